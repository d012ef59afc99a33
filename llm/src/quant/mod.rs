//! Activation quantization as ggml's reference code does it (`quantize_row_q8_0_ref`,
//! `quantize_row_q8_1_ref`), and the f16 → f32 conversion of block scales.
//!
//! Per 32-value block: `amax` = the largest `|x|` (kept as C's `MAX(amax, fabsf(v))` keeps it),
//! `d = amax / 127`, `id = d ≠ 0 ? 1 / d : 0`, `q = roundf(x · id)` (half away from zero), the
//! scale stored as `f16(d)` (round to nearest even). Q8_1 also stores `s = f16(Σq · d)`, the
//! block sum the Q4_1 dot product uses for the weights' minimum. Scales are kept here as the
//! f32 value of that f16, which is what the dot products multiply with.

use half::f16;

/// Values per quantization block.
pub const BLOCK: usize = 32;

/// One activation row quantized per 32-block: codes, scales (`f32` of the stored f16) and, for
/// Q8_1, the block sums `s`.
#[derive(Debug)]
pub struct QuantRow<'s> {
    /// Codes, `BLOCK` per block.
    pub qs: &'s [i8],
    /// Block scales `f16(d)` as f32.
    pub d: &'s [f32],
    /// Q8_1 block sums `f16(Σq · d)` as f32 (unused for Q8_0).
    pub s: &'s [f32],
}

/// The f32 value of an IEEE binary16 bit pattern (exact; subnormals included; NaN stays NaN).
/// Branch-light so that the matmul's per-block scale reads stay cheap on targets without a
/// hardware conversion.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let rest = (h & 0x7fff) as u32;
    if rest >= 0x7c00 {
        // Infinity or NaN.
        return f32::from_bits(sign | 0x7f80_0000 | ((rest & 0x3ff) << 13));
    }
    // Reinterpret exponent and mantissa in f32's low range, then scale by 2^112: exact for
    // normals and subnormals alike (a multiplication by a power of two).
    let magnitude = f32::from_bits(rest << 13) * f32::from_bits(0x7780_0000);
    f32::from_bits(sign | magnitude.to_bits())
}

/// Rounds `x` through f16 (nearest even), returned as f32.
#[inline]
fn through_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

#[inline]
fn block_scale(x: &[f32]) -> (f32, f32) {
    let mut amax = 0.0f32;
    for &v in x {
        let a = libm::fabsf(v);
        // C's MAX(amax, a): `amax > a ? amax : a`.
        amax = if amax > a { amax } else { a };
    }
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    (d, id)
}

/// Quantizes `x` (a whole number of blocks) to Q8_0 into `qs` (same length) and `d` (one per
/// block). Lengths are the caller's contract (checked by the planner's callers).
pub fn quantize_q8_0(x: &[f32], qs: &mut [i8], d: &mut [f32]) {
    for ((xb, qb), db) in x
        .chunks_exact(BLOCK)
        .zip(qs.chunks_exact_mut(BLOCK))
        .zip(d.iter_mut())
    {
        let (scale, id) = block_scale(xb);
        *db = through_f16(scale);
        for (q, &v) in qb.iter_mut().zip(xb) {
            *q = libm::roundf(v * id) as i8;
        }
    }
}

/// Quantizes `x` to Q8_1: as [`quantize_q8_0`], plus the block sums `s = f16(Σq · d)` with `d`
/// the unrounded f32 scale (as ggml computes it).
pub fn quantize_q8_1(x: &[f32], qs: &mut [i8], d: &mut [f32], s: &mut [f32]) {
    for (((xb, qb), db), sb) in x
        .chunks_exact(BLOCK)
        .zip(qs.chunks_exact_mut(BLOCK))
        .zip(d.iter_mut())
        .zip(s.iter_mut())
    {
        let (scale, id) = block_scale(xb);
        *db = through_f16(scale);
        let mut sum = 0i32;
        for (q, &v) in qb.iter_mut().zip(xb) {
            *q = libm::roundf(v * id) as i8;
            sum += *q as i32;
        }
        *sb = through_f16(sum as f32 * scale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_matches_half_on_every_pattern() {
        for h in 0..=u16::MAX {
            let want = f16::from_bits(h).to_f32();
            let got = f16_to_f32(h);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#x}");
            }
        }
    }

    #[test]
    fn q8_1_block_follows_the_reference_formula() {
        let x: [f32; 32] = core::array::from_fn(|i| (i as f32 - 15.5) * 0.37);
        let (mut qs, mut d, mut s) = ([0i8; 32], [0f32; 1], [0f32; 1]);
        quantize_q8_1(&x, &mut qs, &mut d, &mut s);
        let amax = 15.5f32 * 0.37;
        let scale = amax / 127.0;
        assert_eq!(d[0], f16::from_f32(scale).to_f32());
        assert_eq!(qs[31], 127);
        assert_eq!(qs[0], -127);
        let sum: i32 = qs.iter().map(|&q| q as i32).sum();
        assert_eq!(s[0], f16::from_f32(sum as f32 * scale).to_f32());
        // Half away from zero: 2.5 → 3, -2.5 → -3.
        let mut y = [0f32; 32];
        y[0] = 127.0;
        y[1] = 2.5;
        y[2] = -2.5;
        let (mut q0, mut d0) = ([0i8; 32], [0f32; 1]);
        quantize_q8_0(&y, &mut q0, &mut d0);
        assert_eq!((q0[0], q0[1], q0[2]), (127, 3, -3));
        // An all-zero block has scale 0 and codes 0.
        quantize_q8_0(&[0.0; 32], &mut q0, &mut d0);
        assert_eq!(d0[0], 0.0);
        assert!(q0.iter().all(|&q| q == 0));
    }
}
