//! The inputs of the `tiny_*` cases: K/V rows and queries at and around f32's subnormal range,
//! built from integer bits only.
//!
//! Helium's (MVE) vector floats flush subnormal operands and results to zero where scalar FPUs
//! and the host keep them; the `tiny_*` cases give every page format values where that would
//! show. Each KV head has its own regime for the whole case, so that a head's accumulators stay
//! small (a mix of regimes in one head would let its normal values hide the tiny ones):
//!
//! - head 0: K normal (as [`kv_rows`]'s), V of magnitude 2^-124 … 2^-100 (normal, but their
//!   products with weights and their sums reach the subnormal range);
//! - head 1: K and V subnormal (every exponent down to 2^-149), smallest normals and ±0 mixed;
//! - head 2: K and V of magnitude 2^-70 … 2^-40 (products with small queries and weights are
//!   subnormal), every fourth value normal, every seventh ±0.
//!
//! Query heads of each group: × [`SHARP`] (many weights in [2^-60, 2^-20]), as they come, and
//! scaled into 2^-100 … 2^-60. No float operation forms a subnormal here (the boards' compilers
//! vectorize these loops too): tiny values are put together as bits.

use super::*;

/// A value with random sign and mantissa and a magnitude in [2^lo, 2^(hi + 1)), as bits
/// (subnormal below 2^-126: the mantissa with its implicit bit shifted right, truncated).
fn with_exponent(r: &mut Rng, lo: i32, hi: i32) -> f32 {
    let bits = r.next();
    let e = lo + (bits % (hi - lo + 1) as u64) as i32;
    let mant = ((bits >> 16) as u32) & 0x007f_ffff;
    let sign = ((bits >> 40) as u32 & 1) << 31;
    let magnitude = if e >= -126 {
        ((e + 127) as u32) << 23 | mant
    } else {
        let shift = (-126 - e) as u32;
        (0x0080_0000 | mant) >> shift.min(31)
    };
    f32::from_bits(sign | magnitude)
}

/// `x` times `2^e` by its exponent field, for normal `x` and a normal result.
fn scaled_by(x: f32, e: i32) -> f32 {
    let b = x.to_bits();
    let exp = ((b >> 23) & 0xff) as i32;
    if exp == 0 {
        return x;
    }
    f32::from_bits((b & !0x7f80_0000) | (((exp + e).clamp(1, 254) as u32) << 23))
}

/// One head row of a regime: `k` selects the key's half of head 0 (normal keys).
fn head_row(r: &mut Rng, head: usize, k: bool, row: &mut [f32]) {
    for (i, x) in row.iter_mut().enumerate() {
        *x = match (head, k) {
            (0, true) => r.signed() * 2.0,
            (0, false) => with_exponent(r, -124, -100),
            (1, _) => match i % 5 {
                0 => f32::from_bits(((r.next() >> 20) as u32 & 1) << 31),
                1 => with_exponent(r, -127, -125),
                _ => with_exponent(r, -160, -127),
            },
            _ if i % 7 == 3 => f32::from_bits(((r.next() >> 20) as u32 & 1) << 31),
            _ if i % 4 == 1 => r.signed(),
            _ => with_exponent(r, -70, -40),
        };
    }
}

/// One token's K and V rows of the `tiny_*` cases (see the module doc).
pub(crate) fn tiny_kv_rows(seed: u64, k: &mut [f32], v: &mut [f32]) {
    let hd = SHAPE.head_dim as usize;
    let mut r = Rng::new(seed);
    for (h, (kh, vh)) in k
        .chunks_exact_mut(hd)
        .zip(v.chunks_exact_mut(hd))
        .enumerate()
    {
        head_row(&mut r, h % 3, true, kh);
        head_row(&mut r, h % 3, false, vh);
    }
}

/// One query row of the `tiny_*` cases: per group of three query heads, one × [`SHARP`], one as
/// [`query_row`] gives it, one scaled into 2^-100 … 2^-60.
pub(crate) fn tiny_query_row(seed: u64, q: &mut [f32]) {
    let hd = SHAPE.head_dim as usize;
    let mut r = Rng::new(seed);
    for (h, qh) in q.chunks_exact_mut(hd).enumerate() {
        let shift = -100 + (r.next() % 41) as i32;
        for x in qh.iter_mut() {
            let v = r.signed() * 2.0;
            *x = match h % 3 {
                0 => scaled_by(v, 5) * 0.75, // × 24
                1 => v,
                _ => scaled_by(v, shift),
            };
        }
    }
}
