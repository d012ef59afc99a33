//! x86-64 with AVX2 and F16C (detected at run time, see `detect`; used directly when the build
//! enables both statically): the quantizers' hot loops with explicit intrinsics (`int8`, `fp8`,
//! reading rows through `lanes`), and the [`Isa`](super::Isa) of the attention page loop's
//! build for these instructions (`isa`; the build itself is `attention::dispatch`'s).
//!
//! Baseline x86-64 has only SSE2, where the f16 widening, the `max|x|` reductions and the 4-lane
//! division dominate. No FMA is used (it would change roundings); the f16 → f32 widening is exact
//! and the division is IEEE `vdivps`, so the results are those of the portable code, which the
//! tests check on random and corner-case rows.

// Register-only intrinsics (and CPUID) are safe to call in `target_feature` code since Rust 1.87;
// the workspace supports 1.85, where they are unsafe fns: keep the blocks, allow them unused.
#![allow(unused_unsafe)]

// The page loop's AVX2 `Isa`: `small-code` builds keep the portable loop only.
mod detect;
#[cfg(not(feature = "small-code"))]
mod exp;
mod fp8;
mod int8;
#[cfg(not(feature = "small-code"))]
mod isa;
mod lanes;
#[cfg(not(feature = "small-code"))]
mod page;
#[cfg(not(feature = "small-code"))]
mod page_f16;
#[cfg(not(feature = "small-code"))]
mod softmax;
#[cfg(test)]
mod tests;

#[cfg(not(feature = "small-code"))]
pub(crate) use isa::Avx2F16c;

/// The `Isa` of `small-code` builds' one page loop (`attention::small`): the portable one.
#[cfg(feature = "small-code")]
pub(crate) type SmallCode = super::Portable;
use half::f16;

use crate::format::QuantKernels;

/// Whether the AVX2/F16C kernels run here (this CPU, this build).
#[inline]
pub(crate) fn available() -> bool {
    detect::avx2_f16c()
}

/// The quantizer kernels with AVX2 and F16C, where this CPU has them and the group (tile) is a
/// multiple of 8.
pub(crate) struct NativeQuant;

impl QuantKernels for NativeQuant {
    #[inline]
    fn q8_f32(x: &[f32], g: usize, codes: &mut [i8], scales: &mut [f16]) -> bool {
        if g % 8 != 0 || !available() {
            return false;
        }
        // SAFETY: `available()` checked AVX2 and F16C.
        unsafe { int8::quantize_groups(x, g, codes, scales) };
        true
    }

    #[inline]
    fn q8_f16(x: &[f16], g: usize, codes: &mut [i8], scales: &mut [f16]) -> bool {
        if g % 8 != 0 || !available() {
            return false;
        }
        // SAFETY: `available()` checked AVX2 and F16C.
        unsafe { int8::quantize_groups(x, g, codes, scales) };
        true
    }

    #[inline]
    fn fp8_f32(x: &[f32], tile: usize, codes: &mut [u8], scales: &mut [u8]) -> bool {
        if tile % 8 != 0 || !available() {
            return false;
        }
        // SAFETY: `available()` checked AVX2 and F16C.
        unsafe { fp8::quantize_tiles(x, tile, codes, scales) };
        true
    }

    #[inline]
    fn fp8_f16(x: &[f16], tile: usize, codes: &mut [u8], scales: &mut [u8]) -> bool {
        if tile % 8 != 0 || !available() {
            return false;
        }
        // SAFETY: `available()` checked AVX2 and F16C.
        unsafe { fp8::quantize_tiles(x, tile, codes, scales) };
        true
    }
}

/// The quantized query as it is (no ISA score kernel here reads it in another order).
#[inline(always)]
pub(crate) fn arrange_query(_codes: &mut [i16], _g: usize) {}
