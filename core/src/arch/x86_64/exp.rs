//! A page's attention weights with AVX2: `numeric::exp`'s lanes (libm's `expf` steps for
//! `|x| < 87.3`, in its order, unfused, then the weight floor) as intrinsics, two blocks of
//! eight per step.
//!
//! LLVM's vectorization of the portable lanes keeps their integer emulations (the magic-number
//! truncation, masks for each select) and reloads its constants every block; here truncation is
//! `vcvttps2dq` (equal for the `|v| < 127` it meets), selects are blends, the constants stay in
//! registers, and two independent blocks share a step so that the division's latency overlaps.
//! Lanes at or past 87.3 in magnitude (and NaN) take `libm::expf` itself, as the portable lanes
//! do; the tests compare every path with `floor::weight(libm::expf(x))`.

use core::arch::x86_64::{
    __m256, _CMP_LT_OQ, _mm256_add_epi32, _mm256_add_ps, _mm256_and_ps, _mm256_and_si256,
    _mm256_andnot_ps, _mm256_blendv_epi8, _mm256_blendv_ps, _mm256_castps_si256,
    _mm256_castsi256_ps, _mm256_cmp_ps, _mm256_cmpgt_epi32, _mm256_cvtepi32_ps,
    _mm256_cvttps_epi32, _mm256_div_ps, _mm256_loadu_ps, _mm256_movemask_ps, _mm256_mul_ps,
    _mm256_or_ps, _mm256_or_si256, _mm256_set1_epi32, _mm256_set1_ps, _mm256_slli_epi32,
    _mm256_srai_epi32, _mm256_storeu_ps, _mm256_sub_ps,
};

use crate::numeric::exp::{
    EDGE, HALF_LN2, INV_LN2, LN2_HI, LN2_LO, P1, P2, THREE_HALVES_LN2, TINY,
};
use crate::numeric::floor::{WEIGHT_FLOOR, weight};

/// `xs[i] = weight(exp(xs[i] − shifts[i / row]))` for rows of `row` values, each bit-identical
/// to `floor::weight(libm::expf(xs[i] - shifts[i / row]))`. `false`, nothing written, unless
/// `row` is a nonzero multiple of eight.
///
/// # Safety
///
/// The CPU supports AVX2.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn exp_rows(xs: &mut [f32], row: usize, shifts: &[f32]) -> bool {
    if row == 0 || row % 8 != 0 {
        return false;
    }
    for (xs, &shift) in xs.chunks_exact_mut(row).zip(shifts) {
        let mut pairs = xs.chunks_exact_mut(16);
        for b in &mut pairs {
            let b: &mut [f32; 16] = b.try_into().expect("16 weights");
            // SAFETY: AVX2 is present (the caller's obligation); the loads and stores cover
            // exactly the 16 floats of `b`.
            unsafe {
                let s = _mm256_set1_ps(shift);
                let x0 = _mm256_sub_ps(_mm256_loadu_ps(b.as_ptr()), s);
                let x1 = _mm256_sub_ps(_mm256_loadu_ps(b.as_ptr().add(8)), s);
                let (w0, w1) = (exp8(x0), exp8(x1));
                _mm256_storeu_ps(b.as_mut_ptr(), w0);
                _mm256_storeu_ps(b.as_mut_ptr().add(8), w1);
            }
        }
        let rest = pairs.into_remainder();
        if !rest.is_empty() {
            let b: &mut [f32; 8] = rest.try_into().expect("8 weights");
            // SAFETY: AVX2 is present; the load and store cover exactly the 8 floats of `b`.
            unsafe {
                let x = _mm256_sub_ps(_mm256_loadu_ps(b.as_ptr()), _mm256_set1_ps(shift));
                _mm256_storeu_ps(b.as_mut_ptr(), exp8(x));
            }
        }
    }
    true
}

