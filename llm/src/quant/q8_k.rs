//! Activation quantization to Q8_K (256-value super-blocks, the K-quants' dot-product partner)
//! as ggml's `quantize_row_q8_K_ref` does it.
//!
//! Per super-block: `max` = the first value of largest `|x|` (strictly greater replaces it);
//! an all-zero block (no `|x| > 0`) has `d = 0`, codes 0 and sums 0. Otherwise
//! `iscale = −127 / max` (f32), `q = min(127, nearest_int(iscale · x))` with ggml's
//! `nearest_int` (add 1.5·2²³ and read the mantissa: round half to even), the sixteen 16-value
//! sums `bsums` (i16, exact) and `d = 1 / iscale` kept in f32 (not rounded through f16).

use super::floor;
use crate::gguf::QK_K;

/// ggml's `nearest_int`: `x + 12582912` in f32, then the low 23 mantissa bits minus 2²² (round
/// half to even for `|x| < 2²²`; the same bit trick for every input, NaN included).
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Quantizes `x` (a whole number of 256-value super-blocks) to Q8_K: codes into `qs` (same
/// length), one f32 scale per super-block into `d`, sixteen sums per super-block into `bsums`.
/// Lengths are the caller's contract; extra input past the shortest output is ignored.
pub fn quantize_q8_k(x: &[f32], qs: &mut [i8], d: &mut [f32], bsums: &mut [i16]) {
    for (((xb, qb), db), sb) in x
        .chunks_exact(QK_K)
        .zip(qs.chunks_exact_mut(QK_K))
        .zip(d.iter_mut())
        .zip(bsums.chunks_exact_mut(QK_K / 16))
    {
        let (mut max, mut amax) = (0.0f32, 0.0f32);
        for &v in xb {
            let v = floor::input(v);
            let a = libm::fabsf(v);
            if a > amax {
                amax = a;
                max = v;
            }
        }
        if amax == 0.0 {
            *db = 0.0;
            qb.fill(0);
            sb.fill(0);
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in qb.iter_mut().zip(xb) {
            *q = nearest_int(iscale * floor::input(v)).min(127) as i8;
        }
        for (s, q16) in sb.iter_mut().zip(qb.chunks_exact(16)) {
            *s = q16.iter().map(|&q| q as i16).sum();
        }
        *db = 1.0 / iscale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        for (x, want) in [
            (0.5f32, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (-2.5, -2),
            (126.7, 127),
            (-127.0, -127),
            (0.49999997, 0),
        ] {
            assert_eq!(nearest_int(x), want, "{x}");
        }
    }

    #[test]
    fn q8_k_block_follows_the_reference_formula() {
        let x: [f32; 512] = core::array::from_fn(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013);
        let (mut qs, mut d, mut bs) = ([0i8; 512], [0f32; 2], [0i16; 32]);
        quantize_q8_k(&x, &mut qs, &mut d, &mut bs);
        for b in 0..2 {
            let xb = &x[b * 256..][..256];
            // The first value of largest magnitude sets the sign of the scale.
            let (mut max, mut at) = (0f32, 0);
            for (j, &v) in xb.iter().enumerate() {
                if v.abs() > max.abs() {
                    (max, at) = (v, j);
                }
            }
            let iscale = -127.0 / max;
            // The value of largest magnitude maps to -127 (its sign flipped by the scale).
            assert_eq!(qs[b * 256 + at], -127);
            assert_eq!(d[b].to_bits(), (1.0 / iscale).to_bits());
            for (j, &v) in xb.iter().enumerate() {
                let want = ((iscale * v).round_ties_even() as i32).min(127);
                assert_eq!(qs[b * 256 + j] as i32, want);
            }
            for j in 0..16 {
                let s: i32 = qs[b * 256 + 16 * j..][..16].iter().map(|&q| q as i32).sum();
                assert_eq!(bs[b * 16 + j] as i32, s);
            }
        }
        // All zero: scale, codes and sums 0.
        quantize_q8_k(&[0.0; 256], &mut qs[..256], &mut d[..1], &mut bs[..16]);
        assert_eq!(d[0], 0.0);
        assert!(qs[..256].iter().all(|&q| q == 0) && bs[..16].iter().all(|&s| s == 0));
    }
}
