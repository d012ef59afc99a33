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
//! gives all-zero scaled values. Not yet a page format: the cache's `Int4` pages are issue 20's.

use half::f16;

use crate::error::{Error, Result};

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

/// Quantizes `x` (a multiple of 32 values) into `out` (`kind.bytes_for(x.len())` bytes).
///
/// Non-finite inputs give codes but no panic: a NaN scaled value takes code 0, infinities
/// saturate (ggml leaves both undefined).
///
/// # Errors
///
/// [`Error::LengthMismatch`] if `x.len()` is not a multiple of 32 or `out` has the wrong length;
/// nothing is written then.
pub fn quantize_q4(kind: Q4Kind, x: &[f32], out: &mut [u8]) -> Result<()> {
    if kind.bytes_for(x.len()) != Some(out.len()) {
        return Err(Error::LengthMismatch);
    }
    for (b, o) in x
        .chunks_exact(Q4_BLOCK)
        .zip(out.chunks_exact_mut(kind.block_bytes()))
    {
        // Always whole blocks (`chunks_exact`).
        if let Ok(b) = <&[f32; Q4_BLOCK]>::try_from(b) {
            match kind {
                Q4Kind::Q4_0 => encode_q4_0(b, o),
                Q4Kind::Q4_1 => encode_q4_1(b, o),
            }
        }
    }
    Ok(())
}

/// Dequantizes blocks of `kind` into `y` (32 values per block).
///
/// # Errors
///
/// [`Error::LengthMismatch`] if `blocks` is not `kind.bytes_for(y.len())` bytes; nothing is
/// written then.
pub fn dequantize_q4(kind: Q4Kind, blocks: &[u8], y: &mut [f32]) -> Result<()> {
    if kind.bytes_for(y.len()) != Some(blocks.len()) {
        return Err(Error::LengthMismatch);
    }
    for (b, o) in blocks
        .chunks_exact(kind.block_bytes())
        .zip(y.chunks_exact_mut(Q4_BLOCK))
    {
        let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
        let (m, codes) = match kind {
            Q4Kind::Q4_0 => (0.0, &b[2..]),
            Q4Kind::Q4_1 => (f16::from_le_bytes([b[2], b[3]]).to_f32(), &b[4..]),
        };
        for (j, &c) in codes.iter().enumerate() {
            let (lo, hi) = (c & 0x0F, c >> 4);
            match kind {
                Q4Kind::Q4_0 => {
                    o[j] = (i32::from(lo) - 8) as f32 * d;
                    o[j + 16] = (i32::from(hi) - 8) as f32 * d;
                }
                Q4Kind::Q4_1 => {
                    o[j] = f32::from(lo) * d + m;
                    o[j + 16] = f32::from(hi) * d + m;
                }
            }
        }
    }
    Ok(())
}

/// `1 / d`, or 0 for a zero `d`.
#[inline]
fn inverse(d: f32) -> f32 {
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

fn encode_q4_0(x: &[f32; Q4_BLOCK], out: &mut [u8]) {
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
