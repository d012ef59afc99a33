//! The FP8 E4M3 tile loop (f32 scales) with AVX2/F16C: `max|x|` eight lanes at a time, the scale
//! from the portable [`tile_scale`], and for tiles with a normal scale and finite `max|x|` the
//! codes `e4m3(x / s)` with an 8-lane IEEE division (`vdivps`, correctly rounded like scalar `/`)
//! and the same rounding steps as the portable `e4m3_mag_small`. Other tiles take the portable
//! [`tile_codes`].

use core::arch::x86_64::*;

use super::lanes::{Code8, Lanes, map_codes};
use crate::format::fp8::{M_MIN, TWO_POW_M120, tile_codes, tile_scale};
use crate::format::load::Load;

/// Quantizes like the portable `quantize_tiles` with f32 scales (same bytes), for any
/// `tile ≥ 1` (fastest when `tile` is a multiple of 8). `codes` has one byte per value, `scales`
/// four bytes per tile; other lengths write what the shortest slice allows.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn quantize_tiles<T: Lanes>(
    x: &[T],
    tile: usize,
    codes: &mut [u8],
    scales: &mut [u8],
) {
    // SAFETY: AVX2 and F16C per the caller.
    unsafe {
        if tile % 32 == 0 {
            tiles::<T, true>(x, tile, codes, scales)
        } else {
            tiles::<T, false>(x, tile, codes, scales)
        }
    }
}

/// [`quantize_tiles`]; with `W32`, `tile` is a multiple of 32 (no leftovers to code).
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn tiles<T: Lanes, const W32: bool>(
    x: &[T],
    tile: usize,
    codes: &mut [u8],
    scales: &mut [u8],
) {
    if tile == 0 {
        return;
    }
    for ((xt, ct), st) in x
        .chunks_exact(tile)
        .zip(codes.chunks_exact_mut(tile))
        .zip(scales.chunks_exact_mut(4))
    {
        // SAFETY: AVX2 and F16C per the caller.
        let amax = T::L::key_f32(unsafe { T::amax_key::<W32>(xt) });
        let s = tile_scale(amax, false);
        if amax.is_finite() && s >= f32::MIN_POSITIVE {
            // SAFETY: AVX2 and F16C per the caller.
            let n = unsafe { map_codes::<T, _, W32>(xt, ct, &E4m3Code(_mm256_set1_ps(s))) };
            if !W32 {
                if let (Some(xr), Some(cr)) = (xt.get(n..), ct.get_mut(n..)) {
                    tile_codes::<T::L>(xr, amax, s, cr);
                }
            }
        } else {
            tile_codes::<T::L>(xt, amax, s, ct);
        }
        if let Some(st) = st.first_chunk_mut::<4>() {
            *st = s.to_le_bytes();
        }
    }
}

/// The e4m3 code of `x / s` with the scale `s` (normal, and `|x| ≤ 448·s`) in every lane.
struct E4m3Code(__m256);

impl Code8 for E4m3Code {
    type B = u8;
    const SIGN_OF_X: bool = true;

    /// `|q| = |x / s|`; `m = 2^(max(exponent(q), -6) + 20)`; `r = (|q| + m) − m` rounds to the
    /// e4m3 grid (nearest even); the code's magnitude is the bits of `r · 2^-120` shifted right
    /// by 20 (the sign is added by `map_codes`).
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn code8(&self, v: __m256) -> __m256i {
        // SAFETY: register operations only; AVX2 per the caller.
        unsafe {
            let q = _mm256_castps_si256(_mm256_div_ps(v, self.0));
            let a = _mm256_and_si256(q, _mm256_set1_epi32(0x7FFF_FFFF));
            let e = _mm256_and_si256(a, _mm256_set1_epi32(0x7F80_0000));
            let m = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_set1_epi32(20 << 23)));
            let m = _mm256_max_ps(m, _mm256_set1_ps(M_MIN));
            let r = _mm256_sub_ps(_mm256_add_ps(_mm256_castsi256_ps(a), m), m);
            let c = _mm256_castps_si256(_mm256_mul_ps(r, _mm256_set1_ps(TWO_POW_M120)));
            _mm256_srli_epi32::<20>(c)
        }
    }
}
