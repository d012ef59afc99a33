//! Q5_0 weights × Q8_0 activations with the DSP extension: every weight row against one
//! activation row, expanded once per call ([`expand`]), then one `asm!` loop over the rows and
//! blocks (about 94 instructions per block and row).
//!
//! A block's value is `q − 16` with `q = nibble + 16 · h` (`h` the block's `qh` bit), so
//! `Σ (q − 16) · x = Σ nibble · x − Σ 16 · (1 − h) · x`: the nibbles by pairs as the Q4_1
//! kernel takes them (one `AND` with `0x000f000f` and a shift per pair, then `SMLAD`), and the
//! fifth bits by pairs `(j, j + 16)`, whose `qh` bits are 16 apart as two halves are: one `AND`
//! of `¬qh` (shifted) with `0x00100010` gives the pair `(16 · (1 − h_j), 16 · (1 − h_{j+16}))`,
//! multiplied by `SMLAD` with the expanded `(x_j, x_{j+16})`; that sum is negated and the
//! nibbles' added to it. Exact in an `i32` (at most 32 · 16 · 128 each), then
//! `sumf += (d_w · d_a) · (f32)sumi` in block order, as the portable code.

use core::arch::asm;

use super::insn::{code_word, halves, sxtb16, sxtb16_ror8};
use crate::quant::q5_0::BYTES;
use crate::quant::{BLOCK, QuantRow};

/// Words per expanded block: `d_a` (f32 bits), the 16 fifth-bit pairs, the 16 nibble pairs.
const WORDS: usize = 33;

/// Blocks expanded at a time (Gemma 3's 640-value rows in two chunks, 16 and 4; the kernel
/// check's 576-value rows too): 16 × 33 words (2,112 bytes) of stack.
const CHUNK: usize = 16;

/// Blocks `from..from + out.len() / 33` of `a` as [`block`] reads them: `d_a`; for `j` in 0..16
/// the pair `(x_j, x_{j+16})`; then for each of the block's four nibble words `k` the pairs its
/// four `AND`s give (`(4k, 4k+2)`, `(4k+1, 4k+3)` of the low nibbles, `(4k+16, 4k+18)`,
/// `(4k+17, 4k+19)` of the high ones), each by `SXTB16` (of a `PKHBT` / `PKHTB` of two code
/// words for the first ones). The caller keeps the blocks within `a`.
fn expand(a: &QuantRow<'_>, from: usize, out: &mut [u32]) {
    for (b, x) in (from..).zip(out.chunks_exact_mut(WORDS)) {
        x[0] = a.d[b].to_bits();
        let q = &a.qs[b * BLOCK..][..BLOCK];
        for k in 0..4 {
            let (lo, hi) = (code_word(q, 4 * k), code_word(q, 16 + 4 * k));
            let [p, r] = halves(lo, hi);
            let bits = &mut x[1 + 4 * k..][..4];
            bits[0] = sxtb16(p);
            bits[1] = sxtb16_ror8(p);
            bits[2] = sxtb16(r);
            bits[3] = sxtb16_ror8(r);
            let nibbles = &mut x[17 + 4 * k..][..4];
            nibbles[0] = sxtb16(lo);
            nibbles[1] = sxtb16_ror8(lo);
            nibbles[2] = sxtb16(hi);
            nibbles[3] = sxtb16_ror8(hi);
        }
    }
}

// The block layout the `asm!` below reads: `d` (f16) at 0, `qh` (u32) at 2, the 16 nibble bytes
// at 6, 22 bytes in all.
const _: () = assert!(BYTES == 22);

/// Four fifth-bit pairs `(j, j + 16)` (`¬qh` in r4, shifted by `$s0`..`$s3` to put bit `j` at
/// bit 4; mask `0x00100010` in r12) against their expanded activation pairs (loaded into
/// r8–r11), multiplied and added into lr (`$first`: `SMUAD` for the block's first pair).
#[rustfmt::skip]
macro_rules! bit_pairs {
    ($s0:literal, $s1:literal, $s2:literal, $s3:literal, $first:literal) => {
        concat!(
            "ldmia r2!, {{r8, r9, r10, r11}}\n",
            "and r0, r12, r4", $s0, "\n",
            $first, "\n",
            "and r0, r12, r4", $s1, "\n",
            "smlad lr, r0, r9, lr\n",
            "and r0, r12, r4", $s2, "\n",
            "smlad lr, r0, r10, lr\n",
            "and r0, r12, r4", $s3, "\n",
            "smlad lr, r0, r11, lr\n",
        )
    };
}

