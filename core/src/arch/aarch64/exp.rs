//! A page's attention weights with NEON: `numeric::exp`'s lanes (libm's `expf` steps for
//! `|x| < 87.3`, in its order, unfused, then the weight floor) as intrinsics, eight weights (two
//! registers) per step, the constants in registers across a page.
//!
//! LLVM's vectorization of the portable lanes keeps their integer emulations (the magic-number
//! truncation, masks for each select) and spills its constants to the stack; here truncation
//! is `FCVTZS` (equal to `as i32` for the `|v| < 127` it meets), selects are `BSL`s. Lanes at or
//! past 87.3 in magnitude (and NaN) take `libm::expf` itself, as the portable lanes do; the
//! tests compare every path with `floor::weight(libm::expf(x))`.

use core::arch::aarch64::{
    float32x4_t, uint32x4_t, vabsq_f32, vaddq_f32, vaddq_s32, vandq_u32, vbicq_u32, vbslq_f32,
    vbslq_s32, vcgtq_u32, vcltq_f32, vcvtq_f32_s32, vcvtq_s32_f32, vdivq_f32, vdupq_n_f32,
    vdupq_n_s32, vdupq_n_u32, veorq_u32, vld1q_f32, vmaxvq_u32, vmulq_f32, vorrq_s32, vorrq_u32,
    vreinterpretq_f32_s32, vreinterpretq_f32_u32, vreinterpretq_s32_f32, vreinterpretq_s32_u32,
    vreinterpretq_u32_f32, vreinterpretq_u32_s32, vshlq_n_s32, vshrq_n_s32, vst1q_f32, vsubq_f32,
};

use crate::numeric::exp::{
    EDGE, HALF_LN2, INV_LN2, LN2_HI, LN2_LO, P1, P2, THREE_HALVES_LN2, TINY,
};
use crate::numeric::floor::WEIGHT_FLOOR;

/// `xs[i] = weight(exp(xs[i] − shifts[i / row]))` for rows of `row` values, each bit-identical
/// to `floor::weight(libm::expf(xs[i] - shifts[i / row]))`. `false`, nothing written, unless
/// `row` is a nonzero multiple of eight.
#[inline(always)]
pub(super) fn exp_rows(xs: &mut [f32], row: usize, shifts: &[f32]) -> bool {
    if row == 0 || row % 8 != 0 {
        return false;
    }
    for (xs, &shift) in xs.chunks_exact_mut(row).zip(shifts) {
        for b in xs.chunks_exact_mut(8) {
            // SAFETY: the loads and stores cover exactly the 8 floats of `b` (NEON is part of
            // every AArch64 core).
            unsafe {
                let s = vdupq_n_f32(shift);
                let x0 = vsubq_f32(vld1q_f32(b.as_ptr()), s);
                let x1 = vsubq_f32(vld1q_f32(b.as_ptr().add(4)), s);
                let (w0, w1) = (exp4(x0), exp4(x1));
                vst1q_f32(b.as_mut_ptr(), w0);
                vst1q_f32(b.as_mut_ptr().add(4), w1);
            }
        }
    }
    true
}

/// Four `floor::weight(libm::expf(x))`s: `numeric::exp`'s lane, step for step.
#[inline(always)]
pub(super) fn exp4(x: float32x4_t) -> float32x4_t {
    let (mut e, edge) = exp4_core(x);
    // SAFETY: register-only NEON operations.
    unsafe {
        if vmaxvq_u32(edge) != 0 {
            e = edge_lanes(x, e, edge);
        }
    }
    floor4(e)
}

/// [`exp4`] for lanes below 87.3 in magnitude, and the mask of the other lanes (|x| ≥ 87.3,
/// NaN), whose weights are wrong: a caller that meets any redoes the four with [`exp4`]. No call
/// out of line, so a loop of these keeps its constants in registers.
#[inline(always)]
pub(super) fn exp4_unchecked(x: float32x4_t) -> (float32x4_t, uint32x4_t) {
    let (e, edge) = exp4_core(x);
    (floor4(e), edge)
}

