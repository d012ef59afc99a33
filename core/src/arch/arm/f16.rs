//! The FPU's half-precision conversion (hard-float Cortex-M targets), one `asm!` (the Rust
//! intrinsic is unstable): every build's f16 scales and values, `small-code` ones included.

use core::arch::asm;

/// `f16` bits to `f32` with the FPU's `VCVTB.F32.F16`: `half::f16::to_f32`'s bits (exact for
/// every number; NaNs keep their payload and become quiet) under the FPSCR the Cortex-M runtime
/// leaves at reset (IEEE half precision, `AHP` = 0; `DN` = 0, which keeps NaN payloads).
#[inline(always)]
pub(super) fn to_f32(h: u16) -> f32 {
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
