//! Query rows for int8 keys: each query head's row quantized per key group to 16-bit codes and
//! one f32 scale (the score scale folded in), once per query row, so that a score over an int8
//! key row is a sum of exact integer dot products, one per group, each times its two scales:
//!
//! `score = Σ_b (qs_b · ks_b) · Σ_{i ∈ b} qc_i · kc_i`, the groups in order.
//!
//! The integer sums are exact, so any SIMD width and any summation order gives the same bits on
//! every target; 16-bit query codes keep the query's error (2⁻¹⁵ of its group's largest
//! magnitude) far below the keys' own 8-bit error.

use crate::format::ElementFormat;
use crate::format::int8::groups::ROUND_BIAS;

/// Largest query code.
const Q16_MAX: f32 = 32_767.0;

/// Query groups whose largest magnitude is below 2⁻⁶⁰ quantize to zero: their scores' terms are
/// below 10⁻¹⁸ of the key scale, and every query scale is then at least 2⁻⁷⁸, so its product with
/// a key's f16 scale is normal (no subnormal for vector floats that flush them; see
/// `numeric::floor`).
const TINY: f32 = f32::from_bits(0x2180_0000);

/// The key group of a K format that scores from quantized queries: int8 (whose groups hold at
/// least two values: page formats refuse a group of 1).
#[inline(always)]
pub(crate) const fn int8_group(k: ElementFormat) -> Option<usize> {
    match k {
        ElementFormat::Int8 { group } if group >= 2 && k.enabled() => Some(group as usize),
        _ => None,
    }
}

/// `f32` slots of scratch the quantized query of `q_heads` heads takes: codes two to a slot,
/// then one scale per group (`q_heads · head_dim` slots for any group ≥ 2).
pub(crate) const fn slots(q_heads: usize, head_dim: usize) -> usize {
    q_heads * head_dim
}

/// A query row quantized for int8 keys: `codes[h·head_dim + i]`, `scales[h·(head_dim / g) + b]`
/// (empty when the keys are not int8).
#[derive(Clone, Copy)]
pub(crate) struct QueryCodes<'s> {
    pub(crate) codes: &'s [i16],
    pub(crate) scales: &'s [f32],
}

/// Splits `slots` (at least [`slots`]`(q_heads, head_dim)` long) into room for `n` codes and the
/// scales after them.
pub(crate) fn split(slots: &mut [f32], n: usize) -> (&mut [i16], &mut [f32]) {
    let (codes, scales) = slots.split_at_mut(n.div_ceil(2));
    (&mut bytemuck::cast_slice_mut(codes)[..n], scales)
}

/// `round_half_away_from_zero(v)` saturated to `i16` (NaN → 0).
#[inline(always)]
fn round_q16(v: f32) -> i16 {
    let bias = f32::from_bits(ROUND_BIAS.to_bits() | (v.to_bits() & 0x8000_0000));
    (v + bias) as i16
}

/// Quantizes query row `q` (`[heads][head_dim]`) per group of `g` values into `codes` (same
/// length) and `scales` (one per group): codes `round(x · 32767 / amax)`, scale
/// `amax / 32767 · score_scale`. A group whose largest magnitude is infinite or NaN gets a NaN
/// scale (its scores are NaN, as they would be in f32); one below 2⁻¹⁰⁰ gets zeros.
pub(crate) fn quantize(
    q: &[f32],
    g: usize,
    score_scale: f32,
    codes: &mut [i16],
    scales: &mut [f32],
) {
    let groups = q.chunks_exact(g).zip(codes.chunks_exact_mut(g));
    for ((x, c), s) in groups.zip(scales.iter_mut()) {
        // NaN sticks: once `m` is NaN no comparison replaces it.
        let amax = x.iter().fold(0f32, |m, v| {
            let a = v.abs();
            if a > m || a.is_nan() { a } else { m }
        });
        if !amax.is_finite() {
            c.fill(0);
            *s = f32::NAN;
        } else if amax < TINY {
            c.fill(0);
            *s = 0.0;
        } else {
            let id = Q16_MAX / amax;
            for (c, &v) in c.iter_mut().zip(x) {
                *c = round_q16(v * id);
            }
            *s = amax / Q16_MAX * score_scale;
        }
    }
}

/// Each quad of codes `[a, b, c, d]` as `[a, c, b, d]`: the order in which `SXTB16` gives a key
/// word's four codes (its even bytes, then, rotated, its odd ones), so that each word of two
/// query codes pairs with one of them in an `SMLAD` without repacking the key's (what
/// `arch::arrange_query` lays out for the DSP kernels). A tail of fewer than four stays.
#[cfg_attr(
    not(all(edgekv_arm_dsp, not(feature = "small-code"))),
    allow(dead_code)
)]
pub(crate) fn interleave_quads(codes: &mut [i16]) {
    for q in codes.chunks_exact_mut(4) {
        q.swap(1, 2);
    }
}

