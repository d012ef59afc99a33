//! Activation quantization to Q8_0 and Q8_1 (32-value blocks) as ggml's reference code does it
//! (`quantize_row_q8_0_ref`, `quantize_row_q8_1_ref`).
//!
//! Per 32-value block: `amax` = the largest `|x|` (kept as C's `MAX(amax, fabsf(v))` keeps it),
//! `d = amax / 127`, `id = d ≠ 0 ? 1 / d : 0`, `q = roundf(x · id)` (half away from zero), the
//! scale stored as `f16(d)` (round to nearest even). Q8_1 also stores `s = f16(Σq · d)`, the
//! block sum the Q4_1 and Q5_1 dot products use for the weights' minimum. Scales are kept as the
//! f32 value of that f16, which is what the dot products multiply with.

use half::f16;

use super::{BLOCK, floor};

/// Rounds `x` through f16 (nearest even), returned as f32.
#[inline]
pub(crate) fn through_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

#[inline]
fn block_scale(x: &[f32]) -> (f32, f32) {
    let mut amax = 0.0f32;
    for &v in x {
        let a = libm::fabsf(floor::input(v));
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
            *q = libm::roundf(floor::input(v) * id) as i8;
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
            *q = libm::roundf(floor::input(v) * id) as i8;
            sum += *q as i32;
        }
        *sb = through_f16(sum as f32 * scale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