/// The weight floor: below 2^-60 is zero (`BIC`: +0.0; NaN compares false and stays).
#[inline(always)]
fn floor4(e: float32x4_t) -> float32x4_t {
    // SAFETY: register-only NEON operations.
    unsafe {
        let low = vcltq_f32(e, vdupq_n_f32(WEIGHT_FLOOR));
        vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(e), low))
    }
}

/// `expf(x)` by libm's steps for the lanes below 87.3 in magnitude (unfloored), and the mask of
/// the others.
#[inline(always)]
fn exp4_core(x: float32x4_t) -> (float32x4_t, uint32x4_t) {
    // SAFETY: register-only NEON operations.
    unsafe {
        let f = vdupq_n_f32;
        let u = vdupq_n_u32;
        let bits = vreinterpretq_u32_f32(x);
        // `FABS` clears the sign bit only (NaNs too); the sign is what it cleared. (Fewer
        // constants: LLVM keeps the rest in registers across a page's rows.)
        let hx = vreinterpretq_u32_f32(vabsq_f32(x));
        // libm's HALF[sign]: 0.5 with the sign of x; the ±1 of k takes the sign too.
        let sign = veorq_u32(bits, hx);
        let half = vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(f(0.5)), sign));
        let one = vorrq_s32(vshrq_n_s32::<31>(vreinterpretq_s32_f32(x)), vdupq_n_s32(1));
        // For |x| < 87.3 the sum is below 127 in magnitude: truncation is libm's `as i32`.
        let rounded = vcvtq_s32_f32(vaddq_f32(vmulq_f32(f(INV_LN2), x), half));
        let big = vcgtq_u32(hx, u(THREE_HALVES_LN2));
        let mid = vcgtq_u32(hx, u(HALF_LN2));
        let small_k = vreinterpretq_s32_u32(vandq_u32(vreinterpretq_u32_s32(one), mid));
        let k = vbslq_s32(big, rounded, small_k);
        let kf = vcvtq_f32_s32(k);
        let hi = vsubq_f32(x, vmulq_f32(kf, f(LN2_HI)));
        let lo = vmulq_f32(kf, f(LN2_LO));
        let r = vsubq_f32(hi, lo);
        let rr = vmulq_f32(r, r);
        let c = vsubq_f32(r, vmulq_f32(rr, vaddq_f32(f(P1), vmulq_f32(rr, f(P2)))));
        let q = vdivq_f32(vmulq_f32(r, c), vsubq_f32(f(2.0), c));
        let y = vaddq_f32(f(1.0), vaddq_f32(vsubq_f32(q, lo), hi));
        // scalbnf(y, k) for −126 ≤ k ≤ 126: one multiplication by 2^k, `(k + 127) << 23` as
        // `(k << 23) + bits(1.0)`.
        let one_bits = vreinterpretq_s32_f32(f(1.0));
        let two_k = vreinterpretq_f32_s32(vaddq_s32(vshlq_n_s32::<23>(k), one_bits));
        let scaled = vmulq_f32(y, two_k);
        // At or below 2^-14: 1 + x.
        let not_tiny = vcgtq_u32(hx, u(TINY));
        let e = vbslq_f32(not_tiny, scaled, vaddq_f32(f(1.0), x));
        (e, vcgtq_u32(hx, u(EDGE - 1)))
    }
}