/// `Σ q_i · k_i` over a group whose query codes `q` are interleaved ([`interleave_quads`]) and
/// key codes `k` are not: the DSP score kernels' sum where the query is not word-aligned.
#[cfg_attr(
    not(all(edgekv_arm_dsp, not(feature = "small-code"))),
    allow(dead_code)
)]
pub(crate) fn dot_interleaved(q: &[i16], k: &[u8]) -> i32 {
    let quad = |q: &[i16], k: &[u8]| {
        [(0, 0), (1, 2), (2, 1), (3, 3)]
            .iter()
            .map(|&(i, j)| i32::from(q[i]) * i32::from(k[j] as i8))
            .sum::<i32>()
    };
    let whole = q.len().min(k.len()) / 4 * 4;
    let tail: i32 = (whole..q.len().min(k.len()))
        .map(|i| i32::from(q[i]) * i32::from(k[i] as i8))
        .sum();
    q[..whole]
        .chunks_exact(4)
        .zip(k[..whole].chunks_exact(4))
        .map(|(q, k)| quad(q, k))
        .sum::<i32>()
        + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The DSP kernels' pairing, modelled: a key word's `SXTB16` halves (bytes 0 and 2, then 1
    /// and 3) against the interleaved query's two words give the natural dot product.
    #[test]
    fn interleaved_quads_pair_with_sxtb16_halves() {
        let q: [i16; 8] = [3, -7, 11, 32767, -32768, 5, 0, -1];
        let k: [i8; 8] = [-128, 127, 9, -3, 1, -77, 64, 2];
        let natural: i32 = q.iter().zip(&k).map(|(&q, &k)| q as i32 * k as i32).sum();
        let mut qi = q;
        interleave_quads(&mut qi);
        let mut paired = 0i32;
        for (qw, kw) in qi.chunks(4).zip(k.chunks(4)) {
            let (even, odd) = ([kw[0], kw[2]], [kw[1], kw[3]]);
            paired += qw[0] as i32 * even[0] as i32 + qw[1] as i32 * even[1] as i32;
            paired += qw[2] as i32 * odd[0] as i32 + qw[3] as i32 * odd[1] as i32;
        }
        assert_eq!(paired, natural);
        let keys: std::vec::Vec<u8> = k.iter().map(|&k| k as u8).collect();
        assert_eq!(dot_interleaved(&qi, &keys), natural);
        let mut tail = [1i16, 2, 3, 4, 5, 6];
        interleave_quads(&mut tail);
        assert_eq!(tail, [1, 3, 2, 4, 5, 6]);
    }

    #[test]
    fn codes_span_the_range_and_scales_restore_the_values() {
        let q: std::vec::Vec<f32> = (0..64).map(|i| (i as f32 - 20.5) * 0.37).collect();
        let (mut c, mut s) = ([0i16; 64], [0f32; 2]);
        quantize(&q, 32, 0.125, &mut c, &mut s);
        for (b, (x, c)) in q.chunks(32).zip(c.chunks(32)).enumerate() {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(c.iter().any(|&c| c.abs() == 32767), "block {b}");
            for (x, &c) in x.iter().zip(c) {
                let back = c as f32 * s[b] / 0.125;
                assert!((back - x).abs() <= amax / 32767.0, "{x} {back}");
            }
        }
    }

    #[test]
    fn special_groups() {
        let mut q = [0f32; 8];
        q[4] = 1e-33;
        q[2] = f32::NAN;
        let (mut c, mut s) = ([7i16; 8], [1f32; 4]);
        quantize(&q, 2, 1.0, &mut c, &mut s);
        assert_eq!(c, [0; 8]);
        assert_eq!(s[0], 0.0);
        assert!(s[1].is_nan());
        assert_eq!(s[2], 0.0);
        q[6] = f32::NEG_INFINITY;
        quantize(&q, 2, 1.0, &mut c, &mut s);
        assert!(s[3].is_nan());
        // Groups at the floor quantize; just below it they are zero.
        let below = f32::from_bits(TINY.to_bits() - 1);
        let (mut c, mut s) = ([7i16; 4], [1f32; 2]);
        quantize(&[TINY, -0.5 * TINY, below, 0.0], 2, 1.0, &mut c, &mut s);
        assert_eq!(c, [32767, -16384, 0, 0]);
        assert_eq!((s[0], s[1]), (TINY / 32767.0, 0.0));
        assert_eq!(round_q16(-32767.4), -32767);
        assert_eq!(round_q16(1e9), i16::MAX);
        assert_eq!(round_q16(2.5), 3);
        assert_eq!(round_q16(-0.49999997), 0);
    }
}