/// Eight `floor::weight(libm::expf(x))`s: `numeric::exp`'s lane, step for step.
///
/// # Safety
///
/// The CPU supports AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn exp8(x: __m256) -> __m256 {
    let f = _mm256_set1_ps;
    let i = _mm256_set1_epi32;
    let bits = _mm256_castps_si256(x);
    let hx = _mm256_and_si256(bits, i(0x7fff_ffff));
    // libm's HALF[sign]: 0.5 with the sign of x; k = ±1 takes the sign too.
    let half = _mm256_or_ps(f(0.5), _mm256_and_ps(x, f(-0.0)));
    let one = _mm256_or_si256(_mm256_srai_epi32::<31>(bits), i(1));
    // For |x| < 87.3 the sum is below 127 in magnitude: truncation is libm's `as i32`.
    let rounded = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(f(INV_LN2), x), half));
    let big = _mm256_cmpgt_epi32(hx, i(THREE_HALVES_LN2 as i32));
    let mid = _mm256_cmpgt_epi32(hx, i(HALF_LN2 as i32));
    let k = _mm256_blendv_epi8(_mm256_and_si256(one, mid), rounded, big);
    let kf = _mm256_cvtepi32_ps(k);
    let hi = _mm256_sub_ps(x, _mm256_mul_ps(kf, f(LN2_HI)));
    let lo = _mm256_mul_ps(kf, f(LN2_LO));
    let r = _mm256_sub_ps(hi, lo);
    let rr = _mm256_mul_ps(r, r);
    let c = _mm256_sub_ps(
        r,
        _mm256_mul_ps(rr, _mm256_add_ps(f(P1), _mm256_mul_ps(rr, f(P2)))),
    );
    let q = _mm256_div_ps(_mm256_mul_ps(r, c), _mm256_sub_ps(f(2.0), c));
    let y = _mm256_add_ps(f(1.0), _mm256_add_ps(_mm256_sub_ps(q, lo), hi));
    // scalbnf(y, k) for −126 ≤ k ≤ 126: one multiplication by 2^k.
    let two_k = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(k, i(127))));
    let scaled = _mm256_mul_ps(y, two_k);
    // At or below 2^-14: 1 + x.
    let not_tiny = _mm256_castsi256_ps(_mm256_cmpgt_epi32(hx, i(TINY as i32)));
    let mut e = _mm256_blendv_ps(_mm256_add_ps(f(1.0), x), scaled, not_tiny);
    let edge = _mm256_cmpgt_epi32(hx, i(EDGE as i32 - 1));
    if _mm256_movemask_ps(_mm256_castsi256_ps(edge)) != 0 {
        // SAFETY: AVX2 is present (the caller's obligation).
        e = unsafe { edge_lanes(x, e, edge) };
    }
    // The floor: below 2^-60 is zero (NaN compares false and stays).
    _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(e, f(WEIGHT_FLOOR)), e)
}

/// `e` with the lanes `edge` marks (|x| ≥ 87.3, NaN) replaced by `libm::expf(x)`, out of line
/// (attention's weights seldom meet them).
///
/// # Safety
///
/// The CPU supports AVX2.
#[target_feature(enable = "avx2")]
#[inline(never)]
#[cold]
unsafe fn edge_lanes(x: __m256, e: __m256, edge: core::arch::x86_64::__m256i) -> __m256 {
    let (mut xs, mut es, mut m) = ([0f32; 8], [0f32; 8], [0i32; 8]);
    // SAFETY: AVX is present; each store writes exactly the 32 bytes of its array, the load
    // reads exactly those of `es`.
    unsafe {
        _mm256_storeu_ps(xs.as_mut_ptr(), x);
        _mm256_storeu_ps(es.as_mut_ptr(), e);
        _mm256_storeu_ps(m.as_mut_ptr().cast::<f32>(), _mm256_castsi256_ps(edge));
    }
    for ((e, &x), &m) in es.iter_mut().zip(&xs).zip(&m) {
        if m != 0 {
            *e = weight(libm::expf(x));
        }
    }
    // SAFETY: as above.
    unsafe { _mm256_loadu_ps(es.as_ptr()) }
}

#[cfg(test)]
mod tests {
    use std::vec::Vec;

    use super::*;

    /// Rows of 8 to 40 weights over a sweep of arguments (every range `expf` distinguishes:
    /// tiny, k = 0, ±1, rounded, the floor, past 87.3, infinities and NaN): each weight is
    /// `floor::weight(libm::expf(x − shift))`, bit for bit.
    #[test]
    fn weights_equal_libm_floored() {
        if !super::super::available() {
            return;
        }
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
            for round in 0..200 {
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
                // SAFETY: AVX2 is present (checked above).
                assert!(unsafe { exp_rows(&mut got, row, &shifts) });
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
        // SAFETY: AVX2 is present.
        assert!(!unsafe { exp_rows(&mut xs, 12, &[0.0]) });
        assert!(xs.iter().all(|&x| x == 0.5));
    }

    /// Every `f32` in [−87.4, 0] a stride apart (about four million): libm's bits, floored.
    #[test]
    fn weights_over_the_negative_range() {
        if !super::super::available() {
            return;
        }
        let (lo, hi) = ((-87.4f32).to_bits(), 0x8000_0000u32);
        let xs: Vec<f32> = (hi..=lo).step_by(257).map(f32::from_bits).collect();
        let n = xs.len() / 16 * 16;
        let mut got = xs[..n].to_vec();
        // SAFETY: AVX2 is present (checked above).
        assert!(unsafe { exp_rows(&mut got, 16, &std::vec![0.0; n / 16]) });
        for (&g, &x) in got.iter().zip(&xs) {
            assert_eq!(g.to_bits(), weight(libm::expf(x)).to_bits(), "{x:e}");
        }
    }
}
