//! The Q8 group loop with NEON: the portable loop's blocks of groups and scale math
//! ([`block_scales`]), with `max|x|` and the codes sixteen values at a time.
//!
//! Codes of a fast group (`d` zero or normal, `max|x|` finite): `p = x · id` (one IEEE `FMUL`,
//! as the portable code's product: for f16 rows the portable `(|x| · 2⁻¹¹²) · (id · 2¹¹²)` is
//! the same real number, rounded once), then `FCVTAS`, which rounds to nearest with ties
//! **away from zero** — `roundf`, the portable `round_q8` (not `FRINTN`'s ties to even); `|p| <
//! 127.5` there, so nothing saturates, and the sign comes with the conversion (−0 gives 0, as
//! the portable code's sign step does). The codes' low bytes by one `TBL`. Other groups take
//! the portable code. The default FPCR (no flush to zero, round to nearest) is assumed, as by
//! every float kernel of the crate: Linux starts every process with it.

use core::arch::aarch64::{vcvtaq_s32_f32, vdupq_n_f32, vmulq_f32, vreinterpretq_u8_s32, vst1q_u8};

use half::f16;

use super::quantize_lanes::{Lanes, W, low_bytes};
use crate::format::int8::groups::{NB, block_scales, quantize_codes_slow};
use crate::format::load::Load;

/// Quantizes like the portable `quantize_groups` (the same codes and scales, bit for bit), for
/// `g` a multiple of [`W`] (the caller's check). Lengths as `quantize_q8` checks them; other
/// lengths write what the shortest slice allows.
pub(super) fn quantize_groups<T: Lanes>(x: &[T], g: usize, codes: &mut [i8], scales: &mut [f16]) {
    if g == 0 || g % W != 0 {
        return;
    }
    for ((xb, cb), sb) in x
        .chunks(NB * g)
        .zip(codes.chunks_mut(NB * g))
        .zip(scales.chunks_mut(NB))
    {
        let mut keys = [<T::L as Load>::K0; NB];
        for (k, xg) in keys.iter_mut().zip(xb.chunks_exact(g)) {
            *k = T::amax_key(xg);
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
                codes_fast(xg, id, cg);
            } else {
                quantize_codes_slow::<T::L>(xg, a, id, cg);
            }
        }
    }
}

/// The codes `round_half_away(x · id)` of a fast group, sixteen at a time (`x.len()` a
/// multiple of [`W`]; the same length as `codes`).
#[inline(always)]
fn codes_fast<T: Lanes>(x: &[T], id: f32, codes: &mut [i8]) {
    // SAFETY: register-only NEON operations; the store writes the 16 bytes of `cc`.
    unsafe {
        let idv = vdupq_n_f32(id);
        for (xc, cc) in x.chunks_exact(W).zip(codes.chunks_exact_mut(W)) {
            let (Some(xc), Some(cc)) = (xc.first_chunk::<W>(), cc.first_chunk_mut::<W>()) else {
                continue;
            };
            let v = T::load16(xc);
            let c = v.map(|v| vreinterpretq_u8_s32(vcvtaq_s32_f32(vmulq_f32(v, idv))));
            vst1q_u8(cc.as_mut_ptr().cast::<u8>(), low_bytes(c));
        }
    }
}
