//! The full-precision formats f32, f16 and bf16: little-endian elements `[P][kv_heads][head_dim]`,
//! no scale pool. Their codec (conversions through f32 with `half`'s round-to-nearest-even) and the
//! decoders attention fuses into its dot products ([`F32s`], [`F16s`], [`Bf16s`]).

use core::marker::PhantomData;

use half::{bf16, f16};

use super::decode::{Decode, LANES, f32_at, u16_at};
use super::{Element, ElementFormat};
use crate::numeric::Widen;
use crate::numeric::floor::value;
#[cfg(test)]
use crate::numeric::widen::f16_to_f32;

/// Encodes `src` into the little-endian page bytes `dst` of full-precision format `fmt`.
/// `dst.len()` must be `src.len()` times the element size (callers check); quantized formats go
/// through their own modules instead and are ignored here.
pub(super) fn encode<T: Element>(fmt: ElementFormat, src: &[T], dst: &mut [u8]) {
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
        ElementFormat::Int8 { .. } | ElementFormat::Fp8Tile { .. } | ElementFormat::Int4 { .. } => {
        }
    }
}

/// Decodes little-endian page bytes `src` of full-precision format `fmt` into `dst` (quantized
/// formats are ignored, as in [`encode`]).
pub(super) fn decode<T: Element>(fmt: ElementFormat, src: &[u8], dst: &mut [T]) {
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
        ElementFormat::Int8 { .. } | ElementFormat::Fp8Tile { .. } | ElementFormat::Int4 { .. } => {
        }
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

/// Little-endian f32 elements, those below 2^-42 in magnitude read as zeros of their sign
/// (`floor::value`: no product with a weight is subnormal, so vector floats that flush
/// subnormals give the same bits).
#[derive(Clone, Copy)]
pub(crate) struct F32s;

impl Decode<{ 4 * LANES }> for F32s {
    #[inline(always)]
    fn block(self, b: &[u8; 4 * LANES]) -> [f32; LANES] {
        let mut x = [0f32; LANES];
        for l in 0..LANES {
            x[l] = value(f32::from_le_bytes([
                b[4 * l],
                b[4 * l + 1],
                b[4 * l + 2],
                b[4 * l + 3],
            ]));
        }
        x
    }

    #[inline(always)]
    fn one(self, bytes: &[u8], i: usize) -> f32 {
        value(f32_at(bytes, i))
    }
}

/// Little-endian f16 elements, widened by `D` (see [`Widen`]).
pub(crate) struct F16s<D>(pub PhantomData<D>);

impl<D> Clone for F16s<D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D> Copy for F16s<D> {}

impl<D: Widen> Decode<{ 2 * LANES }> for F16s<D> {
    #[inline(always)]
    fn block(self, b: &[u8; 2 * LANES]) -> [f32; LANES] {
        D::block(b)
    }

    #[inline(always)]
    fn one(self, bytes: &[u8], i: usize) -> f32 {
        D::one(u16_at(bytes, i))
    }
}

/// Little-endian bf16 elements, widened exactly, those below 2^-42 read as zeros (as [`F32s`]).
#[derive(Clone, Copy)]
pub(crate) struct Bf16s;

impl Decode<{ 2 * LANES }> for Bf16s {
    #[inline(always)]
    fn block(self, b: &[u8; 2 * LANES]) -> [f32; LANES] {
        let mut x = [0f32; LANES];
        for l in 0..LANES {
            x[l] = value(bf16_to_f32(u16::from_le_bytes([b[2 * l], b[2 * l + 1]])));
        }
        x
    }

    #[inline(always)]
    fn one(self, bytes: &[u8], i: usize) -> f32 {
        value(bf16_to_f32(u16_at(bytes, i)))
    }
}

/// bfloat16 to f32, bit-identical to `half::bf16::to_f32` (NaNs made quiet), branch-free.
#[inline(always)]
pub(crate) fn bf16_to_f32(b: u16) -> f32 {
    let nan = ((b & 0x7FFF) > 0x7F80) as u32;
    f32::from_bits(((b as u32) << 16) | nan << 22)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_and_bf16_decoders_match_half_on_every_code() {
        // Every code; under Miri a stride that still crosses every exponent.
        for c in (0..=u16::MAX).step_by(if cfg!(miri) { 61 } else { 1 }) {
            let want = half::f16::from_bits(c).to_f32().to_bits();
            assert_eq!(f16_to_f32(c).to_bits(), want, "f16 {c:#06x}");
            let want = half::bf16::from_bits(c).to_f32().to_bits();
            assert_eq!(bf16_to_f32(c).to_bits(), want, "bf16 {c:#06x}");
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
