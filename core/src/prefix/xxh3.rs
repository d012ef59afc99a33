//! XXH3-64 with a seed over token ids in rolled loops, for `small-code` builds: the bits of
//! `xxhash_rust::xxh3::xxh3_64_with_seed` of the tokens' little-endian bytes (the tests compare
//! them), in a fraction of its code (its 17–240-byte paths are unrolled and inlined, here they
//! are one `mix16` loop each). Token bytes come in multiples of 4, so XXH3's 1–3-byte case is
//! not needed.

use xxhash_rust::const_xxh3::const_custom_default_secret;

/// XXH3's default secret.
const SECRET: [u8; 192] = const_custom_default_secret(0);
const P64_1: u64 = 0x9E37_79B1_85EB_CA87;
const P64_2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P64_3: u64 = 0x1656_67B1_9E37_79F9;
const P64_4: u64 = 0x85EB_CA77_C2B2_AE63;
const P64_5: u64 = 0x27D4_EB2F_1656_67C5;
const P32_1: u64 = 0x9E37_79B1;
const P32_2: u64 = 0x85EB_CA77;
const P32_3: u64 = 0xC2B2_AE3D;
/// The long hash's initial accumulators (a static: copied, not built from immediates).
static INIT: [u64; 8] = [P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1];

/// XXH3-64 of the little-endian bytes of `tokens`, seeded with `seed`.
pub(crate) fn xxh3_tokens(tokens: &[u32], seed: u64) -> u64 {
    let b: &[u8] = bytemuck::cast_slice(tokens);
    let len = b.len();
    let n = len as u64;
    // The starting value of every path over 16 bytes.
    let mut acc = n.wrapping_mul(P64_1);
    if len > 240 {
        return long(b, seed, acc);
    }
    if len > 16 {
        if len <= 128 {
            // Pairs of 16-byte lanes from both ends, secret in 32-byte steps.
            for i in 0..(len - 1) / 32 + 1 {
                acc = acc
                    .wrapping_add(mix16(b, 16 * i, 32 * i, seed))
                    .wrapping_add(mix16(b, len - 16 * (i + 1), 32 * i + 16, seed));
            }
            return avalanche(acc);
        }
        // 129–240 bytes: eight lanes, an avalanche, then the other whole lanes (secret from 3).
        for i in 0..len / 16 {
            let s = if i < 8 { 16 * i } else { 16 * (i - 8) + 3 };
            acc = acc.wrapping_add(mix16(b, 16 * i, s, seed));
            if i == 7 {
                acc = avalanche(acc);
            }
        }
        return avalanche(acc.wrapping_add(mix16(b, len - 16, 119, seed)));
    }
    if len > 8 {
        let lo = r64(b, 0) ^ (r64(&SECRET, 24) ^ r64(&SECRET, 32)).wrapping_add(seed);
        let hi = r64(b, len - 8) ^ (r64(&SECRET, 40) ^ r64(&SECRET, 48)).wrapping_sub(seed);
        let acc = n
            .wrapping_add(lo.swap_bytes())
            .wrapping_add(hi)
            .wrapping_add(fold(lo, hi));
        return avalanche(acc);
    }
    if len > 0 {
        // 4 or 8 bytes.
        let seed = seed ^ (((seed as u32).swap_bytes() as u64) << 32);
        let x = (r32(b, len - 4) as u64).wrapping_add((r32(b, 0) as u64) << 32);
        let mut h = x ^ (r64(&SECRET, 8) ^ r64(&SECRET, 16)).wrapping_sub(seed);
        h ^= h.rotate_left(49) ^ h.rotate_left(24);
        h = h.wrapping_mul(0x9FB2_1C65_1E98_DF25);
        h ^= (h >> 35).wrapping_add(n);
        h = h.wrapping_mul(0x9FB2_1C65_1E98_DF25);
        return h ^ (h >> 28);
    }
    let mut h = seed ^ r64(&SECRET, 56) ^ r64(&SECRET, 64);
    h ^= h >> 33;
    h = h.wrapping_mul(P64_2);
    h ^= h >> 29;
    h = h.wrapping_mul(P64_3);
    h ^ (h >> 32)
}

