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
