//! Runtime detection of AVX2 and F16C on x86-64.
//!
//! The crate is `no_std`, so `std::is_x86_feature_detected!` is not available (the core crate's
//! probe is internal to it): CPUID leaf 1 (OSXSAVE, AVX, F16C) and leaf 7 (AVX2), plus XCR0 to
//! check that the OS saves the ymm registers. The answer is cached in an atomic. A build with
//! both features enabled statically (`-C target-cpu=...`) skips the probe.

use core::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};
use core::sync::atomic::{AtomicU8, Ordering};

/// Not probed yet.
const UNKNOWN: u8 = 2;

/// 0 or 1 once probed.
static AVX2_F16C: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether this CPU (and OS) runs AVX2 and F16C instructions.
#[inline]
pub(super) fn avx2_f16c() -> bool {
    if cfg!(all(target_feature = "avx2", target_feature = "f16c")) {
        return true;
    }
    match AVX2_F16C.load(Ordering::Relaxed) {
        UNKNOWN => {
            let yes = probe();
            AVX2_F16C.store(yes as u8, Ordering::Relaxed);
            yes
        }
        v => v == 1,
    }
}

/// CPUID.1:ECX bit 27: the OS enabled XSAVE (XGETBV is usable).
const OSXSAVE: u32 = 1 << 27;
/// CPUID.1:ECX bit 28.
const AVX: u32 = 1 << 28;
/// CPUID.1:ECX bit 29.
const F16C: u32 = 1 << 29;
/// CPUID.(7,0):EBX bit 5.
const AVX2: u32 = 1 << 5;
/// XCR0 bits 1 and 2: SSE and AVX register state saved by the OS.
const XCR0_YMM: u64 = 0b110;

#[cold]
fn probe() -> bool {
    // SAFETY: CPUID exists on every x86-64 CPU (the block is needed on compilers where
    // `__cpuid` is still an unsafe fn).
    let max_leaf = unsafe { __cpuid(0) }.eax;
    if max_leaf < 7 {
        return false;
    }
    // SAFETY: as above; leaf 1 exists on every x86-64 CPU.
    let ecx = unsafe { __cpuid(1) }.ecx;
    let need = OSXSAVE | AVX | F16C;
    if ecx & need != need {
        return false;
    }
    // SAFETY: OSXSAVE is set, so XGETBV is enabled.
    if unsafe { xcr0() } & XCR0_YMM != XCR0_YMM {
        return false;
    }
    // SAFETY: leaf 7 exists (checked against the maximum leaf above).
    unsafe { __cpuid_count(7, 0) }.ebx & AVX2 != 0
}

/// XCR0 (the OS-enabled register state).
///
/// # Safety
///
/// The CPU must report OSXSAVE (CPUID.1:ECX bit 27).
#[target_feature(enable = "xsave")]
unsafe fn xcr0() -> u64 {
    // SAFETY: the caller checked OSXSAVE; XCR0 (index 0) always exists then.
    unsafe { _xgetbv(0) }
}
