//! The Cortex-M4's whole-page score loop for heads of 64 codes in two Q8_0 groups of 32 and
//! three query heads (SmolLM2's shape): from the codes to the scores in one `asm!` loop nest, with
//! the DSP extension's `SXTB16` / `SMUAD` / `SMLAD` and the FPU's `VCVTB` and `VMLA`.

use core::arch::asm;

/// One key word (four codes) of a Q8_0 row against three query heads' codes, in
/// [`page_scores3_g32`]'s registers: the word's even and odd codes as two pairs (`SXTB16`),
/// each head's two query words by `LDRD`, two `SMLAD`s per head (`SMUAD` for a group's first
/// word, which starts the sums).
#[cfg(all(edgekv_arm_dsp, edgekv_arm_f16cvt))]
macro_rules! key_word3 {
    (start) => {
        key_word3!(
            "smuad r4, r9, r11",
            "smuad r5, r9, r11",
            "smuad r8, r9, r11"
        )
    };
    (add) => {
        key_word3!(
            "smlad r4, r9, r11, r4",
            "smlad r5, r9, r11, r5",
            "smlad r8, r9, r11, r8"
        )
    };
    ($h0:literal, $h1:literal, $h2:literal) => {
        concat!(
            "ldr r9, [r0], #4\n",
            "sxtb16 r10, r9, ror #8\n",
            "sxtb16 r9, r9\n",
            "ldrd r11, r12, [r1], #8\n",
            $h0,
            "\n",
            "smlad r4, r10, r12, r4\n",
            "ldrd r11, r12, [r2], #8\n",
            $h1,
            "\n",
            "smlad r5, r10, r12, r5\n",
            "ldrd r11, r12, [r3], #8\n",
            $h2,
            "\n",
            "smlad r8, r10, r12, r8\n",
        )
    };
}

/// A group of 32 codes: its first word starts the three sums (`SMUAD`), seven more add to them.
#[cfg(all(edgekv_arm_dsp, edgekv_arm_f16cvt))]
macro_rules! group32 {
    () => {
        concat!(
            key_word3!(start),
            key_word3!(add),
            key_word3!(add),
            key_word3!(add),
            key_word3!(add),
            key_word3!(add),
            key_word3!(add),
            key_word3!(add),
        )
    };
}

