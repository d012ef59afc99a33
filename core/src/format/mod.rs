//! Page formats: one module per format, each holding its byte layout, its reference codec and
//! the decoders attention fuses into its dot products (as ggml's per-type `type_traits`).
//!
//! - [`float`]: f32, f16 and bf16 elements.
//! - [`int8`]: int8 codes in groups with f16 scales (ggml Q8_0 math).
//! - [`int4`]: ggml's Q4_0 / Q4_1 blocks of 32 values with f16 scales (and minima).
//! - [`fp8`]: FP8 E4M3 tiles with f32 scales and a raw tail (SGLang NSA rows).
//!
//! [`Rotation`] (`rotation`): the optional Walsh–Hadamard transform of head rows before any
//! format stores them.
//!
//! Shared by all: [`Element`] (the caller's types), `load` (how the codecs read elements),
//! `decode` (the interface to the attention kernels). [`ElementFormat`] and the row codecs below
//! dispatch on the format. ISA-specific builds of a codec live in `crate::arch`, which this
//! layer does not name: the codecs take them as a type parameter ([`QuantKernels`], `kernels`).

mod decode;
mod element;
pub(crate) mod float;
pub(crate) mod fp8;
pub(crate) mod int4;
pub(crate) mod int8;
pub(crate) mod kernels;
pub(crate) mod load;
mod rotation;

pub(crate) use decode::{Decode, LANES, f32_at, u16_at};
pub use element::Element;
pub(crate) use kernels::QuantKernels;

pub use int4::Q4Kind;
pub use rotation::{MAX_ROTATED_DIM, Rotation};
pub(crate) use rotation::{decode_rotated, encode_rotated};

use crate::error::{ConfigError, Error, Result};

/// How the values of a page are stored. All multi-byte values are little-endian.
///
/// Full-precision formats store `[P][kv_heads][head_dim]` elements. Quantized formats:
///
/// - [`Int8 { group }`](ElementFormat::Int8): `[P][kv_heads][head_dim]` `i8` codes in the value
///   pool and `[P][kv_heads][head_dim / group]` `f16` scales in the scale pool, ggml Q8_0 math
///   (`group = 32` is exactly Q8_0; `group = head_dim` is one scale per token and head).
/// - [`Fp8Tile { dv, tile, bf16 }`](ElementFormat::Fp8Tile): SGLang NSA rows
///   `[P][kv_heads][row]`, each row `dv` E4M3 codes, `dv / tile` f32 scales, then the
///   `head_dim − dv` tail values raw (bf16 if `bf16`, else f32). No scale pool.
/// - [`Int4 { kind }`](ElementFormat::Int4): `[P][kv_heads][head_dim / 32]` ggml Q4_0 or Q4_1
///   blocks (f16 scale, Q4_1 then its f16 minimum, 16 bytes of nibbles) in the value pool. No
///   scale pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ElementFormat {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16 (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`).
    Bf16,
    /// int8 codes with one f16 scale per `group` values along head_dim (ggml Q8_0 math).
    Int8 {
        /// Values per scale: at least 2, dividing head_dim.
        group: u16,
    },
    /// FP8 E4M3 tiles with f32 scales and a raw tail (SGLang NSA row layout).
    Fp8Tile {
        /// Quantized values at the start of each head row (a multiple of `tile`, ≤ head_dim).
        dv: u16,
        /// Values per scale.
        tile: u16,
        /// Input dtype bf16: values and scales are rounded to bf16 first and the tail is stored
        /// as bf16 (as the reference does for bf16 models); otherwise f32 throughout.
        bf16: bool,
    },
    /// 4-bit codes in blocks of 32 values along head_dim with ggml's Q4_0 or Q4_1 math and
    /// bytes (head_dim a multiple of 32).
    Int4 {
        /// Q4_0 (scale) or Q4_1 (scale and minimum).
        kind: Q4Kind,
    },
}

impl ElementFormat {
    /// ggml's Q8_0: int8 in groups of 32 with f16 scales.
    pub const Q8_0: ElementFormat = ElementFormat::Int8 { group: 32 };
    /// ggml's Q4_0: 4-bit codes in blocks of 32 with an f16 scale (18 bytes per 32 values).
    pub const Q4_0: ElementFormat = ElementFormat::Int4 { kind: Q4Kind::Q4_0 };
    /// ggml's Q4_1: 4-bit codes in blocks of 32 with an f16 scale and minimum (20 bytes).
    pub const Q4_1: ElementFormat = ElementFormat::Int4 { kind: Q4Kind::Q4_1 };

