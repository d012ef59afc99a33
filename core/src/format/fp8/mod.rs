//! FP8 E4M3 (`float8_e4m3fn`) tiles in SGLang's NSA K-cache layout.
//!
//! One head row of `d` values: the first `dv` values in tiles of `tile` values, each tile with an
//! f32 scale `s = amax / 448` evaluated in the row's input dtype (f32, or bf16 when `bf16` is
//! set: then the values are bf16 and `s` is the f32 quotient rounded to bf16), and codes
//! `e4m3(x / s)` computed in f32 (round to nearest even, saturating to ±448). Row bytes:
//!
//! ```text
//! [dv codes][dv / tile scales, f32 LE][d − dv tail values, raw bf16 or f32 LE]
//! ```
//!
//! Deliberate differences from the reference: a tile whose scale is 0 (all zeros) gets codes 0,
//! where the reference writes NaN codes (0/0); a tile whose `max|x|` is below 2^-24
//! ([`TILE_FLOOR`]) is stored as such a zero tile too, so that no weight × scale × code
//! product of attention is subnormal (Helium's vector floats flush those; see
//! `numeric::floor`).
//!
//! This module holds the format's byte layout ([`fp8_tile_row_bytes`]), its reference codec and the
//! decoders that attention fuses into its dot products ([`E4m3Scaled`], [`E4m3s`]).

#[cfg(test)]
mod tests;

use half::bf16;

use super::decode::{Decode, LANES};
use super::load::{BUF, Bf16Of, F16Bits, Load, ViaElement, store_f32};
use crate::error::{ConfigError, Error, Result};
use crate::format::kernels::QuantKernels;
use crate::format::{Element, ElementFormat};

/// 2^-120: moves an f32 holding an e4m3 value to where its bits `>> 20` are the e4m3 code (the
/// e4m3 exponent bias is 7, f32's 127; e4m3 subnormals land exactly on f32 subnormals). The
/// AVX2 encoder's last step; the portable one takes [`e4m3_code`], which forms no subnormal.
#[cfg(edgekv_x86_kernels)]
pub(crate) const TWO_POW_M120: f32 = f32::from_bits((127 - 120) << 23);
/// The smallest normal e4m3 value, 2^-6.
const MIN_NORMAL: f32 = 0.015_625;
/// The largest finite e4m3fn value.
const MAX: f32 = 448.0;
/// Tiles whose `max|x|` is below this (2^-24) are stored as zero tiles (scale 0, codes 0).
pub(crate) const TILE_FLOOR: f32 = f32::from_bits(0x3380_0000);

/// The code of `r`, a value of the e4m3 grid in `[0, 448]`: normal values by rebiasing the
/// exponent in integer arithmetic (127 → 7, three mantissa bits kept), subnormal ones (multiples
/// of 2^-9 below 2^-6) as `r · 2^9`, exact. No f32 subnormal is formed, so flush-to-zero changes
/// nothing: Helium's vector floats always flush (they run under Arm's standard FPSCR value), and
/// LLVM vectorizes this for them.
#[inline(always)]
fn e4m3_code(r: f32) -> u32 {
    let b = r.to_bits();
    let normal = b.wrapping_sub(120 << 23) >> 20;
    let subnormal = (r * 512.0) as u32;
    if b < MIN_NORMAL.to_bits() {
        subnormal
    } else {
        normal
    }
}

/// The e4m3fn code of `|q|` (0..=0x7F), round to nearest even, saturating: every finite
/// `|q| > 448` and inf give 0x7E, NaN gives 0x7F. Branch-free (vectorizes).
///
/// `m = 2^(max(exponent(v), -6) + 20)` has an f32 ulp equal to the e4m3 spacing at `v`, so
/// `(v + m) − m` is `v` rounded to nearest even on the e4m3 grid by the FPU itself (normal and
/// subnormal ranges alike); [`e4m3_code`] then reads the code off it.
#[inline(always)]
fn e4m3_mag(q: f32) -> u32 {
    let a = q.to_bits() & 0x7FFF_FFFF;
    let nan = (a > 0x7F80_0000) as u32;
    // A NaN becomes 448 by an integer select, before any float operation sees it (turned into
    // 0x7F by `| nan` below): compilers may lower the clamp to the ISA's `min`, and AArch64's
    // `FMINNM` quiets a signalling NaN instead of returning 448, where x86's `MINSS` returns 448.
    let v = f32::from_bits(if nan != 0 { MAX.to_bits() } else { a });
    let v = if v < MAX { v } else { MAX };
    let e = f32::from_bits(v.to_bits() & 0x7F80_0000);
    let e = if e > MIN_NORMAL { e } else { MIN_NORMAL };
    let m = f32::from_bits(e.to_bits() + (20 << 23));
    let r = (v + m) - m;
    e4m3_code(r) | nan
}

