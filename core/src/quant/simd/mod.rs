//! Explicit SIMD versions of the hot quantization loops, chosen at run time, bit-identical to the
//! portable kernels (which stay the reference and the path everywhere else).
//!
//! On x86-64 with AVX2 and F16C (detected at run time, see `detect`; used directly when the
//! build enables both statically): int8 groups from f32 and f16, FP8 tiles with f32 scales from
//! f32 and f16. Baseline x86-64 has only SSE2, where the f16 widening, the `max|x|` reductions
//! and the 4-lane division dominate. No FMA is used (it would change roundings); the f16 → f32
//! widening is exact and the division is IEEE `vdivps`, so the results are those of the portable
//! code, which the tests below check on random and corner-case rows.
//!
//! Every other target, and Miri (which does not model these intrinsics), takes the portable path:
//! the functions here then return `false` without doing anything.

// Register-only intrinsics (and CPUID) are safe to call in `target_feature` code since Rust 1.87;
// the workspace supports 1.85, where they are unsafe fns: keep the blocks, allow them unused.
#![allow(unused_unsafe)]

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod detect;
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod fp8;
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod lanes;
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod q8;
#[cfg(all(test, target_arch = "x86_64", not(miri)))]
mod tests;

use half::f16;

/// Whether the SIMD kernels run here (this CPU, this build).
#[inline]
pub(crate) fn available() -> bool {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        detect::avx2_f16c()
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        false
    }
}

/// Quantizes an f32 row into Q8 groups (as `quantize_groups`) if the SIMD path applies;
/// `false` (nothing written) otherwise. Lengths as checked by `quantize_q8`.
#[inline]
pub(super) fn q8_f32(x: &[f32], g: usize, codes: &mut [i8], scales: &mut [f16]) -> bool {
    if g % 8 != 0 || !available() {
        return false;
    }
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `available()` checked AVX2 and F16C.
    unsafe {
        q8::quantize_groups(x, g, codes, scales)
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = (x, codes, scales);
    true
}

/// [`q8_f32`] for an f16 row.
#[inline]
pub(super) fn q8_f16(x: &[f16], g: usize, codes: &mut [i8], scales: &mut [f16]) -> bool {
    if g % 8 != 0 || !available() {
        return false;
    }
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `available()` checked AVX2 and F16C.
    unsafe {
        q8::quantize_groups(x, g, codes, scales)
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = (x, codes, scales);
    true
}

/// Quantizes the first `dv` values of an f32 row into FP8 tiles with f32 scales (as
/// `quantize_tiles` without bf16) if the SIMD path applies; `false` (nothing written)
/// otherwise.
#[inline]
pub(super) fn fp8_f32(x: &[f32], tile: usize, codes: &mut [u8], scales: &mut [u8]) -> bool {
    if tile % 8 != 0 || !available() {
        return false;
    }
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `available()` checked AVX2 and F16C.
    unsafe {
        fp8::quantize_tiles(x, tile, codes, scales)
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = (x, codes, scales);
    true
}

/// [`fp8_f32`] for an f16 row.
#[inline]
pub(super) fn fp8_f16(x: &[f16], tile: usize, codes: &mut [u8], scales: &mut [u8]) -> bool {
    if tile % 8 != 0 || !available() {
        return false;
    }
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `available()` checked AVX2 and F16C.
    unsafe {
        fp8::quantize_tiles(x, tile, codes, scales)
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = (x, codes, scales);
    true
}
