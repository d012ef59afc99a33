//! Element formats of pages and the element types callers read and write.

use half::{bf16, f16};

use crate::error::{Error, Result};

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
        /// Values per scale; must divide head_dim.
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
}

impl ElementFormat {
    /// ggml's Q8_0: int8 in groups of 32 with f16 scales.
    pub const Q8_0: ElementFormat = ElementFormat::Int8 { group: 32 };

    /// Whether this build includes the format: f32 always; the others with their cargo feature
    /// (`f16`, `bf16`, `int8`, `fp8`, all on by default). A configuration using a format left out
    /// fails with [`FormatDisabled`](Error::FormatDisabled), and its code is not linked.
    pub const fn enabled(self) -> bool {
        match self {
            ElementFormat::F32 => true,
            ElementFormat::F16 => cfg!(feature = "f16"),
            ElementFormat::Bf16 => cfg!(feature = "bf16"),
            ElementFormat::Int8 { .. } => cfg!(feature = "int8"),
            ElementFormat::Fp8Tile { .. } => cfg!(feature = "fp8"),
        }
    }

    /// Whether writes quantize (and reads dequantize).
    pub const fn is_quantized(self) -> bool {
        matches!(
            self,
            ElementFormat::Int8 { .. } | ElementFormat::Fp8Tile { .. }
        )
    }

    /// Bytes of one token's row in the value pool (all heads), or an error when the format does
    /// not fit the shape ([`InvalidFormat`](Error::InvalidFormat)), is not in this build
    /// ([`FormatDisabled`](Error::FormatDisabled)) or the size overflows.
    pub const fn row_bytes(self, kv_heads: usize, head_dim: usize) -> Result<usize> {
        if !self.enabled() {
            return Err(Error::FormatDisabled);
        }
        let per_head = match self {
            ElementFormat::F32 => head_dim.checked_mul(4),
            ElementFormat::F16 | ElementFormat::Bf16 => head_dim.checked_mul(2),
            ElementFormat::Int8 { group } => {
                if group == 0 || head_dim % group as usize != 0 {
                    return Err(Error::InvalidFormat);
                }
                Some(head_dim)
            }
            ElementFormat::Fp8Tile { dv, tile, bf16 } => {
                let (dv, tile) = (dv as usize, tile as usize);
                if tile == 0 || dv == 0 || dv % tile != 0 || dv > head_dim {
                    return Err(Error::InvalidFormat);
                }
                crate::quant::fp8_tile_row_bytes(head_dim, dv, tile, bf16)
            }
        };
        match per_head {
            Some(b) => match b.checked_mul(kv_heads) {
                Some(r) => Ok(r),
                None => Err(Error::Overflow),
            },
            None => Err(Error::Overflow),
        }
    }

