//! The quantizer kernels a build may offer (ggml's `from_float` entries of `type_traits_cpu`):
//! the reference codecs of `int8`, `fp8` and `int4` take them as a type parameter, so that this layer
//! names no ISA. `crate::arch` implements [`QuantKernels`] for the ISA this build targets; the
//! public codecs (`crate::quant`) pass that. Every kernel has the reference loop's bits.

use half::f16;

use super::int4::Q4Kind;

/// Quantizer kernels: each returns `false`, with nothing written, where it has none for its
/// arguments (then the reference loop runs). Lengths as the codecs check them.
pub(crate) trait QuantKernels {
    /// Int8 groups of `g` from f32 values (`int8::groups::quantize_groups`' bits).
    #[inline(always)]
    fn q8_f32(_x: &[f32], _g: usize, _codes: &mut [i8], _scales: &mut [f16]) -> bool {
        false
    }
    /// [`QuantKernels::q8_f32`] from f16 values.
    #[inline(always)]
    fn q8_f16(_x: &[f16], _g: usize, _codes: &mut [i8], _scales: &mut [f16]) -> bool {
        false
    }
    /// FP8 tiles of `tile` with f32 scales from f32 values (`fp8::quantize_tiles`' bits, no
    /// bf16).
    #[inline(always)]
    fn fp8_f32(_x: &[f32], _tile: usize, _codes: &mut [u8], _scales: &mut [u8]) -> bool {
        false
    }
    /// [`QuantKernels::fp8_f32`] from f16 values.
    #[inline(always)]
    fn fp8_f16(_x: &[f16], _tile: usize, _codes: &mut [u8], _scales: &mut [u8]) -> bool {
        false
    }
    /// 4-bit blocks of `kind` from f32 values (`int4::encode_block`'s bits, block by block):
    /// `x` whole blocks of 32, `out` their `kind.block_bytes()` each.
    #[inline(always)]
    fn q4_f32(_kind: Q4Kind, _x: &[f32], _out: &mut [u8]) -> bool {
        false
    }
}

/// No kernels: the reference loops only.
#[cfg(test)]
pub(crate) struct Reference;

#[cfg(test)]
impl QuantKernels for Reference {}
