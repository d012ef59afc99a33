//! Q8_0 weights × Q8_0 activations with NEON: four weight rows against one activation row.

use core::arch::aarch64::{
    vaddq_f32, vcvtq_f32_s32, vdupq_n_f32, vdupq_n_s32, vld1q_s8, vmulq_f32, vmulq_n_f32, vst1q_f32,
};

use super::lanes::{dot16, f16x4, sums4};
use crate::quant::q8_0::BYTES;
use crate::quant::{BLOCK, QuantRow};

/// `dot_q8_0_q8_0` of four weight rows with the activation row `a`, the same bits: per block
/// the four rows' exact integer sums side by side ([`dot16`], `DOT`: with `SDOT`), then in four
/// lanes `sumf += (f32)sumi · (d_w · d_a)` (`FMUL`, `FMUL`, `FADD`), blocks in order. Blocks
/// past the shortest row (or the activation row) are left out, as the portable `zip` leaves
/// them.
#[inline(always)]
pub(super) fn dot4<const DOT: bool>(w: [&[u8]; 4], a: &QuantRow<'_>) -> [f32; 4] {
    let mut blocks = (a.qs.len() / BLOCK).min(a.d.len());
    for r in w {
        blocks = blocks.min(r.len() / BYTES);
    }
    let wp = w.map(<[u8]>::as_ptr);
    let mut out = [0f32; 4];
    // SAFETY: every block `b < blocks` lies within each weight row (`BYTES` bytes at
    // `b·BYTES`), the activation codes (32 at `b·32`) and scales; the store writes the 16
    // bytes of `out`.
    unsafe {
        let zero = vdupq_n_s32(0);
        let mut sumf = vdupq_n_f32(0.0);
        for b in 0..blocks {
            let qa = a.qs.as_ptr().add(b * BLOCK);
            let (a0, a1) = (vld1q_s8(qa), vld1q_s8(qa.add(16)));
            let at = b * BYTES;
            let p = wp.map(|w| {
                let c = w.add(at + 2).cast::<i8>();
                dot16::<DOT>(dot16::<DOT>(zero, vld1q_s8(c), a0), vld1q_s8(c.add(16)), a1)
            });
            let dw = f16x4(wp.map(|w| w.add(at)));
            let t = vmulq_n_f32(dw, *a.d.get_unchecked(b));
            sumf = vaddq_f32(sumf, vmulq_f32(vcvtq_f32_s32(sums4(p)), t));
        }
        vst1q_f32(out.as_mut_ptr(), sumf);
    }
    out
}
