//! Q4_1 weights × Q8_1 activations with NEON: four weight rows against one activation row.

use core::arch::aarch64::{
    vaddq_f32, vandq_u8, vcvtq_f32_s32, vdupq_n_f32, vdupq_n_s32, vdupq_n_u8, vld1q_s8, vld1q_u8,
    vmulq_f32, vmulq_n_f32, vreinterpretq_s8_u8, vshrq_n_u8, vst1q_f32,
};

use super::lanes::{dot16, f16x4, sums4};
use crate::quant::q4_1::BYTES;
use crate::quant::{BLOCK, QuantRow};

/// `dot_q4_1_q8_1` of four weight rows with the activation row `a`, the same bits: per block
/// the four rows' exact integer sums side by side (low nibbles with codes 0–15, high ones with
/// codes 16–31, [`dot16`], `DOT`: with `SDOT`), then in four lanes
/// `sumf += (d_w · d_a) · (f32)sumi + m_w · s_a` (`FMUL`s and `FADD`s in that order), blocks in
/// order. Blocks past the shortest row (or the activation row) are left out, as the portable
/// `zip` leaves them.
#[inline(always)]
pub(super) fn dot4<const DOT: bool>(w: [&[u8]; 4], a: &QuantRow<'_>) -> [f32; 4] {
    let mut blocks = (a.qs.len() / BLOCK).min(a.d.len()).min(a.s.len());
    for r in w {
        blocks = blocks.min(r.len() / BYTES);
    }
    let wp = w.map(<[u8]>::as_ptr);
    let mut out = [0f32; 4];
    // SAFETY: every block `b < blocks` lies within each weight row (`BYTES` bytes at
    // `b·BYTES`), the activation codes (32 at `b·32`), scales and sums; the store writes the
    // 16 bytes of `out`.
    unsafe {
        let zero = vdupq_n_s32(0);
        let nibble = vdupq_n_u8(0x0f);
        let mut sumf = vdupq_n_f32(0.0);
        for b in 0..blocks {
            let qa = a.qs.as_ptr().add(b * BLOCK);
            let (a0, a1) = (vld1q_s8(qa), vld1q_s8(qa.add(16)));
            let at = b * BYTES;
            let p = wp.map(|w| {
                let c = vld1q_u8(w.add(at + 4));
                let lo = vreinterpretq_s8_u8(vandq_u8(c, nibble));
                let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(c));
                dot16::<DOT>(dot16::<DOT>(zero, lo, a0), hi, a1)
            });
            let dw = f16x4(wp.map(|w| w.add(at)));
            let mw = f16x4(wp.map(|w| w.add(at + 2)));
            let scaled = vmulq_f32(
                vmulq_n_f32(dw, *a.d.get_unchecked(b)),
                vcvtq_f32_s32(sums4(p)),
            );
            let term = vaddq_f32(scaled, vmulq_n_f32(mw, *a.s.get_unchecked(b)));
            sumf = vaddq_f32(sumf, term);
        }
        vst1q_f32(out.as_mut_ptr(), sumf);
    }
    out
}