    /// Bytes of one token's scales in the scale pool (0 for formats without one).
    pub const fn scale_row_bytes(self, kv_heads: usize, head_dim: usize) -> Result<usize> {
        if !self.enabled() {
            return Err(Error::FormatDisabled);
        }
        match self {
            ElementFormat::Int8 { group } => {
                if group == 0 || head_dim % group as usize != 0 {
                    return Err(Error::InvalidFormat);
                }
                match (head_dim / group as usize).checked_mul(kv_heads) {
                    Some(n) => match n.checked_mul(2) {
                        Some(b) => Ok(b),
                        None => Err(Error::Overflow),
                    },
                    None => Err(Error::Overflow),
                }
            }
            _ => Ok(0),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// An element type callers write into and read from pages: `f32`, `half::f16` or `half::bf16`.
///
/// When the caller's type equals the page format, rows are copied byte for byte; otherwise they
/// are converted through `f32` (`half`'s round-to-nearest-even conversions).
pub trait Element: sealed::Sealed + bytemuck::Pod + Default {
    /// The page format that stores this type without conversion.
    const FORMAT: ElementFormat;
    /// Widen to f32 (exact for every supported type).
    fn to_f32(self) -> f32;
    /// Narrow from f32 (round to nearest even).
    fn from_f32(v: f32) -> Self;
}

impl Element for f32 {
    const FORMAT: ElementFormat = ElementFormat::F32;
    #[inline]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Element for f16 {
    const FORMAT: ElementFormat = ElementFormat::F16;
    #[inline]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Element for bf16 {
    const FORMAT: ElementFormat = ElementFormat::Bf16;
    #[inline]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// Encodes whole token rows `src` (`[tokens][kv_heads][head_dim]`) into value bytes `vals` and,
/// for int8, scale bytes `scales` of format `fmt`. Lengths come from the plan (callers check).
pub(crate) fn encode_rows<T: Element>(
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
        _ if !fmt.enabled() => Err(Error::FormatDisabled),
        ElementFormat::Int8 { group } => {
            let scales =
                bytemuck::try_cast_slice_mut(scales).map_err(|_| Error::MisalignedArena)?;
            crate::quant::quantize_q8(src, group as usize, bytemuck::cast_slice_mut(vals), scales)
        }
        ElementFormat::Fp8Tile { dv, tile, bf16 } => {
            let heads = src.len() / head_dim;
            let row = vals.len() / heads.max(1);
            for (x, r) in src.chunks_exact(head_dim).zip(vals.chunks_exact_mut(row)) {
                crate::quant::quantize_fp8_tile(x, dv as usize, tile as usize, bf16, r)?;
            }
            Ok(())
        }
        _ => {
            encode(fmt, src, vals);
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
        _ if !fmt.enabled() => Err(Error::FormatDisabled),
        ElementFormat::Int8 { group } => {
            let scales = bytemuck::try_cast_slice(scales).map_err(|_| Error::MisalignedArena)?;
            crate::quant::dequantize_q8(bytemuck::cast_slice(vals), scales, group as usize, dst)
        }
        ElementFormat::Fp8Tile { dv, tile, bf16 } => {
            let heads = dst.len() / head_dim;
            let row = vals.len() / heads.max(1);
            for (r, x) in vals.chunks_exact(row).zip(dst.chunks_exact_mut(head_dim)) {
                crate::quant::dequantize_fp8_tile(r, dv as usize, tile as usize, bf16, x)?;
            }
            Ok(())
        }
        _ => {
            decode(fmt, vals, dst);
            Ok(())
        }
    }
}

/// Encodes `src` into the little-endian page bytes `dst` of full-precision format `fmt`.
/// `dst.len()` must be `src.len()` times the element size (callers check); quantized formats go
/// through [`crate::quant`] instead and are ignored here.
fn encode<T: Element>(fmt: ElementFormat, src: &[T], dst: &mut [u8]) {
    if !fmt.enabled() {
        return;
    }
    if fmt == T::FORMAT && cfg!(target_endian = "little") {
        dst.copy_from_slice(bytemuck::cast_slice(src));
        return;
    }
    if cfg!(target_endian = "little") && encode_f32_slice(fmt, src, dst) {
        return;
    }
    match fmt {
        ElementFormat::F32 => {
            for (d, s) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&s.to_f32().to_le_bytes());
            }
        }
        ElementFormat::F16 => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&f16::from_f32(s.to_f32()).to_le_bytes());
            }
        }
        ElementFormat::Bf16 => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&bf16::from_f32(s.to_f32()).to_le_bytes());
            }
        }
        ElementFormat::Int8 { .. } | ElementFormat::Fp8Tile { .. } => {}
    }
}

/// Decodes little-endian page bytes `src` of full-precision format `fmt` into `dst` (quantized
/// formats are ignored, as in [`encode`]).
fn decode<T: Element>(fmt: ElementFormat, src: &[u8], dst: &mut [T]) {
    if !fmt.enabled() {
        return;
    }
    if fmt == T::FORMAT && cfg!(target_endian = "little") {
        bytemuck::cast_slice_mut(dst).copy_from_slice(src);
        return;
    }
    if cfg!(target_endian = "little") && decode_f32_slice(fmt, src, dst) {
        return;
    }
    match fmt {
        ElementFormat::F32 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = T::from_f32(f32::from_le_bytes([s[0], s[1], s[2], s[3]]));
            }
        }
        ElementFormat::F16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = T::from_f32(f16::from_le_bytes([s[0], s[1]]).to_f32());
            }
        }
        ElementFormat::Bf16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = T::from_f32(bf16::from_le_bytes([s[0], s[1]]).to_f32());
            }
        }
        ElementFormat::Int8 { .. } | ElementFormat::Fp8Tile { .. } => {}
    }
}

/// f32 rows into aligned f16 / bf16 pages with `half`'s slice conversion (F16C / NEON where
/// available). Returns `false` when it does not apply (other types, misaligned page bytes).
fn encode_f32_slice<T: Element>(fmt: ElementFormat, src: &[T], dst: &mut [u8]) -> bool {
    use half::slice::HalfFloatSliceExt;
    let Ok(src) = bytemuck::try_cast_slice::<T, f32>(src) else {
        return false;
    };
    if T::FORMAT != ElementFormat::F32 {
        return false;
    }
    match fmt {
        ElementFormat::F16 => match bytemuck::try_cast_slice_mut::<u8, f16>(dst) {
            Ok(d) => d.convert_from_f32_slice(src),
            Err(_) => return false,
        },
        ElementFormat::Bf16 => match bytemuck::try_cast_slice_mut::<u8, bf16>(dst) {
            Ok(d) => d.convert_from_f32_slice(src),
            Err(_) => return false,
        },
        _ => return false,
    }
    true
}

