//! Quantization kernels: int8 groups (ggml Q8_0 math) and FP8 E4M3 tiles (SGLang layout).

mod fp8;
mod q8;
// The only unsafe code of the quantizers: x86-64 intrinsics behind run-time detection.
#[allow(unsafe_code)]
mod simd;

pub use fp8::{
    dequantize_fp8_tile, e4m3_from_f32, e4m3_to_f32, fp8_tile_row_bytes, quantize_fp8_tile,
};
pub use q8::{dequantize_q8, quantize_q8};

/// Whether this CPU runs the crate's AVX2/F16C code paths (x86-64, detected once at run time;
/// `false` everywhere else and under Miri).
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
pub(crate) fn simd_available() -> bool {
    simd::available()
}
