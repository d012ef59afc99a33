//! The DSP extension's instructions Rust cannot reach on stable (its Arm DSP intrinsics are
//! unstable) for the Rust code around the `asm!` loops: the activation expansions of `q5_0` and
//! `k_lanes` (`SXTB16`; LLVM emits the `PKHBT` / `PKHTB` of [`halves`] itself) and the f16
//! scales of the K-quants (`VCVTB`). Each is one `asm!` the compiler places and allocates like
//! any other operation.
//!
//! Each `asm!` reads all its inputs before it writes its output (one instruction, or a chain
//! whose last instruction alone writes the output), so a `lateout` may share a register with
//! an input.

use core::arch::asm;

/// Bytes 0 and 2 of `a`, each sign-extended into a 16-bit half (`SXTB16`).
#[inline(always)]
pub(super) fn sxtb16(a: u32) -> u32 {
    let r: u32;
    // SAFETY: one register-only instruction; no memory, no stack.
    unsafe {
        asm!(
            "sxtb16 {r}, {a}",
            r = lateout(reg) r,
            a = in(reg) a,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    r
}

/// Bytes 1 and 3 of `a`, each sign-extended into a 16-bit half (`SXTB16` with `ROR #8`).
#[inline(always)]
pub(super) fn sxtb16_ror8(a: u32) -> u32 {
    let r: u32;
    // SAFETY: one register-only instruction; no memory, no stack.
    unsafe {
        asm!(
            "sxtb16 {r}, {a}, ror #8",
            r = lateout(reg) r,
            a = in(reg) a,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    r
}

/// `(bytes (0, 1) of lo, bytes (0, 1) of hi)` and `(bytes (2, 3) of lo, of hi)` in the two
/// 16-bit halves (`PKHBT`, `PKHTB`: LLVM emits them for these expressions).
#[inline(always)]
pub(super) fn halves(lo: u32, hi: u32) -> [u32; 2] {
    [(lo & 0xffff) | (hi << 16), (lo >> 16) | (hi & 0xffff_0000)]
}

/// The f32 value of the f16 bit pattern `h` (`VCVTB.F32.F16`: exact, subnormals included; a
/// NaN stays a NaN).
#[inline(always)]
pub(super) fn f16_to_f32(h: u16) -> f32 {
    let bits: u32;
    // SAFETY: three register-only instructions, the FPU register s0 declared clobbered (rustc
    // takes FPU registers as operands only with a target feature this target does not list, so
    // the value passes through core registers); no memory, no stack.
    unsafe {
        asm!(
            "vmov s0, {h}",
            "vcvtb.f32.f16 s0, s0",
            "vmov {bits}, s0",
            h = in(reg) u32::from(h),
            bits = lateout(reg) bits,
            out("s0") _,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    f32::from_bits(bits)
}

/// The little-endian word at byte `at` of `b` (an `LDR`, which ARMv7-M and ARMv8-M Mainline
/// allow unaligned).
#[inline(always)]
pub(super) fn word(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

/// The little-endian word at code `at` of `q` (any alignment: an `LDR`).
#[inline(always)]
pub(super) fn code_word(q: &[i8], at: usize) -> u32 {
    word(bytemuck::cast_slice(q), at)
}
