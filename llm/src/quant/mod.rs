//! Quantized blocks as ggml's CPU reference code reads and writes them: one home per weight type
//! (block layout, dequantization as `dequantize_row_*`, the dot product with its activation
//! type as `ggml_vec_dot_*_generic`), the activation quantizers (`quantize_row_q8_0_ref`,
//! `quantize_row_q8_1_ref`, `quantize_row_q8_K_ref`) and the f16 → f32 conversion of scales.
//!
//! Which activation type a weight type's dot product takes is ggml's `vec_dot_type`
//! (`type_traits_cpu` in `ggml-cpu.c`): [`ActivationType::for_weights`].

pub mod floor;
mod k_lanes;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub(crate) mod q8_act;
mod q8_k;

pub use q8_act::{quantize_q8_0, quantize_q8_1};
pub use q8_k::quantize_q8_k;

use crate::error::{Error, Result};
use crate::gguf::{GgufError, QK_K, TensorType};

/// Values per Q8_0 / Q8_1 activation block (and per Q4_0 … Q8_0 weight block).
pub const BLOCK: usize = 32;

/// The activation block type a weight type's dot product takes (ggml's `vec_dot_type`).
#[allow(non_camel_case_types)] // ggml's names
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivationType {
    /// 32-value blocks, f16 scale (for Q4_0, Q5_0 and Q8_0 weights).
    Q8_0,
    /// 32-value blocks, f16 scale and f16 block sum `Σq · d` (for Q4_1 and Q5_1 weights).
    Q8_1,
    /// 256-value super-blocks, f32 scale, sixteen i16 sums of 16 codes (for the K-quants).
    Q8_K,
}

impl ActivationType {
    /// The activation type of `ty`'s dot product; `None` for F32 (no quantized dot product).
    pub const fn for_weights(ty: TensorType) -> Option<Self> {
        match ty {
            TensorType::F32 => None,
            TensorType::Q4_0 | TensorType::Q5_0 | TensorType::Q8_0 => Some(ActivationType::Q8_0),
            TensorType::Q4_1 | TensorType::Q5_1 => Some(ActivationType::Q8_1),
            TensorType::Q4_K | TensorType::Q5_K | TensorType::Q6_K => Some(ActivationType::Q8_K),
        }
    }

    /// Values per block (32, or [`QK_K`] for Q8_K).
    pub const fn block_values(self) -> usize {
        match self {
            ActivationType::Q8_0 | ActivationType::Q8_1 => BLOCK,
            ActivationType::Q8_K => QK_K,
        }
    }
}

/// One quantized activation row: codes, scales (Q8_0 / Q8_1: the f32 of the stored f16; Q8_K:
/// f32), Q8_1's block sums and Q8_K's 16-value sums.
#[derive(Debug)]
pub struct QuantRow<'s> {
    /// Codes, one per value.
    pub qs: &'s [i8],
    /// Block scales, one per block.
    pub d: &'s [f32],
    /// Q8_1 block sums `f16(Σq · d)` as f32 (empty or unused for the other types).
    pub s: &'s [f32],
    /// Q8_K sums of each 16 codes (empty or unused for the other types).
    pub bsums: &'s [i16],
}

impl<'s> QuantRow<'s> {
    /// A row of `act` over the buffers [`quantize_activation`] wrote: `qs`, `d`, and `s` holding
    /// Q8_1's sums (f32) or Q8_K's 16-value sums (i16 pairs in the same bytes).
    pub fn of(act: ActivationType, qs: &'s [i8], d: &'s [f32], s: &'s [f32]) -> Self {
        let (s, bsums) = match act {
            ActivationType::Q8_K => (&[][..], bytemuck::try_cast_slice(s).unwrap_or(&[])),
            _ => (s, &[][..]),
        };
        QuantRow { qs, d, s, bsums }
    }
}

/// f32s of the sums buffer `s` a row of `cols` values takes: `cols / 32` for every activation
/// type (Q8_1: one f32 per block; Q8_K: one i16 per 16 values, two per f32).
pub const fn sums_len(cols: usize) -> usize {
    cols / BLOCK
}

