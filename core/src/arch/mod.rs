//! ISA-specific kernels behind one dispatch point.
//!
//! Each kernel family has one entry here, called by its portable home: the int8 and FP8
//! quantizers ([`q8_f32`], [`q8_f16`], [`fp8_f32`], [`fp8_f16`], called by `format::int8` and
//! `format::fp8`) and the attention page loop ([`attend_page`], called by `attention`). An entry
//! forwards to `native`, the module of the ISA this build targets, chosen once below: `x86_64/`
//! (AVX2 and F16C, detected at run time), `arm/` (Cortex-M: the DSP extension's int8 kernels on
//! cores without Helium, the FPU's f16 conversion on hard-float targets; chosen at build time by
//! `build.rs`), `aarch64/` (Cortex-A: NEON, and `SDOT` where the core has it, detected at run
//! time by [`aarch64_dotprod`], the one AArch64 detection of the workspace), otherwise
//! `none.rs`, where every entry takes
//! the portable path (as does every build with the feature `portable`). The portable code is the reference (the ISA builds are tested against it
//! bit for bit) and is what Miri runs.
//!
//! Adding an ISA (e.g. Arm Helium for the Cortex-M55): a folder `arch/<isa>/` with the same
//! functions as `none.rs`, its own [`Isa`] for the page loop if it has better f16 decoding or lane
//! sums, and one more line in the selection below.

// `small-code` Arm builds take `arm::Arm` as their one `Isa`.
#[cfg(any(not(feature = "small-code"), not(edgekv_arm_kernels)))]
mod portable;

#[cfg(any(not(feature = "small-code"), not(edgekv_arm_kernels)))]
pub(crate) use portable::Portable;

// Which ISA module this build dispatches to: the build script names it (`edgekv_x86_kernels`,
// `edgekv_arm_kernels`; neither with the feature `portable` or under Miri).
#[cfg_attr(edgekv_x86_kernels, path = "x86_64/mod.rs")]
#[cfg_attr(edgekv_arm_kernels, path = "arm/mod.rs")]
#[cfg_attr(edgekv_aarch64_kernels, path = "aarch64/mod.rs")]
#[cfg_attr(
    not(any(edgekv_x86_kernels, edgekv_arm_kernels, edgekv_aarch64_kernels)),
    path = "none.rs"
)]
// The only unsafe code of the kernels: intrinsics behind run-time detection.
#[allow(unsafe_code)]
mod native;

/// Every kernel of this build against the portable one (the boards' `kernel-check` firmware).
#[cfg(all(any(test, feature = "kernel-check"), not(feature = "small-code")))]
pub mod check;
mod isa;
pub(crate) mod kernels;
pub(crate) mod query;
pub(crate) mod rows;

pub(crate) use isa::Isa;
#[cfg(not(feature = "small-code"))]
pub(crate) use isa::{PageKernels, Softmax};
// Named by the ISA modules' `Isa` implementations (none in `none.rs`).
#[cfg(not(feature = "small-code"))]
#[cfg_attr(
    not(any(edgekv_x86_kernels, edgekv_arm_kernels, edgekv_aarch64_kernels)),
    allow(unused_imports)
)]
pub(crate) use isa::Strategy;
#[cfg(all(edgekv_arm_kernels, not(feature = "small-code")))]
pub(crate) use native::Arm;
#[cfg(feature = "small-code")]
pub(crate) use native::SmallCode;
#[cfg(all(test, edgekv_aarch64_kernels, not(feature = "small-code")))]
pub(crate) use native::force;
#[cfg(all(edgekv_x86_kernels, not(feature = "small-code")))]
pub(crate) use native::{Avx2F16c, available};
#[cfg(all(edgekv_aarch64_kernels, not(feature = "small-code")))]
pub(crate) use native::{Build, Neon, build};

// The AArch64 CPU detection, on every AArch64 build (the matmul kernels of `edgekv-llm` ask it
// too, with or without this crate's kernels).
#[cfg(target_arch = "aarch64")]
#[path = "aarch64/detect.rs"]
#[allow(unsafe_code)]
mod aarch64_detect;

#[cfg(target_arch = "aarch64")]
pub use aarch64_detect::dotprod as aarch64_dotprod;

/// This build's quantizer kernels (`format::QuantKernels`): none here, the reference loops run.
#[cfg(not(any(edgekv_x86_kernels, edgekv_aarch64_kernels)))]
pub(crate) struct NativeQuant;

#[cfg(not(any(edgekv_x86_kernels, edgekv_aarch64_kernels)))]
impl crate::format::QuantKernels for NativeQuant {}

/// This build's quantizer kernels (`format::QuantKernels`): AVX2 and F16C where the CPU has them;
/// NEON on AArch64.
#[cfg(any(edgekv_x86_kernels, edgekv_aarch64_kernels))]
pub(crate) use native::NativeQuant;

/// Lays a quantized query's codes (groups of `g`) out as this build's int8 score kernels read
/// them: on cores with the DSP extension, each quad in the order `SXTB16` gives a key word's
/// codes (`query::interleave_quads`); elsewhere as they are.
#[inline]
pub(crate) fn arrange_query(codes: &mut [i16], g: usize) {
    native::arrange_query(codes, g)
}
