//! 4-bit blocks with ggml's Q4_0 and Q4_1 math: the reference codec, bit-exact with gguf-py's
//! `quants.Q4_0` / `quants.Q4_1` (which follow `quantize_row_q4_0_ref` / `_q4_1_ref`).
//!
//! A block holds 32 values: its f16 scale `d` (Q4_1: then its f16 minimum `m`), then 16 bytes of
//! codes, value `j` in the low nibble of byte `j` and value `j + 16` in the high nibble.
//!
//! - Q4_0 (18 bytes): `max` is the first value of largest magnitude (sign kept), `d = max / −8`,
//!   `q = min(15, trunc(x / d + 8.5))`; a value is `(q − 8) · d`.
//! - Q4_1 (20 bytes): `d = (max − min) / 15`, `q = min(15, trunc((x − min) / d + 0.5))`; a value is
//!   `q · d + m`.
//!
//! Codes are computed with `1 / d` in f32 before `d` is rounded to f16, as ggml does; a zero `d`
//! gives all-zero scaled values.
//!
//! As a page format ([`ElementFormat::Int4`](super::ElementFormat::Int4)) each head row is
//! `head_dim / 32` whole blocks in the value pool, exactly ggml's bytes (no scale pool). Attention
//! decodes a block's codes half by half ([`Q4Codes`]: values 0–15 from the low nibbles, 16–31
//! from the high ones) into the dequantized values (K) or codes whose block scale is folded into
//! the weights (V, see `arch::kernels`).

use half::f16;

use super::decode::{Decode, LANES, u16_at};
use super::kernels::QuantKernels;
use super::{Element, ElementFormat};
use crate::error::{ConfigError, Error, Result};
use crate::numeric::floor::quant_input;
use crate::numeric::widen::{Soft, Widen};

/// Values per block.
pub const Q4_BLOCK: usize = 32;

/// Which of ggml's 4-bit block types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Q4Kind {
    /// Symmetric: one f16 scale per block (`GGML_TYPE_Q4_0`).
    Q4_0,
    /// Scale and minimum per block (`GGML_TYPE_Q4_1`).
    Q4_1,
}

impl Q4Kind {
    /// Bytes of one block: 18 (Q4_0) or 20 (Q4_1).
    pub const fn block_bytes(self) -> usize {
        match self {
            Q4Kind::Q4_0 => 2 + Q4_BLOCK / 2,
            Q4Kind::Q4_1 => 4 + Q4_BLOCK / 2,
        }
    }

    /// Bytes of the blocks of `n` values (`n` a multiple of 32), `None` otherwise.
    pub const fn bytes_for(self, n: usize) -> Option<usize> {
        if n % Q4_BLOCK != 0 {
            return None;
        }
        Some(n / Q4_BLOCK * self.block_bytes())
    }
}

/// Bytes of one head row of `head_dim` values (whole blocks), or
/// [`ConfigError::InvalidFormat`] when `head_dim` is not a multiple of 32.
pub(crate) const fn head_bytes(head_dim: usize, kind: Q4Kind) -> Result<usize, ConfigError> {
    if head_dim == 0 || head_dim % Q4_BLOCK != 0 {
        return Err(ConfigError::InvalidFormat);
    }
    match (head_dim / Q4_BLOCK).checked_mul(kind.block_bytes()) {
        Some(b) => Ok(b),
        None => Err(ConfigError::Overflow),
    }
}

/// A block's f16 scale `d` and (Q4_1) minimum `m` as f32 (`m = 0` for Q4_0), and its 16 code
/// bytes; f16 widened by `D` (every [`Widen`] gives the same bits). `b` is one whole block.
#[inline(always)]
pub(crate) fn block_parts<D: Widen>(kind: Q4Kind, b: &[u8]) -> (f32, f32, &[u8]) {
    let d = D::one(u16_at(b, 0));
    match kind {
        Q4Kind::Q4_0 => (d, 0.0, &b[2..]),
        Q4Kind::Q4_1 => (d, D::one(u16_at(b, 1)), &b[4..]),
    }
}

/// Half of a block's codes as f32 values, eight at a time from eight code bytes: the low
/// nibbles (`shift` 0: values 0–15 of the block) or the high ones (`shift` 4: values 16–31),
/// each `(q − bias) · d + m`. With `d = 1, m = 0` these are the codes themselves (centred by
/// `bias`: 8 for Q4_0, 0 for Q4_1), for kernels that fold the block scale into their weights.
#[derive(Clone, Copy)]
pub(crate) struct Q4Codes {
    pub(crate) shift: u32,
    pub(crate) bias: i32,
    pub(crate) d: f32,
    pub(crate) m: f32,
    /// Whether to apply `d` and `m` (when false, the values are `q − bias` exactly).
    pub(crate) scaled: bool,
}

impl Q4Codes {
    /// The value of code byte `c`'s nibble.
    #[inline(always)]
    fn value(self, c: u8) -> f32 {
        let q = (i32::from(c >> self.shift) & 0x0F) - self.bias;
        if !self.scaled {
            q as f32
        } else if self.bias == 0 {
            q as f32 * self.d + self.m
        } else {
            q as f32 * self.d
        }
    }
}

impl Decode<LANES> for Q4Codes {
    #[inline(always)]
    fn block(self, b: &[u8; LANES]) -> [f32; LANES] {
        let mut x = [0f32; LANES];
        for l in 0..LANES {
            x[l] = self.value(b[l]);
        }
        x
    }

    #[inline(always)]
    fn one(self, bytes: &[u8], i: usize) -> f32 {
        self.value(bytes[i])
    }
}