/// `e` with the lanes `edge` marks (|x| ≥ 87.3, NaN) replaced by `libm::expf(x)`, out of line
/// (attention's weights seldom meet them).
#[inline(never)]
#[cold]
fn edge_lanes(x: float32x4_t, e: float32x4_t, edge: uint32x4_t) -> float32x4_t {
    let (mut xs, mut es) = ([0f32; 4], [0f32; 4]);
    let mut m = [0u32; 4];
    // SAFETY: each store writes exactly the 16 bytes of its array, the load reads those of `es`.
    unsafe {
        vst1q_f32(xs.as_mut_ptr(), x);
        vst1q_f32(es.as_mut_ptr(), e);
        vst1q_f32(m.as_mut_ptr().cast::<f32>(), vreinterpretq_f32_u32(edge));
    }
    for ((e, &x), &m) in es.iter_mut().zip(&xs).zip(&m) {
        if m != 0 {
            *e = libm::expf(x);
        }
    }
    // SAFETY: as above.
    unsafe { vld1q_f32(es.as_ptr()) }
}

#[cfg(test)]
mod tests {
    use std::vec::Vec;

    use super::*;
    use crate::numeric::floor::weight;

    /// Rows of 8 to 40 weights over a sweep of arguments (every range `expf` distinguishes:
    /// tiny, k = 0, ±1, rounded, the floor, past 87.3, infinities and NaN): each weight is
    /// `floor::weight(libm::expf(x − shift))`, bit for bit.
    #[test]
    fn weights_equal_libm_floored() {
        let specials = [
            0.0f32,
            -0.0,
            f32::from_bits(TINY),
            -f32::from_bits(TINY),
            f32::from_bits(TINY + 1),
            -f32::from_bits(HALF_LN2),
            -f32::from_bits(HALF_LN2 + 1),
            -f32::from_bits(THREE_HALVES_LN2),
            -f32::from_bits(THREE_HALVES_LN2 + 1),
            -41.58883,
            -41.6,
            -87.33654,
            -f32::from_bits(EDGE),
            -100.0,
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::NAN,
            88.0,
            1.0,
            3.5,
        ];
        let mut next = crate::testing::xorshift32(0x9e37_79b9);
        for row in [8usize, 16, 24, 40] {
            for round in 0..100 {
                let heads = 1 + round % 4;
                let shifts: Vec<f32> = (0..heads)
                    .map(|h| {
                        if h == 1 {
                            0.0
                        } else {
                            (next() % 4000) as f32 * 0.01 - 5.0
                        }
                    })
                    .collect();
                let xs: Vec<f32> = (0..heads * row)
                    .map(|_| match next() % 8 {
                        0 => specials[next() as usize % specials.len()],
                        1 => -((next() % 90_000) as f32) * 1e-3,
                        _ => f32::from_bits(next() >> 1) * if next() % 2 == 0 { -1.0 } else { 1.0 },
                    })
                    .map(|v| {
                        if v.is_finite() && v.abs() > 1e6 {
                            v * 1e-30
                        } else {
                            v
                        }
                    })
                    .collect();
                let mut got = xs.clone();
                assert!(exp_rows(&mut got, row, &shifts));
                for (i, (&g, &x)) in got.iter().zip(&xs).enumerate() {
                    let want = weight(libm::expf(x - shifts[i / row]));
                    assert!(
                        g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                        "x {x:e} shift {:e}: {g:e} vs {want:e}",
                        shifts[i / row]
                    );
                }
            }
        }
        let mut xs = [0.5f32; 12];
        assert!(!exp_rows(&mut xs, 12, &[0.0]));
        assert!(xs.iter().all(|&x| x == 0.5));
    }

    /// Every `f32` in [−87.4, 0] a stride apart: libm's bits, floored.
    #[test]
    fn weights_over_the_negative_range() {
        let (lo, hi) = ((-87.4f32).to_bits(), 0x8000_0000u32);
        let xs: Vec<f32> = (hi..=lo).step_by(1031).map(f32::from_bits).collect();
        let n = xs.len() / 16 * 16;
        let mut got = xs[..n].to_vec();
        assert!(exp_rows(&mut got, 16, &std::vec![0.0; n / 16]));
        for (&g, &x) in got.iter().zip(&xs) {
            assert_eq!(g.to_bits(), weight(libm::expf(x)).to_bits(), "{x:e}");
        }
    }
}