    /// Whether this build includes the format: f32 always; the others with their cargo feature
    /// (`f16`, `bf16`, `int8`, `fp8`, `int4`, all on by default). A configuration using a format left out
    /// fails with [`FormatDisabled`](ConfigError::FormatDisabled), and its code is not linked.
    pub const fn enabled(self) -> bool {
        match self {
            ElementFormat::F32 => true,
            ElementFormat::F16 => cfg!(feature = "f16"),
            ElementFormat::Bf16 => cfg!(feature = "bf16"),
            ElementFormat::Int8 { .. } => cfg!(feature = "int8"),
            ElementFormat::Fp8Tile { .. } => cfg!(feature = "fp8"),
            ElementFormat::Int4 { .. } => cfg!(feature = "int4"),
        }
    }

    /// Whether writes quantize (and reads dequantize).
    pub const fn is_quantized(self) -> bool {
        matches!(
            self,
            ElementFormat::Int8 { .. } | ElementFormat::Fp8Tile { .. } | ElementFormat::Int4 { .. }
        )
    }

    /// Bytes of one token's row in the value pool (all heads).
    ///
    /// # Errors
    ///
    /// [`InvalidFormat`](ConfigError::InvalidFormat) when the format does not fit the shape,
    /// [`FormatDisabled`](ConfigError::FormatDisabled) when it is not in this build,
    /// [`Overflow`](ConfigError::Overflow) when the size overflows.
    pub const fn row_bytes(self, kv_heads: usize, head_dim: usize) -> Result<usize, ConfigError> {
        if !self.enabled() {
            return Err(ConfigError::FormatDisabled);
        }
        let per_head = match self {
            ElementFormat::F32 => head_dim.checked_mul(4),
            ElementFormat::F16 | ElementFormat::Bf16 => head_dim.checked_mul(2),
            ElementFormat::Int8 { group } => match int8::head_bytes(head_dim, group) {
                Ok(b) => Some(b),
                Err(e) => return Err(e),
            },
            ElementFormat::Fp8Tile { dv, tile, bf16 } => {
                let (dv, tile) = (dv as usize, tile as usize);
                if tile == 0 || dv == 0 || dv % tile != 0 || dv > head_dim {
                    return Err(ConfigError::InvalidFormat);
                }
                fp8::fp8_tile_row_bytes(head_dim, dv, tile, bf16)
            }
            ElementFormat::Int4 { kind } => match int4::head_bytes(head_dim, kind) {
                Ok(b) => Some(b),
                Err(e) => return Err(e),
            },
        };
        match per_head {
            Some(b) => match b.checked_mul(kv_heads) {
                Some(r) => Ok(r),
                None => Err(ConfigError::Overflow),
            },
            None => Err(ConfigError::Overflow),
        }
    }

    /// Bytes of one token's scales in the scale pool (0 for formats without one).
    ///
    /// # Errors
    ///
    /// As [`row_bytes`](Self::row_bytes).
    pub const fn scale_row_bytes(
        self,
        kv_heads: usize,
        head_dim: usize,
    ) -> Result<usize, ConfigError> {
        if !self.enabled() {
            return Err(ConfigError::FormatDisabled);
        }
        match self {
            ElementFormat::Int8 { group } => match int8::head_scale_bytes(head_dim, group) {
                Ok(b) => match b.checked_mul(kv_heads) {
                    Some(b) => Ok(b),
                    None => Err(ConfigError::Overflow),
                },
                Err(e) => Err(e),
            },
            _ => Ok(0),
        }
    }
}

/// Encodes whole token rows `src` (`[tokens][kv_heads][head_dim]`) into value bytes `vals` and,
/// for int8, scale bytes `scales` of format `fmt`, with `K`'s quantizer kernels. Lengths come
/// from the plan (callers check).
pub(crate) fn encode_rows<K: QuantKernels, T: Element>(
    fmt: ElementFormat,
    head_dim: usize,
    src: &[T],
    vals: &mut [u8],
    scales: &mut [u8],
) -> Result<()> {
    if src.is_empty() || head_dim == 0 {
        return Ok(());
    }
    match fmt {
        // Guards on `enabled()` (a constant) drop a left-out format's code from the build.
        _ if !fmt.enabled() => Err(ConfigError::FormatDisabled.into()),
        ElementFormat::Int8 { group } => {
            let scales = bytemuck::try_cast_slice_mut(scales)
                .map_err(|_| Error::Config(ConfigError::MisalignedArena))?;
            int8::quantize_q8_with::<K, T>(
                src,
                group as usize,
                bytemuck::cast_slice_mut(vals),
                scales,
            )
        }
        ElementFormat::Fp8Tile { dv, tile, bf16 } => {
            let heads = src.len() / head_dim;
            let row = vals.len() / heads.max(1);
            for (x, r) in src.chunks_exact(head_dim).zip(vals.chunks_exact_mut(row)) {
                fp8::quantize_fp8_tile_with::<K, T>(x, dv as usize, tile as usize, bf16, r)?;
            }
            Ok(())
        }
        ElementFormat::Int4 { kind } => int4::quantize_q4_with::<K, T>(kind, src, vals),
        _ => {
            float::encode(fmt, src, vals);
            Ok(())
        }
    }
}

