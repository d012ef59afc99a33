//! Q4_K weights × Q8_K activations with NEON: one weight row against one activation row, each
//! super-block's nibbles split to bytes and its 6-bit scales and minimums read once.

use core::arch::aarch64::{
    int8x16_t, int32x4_t, vaddvq_s32, vandq_u8, vdupq_n_s32, vdupq_n_u8, vget_low_s16, vld1_u8,
    vld1q_s8, vld1q_s16, vld1q_u8, vmlal_high_s16, vmlal_s16, vmovl_u8, vmull_s16,
    vreinterpretq_s8_u8, vreinterpretq_s16_u16, vshrq_n_u8, vzip1_u8, vzip2_u8,
};

use super::k_lanes::{Lanes, pairs, scaled};
use crate::gguf::QK_K;
use crate::quant::q4_k::BYTES;
use crate::quant::{QuantRow, f16_le};

/// Sub-block `j`'s (0..8) 6-bit scales and minimums from the 12 packed bytes `q` (ggml's
/// `get_scale_min_k4`, as the portable `scale_min` reads them), all eight at once.
#[inline(always)]
fn scales_mins(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let (mut s, mut m) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        s[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
        s[j + 4] = (q[j + 8] & 0x0f) | ((q[j] >> 6) << 4);
        m[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
    }
    (s, m)
}

/// The eight lane sums `aux32` of sub-blocks `2i` and `2i + 1` (64 values: the 32 nibble bytes
/// at `q`, low nibbles then high ones) with the activation codes at `qa` (64 bytes), each
/// sub-block's i16 lanes multiplied by its scale (lane `2i`, `2i + 1` of `s`).
///
/// # Safety
///
/// 32 bytes at `q` and 64 at `qa` readable.
#[inline(always)]
unsafe fn chunk64<const J0: i32, const J1: i32>(
    acc: &mut [int32x4_t; 2],
    q: *const u8,
    qa: *const i8,
    s: core::arch::aarch64::int16x8_t,
) {
    // SAFETY: the caller's contract: loads of 16 bytes at `q`, `q + 16`, `qa + 16·k` (k < 4).
    unsafe {
        let nibble = vdupq_n_u8(0x0f);
        let (c0, c1) = (vld1q_u8(q), vld1q_u8(q.add(16)));
        let v = |x| -> int8x16_t { vreinterpretq_s8_u8(x) };
        let (l0, l1) = (v(vandq_u8(c0, nibble)), v(vandq_u8(c1, nibble)));
        let (h0, h1) = (v(vshrq_n_u8::<4>(c0)), v(vshrq_n_u8::<4>(c1)));
        let a = [
            vld1q_s8(qa),
            vld1q_s8(qa.add(16)),
            vld1q_s8(qa.add(32)),
            vld1q_s8(qa.add(48)),
        ];
        let lo = pairs(l1, a[1], Some(pairs(l0, a[0], None)));
        scaled::<J0>(acc, lo, s);
        let hi = pairs(h1, a[3], Some(pairs(h0, a[2], None)));
        scaled::<J1>(acc, hi, s);
    }
}

/// `dot_q4_k_q8_k` of the weight row `w` with the activation row `a`, the same bits: per
/// super-block the eight integer lanes exact (`SMULL` / `SMLAL` by value, then by the
/// sub-block's scale), `sums[l] += (f32)aux32[l] · (d_w · d_a)` in eight lanes, the minimums'
/// `Σ bsums[j] · m[j / 2]` (`SMULL`, `SMLAL`, `ADDV`: exact) and `sumf −= (dmin_w · d_a) ·
/// (f32)sumi`; the lanes added to `sumf` in order at the end. Super-blocks past the shorter
/// row are left out, as the portable `zip` leaves them.
#[inline(always)]
pub(super) fn dot(w: &[u8], a: &QuantRow<'_>) -> f32 {
    let blocks = (w.len() / BYTES)
        .min(a.qs.len() / QK_K)
        .min(a.d.len())
        .min(a.bsums.len() / (QK_K / 16));
    let mut lanes = Lanes::new();
    for b in 0..blocks {
        let wb = &w[b * BYTES..][..BYTES];
        let mut q = [0u8; 12];
        q.copy_from_slice(&wb[4..16]);
        let (s, m) = scales_mins(&q);
        let da = a.d[b];
        // SAFETY: `wb` holds the super-block's 144 bytes (nibbles at 16..144); the activation
        // row holds 256 codes at `b·256` and 16 sums at `b·16` (`b < blocks`); the scale and
        // minimum loads read the 8 bytes of `s` and `m`.
        let (aux32, sumi) = unsafe {
            let s16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(s.as_ptr())));
            let qa = a.qs.as_ptr().add(b * QK_K);
            let nib = wb.as_ptr().add(16);
            let mut acc = [vdupq_n_s32(0); 2];
            chunk64::<0, 1>(&mut acc, nib, qa, s16);
            chunk64::<2, 3>(&mut acc, nib.add(32), qa.add(64), s16);
            chunk64::<4, 5>(&mut acc, nib.add(64), qa.add(128), s16);
            chunk64::<6, 7>(&mut acc, nib.add(96), qa.add(192), s16);
            let mv = vld1_u8(m.as_ptr());
            let m0 = vreinterpretq_s16_u16(vmovl_u8(vzip1_u8(mv, mv)));
            let m1 = vreinterpretq_s16_u16(vmovl_u8(vzip2_u8(mv, mv)));
            let bs = a.bsums.as_ptr().add(b * (QK_K / 16));
            let (b0, b1) = (vld1q_s16(bs), vld1q_s16(bs.add(8)));
            let p = vmull_s16(vget_low_s16(b0), vget_low_s16(m0));
            let p = vmlal_high_s16(p, b0, m0);
            let p = vmlal_s16(p, vget_low_s16(b1), vget_low_s16(m1));
            let p = vmlal_high_s16(p, b1, m1);
            (acc, vaddvq_s32(p))
        };
        lanes.block(aux32, f16_le(wb[0], wb[1]) * da);
        lanes.minus(f16_le(wb[2], wb[3]) * da, sumi);
    }
    lanes.total()
}
