//! Test inputs shared by the unit tests: xorshift streams (Marsaglia's shifts), deterministic
//! and seeded per test.

/// The xorshift64 stream (shifts 13, 7, 17) from `seed` (nonzero): each call returns the next
/// state.
pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// Values uniform in [−1, 1): the top 24 bits of each word of [`xorshift`]`(seed)`.
pub(crate) fn uniform(seed: u64) -> impl FnMut() -> f32 {
    let mut next = xorshift(seed);
    move || (next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// The xorshift32 stream (shifts 13, 17, 5) from `seed` (nonzero).
pub(crate) fn xorshift32(seed: u32) -> impl FnMut() -> u32 {
    let mut x = seed;
    move || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    }
}