/// [`e4m3_mag`] for finite `|q| < 464` (no saturation or NaN handling needed).
#[inline(always)]
fn e4m3_mag_small(q: f32) -> u32 {
    let a = q.to_bits() & 0x7FFF_FFFF;
    let v = f32::from_bits(a);
    // m = 2^(max(exponent, -6) + 20), the clamp on m itself so that it can be a `maxps`.
    let m = f32::from_bits((a & 0x7F80_0000) + (20 << 23));
    let m = if m > M_MIN { m } else { M_MIN };
    let r = (v + m) - m;
    e4m3_code(r)
}

/// `2^(-6 + 20)`: the magic of the e4m3 subnormal range (spacing 2^-9).
pub(crate) const M_MIN: f32 = 16_384.0;

/// f32 → e4m3fn code (`float8_e4m3fn`): round to nearest even, saturating to ±448 (0x7E/0xFE)
/// for every finite `|x| > 448` and ±inf, NaN → 0x7F/0xFF keeping the sign bit.
///
/// Byte-identical to torch's CPU cast and to `float8::F8E4M3::from_f32` on all 2^32 inputs (the
/// `exhaustive_e4m3` test). The tile kernels use this same function.
#[inline]
pub fn e4m3_from_f32(x: f32) -> u8 {
    (e4m3_mag(x) | ((x.to_bits() >> 24) & 0x80)) as u8
}

/// e4m3fn code → f32 (exact; 0x7F/0xFF are NaN with that sign).
///
/// Integer operations and one exact conversion, so that blocks of codes vectorize (a table lookup
/// per element does not): normal codes rebias the exponent (7 → 127), subnormal codes are
/// `m · 2^-9` (exact), `0x7F` magnitudes are NaN. No subnormal f32 is formed, so flush-to-zero
/// modes change nothing. Attention's fused decoders use this same function.
#[inline(always)]
pub fn e4m3_to_f32(code: u8) -> f32 {
    let c = code as u32;
    let (e, m) = ((c >> 3) & 0xF, c & 0x7);
    let normal = ((e + 120) << 23) | (m << 20);
    let sub = (m as i32 as f32 * f32::from_bits((127 - 9) << 23)).to_bits();
    let is_sub = ((e == 0) as u32).wrapping_neg();
    let is_nan = (((c & 0x7F) == 0x7F) as u32).wrapping_neg();
    let mag = (sub & is_sub) | (normal & !is_sub);
    let mag = (f32::NAN.to_bits() & is_nan) | (mag & !is_nan);
    f32::from_bits(mag | (c & 0x80) << 24)
}

/// Bytes of one head row: `dv + 4·(dv / tile) + (d − dv)·(2 if bf16 else 4)`.
///
/// `None` if `tile == 0`, `dv == 0`, `dv % tile != 0`, `dv > d`, or on overflow.
pub const fn fp8_tile_row_bytes(d: usize, dv: usize, tile: usize, bf16: bool) -> Option<usize> {
    if tile == 0 || dv == 0 || dv % tile != 0 || dv > d {
        return None;
    }
    let Some(scales) = (dv / tile).checked_mul(4) else {
        return None;
    };
    let Some(tail) = (d - dv).checked_mul(if bf16 { 2 } else { 4 }) else {
        return None;
    };
    match dv.checked_add(scales) {
        Some(n) => n.checked_add(tail),
        None => None,
    }
}

/// The row split into its three sections, after every check.
fn split_row(
    row_len: usize,
    d: usize,
    dv: usize,
    tile: usize,
    bf16: bool,
) -> Result<(usize, usize)> {
    let Some(bytes) = fp8_tile_row_bytes(d, dv, tile, bf16) else {
        return Err(ConfigError::InvalidFormat.into());
    };
    if row_len != bytes {
        return Err(Error::LengthMismatch);
    }
    Ok((dv, dv + 4 * (dv / tile)))
}