/// Inputs over 240 bytes: stripes of 64 bytes into eight accumulators under the seed's secret,
/// scrambled after every 16 stripes, the last stripe aligned to the end; merged into `h`.
fn long(b: &[u8], seed: u64, mut h: u64) -> u64 {
    // The seed's secret: the default one's words plus and minus the seed, alternately.
    let sw: [u64; 24] = core::array::from_fn(|i| {
        let v = r64(&SECRET, 8 * i);
        let v = if i % 2 == 0 {
            v.wrapping_add(seed)
        } else {
            v.wrapping_sub(seed)
        };
        v.to_le()
    });
    let secret: &[u8] = bytemuck::cast_slice(&sw);
    let mut acc = INIT;
    let len = b.len();
    for k in 0..(len - 1) / 64 {
        accumulate(&mut acc, b, 64 * k, secret, 8 * (k % 16));
        if k % 16 == 15 {
            for (i, a) in acc.iter_mut().enumerate() {
                *a = (*a ^ (*a >> 47) ^ r64(secret, 128 + 8 * i)).wrapping_mul(P32_1);
            }
        }
    }
    accumulate(&mut acc, b, len - 64, secret, 121);
    for i in 0..4 {
        let s = 11 + 16 * i;
        h = h.wrapping_add(fold(
            acc[2 * i] ^ r64(secret, s),
            acc[2 * i + 1] ^ r64(secret, s + 8),
        ));
    }
    avalanche(h)
}

/// One 64-byte stripe of `b` at `at` into the accumulators, secret from `s`.
fn accumulate(acc: &mut [u64; 8], b: &[u8], at: usize, secret: &[u8], s: usize) {
    let (v, k) = (words::<8>(b, at), words::<8>(secret, s));
    for i in 0..8 {
        let key = v[i] ^ k[i];
        acc[i ^ 1] = acc[i ^ 1].wrapping_add(v[i]);
        acc[i] = acc[i].wrapping_add((key & 0xFFFF_FFFF).wrapping_mul(key >> 32));
    }
}

/// 16 bytes of `b` at `at` against the default secret at `s` and the seed.
fn mix16(b: &[u8], at: usize, s: usize, seed: u64) -> u64 {
    let ([x0, x1], [s0, s1]) = (words::<2>(b, at), words::<2>(&SECRET, s));
    fold(x0 ^ s0.wrapping_add(seed), x1 ^ s1.wrapping_sub(seed))
}

/// The `N` little-endian `u64`s at `at` (zeros past the end: callers stay in range), with one
/// bounds check.
fn words<const N: usize>(b: &[u8], at: usize) -> [u64; N] {
    let mut w = [0u64; N];
    if let Some(c) = b.get(at..).and_then(|s| s.get(..8 * N)) {
        for (w, c) in w.iter_mut().zip(c.chunks_exact(8)) {
            *w = r64(c, 0);
        }
    }
    w
}

/// The 128-bit product's halves xor-ed.
#[inline(never)]
fn fold(a: u64, b: u64) -> u64 {
    let p = a as u128 * b as u128;
    p as u64 ^ (p >> 64) as u64
}

/// XXH3's final mix.
#[inline(never)]
fn avalanche(mut h: u64) -> u64 {
    h ^= h >> 37;
    h = h.wrapping_mul(0x1656_6791_9E37_79F9);
    h ^ (h >> 32)
}

/// The little-endian `u64` at `at` (0 past the end: callers stay in range).
fn r64(b: &[u8], at: usize) -> u64 {
    b.get(at..)
        .and_then(|s| s.first_chunk())
        .map_or(0, |c| u64::from_le_bytes(*c))
}

/// The little-endian `u32` at `at` (0 past the end).
fn r32(b: &[u8], at: usize) -> u32 {
    b.get(at..)
        .and_then(|s| s.first_chunk())
        .map_or(0, |c| u32::from_le_bytes(*c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xxhash_rust::xxh3::xxh3_64_with_seed;

    /// Every path (0–16, 17–128, 129–240 bytes, long inputs over several 1,024-byte blocks) and
    /// seeds that flip each half. Under Miri, the lengths at and around each path's edges.
    #[test]
    fn equals_xxhash_rust_on_every_length() {
        let tokens: [u32; 800] =
            core::array::from_fn(|i| (i as u32).wrapping_mul(0x9E37_79B9) ^ 0x5bd1_e995);
        let lengths: std::vec::Vec<usize> = if cfg!(miri) {
            std::vec![0, 1, 2, 4, 5, 31, 32, 33, 59, 60, 61, 255, 256, 257, 799]
        } else {
            (0..tokens.len()).collect()
        };
        for seed in [0, 1, 0x8000_0000_0000_0000, u64::MAX, 0x0123_4567_89AB_CDEF] {
            for &n in &lengths {
                let t = &tokens[..n];
                assert_eq!(
                    xxh3_tokens(t, seed),
                    xxh3_64_with_seed(bytemuck::cast_slice(t), seed),
                    "{n} tokens, seed {seed:#x}"
                );
            }
        }
    }
}
