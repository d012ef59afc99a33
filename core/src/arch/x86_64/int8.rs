//! The Q8 group loop with AVX2/F16C: the same blocks of groups and the same scale math as the
//! portable loop ([`block_scales`]), with `max|x|` and the codes eight lanes at a time.
//!
//! Codes of a fast group (`d` zero or normal, `max|x|` finite): `p = x · id` (one IEEE multiply,
//! as in the portable code), then `trunc(p + copysign(ROUND_BIAS, p))`, which is
//! `round_half_away_from_zero(p)` (`round_q8` of the reference codec); `|p| < 127.5` there, so the
//! truncating conversion and the narrowing never saturate. Other groups take the portable code.

use core::arch::x86_64::*;

use half::f16;

use super::lanes::{Code8, Lanes, map_codes};
use crate::format::int8::groups::{
    NB, ROUND_BIAS, block_scales, quantize_codes_fast, quantize_codes_slow,
};
use crate::format::load::Load;

/// Quantizes like the portable `quantize_groups` (same outputs bit for bit), for any `g ≥ 1`
/// (fastest when `g` is a multiple of 8). Lengths as checked by `quantize_q8`; other lengths
/// write what the shortest slice allows.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn quantize_groups<T: Lanes>(
    x: &[T],
    g: usize,
    codes: &mut [i8],
    scales: &mut [f16],
) {
    // SAFETY: AVX2 and F16C per the caller.
    unsafe {
        if g % 32 == 0 {
            groups::<T, true>(x, g, codes, scales)
        } else {
            groups::<T, false>(x, g, codes, scales)
        }
    }
}

/// [`quantize_groups`]; with `W32`, `g` is a multiple of 32 (no leftovers to code).
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn groups<T: Lanes, const W32: bool>(
    x: &[T],
    g: usize,
    codes: &mut [i8],
    scales: &mut [f16],
) {
    if g == 0 {
        return;
    }
    for ((xb, cb), sb) in x
        .chunks(NB * g)
        .zip(codes.chunks_mut(NB * g))
        .zip(scales.chunks_mut(NB))
    {
        let mut keys = [<T::L as Load>::K0; NB];
        for (k, xg) in keys.iter_mut().zip(xb.chunks_exact(g)) {
            // SAFETY: AVX2 and F16C per the caller.
            *k = unsafe { T::amax_key::<W32>(xg) };
        }
        let b = block_scales::<T::L>(&keys);
        for (s, &bits) in sb.iter_mut().zip(&b.bits) {
            *s = f16::from_bits(bits);
        }
        for (((xg, cg), &a), (&id, &f)) in xb
            .chunks_exact(g)
            .zip(cb.chunks_exact_mut(g))
            .zip(&b.amax)
            .zip(b.ids.iter().zip(&b.fast))
        {
            if f {
                // SAFETY: AVX2 and F16C per the caller.
                let n = unsafe { map_codes::<T, _, W32>(xg, cg, &Q8Code(_mm256_set1_ps(id))) };
                if !W32 {
                    if let (Some(xr), Some(cr)) = (xg.get(n..), cg.get_mut(n..)) {
                        quantize_codes_fast::<T::L>(xr, id, cr);
                    }
                }
            } else {
                quantize_codes_slow::<T::L>(xg, a, id, cg);
            }
        }
    }
}

/// The Q8 code with inverse scale `id` in every lane.
struct Q8Code(__m256);

impl Code8 for Q8Code {
    type B = i8;
    const SIGN_OF_X: bool = false;

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn code8(&self, v: __m256) -> __m256i {
        // SAFETY: register operations only; AVX per the caller.
        unsafe {
            let p = _mm256_mul_ps(v, self.0);
            let sign = _mm256_and_ps(p, _mm256_set1_ps(-0.0));
            let bias = _mm256_or_ps(sign, _mm256_set1_ps(ROUND_BIAS));
            _mm256_cvttps_epi32(_mm256_add_ps(p, bias))
        }
    }
}
