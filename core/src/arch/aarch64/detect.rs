//! Run-time detection of the dot-product extension (`SDOT`, `UDOT`: FEAT_DotProd, optional in
//! ARMv8.2-A, present on the Cortex-A55, A76 and A78AE, absent on the A53 and A72) — the one
//! home of AArch64 CPU detection: the matmul kernels of `edgekv-llm` ask
//! [`aarch64_dotprod`](crate::aarch64_dotprod) too.
//!
//! The core is `no_std`, so `std::arch::is_aarch64_feature_detected!` is not available. The
//! probe reads the ID register `ID_AA64ISAR0_EL1` (field DP, bits 47:44: 1 when the core has
//! `SDOT`) with `MRS`. At EL0 that read traps, and Linux (since 4.11, `HWCAP_CPUID`) emulates
//! it, giving the register's sanitised value; so does `qemu-aarch64` (its `max` CPU reports DP
//! = 1, `-cpu cortex-a53` DP = 0). The other route, `getauxval(AT_HWCAP)`, would tie the core to
//! the C library; reading `/proc/self/auxv` needs system calls: both are `std` matters this
//! crate does not take. Only Linux builds read the register (elsewhere the answer is the build's
//! static target features: `aarch64-apple-darwin` enables `dotprod`), and not under Miri. The
//! answer is cached in an atomic. A build with `dotprod` enabled statically skips the probe.

use core::sync::atomic::{AtomicU8, Ordering};

/// Not probed yet.
const UNKNOWN: u8 = 2;

/// 0 or 1 once probed.
static DOTPROD: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether this CPU runs the dot-product instructions (`SDOT`, `UDOT`): the build enables
/// `dotprod`, or (Linux) the ID register says so; probed once.
#[inline]
pub fn dotprod() -> bool {
    if cfg!(target_feature = "dotprod") {
        return true;
    }
    match DOTPROD.load(Ordering::Relaxed) {
        UNKNOWN => {
            let yes = probe();
            DOTPROD.store(yes as u8, Ordering::Relaxed);
            yes
        }
        v => v == 1,
    }
}

/// `ID_AA64ISAR0_EL1`'s DP field (bits 47:44).
const DP_SHIFT: u32 = 44;

#[cold]
fn probe() -> bool {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        let isar0: u64;
        // SAFETY: on Linux an EL0 read of an ID register traps to the kernel, which emulates it
        // (`HWCAP_CPUID`, every kernel since 4.11; the sanitised value the system's cores share).
        // Register-only: no memory, no stack, no flags.
        unsafe {
            core::arch::asm!(
                "mrs {}, ID_AA64ISAR0_EL1",
                out(reg) isar0,
                options(nomem, nostack, preserves_flags),
            );
        }
        (isar0 >> DP_SHIFT) & 0xf >= 1
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    {
        false
    }
}
