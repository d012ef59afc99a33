//! The DSP extension's packed 16-bit instructions the kernels use, and the FPU's f16 conversion,
//! one `asm!` each (their Rust intrinsics are unstable).

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

/// The four sign-extended bytes of `w` as two 16-bit pairs: `(b0, b1)`, `(b2, b3)` (low half
/// first), as the query codes lie in their words.
#[cfg(edgekv_arm_dsp)]
#[inline(always)]
pub(super) fn pairs(w: u32) -> (u32, u32) {
    let (lo, hi): (u32, u32);
    // SAFETY: four register-only DSP instructions; no memory, stack or flags are touched.
    // `SXTB16` extends bytes 0 and 2 (then, rotated, 1 and 3) to halves; `PKHBT` / `PKHTB`
    // pair them up in order.
    unsafe {
        asm!(
            "sxtb16 {e}, {w}",
            "sxtb16 {o}, {w}, ror #8",
            "pkhbt {lo}, {e}, {o}, lsl #16",
            "pkhtb {hi}, {o}, {e}, asr #16",
            w = in(reg) w,
            e = out(reg) _,
            o = out(reg) _,
            lo = lateout(reg) lo,
            hi = lateout(reg) hi,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    (lo, hi)
}

/// `f16` bits to `f32` with the FPU's `VCVTB.F32.F16`: `half::f16::to_f32`'s bits (exact for
/// every number; NaNs keep their payload and become quiet) under the FPSCR the Cortex-M runtime
/// leaves at reset (IEEE half precision, `AHP` = 0; `DN` = 0, which keeps NaN payloads).
#[cfg(edgekv_arm_f16cvt)]
#[inline(always)]
pub(super) fn f16_to_f32(h: u16) -> f32 {
    let out: u32;
    // SAFETY: moves between a core and an FPU register and a conversion, register-only
    // (hard-float targets have the FPU with half-precision conversion; `s15` is declared
    // clobbered); no memory or stack is touched, and no code of this crate reads the FPU's flags.
    unsafe {
        asm!(
            "vmov s15, {h}",
            "vcvtb.f32.f16 s15, s15",
            "vmov {o}, s15",
            h = in(reg) u32::from(h),
            o = lateout(reg) out,
            out("s15") _,
            options(pure, nomem, nostack),
        );
    }
    f32::from_bits(out)
}

/// `Σ q_h[i] · (k[i] as i8)` for three query heads `q_h` (codes two to a word) over the same
/// key codes (bytes, read four at a time; any alignment): each key word loaded, sign-extended and
/// paired
/// once (`SXTB16`, `PKHBT` / `PKHTB`), then two `SMLAD` per head. Exact in `i32` for up to 256
/// codes. One loop in `asm!`: as Rust, its twelve live values spill on a Cortex-M4.
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
            "sxtb16 {o}, {k}, ror #8",
            "pkhbt {k}, {e}, {o}, lsl #16",
            "pkhtb {e}, {o}, {e}, asr #16",
            "ldrd {o}, {w}, [{q0}], #8",
            "smlad {a0}, {k}, {o}, {a0}",
            "smlad {a0}, {e}, {w}, {a0}",
            "ldrd {o}, {w}, [{q1}], #8",
            "smlad {a1}, {k}, {o}, {a1}",
            "smlad {a1}, {e}, {w}, {a1}",
            "ldrd {o}, {w}, [{q2}], #8",
            "smlad {a2}, {k}, {o}, {a2}",
            "smlad {a2}, {e}, {w}, {a2}",
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

/// `acc[h·d + l] += ps[ρ][h] · (row_ρ[l] as i8)` for three heads `h`, four lanes `l` and the
/// rows `row_ρ = row + ρ·stride` in order: each product rounded, then added (`VMLA` does not
/// fuse), as the portable kernel does. The twelve accumulators stay in `s16`–`s27` across the
/// rows; each row costs a load of its four codes, their conversion and one `VLDM` of its three
/// weights.
///
/// # Safety
///
/// `acc` is valid for reads and writes of floats `[0, 4)`, `[d, d + 4)` and `[2d, 2d + 4)`;
/// every `row_ρ` (ρ < `ps.len()`) for reads of bytes `[0, 4)`; no other reference to those
/// floats is used meanwhile.
#[cfg(edgekv_arm_dsp)]
#[cfg(edgekv_arm_f16cvt)]
#[inline(always)]
pub(super) unsafe fn add_rows3(acc: *mut f32, d: usize, ps: &[[f32; 3]], row: *const u8, stride: usize) {
    let n = ps.len();
    if n == 0 {
        return;
    }
    // SAFETY: the caller's contract for `acc` and the rows; the loop runs `n` times, reading
    // `ps[ρ]` and row ρ for ρ < n. Only the declared registers and the flags are written.
    unsafe {
        asm!(
            "add {t}, {acc}, {d}, lsl #2",
            "vldmia {acc}, {{s16-s19}}",
            "vldmia {t}, {{s20-s23}}",
            "add {t}, {t}, {d}, lsl #2",
            "vldmia {t}, {{s24-s27}}",
            "2:",
            "ldr {w}, [{rp}]",
            "add {rp}, {rp}, {stride}",
            "vldmia {pp}!, {{s12-s14}}",
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
            "vmla.f32 s16, s12, s0",
            "vmla.f32 s17, s12, s1",
            "vmla.f32 s18, s12, s2",
            "vmla.f32 s19, s12, s3",
            "vmla.f32 s20, s13, s0",
            "vmla.f32 s21, s13, s1",
            "vmla.f32 s22, s13, s2",
            "vmla.f32 s23, s13, s3",
            "vmla.f32 s24, s14, s0",
            "vmla.f32 s25, s14, s1",
            "vmla.f32 s26, s14, s2",
            "vmla.f32 s27, s14, s3",
            "subs {n}, {n}, #1",
            "bne 2b",
            "add {t}, {acc}, {d}, lsl #2",
            "vstmia {acc}, {{s16-s19}}",
            "vstmia {t}, {{s20-s23}}",
            "add {t}, {t}, {d}, lsl #2",
            "vstmia {t}, {{s24-s27}}",
            acc = in(reg) acc,
            d = in(reg) d,
            stride = in(reg) stride,
            rp = inout(reg) row => _,
            pp = inout(reg) ps.as_ptr() => _,
            n = inout(reg) n => _,
            t = out(reg) _,
            w = out(reg) _,
            x = out(reg) _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s12") _, out("s13") _, out("s14") _,
            out("s16") _, out("s17") _, out("s18") _, out("s19") _,
            out("s20") _, out("s21") _, out("s22") _, out("s23") _,
            out("s24") _, out("s25") _, out("s26") _, out("s27") _,
            options(nostack),
        );
    }
}