/// Quantizes one head row into `row` through `K`'s kernel where it has one (the same bits): the
/// public `quant::quantize_fp8_tile`, which see for the rules and errors.
///
/// # Errors
///
/// As `quant::quantize_fp8_tile`.
pub(crate) fn quantize_fp8_tile_with<K: QuantKernels, T: Element>(
    x: &[T],
    dv: usize,
    tile: usize,
    bf16: bool,
    row: &mut [u8],
) -> Result<()> {
    let (codes_end, scales_end) = split_row(row.len(), x.len(), dv, tile, bf16)?;
    let (Some((xq, xt)), Some((codes, rest))) =
        (x.split_at_checked(dv), row.split_at_mut_checked(codes_end))
    else {
        return Err(Error::LengthMismatch);
    };
    let Some((scales, tail)) = rest.split_at_mut_checked(scales_end - codes_end) else {
        return Err(Error::LengthMismatch);
    };
    let f16_row = if T::FORMAT == ElementFormat::F16 {
        bytemuck::try_cast_slice::<T, half::f16>(xq).ok()
    } else {
        None
    };
    let f32_row = if T::FORMAT == ElementFormat::F32 {
        bytemuck::try_cast_slice::<T, f32>(xq).ok()
    } else {
        None
    };
    match (bf16, f16_row) {
        (false, Some(h)) => {
            if !K::fp8_f16(h, tile, codes, scales) {
                quantize_tiles::<F16Bits>(h, tile, false, codes, scales);
            }
        }
        (false, None) => {
            if !f32_row.is_some_and(|f| K::fp8_f32(f, tile, codes, scales)) {
                quantize_tiles::<ViaElement<T>>(xq, tile, false, codes, scales);
            }
        }
        (true, _) if T::FORMAT == ElementFormat::Bf16 => {
            quantize_tiles::<ViaElement<T>>(xq, tile, true, codes, scales)
        }
        (true, Some(h)) => quantize_tiles::<Bf16Of<F16Bits>>(h, tile, true, codes, scales),
        (true, None) => quantize_tiles::<Bf16Of<ViaElement<T>>>(xq, tile, true, codes, scales),
    }
    write_tail(xt, bf16, tail);
    Ok(())
}

/// The tiles of one row, software-pipelined: `max|x|` of the next tile is computed while the
/// scale division of the current one is in flight. (Not specialized on constant tile sizes:
/// fully unrolled tiles leave the reductions to the SLP vectorizer, which does worse.)
pub(crate) fn quantize_tiles<L: Load>(
    x: &[L::R],
    tile: usize,
    bf16_scale: bool,
    codes: &mut [u8],
    scales: &mut [u8],
) {
    let mut tiles = x
        .chunks_exact(tile)
        .zip(codes.chunks_exact_mut(tile))
        .zip(scales.chunks_exact_mut(4));
    let mut cur = tiles.next().map(|((xt, ct), st)| (L::amax(xt), xt, ct, st));
    while let Some((amax, xt, ct, st)) = cur {
        let s = tile_scale(amax, bf16_scale);
        cur = tiles.next().map(|((xt, ct), st)| (L::amax(xt), xt, ct, st));
        tile_codes::<L>(xt, amax, s, ct);
        if let Some(st) = st.first_chunk_mut::<4>() {
            *st = s.to_le_bytes();
        }
    }
}

/// The scale of a tile from its `max|x|`: `amax / 448` (rounded to bf16 for bf16 rows); the
/// canonical NaN for a tile with a NaN (no payload or platform NaN-sign dependence).
#[inline(always)]
pub(crate) fn tile_scale(amax: f32, bf16_scale: bool) -> f32 {
    if amax.is_nan() {
        return f32::NAN;
    }
    // A tile below 2^-24 is a zero tile: its scale would be below 2^-33, and a weight times
    // it times a code could be subnormal (see `numeric::floor`).
    if amax < TILE_FLOOR {
        return 0.0;
    }
    let s = amax / MAX;
    if bf16_scale {
        bf16::from_f32(s).to_f32()
    } else {
        s
    }
}

