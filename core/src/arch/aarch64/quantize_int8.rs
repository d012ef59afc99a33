//! The Q8 group loop with NEON: the portable loop's scale math (`block_scales`' steps) four
//! groups at a time ([`scales4`]: `FDIV`s, and `FCVTN` for the stored f16, nearest even like the
//! portable `f16_bits_rne`), with `max|x|` and the codes sixteen values at a time. (The
//! portable `block_scales` takes sixteen groups per call whatever the row holds: for a K or V
//! row of a few groups most of its work is padding.)
//!
//! Codes of a fast group (`d` zero or normal, `max|x|` finite): `p = x · id` (one IEEE `FMUL`,
//! as the portable code's product: for f16 rows the portable `(|x| · 2⁻¹¹²) · (id · 2¹¹²)` is
//! the same real number, rounded once), then `FCVTAS`, which rounds to nearest with ties
//! **away from zero** — `roundf`, the portable `round_q8` (not `FRINTN`'s ties to even); `|p| <
//! 127.5` there, so nothing saturates, and the sign comes with the conversion (−0 gives 0, as
//! the portable code's sign step does). The codes' low bytes by one `TBL`. Other groups take
//! the portable code. The default FPCR (no flush to zero, round to nearest) is assumed, as by
//! every float kernel of the crate: Linux starts every process with it.

use core::arch::aarch64::{
    float32x4_t, uint16x4_t, vandq_u32, vbslq_f32, vceqq_f32, vcgeq_f32, vcleq_f32, vcvtaq_s32_f32,
    vdivq_f32, vdupq_n_f32, vld1q_f32, vmulq_f32, vorrq_u32, vreinterpretq_u8_s32, vst1_u16,
    vst1q_f32, vst1q_u8, vst1q_u32,
};
use core::arch::asm;

use half::f16;

use super::quantize_lanes::{Lanes, W, low_bytes};
use crate::format::int8::groups::quantize_codes_slow;
use crate::format::load::Load;
use crate::numeric::floor::quant_input;

/// Groups whose scales [`scales4`] computes at a time.
const G4: usize = 4;

/// Four groups' scale math from their `max|x|` (`a`, exact; unused lanes 0), as the portable
/// `group_scale`: `d = a / 127`, `id = 1 / d` (0 where `d == 0`), whether the fast codes apply
/// (`d` zero or normal, `a` finite), and the stored scale's f16 bits (of `d`; the canonical NaN
/// where `a` is NaN) by `FCVTN`: round to nearest even, overflow to inf, f16 subnormals kept
/// (the default FPCR), a quiet NaN to `0x7E00` — `f16_bits_rne`'s values.
#[inline(always)]
fn scales4(a: [f32; G4]) -> ([f32; G4], [u32; G4], [u16; G4]) {
    let (mut ids, mut fast, mut bits) = ([0f32; G4], [0u32; G4], [0u16; G4]);
    // SAFETY: the load reads the 16 bytes of `a`, the stores write the 16, 16 and 8 bytes of
    // `ids`, `fast` and `bits`; the rest is register-only.
    unsafe {
        let av = vld1q_f32(a.as_ptr());
        let d = vdivq_f32(av, vdupq_n_f32(127.0));
        let zero = vceqq_f32(d, vdupq_n_f32(0.0));
        let id = vbslq_f32(zero, vdupq_n_f32(0.0), vdivq_f32(vdupq_n_f32(1.0), d));
        let normal = vandq_u32(
            vcgeq_f32(d, vdupq_n_f32(f32::MIN_POSITIVE)),
            vcleq_f32(av, vdupq_n_f32(f32::MAX)),
        );
        let nan = vceqq_f32(av, av);
        let stored: float32x4_t = vbslq_f32(nan, d, vdupq_n_f32(f32::NAN));
        let h: uint16x4_t;
        asm!(
            "fcvtn {h:v}.4h, {x:v}.4s",
            x = in(vreg) stored,
            h = out(vreg) h,
            options(pure, nomem, nostack, preserves_flags),
        );
        vst1q_f32(ids.as_mut_ptr(), id);
        vst1q_u32(fast.as_mut_ptr(), vorrq_u32(zero, normal));
        vst1_u16(bits.as_mut_ptr(), h);
    }
    (ids, fast, bits)
}

/// Quantizes like the portable `quantize_groups` (the same codes and scales, bit for bit), for
/// `g` a multiple of [`W`] (the caller's check). Lengths as `quantize_q8` checks them; other
/// lengths write what the shortest slice allows.
pub(super) fn quantize_groups<T: Lanes>(x: &[T], g: usize, codes: &mut [i8], scales: &mut [f16]) {
    if g == 0 || g % W != 0 {
        return;
    }
    for ((xb, cb), sb) in x
        .chunks(G4 * g)
        .zip(codes.chunks_mut(G4 * g))
        .zip(scales.chunks_mut(G4))
    {
        let mut amax = [0f32; G4];
        for (a, xg) in amax.iter_mut().zip(xb.chunks_exact(g)) {
            // The portable `group_scale`'s floor: a group below 2^-100 is a zero group.
            *a = quant_input(T::L::key_f32(T::amax_key(xg)));
        }
        let (ids, fast, bits) = scales4(amax);
        for (s, &bits) in sb.iter_mut().zip(&bits) {
            *s = f16::from_bits(bits);
        }
        for (((xg, cg), &a), (&id, &f)) in xb
            .chunks_exact(g)
            .zip(cb.chunks_exact_mut(g))
            .zip(&amax)
            .zip(ids.iter().zip(&fast))
        {
            if f != 0 {
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