/// The scores of `n` Q8_0 rows (two groups of 32 codes: heads of 64) for three query heads, in
/// one `asm!` loop: per row and group the three integer dot products by `SMLAD` (exact in an
/// `i32`, each key word decoded once for the three heads), then
/// `out_h[r] = (qs[0][h] · k_r0) · sum_r0h + (qs[1][h] · k_r1) · sum_r1h`, `k_rb` row `r`'s f16
/// scale of group `b` (at `sc + r·sstride + 2b`, by `VCVTB`), each product rounded before it is
/// added (`VMLA` does not fuse): `kernels::int8_scores`'s bits, group by group in order, but for
/// the sign of a zero score, whose first term the portable kernel adds to `+0` (`+0 + −0` is
/// `+0`). No weight sees that sign: a weight is `exp(score − max)` with `max ≥ score`, and
/// `±0 − max` is `−max` for a nonzero `max`, `±0` (whose `exp` is 1) for a zero one; a zero
/// maximum's sign is as free (`exp::max_of`). The sums stay in registers: nothing goes through
/// memory but the scores.
///
/// # Safety
///
/// `n ≥ 1`; `q[h]` is 4-byte aligned and valid for reads of 64 codes; row `r < n` (at
/// `k + r·stride`, `stride ≥ 64`) for reads of 64 bytes and its scales (at `sc + r·sstride`) of
/// four; `out[h]` for writes of `n` floats (4-byte aligned).
#[cfg(all(edgekv_arm_dsp, edgekv_arm_f16cvt))]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn page_scores3_g32(
    q: [*const i16; 3],
    qs: &[[f32; 3]; 2],
    k: *const u8,
    stride: usize,
    sc: *const u8,
    sstride: usize,
    out: [*mut f32; 3],
    n: usize,
) {
    // SAFETY: the caller's contract: the loop runs `n` times over a row's 16 key words (`LDR`,
    // which ARMv7-M allows unaligned) and each head's 32 query words (`LDRD`, aligned), its two
    // scale halfwords, and stores one float through each output pointer; `qs` is read once. The
    // output, scale and count registers live in `s24`–`s29` across the loop (every core
    // register but the reserved ones is taken); only the declared registers and the flags are
    // written.
    unsafe {
        asm!(
            "vmov s24, r9",
            "vmov s25, r10",
            "vmov s26, r11",
            "vmov s27, r12",
            "vmov s28, r4",
            "vmov s29, r5",
            "vldmia r8, {{s16-s21}}",
            "2:",
            // The row's two scales.
            "vmov r9, s27",
            "ldrh r10, [r9]",
            "ldrh r11, [r9, #2]",
            "vmov s8, s9, r10, r11",
            "vcvtb.f32.f16 s8, s8",
            "vcvtb.f32.f16 s9, s9",
            "vmov r10, s28",
            "add r9, r9, r10",
            "vmov s27, r9",
            group32!(),
            // Group 0: (qs · k) · sum (the portable kernel's `0 + …` differs only in a zero's
            // sign, which no weight sees: see above).
            "vmov s0, s1, r4, r5",
            "vmov s2, r8",
            "vcvt.f32.s32 s0, s0",
            "vcvt.f32.s32 s1, s1",
            "vcvt.f32.s32 s2, s2",
            "vmul.f32 s10, s16, s8",
            "vmul.f32 s11, s17, s8",
            "vmul.f32 s12, s18, s8",
            "vmul.f32 s4, s10, s0",
            "vmul.f32 s5, s11, s1",
            "vmul.f32 s6, s12, s2",
            group32!(),
            // Group 1.
            "vmov s0, s1, r4, r5",
            "vmov s2, r8",
            "vcvt.f32.s32 s0, s0",
            "vcvt.f32.s32 s1, s1",
            "vcvt.f32.s32 s2, s2",
            "vmul.f32 s10, s19, s9",
            "vmul.f32 s11, s20, s9",
            "vmul.f32 s12, s21, s9",
            "vmla.f32 s4, s10, s0",
            "vmla.f32 s5, s11, s1",
            "vmla.f32 s6, s12, s2",
            // The row's three scores, then the next row.
            "vmov r9, s24",
            "vstmia r9!, {{s4}}",
            "vmov s24, r9",
            "vmov r9, s25",
            "vstmia r9!, {{s5}}",
            "vmov s25, r9",
            "vmov r9, s26",
            "vstmia r9!, {{s6}}",
            "vmov s26, r9",
            "add r0, r0, lr",
            "sub r1, r1, #128",
            "sub r2, r2, #128",
            "sub r3, r3, #128",
            "vmov r9, s29",
            "subs r9, r9, #1",
            "vmov s29, r9",
            "bne 2b",
            inout("r0") k => _,
            inout("r1") q[0] => _,
            inout("r2") q[1] => _,
            inout("r3") q[2] => _,
            inout("r4") sstride => _,
            inout("r5") n => _,
            inout("r8") qs.as_ptr() => _,
            inout("r9") out[0] => _,
            inout("r10") out[1] => _,
            inout("r11") out[2] => _,
            inout("r12") sc => _,
            inout("lr") stride - 64 => _,
            out("s0") _, out("s1") _, out("s2") _,
            out("s4") _, out("s5") _, out("s6") _,
            out("s8") _, out("s9") _, out("s10") _, out("s11") _, out("s12") _,
            out("s16") _, out("s17") _, out("s18") _, out("s19") _,
            out("s20") _, out("s21") _,
            out("s24") _, out("s25") _, out("s26") _, out("s27") _,
            out("s28") _, out("s29") _,
            options(nostack),
        );
    }
}