/// The codes of one tile with scale `s` (from [`tile_scale`]).
#[inline(always)]
pub(crate) fn tile_codes<L: Load>(x: &[L::R], amax: f32, s: f32, codes: &mut [u8]) {
    if amax.is_nan() {
        for (c, &r) in codes.iter_mut().zip(x) {
            *c = 0x7F | ((L::f32_any(r).to_bits() >> 24) & 0x80) as u8;
        }
    } else if s == 0.0 {
        codes.fill(0);
    } else if amax.is_finite() && s >= f32::MIN_POSITIVE {
        // s normal: |x/s| ≤ amax/s ≤ 448·(1 + 2^-8) (bf16 s; 448·(1 + 2^-23) for f32 s),
        // which rounds to at most 448, and every x is finite.
        // Sixteen at a time: magnitudes narrowed with one pack sequence, signs with another
        // (saturating packs of the raw values keep their signs), then OR-ed as bytes.
        let mut xs = x.chunks_exact(16);
        let mut cs = codes.chunks_exact_mut(16);
        for (xc, cc) in (&mut xs).zip(&mut cs) {
            let mut m = [0u8; 16];
            let mut sg = [0u8; 16];
            for (m, &r) in m.iter_mut().zip(xc) {
                *m = e4m3_mag_small(L::f32(r) / s) as u8;
            }
            for (g, &r) in sg.iter_mut().zip(xc) {
                *g = L::sign_byte(r);
            }
            for ((c, m), g) in cc.iter_mut().zip(m).zip(sg) {
                *c = m | (g & 0x80);
            }
        }
        for (c, &r) in cs.into_remainder().iter_mut().zip(xs.remainder()) {
            *c = e4m3_mag_small(L::f32(r) / s) as u8 | (L::sign_byte(r) & 0x80);
        }
    } else if amax.is_finite() {
        // Subnormal s: x/s may exceed 448 and saturate.
        for (c, &r) in codes.iter_mut().zip(x) {
            let v = L::f32(r);
            *c = (e4m3_mag(v / s) | ((v.to_bits() >> 24) & 0x80)) as u8;
        }
    } else {
        // s = inf: finite values give ±0, infinities inf/inf = NaN (sign from the input).
        for (c, &r) in codes.iter_mut().zip(x) {
            let v = L::f32_any(r);
            *c = (e4m3_mag(v / s) | ((v.to_bits() >> 24) & 0x80)) as u8;
        }
    }
}

/// Whether `T`'s in-memory bytes are the tail's stored bytes (the tail's dtype, little-endian),
/// so the tail is a plain copy.
fn tail_is_native<T: Element>(bf16: bool) -> bool {
    let dtype = if bf16 {
        ElementFormat::Bf16
    } else {
        ElementFormat::F32
    };
    cfg!(target_endian = "little") && T::FORMAT == dtype
}

/// The `d − dv` tail values, raw in the input dtype (bf16 or f32, little-endian).
fn write_tail<T: Element>(xt: &[T], bf16: bool, tail: &mut [u8]) {
    let native = tail_is_native::<T>(bf16);
    let raw = bytemuck::try_cast_slice::<T, u8>(xt)
        .ok()
        .filter(|r| native && r.len() == tail.len());
    if let Some(raw) = raw {
        tail.copy_from_slice(raw);
    } else if bf16 {
        for (b, &v) in tail.chunks_exact_mut(2).zip(xt) {
            if let Some(b) = b.first_chunk_mut::<2>() {
                *b = bf16::from_f32(v.to_f32()).to_le_bytes();
            }
        }
    } else {
        for (b, &v) in tail.chunks_exact_mut(4).zip(xt) {
            if let Some(b) = b.first_chunk_mut::<4>() {
                *b = v.to_f32().to_le_bytes();
            }
        }
    }
}

/// The f32 in the first four little-endian bytes of `b` (0 if there are fewer).
#[inline(always)]
fn f32_le(b: &[u8]) -> f32 {
    b.first_chunk::<4>().map_or(0.0, |b| f32::from_le_bytes(*b))
}