/// Quantizes the activation row `x` as `act` (`x.len()` a whole number of its blocks) into `qs`
/// (`x.len()` codes), `d` (one scale per block) and `s` ([`sums_len`] f32s: Q8_1's block sums,
/// or Q8_K's 16-value sums as i16 in those bytes; unused for Q8_0).
pub fn quantize_activation(
    act: ActivationType,
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
) {
    match act {
        ActivationType::Q8_0 => quantize_q8_0(x, qs, d),
        ActivationType::Q8_1 => quantize_q8_1(x, qs, d, s),
        ActivationType::Q8_K => {
            let bsums: &mut [i16] = bytemuck::try_cast_slice_mut(s).unwrap_or(&mut []);
            quantize_q8_k(x, qs, d, bsums)
        }
    }
}

/// Dequantizes one row of `ty` (`bytes`, a whole number of blocks) into `out` (as many values),
/// as ggml's `dequantize_row_*` and gguf-py's `dequantize` compute it (bit for bit; F32 is
/// copied).
///
/// # Errors
///
/// [`Gguf`](Error::Gguf)([`PartialBlock`](GgufError::PartialBlock)) when `out` is not a whole
/// number of blocks, [`Mismatch`](Error::Mismatch) when `bytes` is not exactly its encoding.
pub fn dequantize_row(ty: TensorType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let len = ty
        .row_bytes(out.len())
        .ok_or(Error::Gguf(GgufError::PartialBlock {
            type_id: ty.id(),
            row_len: out.len(),
        }))?;
    if len != bytes.len() {
        return Err(Error::Mismatch("row bytes"));
    }
    let blocks = bytes
        .chunks_exact(ty.block_bytes())
        .zip(out.chunks_exact_mut(ty.block_values()));
    macro_rules! each {
        ($f:path) => {
            for (b, o) in blocks {
                if let (Ok(b), Ok(o)) = (b.try_into(), o.try_into()) {
                    $f(b, o);
                }
            }
        };
    }
    match ty {
        TensorType::F32 => {
            for (b, o) in blocks {
                *o.first_mut().ok_or(Error::Mismatch("row bytes"))? =
                    f32::from_le_bytes(b.try_into().map_err(|_| Error::Mismatch("row bytes"))?);
            }
        }
        TensorType::Q4_0 => each!(q4_0::dequantize),
        TensorType::Q4_1 => each!(q4_1::dequantize),
        TensorType::Q5_0 => each!(q5_0::dequantize),
        TensorType::Q5_1 => each!(q5_1::dequantize),
        TensorType::Q8_0 => each!(q8_0::dequantize),
        TensorType::Q4_K => each!(q4_k::dequantize),
        TensorType::Q5_K => each!(q5_k::dequantize),
        TensorType::Q6_K => each!(q6_k::dequantize),
    }
    Ok(())
}

/// The f32 value of the little-endian f16 `[lo, hi]`.
#[inline(always)]
pub(crate) fn f16_le(lo: u8, hi: u8) -> f32 {
    f16_to_f32(u16::from_le_bytes([lo, hi]))
}

/// The f32 value of an IEEE binary16 bit pattern (exact; subnormals included; NaN stays NaN).
/// Branch-light so that the matmul's per-block scale reads stay cheap on targets without a
/// hardware conversion.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let rest = (h & 0x7fff) as u32;
    if rest >= 0x7c00 {
        // Infinity or NaN.
        return f32::from_bits(sign | 0x7f80_0000 | ((rest & 0x3ff) << 13));
    }
    // Reinterpret exponent and mantissa in f32's low range, then scale by 2^112: exact for
    // normals and subnormals alike (a multiplication by a power of two).
    let magnitude = f32::from_bits(rest << 13) * f32::from_bits(0x7780_0000);
    f32::from_bits(sign | magnitude.to_bits())
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn f16_conversion_matches_half_on_every_pattern() {
        for h in 0..=u16::MAX {
            let want = f16::from_bits(h).to_f32();
            let got = f16_to_f32(h);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#x}");
            }
        }
    }
}
