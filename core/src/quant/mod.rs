//! Quantization of rows on their own: int8 groups (ggml Q8_0 math), ggml Q4_0 / Q4_1 blocks and
//! FP8 E4M3 tiles (SGLang layout). The reference codecs live with their page formats
//! (`format::int8`, `format::fp8`, `format::int4`); the quantizers here take them with this
//! build's kernels (`crate::arch`), as does the cache's row codec (`rows`).

mod rows;

use half::f16;

pub(crate) use rows::{decode_rotated, encode_rotated};

use crate::arch::NativeQuant;
use crate::error::Result;
use crate::format::Element;
pub use crate::format::fp8::{dequantize_fp8_tile, e4m3_from_f32, e4m3_to_f32, fp8_tile_row_bytes};
use crate::format::int4::quantize_q4_with;
pub use crate::format::int4::{Q4_BLOCK, Q4Kind, dequantize_q4};
pub use crate::format::int8::dequantize_q8;
#[cfg(doc)]
use crate::{ConfigError, Error};

/// Quantizes `x` in groups of `group` values into `codes` (one per value) and `scales` (one per
/// group), with ggml Q8_0 math (see `format::int8`), through this build's quantizer kernel where it
/// has one (the same bits).
///
/// `group` may be any size ≥ 1 that divides `x.len()`: 32 is Q8_0, `head_dim` gives one scale
/// per token and head.
///
/// - Every code is `round_half_away_from_zero(x * id)` saturated to `i8`; the codes are computed
///   from the f32 `d`, so a group whose `d` underflows f16 still gets its codes (and a stored
///   scale 0), and one whose `d` overflows f16 gets scale `inf`, as in ggml.
/// - A group containing an infinity gets scale `+inf` and all codes 0; a group containing a NaN
///   gets scale NaN (`f16::NAN`) and all codes 0. Both dequantize to NaN for the whole group,
///   which is what gguf-py produces. Nothing panics.
/// - f16 and bf16 values are widened to f32 exactly first.
///
/// # Errors
///
/// [`Error::Config`] ([`InvalidFormat`](ConfigError::InvalidFormat)) if `group == 0`; [`Error::LengthMismatch`] if `group` does not divide
/// `x.len()`, `codes.len() != x.len()` or `scales.len() != x.len() / group`. On error nothing is
/// written.
///
/// # Example
///
/// ```
/// use edgekv::quant::{dequantize_q8, quantize_q8};
/// use half::f16;
///
/// let x = [0.5f32, -1.0, 0.25, 1.27];
/// let (mut q, mut s) = ([0i8; 4], [f16::ZERO; 1]);
/// quantize_q8(&x, 4, &mut q, &mut s)?;
/// assert_eq!(q, [50, -100, 25, 127]);
/// let mut y = [0f32; 4];
/// dequantize_q8(&q, &s, 4, &mut y)?;
/// assert!((y[1] + 1.0).abs() < 1e-3);
/// # Ok::<(), edgekv::Error>(())
/// ```
pub fn quantize_q8<T: Element>(
    x: &[T],
    group: usize,
    codes: &mut [i8],
    scales: &mut [f16],
) -> Result<()> {
    crate::format::int8::quantize_q8_with::<NativeQuant, T>(x, group, codes, scales)
}

/// Quantizes one head row of `d = x.len()` values into `row`
/// ([`fp8_tile_row_bytes`]`(d, dv, tile, bf16)` bytes; layout in `format::fp8`).
///
/// With `bf16` the row's input dtype is bf16: f32/f16 values are first rounded to bf16 (to nearest
/// even; exact for bf16 callers), each tile scale is the f32 quotient `amax / 448` rounded to bf16,
/// and the tail is stored as bf16. Without it everything is f32 (f16/bf16 values widen exactly).
///
/// - A tile whose scale is 0 (all zeros, or `amax` so tiny that `amax / 448` underflows) gets
///   codes 0 (the reference writes NaN codes for 0/0).
/// - A tile containing a NaN gets scale NaN (`f32::NAN`) and NaN codes; one containing an
///   infinity (and no NaN) gets scale +inf, codes ±0 for finite values and NaN codes for the
///   infinities. NaN codes carry the sign bit of the input value (0x7F or 0xFF), on every target.
///   Finite input never yields NaN codes. Nothing panics.
///
/// # Errors
///
/// [`Error::Config`] ([`InvalidFormat`](ConfigError::InvalidFormat)) if `tile == 0`, `dv == 0`, `dv % tile != 0` or `dv > x.len()`;
/// [`Error::LengthMismatch`] if `row.len()` is not the row size. On error nothing is written.
///
/// # Example
///
/// ```
/// use edgekv::quant::{dequantize_fp8_tile, fp8_tile_row_bytes, quantize_fp8_tile};
///
/// let x = [448.0f32, -224.0, 1.0, 0.0, 7.5, 8.5];
/// let mut row = [0u8; 4 + 4 + 2 * 4];
/// assert_eq!(fp8_tile_row_bytes(6, 4, 4, false), Some(row.len()));
/// quantize_fp8_tile(&x, 4, 4, false, &mut row)?;
/// assert_eq!(&row[..4], &[0x7E, 0xF6, 0x38, 0x00]); // scale 1: 448, -224, 1, 0
/// assert_eq!(&row[4..8], &1.0f32.to_le_bytes());
/// let mut y = [0f32; 6];
/// dequantize_fp8_tile(&row, 4, 4, false, &mut y)?;
/// assert_eq!(y, x);
/// # Ok::<(), edgekv::Error>(())
/// ```
pub fn quantize_fp8_tile<T: Element>(
    x: &[T],
    dv: usize,
    tile: usize,
    bf16: bool,
    row: &mut [u8],
) -> Result<()> {
    crate::format::fp8::quantize_fp8_tile_with::<NativeQuant, T>(x, dv, tile, bf16, row)
}

/// Quantizes `x` (a multiple of 32 values) into `out` (`kind.bytes_for(x.len())` bytes) as
/// ggml's Q4_0 or Q4_1 blocks (see `format::int4`), through this build's quantizer kernel where
/// it has one (the same bits). f16 and bf16 values are widened to f32 exactly first.
///
/// Non-finite inputs give codes but no panic: a NaN scaled value takes code 0, infinities
/// saturate (ggml leaves both undefined).
///
/// # Errors
///
/// [`Error::LengthMismatch`] if `x.len()` is not a multiple of 32 or `out` has the wrong length;
/// nothing is written then.
///
/// # Example
///
/// ```
/// use edgekv::quant::{Q4Kind, dequantize_q4, quantize_q4};
///
/// let x: [f32; 32] = core::array::from_fn(|j| j as f32 - 16.0);
/// let mut block = [0u8; 18];
/// quantize_q4(Q4Kind::Q4_0, &x, &mut block)?;
/// let mut y = [0f32; 32];
/// dequantize_q4(Q4Kind::Q4_0, &block, &mut y)?;
/// assert_eq!((y[0], y[16], y[31]), (-16.0, 0.0, 14.0));
/// # Ok::<(), edgekv::Error>(())
/// ```
pub fn quantize_q4<T: Element>(kind: Q4Kind, x: &[T], out: &mut [u8]) -> Result<()> {
    quantize_q4_with::<NativeQuant, T>(kind, x, out)
}
