//! Int8 groups with ggml's Q8_0 math, for any group size `g ≥ 1` dividing the row.
//!
//! Per group of `g` values: `amax = max|x|` (f32), `d = amax / 127` (f32),
//! `id = if d == 0 { 0 } else { 1 / d }`, `q = round_half_away_from_zero(x * id)` saturated to
//! `i8`, stored scale `f16(d)` (round to nearest even). Dequantization is `q as f32 * f32(scale)`.
//! With `g = 32` this is bit for bit ggml's `quantize_row_q8_0_ref` / gguf-py's `Q8_0`.
//!
//! Speed: the loops are written for LLVM's vectorizers, and the group loop is software pipelined
//! so that the two divisions per group overlap with the next group's `max|x|`.
//!
//! This module holds the format's byte layout ([`head_bytes`], [`head_scale_bytes`]), its reference
//! codec ([`quantize_q8_with`], [`dequantize_q8`], in `groups` the group loop) and the decoders that
//! attention fuses into its V accumulation ([`I8s`]; int8 keys score from integer sums, see
//! `arch::query`).

pub(crate) mod groups;
#[cfg(test)]
mod tests;

use half::f16;

use groups::quantize_groups;
#[cfg(test)]
use groups::{f16_bits_rne, round_mag_cast, round_mag_magic, round_q8};

use super::decode::{Decode, LANES};
use super::load::{BUF, F16Bits, ViaElement, store_f32};
use crate::error::{ConfigError, Error, Result};
use crate::format::kernels::QuantKernels;
use crate::format::{Element, ElementFormat};

/// Quantizes `x` in groups of `group` values into `codes` and `scales` with ggml Q8_0 math,
/// through `K`'s kernel where it has one (the same bits): the public `quant::quantize_q8`, which
/// see for the rules and errors.
///
/// # Errors
///
/// As `quant::quantize_q8`.
pub(crate) fn quantize_q8_with<K: QuantKernels, T: Element>(
    x: &[T],
    group: usize,
    codes: &mut [i8],
    scales: &mut [f16],
) -> Result<()> {
    check_q8(x.len(), group, codes.len(), scales.len())?;
    if T::FORMAT == ElementFormat::F16 {
        if let Ok(h) = bytemuck::try_cast_slice::<T, f16>(x) {
            if !K::q8_f16(h, group, codes, scales) {
                quantize_groups::<F16Bits>(h, group, codes, scales);
            }
            return Ok(());
        }
    }
    if T::FORMAT == ElementFormat::F32 {
        if let Ok(f) = bytemuck::try_cast_slice::<T, f32>(x) {
            if K::q8_f32(f, group, codes, scales) {
                return Ok(());
            }
        }
    }
    quantize_groups::<ViaElement<T>>(x, group, codes, scales);
    Ok(())
}

/// Dequantizes `codes` (one per value) and `scales` (one f16 per group of `group` values) into
/// `out`: `out[i] = T::from_f32(codes[i] as f32 * f32(scales[i / group]))`.
///
/// # Errors
///
/// [`Error::Config`] ([`InvalidFormat`](ConfigError::InvalidFormat)) if `group == 0`; [`Error::LengthMismatch`] if `group` does not divide
/// `out.len()`, `codes.len() != out.len()` or `scales.len() != out.len() / group`. On error
/// nothing is written.
pub fn dequantize_q8<T: Element>(
    codes: &[i8],
    scales: &[f16],
    group: usize,
    out: &mut [T],
) -> Result<()> {
    check_q8(out.len(), group, codes.len(), scales.len())?;
    if T::FORMAT == ElementFormat::F32 {
        if let Ok(o) = bytemuck::try_cast_slice_mut::<T, f32>(out) {
            for ((og, cg), s) in o
                .chunks_exact_mut(group)
                .zip(codes.chunks_exact(group))
                .zip(scales)
            {
                let s = s.to_f32();
                for (o, &c) in og.iter_mut().zip(cg) {
                    *o = c as f32 * s;
                }
            }
            return Ok(());
        }
    }
    let mut buf = [0f32; BUF];
    for ((og, cg), s) in out
        .chunks_exact_mut(group)
        .zip(codes.chunks_exact(group))
        .zip(scales)
    {
        let s = s.to_f32();
        for (oc, cc) in og.chunks_mut(BUF).zip(cg.chunks(BUF)) {
            for (b, &c) in buf.iter_mut().zip(cc) {
                *b = c as f32 * s;
            }
            store_f32(buf.get(..oc.len()).unwrap_or(&[]), oc);
        }
    }
    Ok(())
}

/// Argument checks shared by both directions.
fn check_q8(n: usize, group: usize, codes: usize, scales: usize) -> Result<()> {
    if group == 0 {
        return Err(ConfigError::InvalidFormat.into());
    }
    if n % group != 0 || codes != n || scales != n / group {
        return Err(Error::LengthMismatch);
    }
    Ok(())
}

/// Bytes of one head row of `head_dim` codes, or [`ConfigError::InvalidFormat`] when `group` is
/// below 2 (a scale per value: more bytes than f16) or does not divide `head_dim`.
pub(crate) const fn head_bytes(head_dim: usize, group: u16) -> Result<usize, ConfigError> {
    if group < 2 || head_dim % group as usize != 0 {
        return Err(ConfigError::InvalidFormat);
    }
    Ok(head_dim)
}

/// Bytes of one head row's f16 scales, errors as [`head_bytes`].
pub(crate) const fn head_scale_bytes(head_dim: usize, group: u16) -> Result<usize, ConfigError> {
    if group < 2 || head_dim % group as usize != 0 {
        return Err(ConfigError::InvalidFormat);
    }
    match (head_dim / group as usize).checked_mul(2) {
        Some(b) => Ok(b),
        None => Err(ConfigError::Overflow),
    }
}

/// int8 codes.
#[derive(Clone, Copy)]
pub(crate) struct I8s;

impl Decode<LANES> for I8s {
    #[inline(always)]
    fn block(self, b: &[u8; LANES]) -> [f32; LANES] {
        let mut x = [0f32; LANES];
        for l in 0..LANES {
            x[l] = b[l] as i8 as f32;
        }
        x
    }

    #[inline(always)]
    fn one(self, bytes: &[u8], i: usize) -> f32 {
        bytes[i] as i8 as f32
    }
}