/// Decodes value bytes `vals` (and int8 `scales`) of format `fmt` into token rows `dst`.
pub(crate) fn decode_rows<T: Element>(
    fmt: ElementFormat,
    head_dim: usize,
    vals: &[u8],
    scales: &[u8],
    dst: &mut [T],
) -> Result<()> {
    if dst.is_empty() || head_dim == 0 {
        return Ok(());
    }
    match fmt {
        _ if !fmt.enabled() => Err(ConfigError::FormatDisabled.into()),
        ElementFormat::Int8 { group } => {
            let scales = bytemuck::try_cast_slice(scales)
                .map_err(|_| Error::Config(ConfigError::MisalignedArena))?;
            int8::dequantize_q8(bytemuck::cast_slice(vals), scales, group as usize, dst)
        }
        ElementFormat::Fp8Tile { dv, tile, bf16 } => {
            let heads = dst.len() / head_dim;
            let row = vals.len() / heads.max(1);
            for (r, x) in vals.chunks_exact(row).zip(dst.chunks_exact_mut(head_dim)) {
                fp8::dequantize_fp8_tile(r, dv as usize, tile as usize, bf16, x)?;
            }
            Ok(())
        }
        ElementFormat::Int4 { kind } => int4::dequantize_q4(kind, vals, dst),
        _ => {
            float::decode(fmt, vals, dst);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A format left out by cargo features is refused at planning time, precisely; the others
    /// plan. (`cargo test -p edgekv --lib --no-default-features --features int8` runs the
    /// refusing side.)
    #[test]
    fn left_out_formats_fail_with_format_disabled() {
        let fp8 = ElementFormat::Fp8Tile {
            dv: 32,
            tile: 32,
            bf16: false,
        };
        let formats = [
            (ElementFormat::F32, true),
            (ElementFormat::F16, cfg!(feature = "f16")),
            (ElementFormat::Bf16, cfg!(feature = "bf16")),
            (ElementFormat::Q8_0, cfg!(feature = "int8")),
            (fp8, cfg!(feature = "fp8")),
            (ElementFormat::Q4_0, cfg!(feature = "int4")),
            (ElementFormat::Q4_1, cfg!(feature = "int4")),
        ];
        let shape = crate::Shape {
            layers: 1,
            kv_heads: 2,
            head_dim: 64,
        };
        let rotated =
            crate::CacheConfig::new(shape).with_rotations(Rotation::Hadamard, Rotation::None);
        let rotation_on = cfg!(feature = "rotation");
        match rotated.geometry() {
            Ok(_) => assert!(rotation_on),
            Err(e) => assert!(!rotation_on && e == ConfigError::FormatDisabled),
        }
        for (fmt, on) in formats {
            assert_eq!(fmt.enabled(), on, "{fmt:?}");
            let cfg = crate::CacheConfig::new(shape).with_formats(ElementFormat::F32, fmt);
            match cfg.geometry() {
                Ok(_) => assert!(on, "{fmt:?} planned"),
                Err(e) => assert!(!on && e == ConfigError::FormatDisabled, "{fmt:?}: {e:?}"),
            }
            let mut vals = [0u8; 256];
            let vals = &mut vals[..fmt.row_bytes(1, 64).unwrap_or(256)];
            let mut scales = [0u16; 2];
            let scales = &mut bytemuck::cast_slice_mut(&mut scales)[..if on {
                fmt.scale_row_bytes(1, 64).unwrap()
            } else {
                0
            }];
            let rows = encode_rows::<kernels::Reference, f32>(fmt, 64, &[1.0f32; 64], vals, scales);
            assert_eq!(rows.is_ok(), on, "{fmt:?}");
        }
    }
}