/// Dequantizes one head row (layout in the module docs) into `out` (`d = out.len()` values):
/// `e4m3_to_f32(code) * scale` for the first `dv` values, the tail widened to f32, then
/// `T::from_f32` (round to nearest even).
///
/// # Errors
///
/// [`Error::Config`] ([`InvalidFormat`](ConfigError::InvalidFormat)) if `tile == 0`, `dv == 0`, `dv % tile != 0` or `dv > out.len()`;
/// [`Error::LengthMismatch`] if `row.len()` is not the row size for `out.len()` values. On error
/// nothing is written.
pub fn dequantize_fp8_tile<T: Element>(
    row: &[u8],
    dv: usize,
    tile: usize,
    bf16: bool,
    out: &mut [T],
) -> Result<()> {
    let (codes_end, scales_end) = split_row(row.len(), out.len(), dv, tile, bf16)?;
    let (Some((oq, ot)), Some((codes, rest))) = (
        out.split_at_mut_checked(dv),
        row.split_at_checked(codes_end),
    ) else {
        return Err(Error::LengthMismatch);
    };
    let Some((scales, tail)) = rest.split_at_checked(scales_end - codes_end) else {
        return Err(Error::LengthMismatch);
    };
    let f32_out = if T::FORMAT == ElementFormat::F32 {
        bytemuck::try_cast_slice_mut::<T, f32>(oq).ok()
    } else {
        None
    };
    if let Some(o) = f32_out {
        for ((og, cg), sb) in o
            .chunks_exact_mut(tile)
            .zip(codes.chunks_exact(tile))
            .zip(scales.chunks_exact(4))
        {
            let s = f32_le(sb);
            for (o, &c) in og.iter_mut().zip(cg) {
                *o = e4m3_to_f32(c) * s;
            }
        }
    } else {
        let mut buf = [0f32; BUF];
        for ((og, cg), sb) in oq
            .chunks_exact_mut(tile)
            .zip(codes.chunks_exact(tile))
            .zip(scales.chunks_exact(4))
        {
            let s = f32_le(sb);
            for (oc, cc) in og.chunks_mut(BUF).zip(cg.chunks(BUF)) {
                for (b, &c) in buf.iter_mut().zip(cc) {
                    *b = e4m3_to_f32(c) * s;
                }
                store_f32(buf.get(..oc.len()).unwrap_or(&[]), oc);
            }
        }
    }
    let native = tail_is_native::<T>(bf16);
    let raw = bytemuck::try_cast_slice_mut::<T, u8>(ot)
        .ok()
        .filter(|r| native && r.len() == tail.len());
    if let Some(raw) = raw {
        raw.copy_from_slice(tail);
    } else if bf16 {
        for (o, b) in ot.iter_mut().zip(tail.chunks_exact(2)) {
            if let Some(b) = b.first_chunk::<2>() {
                *o = T::from_f32(bf16::from_le_bytes(*b).to_f32());
            }
        }
    } else {
        for (o, b) in ot.iter_mut().zip(tail.chunks_exact(4)) {
            *o = T::from_f32(f32_le(b));
        }
    }
    Ok(())
}

/// E4M3 codes, each times the tile's scale (K rows).
#[derive(Clone, Copy)]
pub(crate) struct E4m3Scaled(pub f32);

impl Decode<LANES> for E4m3Scaled {
    #[inline(always)]
    fn block(self, b: &[u8; LANES]) -> [f32; LANES] {
        let mut x = [0f32; LANES];
        for l in 0..LANES {
            x[l] = e4m3_to_f32(b[l]) * self.0;
        }
        x
    }

    #[inline(always)]
    fn one(self, bytes: &[u8], i: usize) -> f32 {
        e4m3_to_f32(bytes[i]) * self.0
    }
}

/// E4M3 codes (V rows fold the tile scale into the weights).
#[derive(Clone, Copy)]
pub(crate) struct E4m3s;

impl Decode<LANES> for E4m3s {
    #[inline(always)]
    fn block(self, b: &[u8; LANES]) -> [f32; LANES] {
        let mut x = [0f32; LANES];
        for l in 0..LANES {
            x[l] = e4m3_to_f32(b[l]);
        }
        x
    }

    #[inline(always)]
    fn one(self, bytes: &[u8], i: usize) -> f32 {
        e4m3_to_f32(bytes[i])
    }
}
