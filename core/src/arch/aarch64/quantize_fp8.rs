//! The FP8 E4M3 tile loop (f32 scales) with NEON: `max|x|` sixteen values at a time, the scale
//! from the portable [`tile_scale`], and for tiles with a normal scale and finite `max|x|` the
//! codes `e4m3(x / s)` with a four-lane IEEE division (`FDIV`, correctly rounded like scalar
//! `/`) and the portable `e4m3_mag_small`'s rounding steps; other tiles take the portable
//! [`tile_codes`].
//!
//! The magnitude's code: `m = 2^(max(exponent(q), −6) + 20)` (integer add on the exponent bits,
//! `FMAX` with [`M_MIN`]), `r = (|q| + m) − m` (the FPU rounds `|q|` to the e4m3 grid, ties to
//! even), then the portable `e4m3_code`: normal `r` by rebiasing its bits (`(r − 120·2²³) >>
//! 20`), `r` below 2⁻⁶ (an e4m3 subnormal, a multiple of 2⁻⁹) as `r · 512` converted to an
//! integer (exact), chosen per lane. No f32 subnormal is formed. The sign bit is the value's.

use core::arch::aarch64::{
    float32x4_t, uint32x4_t, vaddq_f32, vaddq_u32, vandq_u32, vbslq_u32, vcltq_u32, vcvtq_u32_f32,
    vdivq_f32, vdupq_n_f32, vdupq_n_u32, vmaxq_f32, vmulq_f32, vorrq_u32, vreinterpretq_f32_u32,
    vreinterpretq_u32_f32, vshrq_n_u32, vst1q_u8, vsubq_f32, vsubq_u32,
};

use super::quantize_lanes::{Lanes, W, low_bytes_u32};
use crate::format::fp8::{M_MIN, tile_codes, tile_scale};
use crate::format::load::Load;

/// The bits of 2⁻⁶, the smallest normal e4m3 value.
const MIN_NORMAL_BITS: u32 = 0x3C80_0000;

/// Quantizes like the portable `quantize_tiles` with f32 scales (the same bytes), for `tile` a
/// multiple of [`W`] (the caller's check). `codes` has one byte per value, `scales` four bytes
/// per tile; other lengths write what the shortest slice allows.
pub(super) fn quantize_tiles<T: Lanes>(x: &[T], tile: usize, codes: &mut [u8], scales: &mut [u8]) {
    if tile == 0 || tile % W != 0 {
        return;
    }
    for ((xt, ct), st) in x
        .chunks_exact(tile)
        .zip(codes.chunks_exact_mut(tile))
        .zip(scales.chunks_exact_mut(4))
    {
        let amax = T::L::key_f32(T::amax_key(xt));
        let s = tile_scale(amax, false);
        if amax.is_finite() && s >= f32::MIN_POSITIVE {
            codes_fast(xt, s, ct);
        } else {
            tile_codes::<T::L>(xt, amax, s, ct);
        }
        if let Some(st) = st.first_chunk_mut::<4>() {
            *st = s.to_le_bytes();
        }
    }
}

/// The e4m3 codes of `x / s` (`s` normal, every `|x| ≤ 448·s`), sixteen at a time (`x.len()` a
/// multiple of [`W`]; the same length as `codes`).
#[inline(always)]
fn codes_fast<T: Lanes>(x: &[T], s: f32, codes: &mut [u8]) {
    // SAFETY: register-only NEON operations; the store writes the 16 bytes of `cc`.
    unsafe {
        let sv = vdupq_n_f32(s);
        for (xc, cc) in x.chunks_exact(W).zip(codes.chunks_exact_mut(W)) {
            let (Some(xc), Some(cc)) = (xc.first_chunk::<W>(), cc.first_chunk_mut::<W>()) else {
                continue;
            };
            let v = T::load16(xc);
            vst1q_u8(cc.as_mut_ptr(), low_bytes_u32(v.map(|v| code4(v, sv))));
        }
    }
}

/// The four codes (in the low bytes of the lanes) of `v / s`.
#[inline(always)]
fn code4(v: float32x4_t, s: float32x4_t) -> uint32x4_t {
    // SAFETY: register-only NEON operations.
    unsafe {
        let bits = vreinterpretq_u32_f32(v);
        let q = vreinterpretq_u32_f32(vdivq_f32(v, s));
        let a = vandq_u32(q, vdupq_n_u32(0x7FFF_FFFF));
        let e = vandq_u32(a, vdupq_n_u32(0x7F80_0000));
        let m = vreinterpretq_f32_u32(vaddq_u32(e, vdupq_n_u32(20 << 23)));
        let m = vmaxq_f32(m, vdupq_n_f32(M_MIN));
        let r = vsubq_f32(vaddq_f32(vreinterpretq_f32_u32(a), m), m);
        let rb = vreinterpretq_u32_f32(r);
        let normal = vshrq_n_u32::<20>(vsubq_u32(rb, vdupq_n_u32(120 << 23)));
        let sub = vcvtq_u32_f32(vmulq_f32(r, vdupq_n_f32(512.0)));
        let mag = vbslq_u32(vcltq_u32(rb, vdupq_n_u32(MIN_NORMAL_BITS)), sub, normal);
        let sign = vandq_u32(vshrq_n_u32::<24>(bits), vdupq_n_u32(0x80));
        vorrq_u32(mag, sign)
    }
}
