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
/// many as `out` holds), the same bits: the blocks of `a` expanded [`CHUNK`] at a time, each
/// row's sum carried from chunk to chunk in block order. `false` (nothing written) when `w` does
/// not hold the rows.
pub(super) fn rows(w: &[u8], row_bytes: usize, a: &QuantRow<'_>, out: &mut [f32]) -> bool {
    let fits = out
        .len()
        .checked_mul(row_bytes)
        .is_some_and(|b| b <= w.len());
    if !fits {
        return false;
    }
    let blocks = (row_bytes / BYTES).min(a.qs.len() / BLOCK).min(a.d.len());
    // +0.0, as the portable `sumf` starts.
    out.fill(0.0);
    if out.is_empty() {
        return true;
    }
    let mut x = [0u32; CHUNK * Q8_0_WORDS];
    let mut from = 0;
    while from < blocks {
        let nb = (blocks - from).min(CHUNK);
        let x = &mut x[..nb * Q8_0_WORDS];
        expand_q8_0(a, from, x);
        // SAFETY: every row's chunk, `row_bytes` after the previous one's start, holds `nb` ≥ 1
        // blocks from byte `from · 34` (`(from + nb) · 34` ≤ `row_bytes`, and `w` holds
        // `out.len()` rows, as checked above); `x` holds `nb` expanded blocks; `out` is
        // written once per row.
        unsafe {
            dot_rows(
                w[from * BYTES..].as_ptr(),
                row_bytes - nb * BYTES,
                x.as_ptr(),
                nb,
                out,
            );
        }
        from += nb;
    }
    true
}

/// `out[o] +=` (in block order) `blocks` blocks of weight row `o` (the first at `w`, each
/// `blocks · 34 + skip` bytes after the previous one) against the expanded activation blocks at
/// `x`, one block at a time: its integer sum by `SMUAD` / `SMLAD`, then
/// `sum += (f32)sumi · (d · d_a)` on the scalar FPU (`VCVTB` converts the f16 `d` exactly,
/// subnormals included), separate multiplications and additions in the portable order. The
/// row loop is in the `asm!` too (the output pointer and the activation's start in FPU
/// registers).
///
/// # Safety
///
/// `blocks` ≥ 1 and `out.len()` ≥ 1; for every `o < out.len()`, `w + o · (blocks · 34 + skip)`
/// readable for `blocks · 34` bytes (any alignment); `x` 4-byte aligned and readable for
/// `blocks · 17` words.
#[inline(always)]
unsafe fn dot_rows(w: *const u8, skip: usize, x: *const u32, blocks: usize, out: &mut [f32]) {
    // SAFETY: the caller's contract: for each of the `out.len()` rows the block loop runs
    // `blocks` times, reading one 34-byte weight block (`LDRH` of `d`, eight `LDR`s of the
    // codes, which ARMv7-M and ARMv8-M Mainline allow unaligned: the Cortex-M reset state does
    // not trap them) and 17 words of `x`, then the row's sum is read from and written back to
    // `out` (`VLDR`, `VSTM`: f32, aligned). Only the registers declared here and the flags are
    // written (lr holds the block's integer sum, at most 32 · 128 · 128 in magnitude: exact).
    unsafe {
        asm!(
            "vmov s8, r2",
            "vmov s9, r3",
            "vmov s12, r0",
            "3:",
            "vmov r0, s12",
            "vldr s7, [r0]",
            "vmov r2, s8",
            "vmov r3, s9",
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
            "vmov r0, s12",
            "vstmia r0!, {{s7}}",
            "vmov s12, r0",
            "add r1, r1, r12",
            "subs r5, r5, #1",
            "bne 3b",
            inout("r0") out.as_mut_ptr() => _,
            inout("r1") w => _,
            inout("r2") x => _,
            inout("r3") blocks => _,
            inout("r12") skip => _,
            inout("r5") out.len() => _,
            out("r4") _,
            out("r8") _, out("r9") _, out("r10") _, out("r11") _,
            out("lr") _,
            out("s0") _, out("s2") _, out("s4") _, out("s6") _, out("s7") _,
            out("s8") _, out("s9") _, out("s12") _,
            options(nostack),
        );
    }
}
