//! Q4_1 weights × Q8_1 activations with the DSP extension: every weight row against one
//! activation row, expanded ([`expand_q8_1`]).

use core::arch::asm;

use super::{CHUNK, Q8_1_WORDS, expand_q8_1};
use crate::quant::q4_1::BYTES;
use crate::quant::{BLOCK, QuantRow};

/// One nibble word of a weight block (in `$w`) against its four expanded activation pairs
/// (loaded into r8–r11): the low nibbles of bytes 0 and 2, 1 and 3, then the high ones, each pair
/// cut out by one `AND` with `0x000f000f` (in r12) and a shift, into r0, then multiplied
/// and added into lr (`$first`: `SMUAD` for the block's first word, else `SMLAD`).
#[rustfmt::skip]
macro_rules! nibble_word {
    ($w:literal, $first:literal) => {
        concat!(
            "ldmia r2!, {{r8, r9, r10, r11}}\n",
            "and r0, r12, ", $w, "\n",
            $first, "\n",
            "and r0, r12, ", $w, ", lsr #8\n",
            "smlad lr, r0, r9, lr\n",
            "and r0, r12, ", $w, ", lsr #4\n",
            "smlad lr, r0, r10, lr\n",
            "and r0, r12, ", $w, ", lsr #12\n",
            "smlad lr, r0, r11, lr\n",
        )
    };
}

/// `out[o] = dot_q4_1_q8_1(W[o], a)` for every row `o` of `w` (rows of `row_bytes` bytes, as
/// many as `out` holds, 4-byte aligned: the caller checked it, and that `w` holds them), the same
/// bits: the blocks of `a` expanded [`CHUNK`] at a time, each row's sum carried from chunk to
/// chunk in block order.
pub(super) fn rows(w: &[u8], row_bytes: usize, a: &QuantRow<'_>, out: &mut [f32]) {
    let blocks = (row_bytes / BYTES)
        .min(a.qs.len() / BLOCK)
        .min(a.d.len())
        .min(a.s.len());
    // +0.0, as the portable `sumf` starts.
    out.fill(0.0);
    let mut x = [0u32; CHUNK * Q8_1_WORDS];
    let mut from = 0;
    while from < blocks {
        let nb = (blocks - from).min(CHUNK);
        let x = &mut x[..nb * Q8_1_WORDS];
        expand_q8_1(a, from, x);
        for (o, sum) in out.iter_mut().enumerate() {
            let row = &w[o * row_bytes + from * BYTES..][..nb * BYTES];
            // SAFETY: `row` holds `nb` ≥ 1 blocks and starts 4-byte aligned (the row does, as
            // the caller checked, and blocks are 20 bytes); `x` holds `nb` expanded blocks.
            *sum = unsafe { dot_blocks(row.as_ptr(), x.as_ptr(), nb, *sum) };
        }
        from += nb;
    }
}

/// `sum` plus `blocks` blocks of one weight row (at `w`) against the expanded activation
/// blocks at `x`, one at a time: the block's integer sum by `SMUAD` / `SMLAD`, then
/// `sum += (d · d_a) · (f32)sumi + m · s_a` on the scalar FPU (`VCVTB` / `VCVTT` convert the
/// f16 `d`, `m` exactly, subnormals included), separate multiplications and additions in the
/// portable order (no fused multiply-add).
///
/// # Safety
///
/// `blocks` ≥ 1; `w` 4-byte aligned and readable for `blocks · 20` bytes; `x` readable for
/// `blocks · 18` words.
#[inline(always)]
unsafe fn dot_blocks(w: *const u8, x: *const u32, blocks: usize, sum: f32) -> f32 {
    let mut sum = sum.to_bits();
    // SAFETY: the caller's contract: each pass reads one 20-byte weight block by words (`VLDM`
    // of `d`, `m`; two `LDM`s of the codes; aligned) and 18 words of `x`, `blocks` times. Only
    // the registers declared here and the flags are written (r12 holds the nibble mask, lr the
    // block's integer sum, at most 32 · 15 · 128 in magnitude: exact).
    unsafe {
        asm!(
            "vmov s7, r0",
            "mov.w r12, #0x000f000f",
            "2:",
            "vldmia r1!, {{s0}}",
            "vldmia r2!, {{s2, s3}}",
            "vcvtb.f32.f16 s4, s0",
            "vcvtt.f32.f16 s5, s0",
            "ldmia r1!, {{r4, r5}}",
            nibble_word!("r4", "smuad lr, r0, r8"),
            nibble_word!("r5", "smlad lr, r0, r8, lr"),
            "ldmia r1!, {{r4, r5}}",
            nibble_word!("r4", "smlad lr, r0, r8, lr"),
            nibble_word!("r5", "smlad lr, r0, r8, lr"),
            "vmov s6, lr",
            "vcvt.f32.s32 s6, s6",
            "vmul.f32 s4, s4, s2",
            "vmul.f32 s4, s4, s6",
            "vmul.f32 s5, s5, s3",
            "vadd.f32 s4, s4, s5",
            "vadd.f32 s7, s7, s4",
            "subs r3, r3, #1",
            "bne 2b",
            "vmov r0, s7",
            inout("r1") w => _,
            inout("r2") x => _,
            inout("r3") blocks => _,
            inout("r0") sum,
            out("r4") _, out("r5") _,
            out("r8") _, out("r9") _, out("r10") _, out("r11") _,
            out("r12") _, out("lr") _,
            out("s0") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            options(readonly, nostack),
        );
    }
    f32::from_bits(sum)
}