/// The decoder of one half (`hi`: values 16–31) of a block of `kind` with scale `d` and minimum
/// `m`, giving dequantized values.
#[inline(always)]
pub(crate) fn dequantizing(kind: Q4Kind, hi: bool, d: f32, m: f32) -> Q4Codes {
    Q4Codes {
        shift: if hi { 4 } else { 0 },
        bias: match kind {
            Q4Kind::Q4_0 => 8,
            Q4Kind::Q4_1 => 0,
        },
        d,
        m,
        scaled: true,
    }
}

/// Quantizes `x` (a multiple of 32 values) into `out` (`kind.bytes_for(x.len())` bytes), through
/// `K`'s kernel where it has one (the same bits): the public `quant::quantize_q4`, which see for
/// the rules. f16 and bf16 values are widened to f32 exactly first, a block at a time.
///
/// # Errors
///
/// As `quant::quantize_q4`; nothing is written then.
pub(crate) fn quantize_q4_with<K: QuantKernels, T: Element>(
    kind: Q4Kind,
    x: &[T],
    out: &mut [u8],
) -> Result<()> {
    if kind.bytes_for(x.len()) != Some(out.len()) {
        return Err(Error::LengthMismatch);
    }
    // f32 rows to the kernel whole; other rows (and f32 rows it declines) a block at a time.
    if T::FORMAT == ElementFormat::F32 {
        if let Ok(f) = bytemuck::try_cast_slice::<T, f32>(x) {
            if K::q4_f32(kind, f, out) {
                return Ok(());
            }
        }
    }
    for (b, o) in x
        .chunks_exact(Q4_BLOCK)
        .zip(out.chunks_exact_mut(kind.block_bytes()))
    {
        let b: [f32; Q4_BLOCK] = core::array::from_fn(|i| b[i].to_f32());
        if !K::q4_f32(kind, &b, o) {
            encode_block(kind, &b, o);
        }
    }
    Ok(())
}

/// One block of `kind` from 32 f32 values into its `kind.block_bytes()` bytes `out`: the
/// reference encoder.
#[inline]
pub(crate) fn encode_block(kind: Q4Kind, x: &[f32; Q4_BLOCK], out: &mut [u8]) {
    match kind {
        Q4Kind::Q4_0 => encode_q4_0(x, out),
        Q4Kind::Q4_1 => encode_q4_1(x, out),
    }
}

/// Dequantizes blocks of `kind` into `y` (32 values per block): Q4_0 `(q − 8) · d`, Q4_1
/// `q · d + m`, in f32, then narrowed to `T` (round to nearest even).
///
/// # Errors
///
/// [`Error::LengthMismatch`] if `blocks` is not `kind.bytes_for(y.len())` bytes; nothing is
/// written then.
pub fn dequantize_q4<T: Element>(kind: Q4Kind, blocks: &[u8], y: &mut [T]) -> Result<()> {
    if kind.bytes_for(y.len()) != Some(blocks.len()) {
        return Err(Error::LengthMismatch);
    }
    for (b, o) in blocks
        .chunks_exact(kind.block_bytes())
        .zip(y.chunks_exact_mut(Q4_BLOCK))
    {
        let (d, m, codes) = block_parts::<Soft>(kind, b);
        let (lo, hi) = (
            dequantizing(kind, false, d, m),
            dequantizing(kind, true, d, m),
        );
        for (j, &c) in codes.iter().enumerate() {
            o[j] = T::from_f32(lo.value(c));
            o[j + 16] = T::from_f32(hi.value(c));
        }
    }
    Ok(())
}

/// `1 / d`, or 0 for a zero `d`.
#[inline]
pub(crate) fn inverse(d: f32) -> f32 {
    if d == 0.0 { 0.0 } else { 1.0 / d }
}

/// `min(15, trunc(v))` for `v ≥ 0` as a nibble; negative and NaN give 0 (as a saturating cast).
#[inline]
fn nibble(v: f32) -> u8 {
    (v as u8).min(15)
}

/// Packs codes `q[j]` (low nibble of byte `j`) and `q[j + 16]` (high nibble).
#[inline]
fn pack(q: impl Fn(usize) -> u8, out: &mut [u8]) {
    for (j, o) in out.iter_mut().enumerate().take(Q4_BLOCK / 2) {
        *o = q(j) | q(j + 16) << 4;
    }
}

/// The block with inputs below 2^-100 read as zeros (`floor::quant_input`): the block's f16
/// scale would be zero anyway, and no scale, inverse or product formed from it is subnormal (so
/// Helium's vector floats, which flush subnormals, write the host's codes).
#[inline(always)]
fn floored(x: &[f32; Q4_BLOCK]) -> [f32; Q4_BLOCK] {
    x.map(quant_input)
}

fn encode_q4_0(x: &[f32; Q4_BLOCK], out: &mut [u8]) {
    let x = &floored(x);
    // The first value of largest magnitude (`argmax(|x|)`), sign kept.
    let mut max = x[0];
    for &v in &x[1..] {
        if v.abs() > max.abs() {
            max = v;
        }
    }
    let d = max / -8.0;
    let id = inverse(d);
    out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    pack(|j| nibble(x[j] * id + 8.5), &mut out[2..]);
}

fn encode_q4_1(x: &[f32; Q4_BLOCK], out: &mut [u8]) {
    let x = &floored(x);
    let (mut min, mut max) = (x[0], x[0]);
    for &v in &x[1..] {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    let d = (max - min) / 15.0;
    let id = inverse(d);
    out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    out[2..4].copy_from_slice(&f16::from_f32(min).to_le_bytes());
    pack(|j| nibble((x[j] - min) * id + 0.5), &mut out[4..]);
}

#[cfg(test)]
mod tests;
