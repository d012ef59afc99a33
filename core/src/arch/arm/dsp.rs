//! The DSP extension's packed 16-bit instructions the kernels use, one `asm!` each (their Rust
//! intrinsics are unstable), and the `asm!` loops built on them.

use core::arch::asm;

/// `acc + a.lo · b.lo + a.hi · b.hi` (16-bit signed halves): `SMLAD`. Callers keep the sums
/// within `i32` (at most 256 products of an `i16` and an `i8`).
#[cfg(edgekv_arm_dsp)]
#[inline(always)]
pub(super) fn smlad(a: u32, b: u32, acc: i32) -> i32 {
    let out: i32;
    // SAFETY: one register-only DSP instruction (this module is built only for cores with the
    // DSP extension); no memory, stack or flags are touched.
    unsafe {
        asm!(
            "smlad {out}, {a}, {b}, {acc}",
            out = lateout(reg) out,
            a = in(reg) a,
            b = in(reg) b,
            acc = in(reg) acc,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

/// The four sign-extended bytes of `w` as two 16-bit pairs: `(b0, b2)`, `(b1, b3)` (low half
/// first, `SXTB16`), the order an interleaved query's words take (`query::interleave_quads`).
#[cfg(edgekv_arm_dsp)]
#[inline(always)]
pub(super) fn halves(w: u32) -> (u32, u32) {
    let (even, odd): (u32, u32);
    // SAFETY: two register-only DSP instructions; no memory, stack or flags are touched.
    unsafe {
        asm!(
            "sxtb16 {e}, {w}",
            "sxtb16 {o}, {w}, ror #8",
            w = in(reg) w,
            // Written before the second instruction reads `w`: never `w`'s register.
            e = out(reg) even,
            o = lateout(reg) odd,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    (even, odd)
}

/// `Σ q_h[i] · (k[i] as i8)` for three query heads `q_h` (codes two to a word) over the same
/// key codes (bytes, read four at a time; any alignment), the query interleaved
/// (`query::interleave_quads`): each key word loaded and sign-extended once (`SXTB16`: its even,
/// then its odd codes, as the query's words pair them), then two `SMLAD` per head. Exact in
/// `i32` for up to 256 codes. One loop in `asm!`: as Rust, its twelve live values spill on a
/// Cortex-M4.
#[cfg(edgekv_arm_dsp)]
#[inline(always)]
pub(super) fn dot3(q: [&[u32]; 3], k: &[u8]) -> [i32; 3] {
    let words = q.iter().fold(k.len() / 4, |n, q| n.min(q.len() / 2));
    if words == 0 {
        return [0; 3];
    }
    let (mut a0, mut a1, mut a2) = (0i32, 0i32, 0i32);
    // SAFETY: the loop runs `words` ≥ 1 times, reading four key bytes (`LDR`, which ARMv7-M and
    // ARMv8-M allow unaligned) and two words of each query row per pass (`LDRD`: the `&[u32]`
    // are aligned); `words` ≤ a quarter of `k.len()` and ≤ half of every `q` length. It writes
    // only the registers declared here and the flags (no memory, no stack).
    unsafe {
        asm!(
            "2:",
            "ldr {k}, [{kp}], #4",
            "sxtb16 {e}, {k}",
            "sxtb16 {k}, {k}, ror #8",
            "ldrd {o}, {w}, [{q0}], #8",
            "smlad {a0}, {e}, {o}, {a0}",
            "smlad {a0}, {k}, {w}, {a0}",
            "ldrd {o}, {w}, [{q1}], #8",
            "smlad {a1}, {e}, {o}, {a1}",
            "smlad {a1}, {k}, {w}, {a1}",
            "ldrd {o}, {w}, [{q2}], #8",
            "smlad {a2}, {e}, {o}, {a2}",
            "smlad {a2}, {k}, {w}, {a2}",
            "subs {n}, {n}, #1",
            "bne 2b",
            kp = inout(reg) k.as_ptr() => _,
            q0 = inout(reg) q[0].as_ptr() => _,
            q1 = inout(reg) q[1].as_ptr() => _,
            q2 = inout(reg) q[2].as_ptr() => _,
            n = inout(reg) words => _,
            a0 = inout(reg) a0,
            a1 = inout(reg) a1,
            a2 = inout(reg) a2,
            k = out(reg) _,
            e = out(reg) _,
            o = out(reg) _,
            w = out(reg) _,
            options(readonly, nostack),
        );
    }
    [a0, a1, a2]
}

/// [`dot3`] for every group of every row of a page, all in one `asm!` loop nest, eight codes a
/// step: `out[r·groups + b]` is row `r`'s group `b` (see `page::Dot3Page`).
///
/// # Safety
///
/// `p` as `page::dot3_page` checks it: every count ≥ 1, each query row 4-byte aligned and
/// readable for `steps · 8` codes per group of a row, each of `p.rows` key rows `p.advance` bytes
/// past the previous one's end readable from `k`, and `out` writable for `p.rows · p.groups`
/// sums.
#[cfg(edgekv_arm_dsp)]
#[inline(always)]
pub(super) unsafe fn dot3_page(p: &super::page::Dot3Page, k: *const u8, out: *mut [i32; 3]) {
    // SAFETY: the caller's contract: the loops read what it names (8 key bytes by `LDR`, which
    // ARMv7-M allows unaligned, and four words of each query row by `LDRD` per step) and store
    // three words per group to `out`; `p` is only read. The loops keep their pointer to `p`, the
    // output pointer and their two counters in 16 bytes of stack below `sp` (restored before
    // the end), as the innermost loop takes every other register; only the declared registers
    // and the flags are written.
    unsafe {
        asm!(
            "sub sp, sp, #16",
            "str r9, [sp]",
            "str lr, [sp, #4]",
            "ldr r0, [r9, #24]",
            "str r0, [sp, #12]",
            "4:",
            "ldr r12, [sp]",
            "ldm r12, {{r2, r3, r4}}",
            "ldr r0, [r12, #20]",
            "str r0, [sp, #8]",
            "3:",
            "ldr r12, [sp]",
            "ldr r0, [r12, #12]",
            "movs r5, #0",
            "mov.w r8, #0",
            "mov.w r10, #0",
            "2:",
            "ldr r11, [r1], #4",
            "sxtb16 r12, r11, ror #8",
            "sxtb16 r11, r11",
            "ldrd lr, r9, [r2], #8",
            "smlad r5, r11, lr, r5",
            "smlad r5, r12, r9, r5",
            "ldrd lr, r9, [r3], #8",
            "smlad r8, r11, lr, r8",
            "smlad r8, r12, r9, r8",
            "ldrd lr, r9, [r4], #8",
            "smlad r10, r11, lr, r10",
            "smlad r10, r12, r9, r10",
            "ldr r11, [r1], #4",
            "sxtb16 r12, r11, ror #8",
            "sxtb16 r11, r11",
            "ldrd lr, r9, [r2], #8",
            "smlad r5, r11, lr, r5",
            "smlad r5, r12, r9, r5",
            "ldrd lr, r9, [r3], #8",
            "smlad r8, r11, lr, r8",
            "smlad r8, r12, r9, r8",
            "ldrd lr, r9, [r4], #8",
            "smlad r10, r11, lr, r10",
            "smlad r10, r12, r9, r10",
            "subs r0, r0, #1",
            "bne 2b",
            "ldr r0, [sp, #4]",
            "stmia r0!, {{r5, r8, r10}}",
            "str r0, [sp, #4]",
            "ldr r0, [sp, #8]",
            "subs r0, r0, #1",
            "str r0, [sp, #8]",
            "bne 3b",
            "ldr r12, [sp]",
            "ldr r0, [r12, #16]",
            "add r1, r1, r0",
            "ldr r0, [sp, #12]",
            "subs r0, r0, #1",
            "str r0, [sp, #12]",
            "bne 4b",
            "add sp, sp, #16",
            inout("r9") p as *const _ => _,
            inout("lr") out => _,
            inout("r1") k => _,
            out("r0") _,
            out("r2") _,
            out("r3") _,
            out("r4") _,
            out("r5") _,
            out("r8") _,
            out("r10") _,
            out("r11") _,
            out("r12") _,
        );
    }
}

/// `ps[j] = [w[0][j] · s_j, w[1][j] · s_j, w[2][j] · s_j]` for `j < m`, `s_j` the f16 at
/// `sc + j·sstride` converted by `VCVTB` (as `f16::to_f32`): the value kernel's weights × scales
/// of a chunk's rows for three heads (`kernels::scale_weights`'s products).
///
/// # Safety
///
/// `m ≥ 1`; `ps` is valid for writes of `m` rows, each `w[h]` for reads of `m` floats (4-byte
/// aligned), and `sc + j·sstride` for reads of two bytes for every `j < m`.
#[cfg(all(edgekv_arm_dsp, edgekv_arm_f16cvt))]
#[inline(always)]
pub(super) unsafe fn weights3(
    ps: *mut [f32; 3],
    w: [*const f32; 3],
    sc: *const u8,
    sstride: usize,
    m: usize,
) {
    // SAFETY: the caller's contract: the loop runs `m` times, reading a halfword at `sc` (which
    // ARMv7-M and ARMv8-M Mainline allow unaligned) and one float of each weight row, and
    // writing three floats to `ps`. Only the declared registers and the flags are written.
    unsafe {
        asm!(
            "2:",
            "ldrh {t}, [{sc}]",
            "add {sc}, {sc}, {ss}",
            "vmov s0, {t}",
            "vcvtb.f32.f16 s0, s0",
            "vldmia {w0}!, {{s1}}",
            "vldmia {w1}!, {{s2}}",
            "vldmia {w2}!, {{s3}}",
            "vmul.f32 s1, s1, s0",
            "vmul.f32 s2, s2, s0",
            "vmul.f32 s3, s3, s0",
            "vstmia {ps}!, {{s1-s3}}",
            "subs {m}, {m}, #1",
            "bne 2b",
            ps = inout(reg) ps => _,
            w0 = inout(reg) w[0] => _,
            w1 = inout(reg) w[1] => _,
            w2 = inout(reg) w[2] => _,
            sc = inout(reg) sc => _,
            ss = in(reg) sstride,
            m = inout(reg) m => _,
            t = out(reg) _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            options(nostack),
        );
    }
}

/// [`weights3`] for rows of two groups at once: `pa[j]` with row `j`'s scale of group 0 (at
/// `sc + j·sstride`), `pb[j]` with its scale of group 1 (two bytes on), each row's three weights
/// loaded once.
///
/// # Safety
///
/// `m ≥ 1`; `pa` and `pb` are valid for writes of `m` rows, `w0`, `w1` and `w2` for reads of `m`
/// floats each (4-byte aligned), and `sc + j·sstride` for reads of four bytes for every `j < m`.
#[cfg(all(edgekv_arm_dsp, edgekv_arm_f16cvt))]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn weights3x2(
    pa: *mut [f32; 3],
    pb: *mut [f32; 3],
    w: [*const f32; 3],
    sc: *const u8,
    sstride: usize,
    m: usize,
) {
    // SAFETY: the caller's contract: the loop runs `m` times, reading two halfwords at `sc`
    // (unaligned halfwords are allowed) and one float of each weight row, and writing three
    // floats to each of `pa` and `pb`. Only the declared registers and the flags are written.
    unsafe {
        asm!(
            "2:",
            "ldrh {t}, [{sc}]",
            "ldrh {u}, [{sc}, #2]",
            "add {sc}, {sc}, {ss}",
            "vmov s0, s1, {t}, {u}",
            "vcvtb.f32.f16 s0, s0",
            "vcvtb.f32.f16 s1, s1",
            "vldmia {w0}!, {{s2}}",
            "vldmia {w1}!, {{s3}}",
            "vldmia {w2}!, {{s4}}",
            "vmul.f32 s5, s2, s0",
            "vmul.f32 s6, s3, s0",
            "vmul.f32 s7, s4, s0",
            "vstmia {pa}!, {{s5-s7}}",
            "vmul.f32 s5, s2, s1",
            "vmul.f32 s6, s3, s1",
            "vmul.f32 s7, s4, s1",
            "vstmia {pb}!, {{s5-s7}}",
            "subs {m}, {m}, #1",
            "bne 2b",
            pa = inout(reg) pa => _,
            pb = inout(reg) pb => _,
            w0 = inout(reg) w[0] => _,
            w1 = inout(reg) w[1] => _,
            w2 = inout(reg) w[2] => _,
            sc = inout(reg) sc => _,
            ss = in(reg) sstride,
            m = inout(reg) m => _,
            t = out(reg) _,
            u = out(reg) _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            options(nostack),
        );
    }
}

/// `acc[h·d + l] += ps[ρ][h] · (row_ρ[l] as i8)` for three heads `h`, four lanes `l` and the
/// rows `row_ρ = row + ρ·stride` in order: each product rounded, then added (`VMLA` does not
/// fuse), as the portable kernel does. The twelve accumulators stay in `s16`–`s27` across the
/// rows; each row costs a load of its four codes, their conversion and its three weights (`VLDM`
/// of two rows' six; rows in pairs, an odd last one alone).
///
/// # Safety
///
/// `acc` is valid for reads and writes of floats `[0, 4)`, `[d, d + 4)` and `[2d, 2d + 4)`;
/// `ps` for reads of `n` rows (initialized); every `row_ρ` (ρ < `n`) for reads of bytes
/// `[0, 4)`; no other reference to those floats is used meanwhile.
#[cfg(edgekv_arm_dsp)]
#[cfg(edgekv_arm_f16cvt)]
#[inline(always)]
pub(super) unsafe fn add_rows3(
    acc: *mut f32,
    d: usize,
    ps: *const [f32; 3],
    n: usize,
    row: *const u8,
    stride: usize,
) {
    if n == 0 {
        return;
    }
    // SAFETY: the caller's contract for `acc` and the rows; the loops run `n / 2` times over two
    // rows and `n % 2` times over one, reading `ps[ρ]` and row ρ for ρ < n. Only the declared
    // registers and the flags are written.
    unsafe {
        asm!(
            "add {t}, {acc}, {d}, lsl #2",
            "vldmia {acc}, {{s16-s19}}",
            "vldmia {t}, {{s20-s23}}",
            "add {t}, {t}, {d}, lsl #2",
            "vldmia {t}, {{s24-s27}}",
            "cmp {n2}, #0",
            "beq 3f",
            "2:",
            "ldr {w}, [{rp}]",
            "ldr {w2}, [{rp}, {stride}]",
            "add {rp}, {rp}, {stride}, lsl #1",
            "vldmia {pp}!, {{s8-s13}}",
            "sxtb {t}, {w}",
            "sbfx {x}, {w}, #8, #8",
            "vmov s0, s1, {t}, {x}",
            "sbfx {t}, {w}, #16, #8",
            "asr {x}, {w}, #24",
            "vmov s2, s3, {t}, {x}",
            "vcvt.f32.s32 s0, s0",
            "vcvt.f32.s32 s1, s1",
            "vcvt.f32.s32 s2, s2",
            "vcvt.f32.s32 s3, s3",
            "vmla.f32 s16, s8, s0",
            "vmla.f32 s17, s8, s1",
            "vmla.f32 s18, s8, s2",
            "vmla.f32 s19, s8, s3",
            "vmla.f32 s20, s9, s0",
            "vmla.f32 s21, s9, s1",
            "vmla.f32 s22, s9, s2",
            "vmla.f32 s23, s9, s3",
            "vmla.f32 s24, s10, s0",
            "vmla.f32 s25, s10, s1",
            "vmla.f32 s26, s10, s2",
            "vmla.f32 s27, s10, s3",
            "sxtb {t}, {w2}",
            "sbfx {x}, {w2}, #8, #8",
            "vmov s4, s5, {t}, {x}",
            "sbfx {t}, {w2}, #16, #8",
            "asr {x}, {w2}, #24",
            "vmov s6, s7, {t}, {x}",
            "vcvt.f32.s32 s4, s4",
            "vcvt.f32.s32 s5, s5",
            "vcvt.f32.s32 s6, s6",
            "vcvt.f32.s32 s7, s7",
            "vmla.f32 s16, s11, s4",
            "vmla.f32 s17, s11, s5",
            "vmla.f32 s18, s11, s6",
            "vmla.f32 s19, s11, s7",
            "vmla.f32 s20, s12, s4",
            "vmla.f32 s21, s12, s5",
            "vmla.f32 s22, s12, s6",
            "vmla.f32 s23, s12, s7",
            "vmla.f32 s24, s13, s4",
            "vmla.f32 s25, s13, s5",
            "vmla.f32 s26, s13, s6",
            "vmla.f32 s27, s13, s7",
            "subs {n2}, {n2}, #1",
            "bne 2b",
            "3:",
            "cmp {odd}, #0",
            "beq 4f",
            "ldr {w}, [{rp}]",
            "vldmia {pp}, {{s8-s10}}",
            "sxtb {t}, {w}",
            "sbfx {x}, {w}, #8, #8",
            "vmov s0, s1, {t}, {x}",
            "sbfx {t}, {w}, #16, #8",
            "asr {x}, {w}, #24",
            "vmov s2, s3, {t}, {x}",
            "vcvt.f32.s32 s0, s0",
            "vcvt.f32.s32 s1, s1",
            "vcvt.f32.s32 s2, s2",
            "vcvt.f32.s32 s3, s3",
            "vmla.f32 s16, s8, s0",
            "vmla.f32 s17, s8, s1",
            "vmla.f32 s18, s8, s2",
            "vmla.f32 s19, s8, s3",
            "vmla.f32 s20, s9, s0",
            "vmla.f32 s21, s9, s1",
            "vmla.f32 s22, s9, s2",
            "vmla.f32 s23, s9, s3",
            "vmla.f32 s24, s10, s0",
            "vmla.f32 s25, s10, s1",
            "vmla.f32 s26, s10, s2",
            "vmla.f32 s27, s10, s3",
            "4:",
            "add {t}, {acc}, {d}, lsl #2",
            "vstmia {acc}, {{s16-s19}}",
            "vstmia {t}, {{s20-s23}}",
            "add {t}, {t}, {d}, lsl #2",
            "vstmia {t}, {{s24-s27}}",
            acc = in(reg) acc,
            d = in(reg) d,
            stride = in(reg) stride,
            rp = inout(reg) row => _,
            pp = inout(reg) ps => _,
            n2 = inout(reg) n / 2 => _,
            odd = in(reg) n % 2,
            t = out(reg) _,
            w = out(reg) _,
            w2 = out(reg) _,
            x = out(reg) _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            out("s8") _, out("s9") _, out("s10") _, out("s11") _,
            out("s12") _, out("s13") _,
            out("s16") _, out("s17") _, out("s18") _, out("s19") _,
            out("s20") _, out("s21") _, out("s22") _, out("s23") _,
            out("s24") _, out("s25") _, out("s26") _, out("s27") _,
            options(nostack),
        );
    }
}
