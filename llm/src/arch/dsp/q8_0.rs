//! Q8_0 weights × Q8_0 activations with the DSP extension: every weight row against one
//! activation row, expanded ([`expand_q8_0`]).

use core::arch::asm;

use super::{CHUNK, Q8_0_WORDS, expand_q8_0};
use crate::quant::q8_0::BYTES;
use crate::quant::{BLOCK, QuantRow};

/// Two code words of a weight block (at byte offsets `$a`, `$b` from r1, any alignment: `LDR`)
/// against their four expanded activation pairs (loaded into r8–r11): each word's even and odd
/// codes sign-extended by `SXTB16` into r0, multiplied and added into lr (`$first`: `SMUAD` for
/// the block's first word, else `SMLAD`).
#[rustfmt::skip]
macro_rules! code_words {
    ($a:literal, $b:literal, $first:literal) => {
        concat!(
            "ldmia r2!, {{r8, r9, r10, r11}}\n",
            "ldr r4, [r1, #", $a, "]\n",
            "sxtb16 r0, r4\n",
            $first, "\n",
            "sxtb16 r0, r4, ror #8\n",
            "smlad lr, r0, r9, lr\n",
            "ldr r4, [r1, #", $b, "]\n",
            "sxtb16 r0, r4\n",
            "smlad lr, r0, r10, lr\n",
            "sxtb16 r0, r4, ror #8\n",
            "smlad lr, r0, r11, lr\n",
        )
    };
}

/// `out[o] = dot_q8_0_q8_0(W[o], a)` for every row `o` of `w` (rows of `row_bytes` bytes, as
/// many as `out` holds; the caller checked that `w` holds them), the same bits: the blocks of
/// `a` expanded [`CHUNK`] at a time, each row's sum carried from chunk to chunk in block order.
pub(super) fn rows(w: &[u8], row_bytes: usize, a: &QuantRow<'_>, out: &mut [f32]) {
    let blocks = (row_bytes / BYTES).min(a.qs.len() / BLOCK).min(a.d.len());
    // +0.0, as the portable `sumf` starts.
    out.fill(0.0);
    let mut x = [0u32; CHUNK * Q8_0_WORDS];
    let mut from = 0;
    while from < blocks {
        let nb = (blocks - from).min(CHUNK);
        let x = &mut x[..nb * Q8_0_WORDS];
        expand_q8_0(a, from, x);
        for (o, sum) in out.iter_mut().enumerate() {
            let row = &w[o * row_bytes + from * BYTES..][..nb * BYTES];
            // SAFETY: `row` holds `nb` ≥ 1 blocks; `x` holds `nb` expanded blocks.
            *sum = unsafe { dot_blocks(row.as_ptr(), x.as_ptr(), nb, *sum) };
        }
        from += nb;
    }
}

/// `sum` plus `blocks` blocks of one weight row (at `w`) against the expanded activation
/// blocks at `x`, one at a time: the block's integer sum by `SMUAD` / `SMLAD`, then
/// `sum += (f32)sumi · (d · d_a)` on the scalar FPU (`VCVTB` converts the f16 `d` exactly,
/// subnormals included), separate multiplications and additions in the portable order.
///
/// # Safety
///
/// `blocks` ≥ 1; `w` readable for `blocks · 34` bytes (any alignment); `x` 4-byte aligned and
/// readable for `blocks · 17` words.
#[inline(always)]
unsafe fn dot_blocks(w: *const u8, x: *const u32, blocks: usize, sum: f32) -> f32 {
    let mut sum = sum.to_bits();
    // SAFETY: the caller's contract: each pass reads one 34-byte weight block (`LDRH` of `d`,
    // eight `LDR`s of the codes, which ARMv7-M and ARMv8-M Mainline allow unaligned: the
    // Cortex-M reset state does not trap them) and 17 words of `x`, `blocks` times. Only the
    // registers declared here and the flags are written (lr holds the block's integer sum, at
    // most 32 · 128 · 128 in magnitude: exact).
    unsafe {
        asm!(
            "vmov s7, r0",
            "2:",
            "ldrh r0, [r1]",
            "vmov s0, r0",
            "vcvtb.f32.f16 s4, s0",
            "vldmia r2!, {{s2}}",
            code_words!("2", "6", "smuad lr, r0, r8"),
            code_words!("10", "14", "smlad lr, r0, r8, lr"),
            code_words!("18", "22", "smlad lr, r0, r8, lr"),
            code_words!("26", "30", "smlad lr, r0, r8, lr"),
            "adds r1, r1, #34",
            "vmov s6, lr",
            "vcvt.f32.s32 s6, s6",
            "vmul.f32 s4, s4, s2",
            "vmul.f32 s6, s6, s4",
            "vadd.f32 s7, s7, s6",
            "subs r3, r3, #1",
            "bne 2b",
            "vmov r0, s7",
            inout("r1") w => _,
            inout("r2") x => _,
            inout("r3") blocks => _,
            inout("r0") sum,
            out("r4") _,
            out("r8") _, out("r9") _, out("r10") _, out("r11") _,
            out("lr") _,
            out("s0") _, out("s2") _, out("s4") _, out("s6") _, out("s7") _,
            options(readonly, nostack),
        );
    }
    f32::from_bits(sum)
}