/// The reverse of [`encode_f32_slice`].
fn decode_f32_slice<T: Element>(fmt: ElementFormat, src: &[u8], dst: &mut [T]) -> bool {
    use half::slice::HalfFloatSliceExt;
    if T::FORMAT != ElementFormat::F32 {
        return false;
    }
    let Ok(dst) = bytemuck::try_cast_slice_mut::<T, f32>(dst) else {
        return false;
    };
    match fmt {
        ElementFormat::F16 => match bytemuck::try_cast_slice::<u8, f16>(src) {
            Ok(s) => s.convert_to_f32_slice(dst),
            Err(_) => return false,
        },
        ElementFormat::Bf16 => match bytemuck::try_cast_slice::<u8, bf16>(src) {
            Ok(s) => s.convert_to_f32_slice(dst),
            Err(_) => return false,
        },
        _ => return false,
    }
    true
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
        ];
        let shape = crate::Shape {
            layers: 1,
            kv_heads: 2,
            head_dim: 64,
        };
        for (fmt, on) in formats {
            assert_eq!(fmt.enabled(), on, "{fmt:?}");
            let cfg = crate::CacheConfig::new(shape).with_formats(ElementFormat::F32, fmt);
            match cfg.geometry() {
                Ok(_) => assert!(on, "{fmt:?} planned"),
                Err(e) => assert!(!on && e == Error::FormatDisabled, "{fmt:?}: {e:?}"),
            }
            let mut vals = [0u8; 256];
            let vals = &mut vals[..fmt.row_bytes(1, 64).unwrap_or(256)];
            let mut scales = [0u16; 2];
            let scales = &mut bytemuck::cast_slice_mut(&mut scales)[..if on {
                fmt.scale_row_bytes(1, 64).unwrap()
            } else {
                0
            }];
            let rows = encode_rows(fmt, 64, &[1.0f32; 64], vals, scales);
            assert_eq!(rows.is_ok(), on, "{fmt:?}");
        }
    }

    #[test]
    fn same_format_round_trips_bits() {
        let src = [1.5f32, -0.0, f32::MIN_POSITIVE, f32::NAN];
        let mut bytes = [0u8; 16];
        encode(ElementFormat::F32, &src, &mut bytes);
        let mut back = [0f32; 4];
        decode(ElementFormat::F32, &bytes, &mut back);
        for (a, b) in src.iter().zip(&back) {
            assert_eq!(a.to_bits(), b.to_bits());
        }
        assert_eq!(&bytes[0..4], &1.5f32.to_le_bytes());
    }

    #[test]
    fn f32_into_f16_page_rounds_to_nearest_even() {
        // 1 + 2^-11 is a tie between 1.0 and 1 + 2^-10 in f16: even mantissa (1.0) wins.
        let src = [1.0f32 + f32::powi(2.0, -11), 65520.0];
        let mut bytes = [0u8; 4];
        encode(ElementFormat::F16, &src, &mut bytes);
        let mut back = [0f32; 2];
        decode(ElementFormat::F16, &bytes, &mut back);
        assert_eq!(back[0], 1.0);
        assert!(back[1].is_infinite(), "65520 rounds up to f16 infinity");
    }

    #[test]
    fn slice_conversion_matches_scalar_rounding() {
        let src: [f32; 9] = [
            1.0 + f32::powi(2.0, -11),
            65520.0,
            -1e-8,
            3.3,
            -0.0,
            1e30,
            0.1,
            7.0,
            -2.5,
        ];
        for fmt in [ElementFormat::F16, ElementFormat::Bf16] {
            // Aligned (slice path) and misaligned (scalar path) destinations agree bit for bit.
            let mut aligned = [0u16; 9];
            encode(fmt, &src, bytemuck::cast_slice_mut(&mut aligned));
            let mut buf = [0u8; 19];
            encode(fmt, &src, &mut buf[1..]);
            assert_eq!(bytemuck::cast_slice::<u16, u8>(&aligned), &buf[1..]);
            let mut a = [0f32; 9];
            let mut b = [0f32; 9];
            decode(fmt, bytemuck::cast_slice(&aligned), &mut a);
            decode(fmt, &buf[1..], &mut b);
            assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits));
        }
    }

    #[test]
    fn bf16_page_from_f16_input() {
        let src = [f16::from_f32(3.0), f16::from_f32(-0.5)];
        let mut bytes = [0u8; 4];
        encode(ElementFormat::Bf16, &src, &mut bytes);
        assert_eq!(&bytes[0..2], &bf16::from_f32(3.0).to_le_bytes());
        let mut back = [bf16::ZERO; 2];
        decode(ElementFormat::Bf16, &bytes, &mut back);
        assert_eq!(back[1].to_f32(), -0.5);
    }
}
