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
/// many as `out` holds), the same bits: the blocks of `a` expanded [`CHUNK`] at a time, each
/// row's sum carried from chunk to chunk in block order. `false` (nothing written) when `w` does
/// not hold the rows or they are not 4-byte aligned (the kernel loads blocks by words).
pub(super) fn rows(w: &[u8], row_bytes: usize, a: &QuantRow<'_>, out: &mut [f32]) -> bool {
    let fits = out
        .len()
        .checked_mul(row_bytes)
        .is_some_and(|b| b <= w.len())
        && w.as_ptr() as usize % 4 == 0
        && row_bytes % 4 == 0;
    if !fits {
        return false;
    }
    let blocks = (row_bytes / BYTES)
        .min(a.qs.len() / BLOCK)
        .min(a.d.len())
        .min(a.s.len());
    // +0.0, as the portable `sumf` starts.
    out.fill(0.0);
    if out.is_empty() {
        return true;
    }
    let mut x = [0u32; CHUNK * Q8_1_WORDS];
    let mut from = 0;
    while from < blocks {
        let nb = (blocks - from).min(CHUNK);
        let x = &mut x[..nb * Q8_1_WORDS];
        expand_q8_1(a, from, x);
        // SAFETY: every row's chunk, `row_bytes` after the previous one's start, holds `nb` ≥ 1
        // blocks from byte `from · 20` (`(from + nb) · 20` ≤ `row_bytes`, and `w` holds
        // `out.len()` rows, as checked above) and starts 4-byte aligned (rows do, as checked
        // above, and blocks are 20 bytes); `x` holds `nb` expanded blocks; `out` is
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
/// `blocks · 20 + skip` bytes after the previous one) against the expanded activation blocks at
/// `x`, one block at a time: its integer sum by `SMUAD` / `SMLAD`, then
/// `sum += (d · d_a) · (f32)sumi + m · s_a` on the scalar FPU (`VCVTB` / `VCVTT` convert the
/// f16 `d`, `m` exactly, subnormals included), separate multiplications and additions in the
/// portable order (no fused multiply-add). The row loop is in the `asm!` too, its counters in
/// FPU registers (s8–s12) while the block loop takes every core register.
///
/// # Safety
///
/// `blocks` ≥ 1 and `out.len()` ≥ 1; for every `o < out.len()`, `w + o · (blocks · 20 + skip)`
/// 4-byte aligned and readable for `blocks · 20` bytes; `x` readable for `blocks · 18` words.
#[inline(always)]
unsafe fn dot_rows(w: *const u8, skip: usize, x: *const u32, blocks: usize, out: &mut [f32]) {
    // SAFETY: the caller's contract: for each of the `out.len()` rows the block loop runs
    // `blocks` times, reading one 20-byte weight block by words (`VLDM` of `d`, `m`; two `LDM`s
    // of the codes; aligned) and 18 words of `x`, then the row's sum is read from and written
    // back to `out` (`VLDR`, `VSTM`: f32, aligned). Only the registers declared here and the
    // flags are written (r12 holds the nibble mask, lr the block's integer sum, at most
    // 32 · 15 · 128 in magnitude: exact).
    unsafe {
        asm!(
            "vmov s8, r2",
            "vmov s9, r3",
            "vmov s10, r4",
            "vmov s11, r5",
            "vmov s12, r0",
            "mov.w r12, #0x000f000f",
            "3:",
            "vmov r0, s12",
            "vldr s7, [r0]",
            "vmov r2, s8",
            "vmov r3, s9",
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
            "vmov r0, s12",
            "vstmia r0!, {{s7}}",
            "vmov s12, r0",
            "vmov r4, s10",
            "add r1, r1, r4",
            "vmov r5, s11",
            "subs r5, r5, #1",
            "vmov s11, r5",
            "bne 3b",
            inout("r0") out.as_mut_ptr() => _,
            inout("r1") w => _,
            inout("r2") x => _,
            inout("r3") blocks => _,
            inout("r4") skip => _,
            inout("r5") out.len() => _,
            out("r8") _, out("r9") _, out("r10") _, out("r11") _,
            out("r12") _, out("lr") _,
            out("s0") _, out("s2") _, out("s3") _, out("s4") _, out("s5") _,
            out("s6") _, out("s7") _, out("s8") _, out("s9") _, out("s10") _,
            out("s11") _, out("s12") _,
            options(nostack),
        );
    }
}
