//! Q5_0 weights × Q8_0 activations with NEON: four weight rows against one activation row.

use core::arch::aarch64::{
    int8x16_t, int32x4_t, uint8x16_t, vaddq_f32, vandq_u8, vbicq_u8, vcvtq_f32_s32, vdupq_n_f32,
    vdupq_n_s32, vdupq_n_u8, vdupq_n_u32, vld1q_s8, vld1q_u8, vmulq_f32, vmulq_n_f32, vqtbl1q_u8,
    vreinterpretq_s8_u8, vreinterpretq_u8_u32, vshrq_n_u8, vst1q_f32, vsubq_u8, vtstq_u8,
};

use super::lanes::{dot16, f16x4, sums4};
use crate::quant::q5_0::BYTES;
use crate::quant::{BLOCK, QuantRow};

/// Byte `j` of a 16-byte vector: the bit of `qh`'s byte that holds value `j`'s fifth bit.
const BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
/// Which byte of `qh` each of the values 0–15 reads (16–31: [`BYTE_HI`]).
const BYTE_LO: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
/// Which byte of `qh` each of the values 16–31 reads.
const BYTE_HI: [u8; 16] = [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3];

/// The constant vectors of [`row_sums`].
struct Tables {
    bit: uint8x16_t,
    byte_lo: uint8x16_t,
    byte_hi: uint8x16_t,
}

/// One block's exact integer sum `Σ (q − 16) · a` in four i32 lanes: the block at `wb`, the
/// activation codes `a0` (values 0–15) and `a1` (16–31).
///
/// # Safety
///
/// The block's 22 bytes at `wb` readable.
#[inline(always)]
unsafe fn row_sums<const DOT: bool>(
    wb: *const u8,
    t: &Tables,
    a0: int8x16_t,
    a1: int8x16_t,
) -> int32x4_t {
    // SAFETY: the caller's contract: `qh`'s 4 bytes at `wb + 2` (read unaligned) and the 16
    // nibble bytes at `wb + 6`; the rest is register-only.
    unsafe {
        let qh = wb.add(2).cast::<u32>().read_unaligned();
        let qh = vreinterpretq_u8_u32(vdupq_n_u32(u32::from_le(qh)));
        let set_lo = vtstq_u8(vqtbl1q_u8(qh, t.byte_lo), t.bit);
        let set_hi = vtstq_u8(vqtbl1q_u8(qh, t.byte_hi), t.bit);
        let c = vld1q_u8(wb.add(6));
        let sixteen = vdupq_n_u8(16);
        let lo = vsubq_u8(vandq_u8(c, vdupq_n_u8(0x0f)), vbicq_u8(sixteen, set_lo));
        let hi = vsubq_u8(vshrq_n_u8::<4>(c), vbicq_u8(sixteen, set_hi));
        let zero = vdupq_n_s32(0);
        dot16::<DOT>(
            dot16::<DOT>(zero, vreinterpretq_s8_u8(lo), a0),
            vreinterpretq_s8_u8(hi),
            a1,
        )
    }
}

/// `dot_q5_0_q8_0` of four weight rows with the activation row `a`, the same bits: per block
/// the signed values `q − 16` (nibble, minus 16 where the fifth bit is clear: `BIC` and `SUB`;
/// the fifth bits spread to bytes by `TBL` and `CMTST`), the four rows' exact integer sums side
/// by side ([`dot16`], `DOT`: with `SDOT`), then in four lanes `sumf += (d_w · d_a) ·
/// (f32)sumi` (`FMUL`, `FMUL`, `FADD`), blocks in order. Blocks past the shortest row (or the
/// activation row) are left out, as the portable `zip` leaves them.
#[inline(always)]
pub(super) fn dot4<const DOT: bool>(w: [&[u8]; 4], a: &QuantRow<'_>) -> [f32; 4] {
    let mut blocks = (a.qs.len() / BLOCK).min(a.d.len());
    for r in w {
        blocks = blocks.min(r.len() / BYTES);
    }
    let wp = w.map(<[u8]>::as_ptr);
    let mut out = [0f32; 4];
    // SAFETY: every block `b < blocks` lies within each weight row (`BYTES` bytes at
    // `b·BYTES`: `qh` at +2, four bytes read unaligned, the nibbles' 16 at +6), the activation
    // codes (32 at `b·32`) and scales; the constant loads read the 16 bytes of each table; the
    // store writes the 16 bytes of `out`.
    unsafe {
        let t = Tables {
            bit: vld1q_u8(BIT.as_ptr()),
            byte_lo: vld1q_u8(BYTE_LO.as_ptr()),
            byte_hi: vld1q_u8(BYTE_HI.as_ptr()),
        };
        let mut sumf = vdupq_n_f32(0.0);
        for b in 0..blocks {
            let qa = a.qs.as_ptr().add(b * BLOCK);
            let (a0, a1) = (vld1q_s8(qa), vld1q_s8(qa.add(16)));
            let at = b * BYTES;
            // Four calls, not a closure over the rows: LLVM left the closure out of line
            // (a call per row and block, the tables reloaded each time).
            let p = [
                row_sums::<DOT>(wp[0].add(at), &t, a0, a1),
                row_sums::<DOT>(wp[1].add(at), &t, a0, a1),
                row_sums::<DOT>(wp[2].add(at), &t, a0, a1),
                row_sums::<DOT>(wp[3].add(at), &t, a0, a1),
            ];
            let dw = f16x4(wp.map(|w| w.add(at)));
            let scale = vmulq_n_f32(dw, *a.d.get_unchecked(b));
            sumf = vaddq_f32(sumf, vmulq_f32(scale, vcvtq_f32_s32(sums4(p))));
        }
        vst1q_f32(out.as_mut_ptr(), sumf);
    }
    out
}