/// One nibble word of a weight block (in `$w`) against its four expanded activation pairs
/// (loaded into r8–r11), as the Q4_1 kernel's: each pair cut out by one `AND` with `0x000f000f`
/// (in r12) and a shift, into r0, then multiplied and added into lr.
#[rustfmt::skip]
macro_rules! nibble_word {
    ($w:literal) => {
        concat!(
            "ldmia r2!, {{r8, r9, r10, r11}}\n",
            "and r0, r12, ", $w, "\n",
            "smlad lr, r0, r8, lr\n",
            "and r0, r12, ", $w, ", lsr #8\n",
            "smlad lr, r0, r9, lr\n",
            "and r0, r12, ", $w, ", lsr #4\n",
            "smlad lr, r0, r10, lr\n",
            "and r0, r12, ", $w, ", lsr #12\n",
            "smlad lr, r0, r11, lr\n",
        )
    };
}

/// `out[o] +=` (in block order) `blocks` blocks of weight row `o` (the first at `w`, each
/// `blocks · 22 + skip` bytes after the previous one) against the expanded activation blocks at
/// `x`, one block at a time: `−Σ 16 · (1 − h) · x` by `SMUAD` / `SMLAD` and a negation, then
/// `Σ nibble · x` added by `SMLAD`, then `sum += (d · d_a) · (f32)sumi` on the scalar FPU
/// (`VCVTB` converts the f16 `d` exactly, subnormals included), separate multiplications and
/// additions in the portable order. The row loop is in the `asm!` too, its counters in FPU
/// registers (s8–s12) while the block loop takes every core register.
///
/// # Safety
///
/// `blocks` ≥ 1 and `out.len()` ≥ 1; for every `o < out.len()`, `w + o · (blocks · 22 + skip)`
/// readable for `blocks · 22` bytes (any alignment); `x` 4-byte aligned and readable for
/// `blocks · 33` words.
#[inline(always)]
unsafe fn dot_rows(w: *const u8, skip: usize, x: *const u32, blocks: usize, out: &mut [f32]) {
    // SAFETY: the caller's contract: for each of the `out.len()` rows the block loop runs
    // `blocks` times, reading one 22-byte weight block (`LDRH` of `d`, `LDR`s of `qh` and the
    // four nibble words, which ARMv7-M and ARMv8-M Mainline allow unaligned: the Cortex-M reset
    // state does not trap them) and 33 words of `x`, then the row's sum is read from and
    // written back to `out` (`VLDR`, `VSTM`: f32, aligned). Only the registers declared here
    // and the flags are written (lr holds the block's integer sum, at most 32 · 31 · 128 in
    // magnitude: exact).
    unsafe {
        asm!(
            "vmov s8, r2",
            "vmov s9, r3",
            "vmov s10, r4",
            "vmov s11, r5",
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
            "ldr r4, [r1, #2]",
            "mvns r4, r4",
            "mov.w r12, #0x00100010",
            bit_pairs!(", lsl #4", ", lsl #3", ", lsl #2", ", lsl #1", "smuad lr, r0, r8"),
            bit_pairs!("", ", lsr #1", ", lsr #2", ", lsr #3", "smlad lr, r0, r8, lr"),
            bit_pairs!(", lsr #4", ", lsr #5", ", lsr #6", ", lsr #7", "smlad lr, r0, r8, lr"),
            bit_pairs!(", lsr #8", ", lsr #9", ", lsr #10", ", lsr #11", "smlad lr, r0, r8, lr"),
            "rsb lr, lr, #0",
            "mov.w r12, #0x000f000f",
            "ldr r4, [r1, #6]",
            "ldr r5, [r1, #10]",
            nibble_word!("r4"),
            nibble_word!("r5"),
            "ldr r4, [r1, #14]",
            "ldr r5, [r1, #18]",
            nibble_word!("r4"),
            nibble_word!("r5"),
            "adds r1, r1, #22",
            "vmov s6, lr",
            "vcvt.f32.s32 s6, s6",
            "vmul.f32 s4, s4, s2",
            "vmul.f32 s4, s4, s6",
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
            out("s0") _, out("s2") _, out("s4") _, out("s6") _, out("s7") _,
            out("s8") _, out("s9") _, out("s10") _, out("s11") _, out("s12") _,
            options(nostack),
        );
    }
}

/// `out[o] = dot_q5_0_q8_0(W[o], a)` for every row `o` of `w` (rows of `row_bytes` bytes, as
/// many as `out` holds, any alignment), the same bits: the blocks of `a` expanded [`CHUNK`] at
/// a time, each row's sum carried from chunk to chunk in block order. `false` (nothing
/// written) when `w` does not hold the rows.
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
    let mut x = [0u32; CHUNK * WORDS];
    let mut from = 0;
    while from < blocks {
        let nb = (blocks - from).min(CHUNK);
        let x = &mut x[..nb * WORDS];
        expand(a, from, x);
        // SAFETY: every row's chunk, `row_bytes` after the previous one's start, holds `nb` ≥ 1
        // blocks from byte `from · 22` (`(from + nb) · 22` ≤ `row_bytes`, and `w` holds
        // `out.len()` rows, as checked above); `x` holds `nb` expanded blocks (a `u32` array:
        // aligned); `out` is written once per row.
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
