//! Q6_K weights × Q8_K activations with NEON: one weight row against one activation row, each
//! super-block's six-bit values assembled in bytes and its sixteen i8 scales widened once.

use core::arch::aarch64::{
    int8x16_t, int16x8_t, int32x4_t, uint8x16_t, vandq_u8, vdupq_n_s32, vdupq_n_u8, vld1_s8,
    vld1q_s8, vld1q_u8, vmovl_s8, vorrq_u8, vreinterpretq_s8_u8, vshlq_n_u8, vshrq_n_u8, vsubq_s8,
};

use super::k_lanes::{Lanes, pairs, scaled};
use crate::gguf::QK_K;
use crate::quant::q6_k::BYTES;
use crate::quant::{QuantRow, f16_le};

/// Sixteen values `q − 32` from their low nibbles `lo` (already in bits 0–3) and their two top
/// bits, already in bits 4–5 of `top` (other bits clear).
#[inline(always)]
fn six(lo: uint8x16_t, top: uint8x16_t) -> int8x16_t {
    // SAFETY: register-only NEON operations.
    unsafe {
        vsubq_s8(
            vreinterpretq_s8_u8(vorrq_u8(lo, top)),
            vreinterpretq_s8_u8(vdupq_n_u8(32)),
        )
    }
}

/// `acc += scale · Σ w·a` over 16 values (group `L` of the half's eight scales `s`).
///
/// # Safety
///
/// 16 bytes at `qa` readable.
#[inline(always)]
unsafe fn group<const L: i32>(acc: &mut [int32x4_t; 2], w: int8x16_t, qa: *const i8, s: int16x8_t) {
    // SAFETY: the caller's contract: one 16-byte load at `qa`.
    let a = unsafe { vld1q_s8(qa) };
    scaled::<L>(acc, pairs(w, a, None), s);
}

/// `dot_q6_k_q8_k` of the weight row `w` with the activation row `a`, the same bits: per
/// super-block the eight integer lanes exact (`SMULL` / `SMLAL2` of 16 values, then `SMLAL` by
/// their i8 scale), `sums[l] += (f32)aux32[l] · (d_w · d_a)` in eight lanes, the lanes added to
/// `sumf` in order at the end. Super-blocks past the shorter row are left out, as the portable
/// `zip` leaves them.
#[inline(always)]
pub(super) fn dot(w: &[u8], a: &QuantRow<'_>) -> f32 {
    let blocks = (w.len() / BYTES).min(a.qs.len() / QK_K).min(a.d.len());
    let mut lanes = Lanes::new();
    for b in 0..blocks {
        let wb = &w[b * BYTES..][..BYTES];
        // SAFETY: `wb` holds the super-block's 210 bytes (`ql` at 0..128, `qh` at 128..192,
        // the scales at 192..208); the activation row holds 256 codes at `b·256` (`b < blocks`).
        let aux32 = unsafe {
            let p = wb.as_ptr();
            let qa = a.qs.as_ptr().add(b * QK_K);
            let (m4, m30) = (vdupq_n_u8(0x0f), vdupq_n_u8(0x30));
            let mut acc = [vdupq_n_s32(0); 2];
            for h in 0..2 {
                let ql = p.add(64 * h);
                let (l0, l1) = (vld1q_u8(ql), vld1q_u8(ql.add(16)));
                let (l2, l3) = (vld1q_u8(ql.add(32)), vld1q_u8(ql.add(48)));
                let (h0, h1) = (vld1q_u8(p.add(128 + 32 * h)), vld1q_u8(p.add(144 + 32 * h)));
                let s = vmovl_s8(vld1_s8(p.add(192 + 8 * h).cast::<i8>()));
                let q = qa.add(128 * h);
                // Values 0–31: low nibbles of `ql[0..32]`, bits 0–1 of `qh`.
                group::<0>(
                    &mut acc,
                    six(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8::<4>(h0), m30)),
                    q,
                    s,
                );
                group::<1>(
                    &mut acc,
                    six(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8::<4>(h1), m30)),
                    q.add(16),
                    s,
                );
                // Values 32–63: low nibbles of `ql[32..64]`, bits 2–3.
                group::<2>(
                    &mut acc,
                    six(vandq_u8(l2, m4), vandq_u8(vshlq_n_u8::<2>(h0), m30)),
                    q.add(32),
                    s,
                );
                group::<3>(
                    &mut acc,
                    six(vandq_u8(l3, m4), vandq_u8(vshlq_n_u8::<2>(h1), m30)),
                    q.add(48),
                    s,
                );
                // Values 64–95: high nibbles of `ql[0..32]`, bits 4–5.
                group::<4>(
                    &mut acc,
                    six(vshrq_n_u8::<4>(l0), vandq_u8(h0, m30)),
                    q.add(64),
                    s,
                );
                group::<5>(
                    &mut acc,
                    six(vshrq_n_u8::<4>(l1), vandq_u8(h1, m30)),
                    q.add(80),
                    s,
                );
                // Values 96–127: high nibbles of `ql[32..64]`, bits 6–7.
                group::<6>(
                    &mut acc,
                    six(vshrq_n_u8::<4>(l2), vandq_u8(vshrq_n_u8::<2>(h0), m30)),
                    q.add(96),
                    s,
                );
                group::<7>(
                    &mut acc,
                    six(vshrq_n_u8::<4>(l3), vandq_u8(vshrq_n_u8::<2>(h1), m30)),
                    q.add(112),
                    s,
                );
            }
            acc
        };
        lanes.block(aux32, f16_le(wb[208], wb[209]) * a.d[b]);
    }
    lanes.total()
}
