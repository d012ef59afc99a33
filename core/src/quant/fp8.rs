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
//! Deliberate difference from the reference: a tile whose scale is 0 (all zeros) gets codes 0,
//! where the reference writes NaN codes (0/0).

use half::bf16;

use super::q8::{BUF, Bf16Of, F16Bits, Load, ViaElement, store_f32};
use super::simd;
use crate::error::{Error, Result};
use crate::format::{Element, ElementFormat};

/// 2^-120: moves an f32 holding an e4m3 value to where its bits `>> 20` are the e4m3 code (the
/// e4m3 exponent bias is 7, f32's 127; e4m3 subnormals land exactly on f32 subnormals).
pub(super) const TWO_POW_M120: f32 = f32::from_bits((127 - 120) << 23);
/// 2^120, the inverse of [`TWO_POW_M120`].
const TWO_POW_120: f32 = f32::from_bits((127 + 120) << 23);
/// The smallest normal e4m3 value, 2^-6.
const MIN_NORMAL: f32 = 0.015_625;
/// The largest finite e4m3fn value.
const MAX: f32 = 448.0;

/// The e4m3fn code of `|q|` (0..=0x7F), round to nearest even, saturating: every finite
/// `|q| > 448` and inf give 0x7E, NaN gives 0x7F. Branch-free (vectorizes).
///
/// `m = 2^(max(exponent(v), -6) + 20)` has an f32 ulp equal to the e4m3 spacing at `v`, so
/// `(v + m) − m` is `v` rounded to nearest even on the e4m3 grid by the FPU itself (normal and
/// subnormal ranges alike); `· 2^-120` is then exact and its bits `>> 20` are the code.
#[inline(always)]
fn e4m3_mag(q: f32) -> u32 {
    let a = q.to_bits() & 0x7FFF_FFFF;
    let nan = (a > 0x7F80_0000) as u32;
    let v = f32::from_bits(a);
    // NaN compares false: clamped to 448 here, turned into 0x7F by `| nan`.
    let v = if v < MAX { v } else { MAX };
    let e = f32::from_bits(v.to_bits() & 0x7F80_0000);
    let e = if e > MIN_NORMAL { e } else { MIN_NORMAL };
    let m = f32::from_bits(e.to_bits() + (20 << 23));
    let r = (v + m) - m;
    ((r * TWO_POW_M120).to_bits() >> 20) | nan
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
    (r * TWO_POW_M120).to_bits() >> 20
}

/// `2^(-6 + 20)`: the magic of the e4m3 subnormal range (spacing 2^-9).
pub(super) const M_MIN: f32 = 16_384.0;

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
#[inline]
pub fn e4m3_to_f32(code: u8) -> f32 {
    let c = code as u32;
    let mag = f32::from_bits((c & 0x7F) << 20) * TWO_POW_120;
    let mag = if c & 0x7F == 0x7F { f32::NAN } else { mag };
    f32::from_bits(mag.to_bits() | ((c & 0x80) << 24))
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
        return Err(Error::InvalidFormat);
    };
    if row_len != bytes {
        return Err(Error::LengthMismatch);
    }
    Ok((dv, dv + 4 * (dv / tile)))
}

/// Quantizes one head row of `d = x.len()` values into `row`
/// ([`fp8_tile_row_bytes`]`(d, dv, tile, bf16)` bytes; layout in the module docs).
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
/// [`Error::InvalidFormat`] if `tile == 0`, `dv == 0`, `dv % tile != 0` or `dv > x.len()`;
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
            if !simd::fp8_f16(h, tile, codes, scales) {
                quantize_tiles::<F16Bits>(h, tile, false, codes, scales);
            }
        }
        (false, None) => {
            if !f32_row.is_some_and(|f| simd::fp8_f32(f, tile, codes, scales)) {
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
pub(super) fn quantize_tiles<L: Load>(
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
pub(super) fn tile_scale(amax: f32, bf16_scale: bool) -> f32 {
    if amax.is_nan() {
        return f32::NAN;
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
pub(super) fn tile_codes<L: Load>(x: &[L::R], amax: f32, s: f32, codes: &mut [u8]) {
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

/// The `d − dv` tail values, raw in the input dtype (bf16 or f32, little-endian).
fn write_tail<T: Element>(xt: &[T], bf16: bool, tail: &mut [u8]) {
    let native = cfg!(target_endian = "little")
        && (T::FORMAT
            == if bf16 {
                ElementFormat::Bf16
            } else {
                ElementFormat::F32
            });
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
/// [`Error::InvalidFormat`] if `tile == 0`, `dv == 0`, `dv % tile != 0` or `dv > out.len()`;
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
    let native = cfg!(target_endian = "little")
        && (T::FORMAT
            == if bf16 {
                ElementFormat::Bf16
            } else {
                ElementFormat::F32
            });
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The oracle: `float8`'s cast (through f64), except that NaN signs are taken from the bits
    /// (a float cast may change a NaN's sign; Miri does so at random).
    fn float8_code(x: f32) -> u8 {
        if x.is_nan() {
            0x7F | ((x.to_bits() >> 24) & 0x80) as u8
        } else {
            float8::F8E4M3::from_f32(x).to_bits()
        }
    }

    /// `2^e` for a normal exponent, exactly (`powi` is not exact under Miri).
    fn p2(e: i32) -> f32 {
        f32::from_bits(((127 + e) as u32) << 23)
    }
    use half::f16;

    fn quant<T: Element>(x: &[T], dv: usize, tile: usize, bf16: bool) -> Vec<u8> {
        let n = fp8_tile_row_bytes(x.len(), dv, tile, bf16).expect("row bytes");
        let mut row = vec![0xAAu8; n];
        quantize_fp8_tile(x, dv, tile, bf16, &mut row).expect("quantize");
        row
    }

    fn dequant(row: &[u8], d: usize, dv: usize, tile: usize, bf16: bool) -> Vec<f32> {
        let mut y = vec![0f32; d];
        dequantize_fp8_tile(row, dv, tile, bf16, &mut y).expect("dequantize");
        y
    }

    fn scale(row: &[u8], dv: usize, t: usize) -> f32 {
        let o = dv + 4 * t;
        f32::from_le_bytes([row[o], row[o + 1], row[o + 2], row[o + 3]])
    }

    #[test]
    fn e4m3_special_values() {
        let cases: [(f32, u8); 22] = [
            (0.0, 0x00),
            (-0.0, 0x80),
            (448.0, 0x7E),
            (449.0, 0x7E),
            (463.9, 0x7E),
            (464.0, 0x7E),
            (464.1, 0x7E),
            (1e6, 0x7E),
            (-1e6, 0xFE),
            (f32::INFINITY, 0x7E),
            (f32::NEG_INFINITY, 0xFE),
            (f32::NAN, 0x7F),
            (-f32::NAN, 0xFF),
            (1.0, 0x38),
            (-1.5, 0xBC),
            (p2(-6), 0x08),
            (p2(-9), 0x01),
            (p2(-10), 0x00), // tie between 0 and the smallest subnormal → even (0)
            (3.0 * p2(-10), 0x02), // tie between 1 and 2 → even (2)
            (15.0 * p2(-10), 0x08), // tie between 7·2^-9 and 2^-6 → even (8)
            (1.0625, 0x38),  // tie between 1 and 1.125 → even (1)
            (1.1875, 0x3A),  // tie between 1.125 and 1.25 → even (1.25)
        ];
        for (x, want) in cases {
            assert_eq!(e4m3_from_f32(x), want, "{x:e}");
            assert_eq!(e4m3_from_f32(x), float8_code(x), "{x:e}");
        }
        assert_eq!(e4m3_from_f32(f32::from_bits(1)), 0x00);
        assert_eq!(e4m3_from_f32(-f32::from_bits(1)), 0x80);
    }

    #[test]
    fn e4m3_decode_all_codes() {
        for c in 0..=255u8 {
            let v = e4m3_to_f32(c);
            let want = float8::F8E4M3::from_bits(c).to_f32();
            if c & 0x7F == 0x7F {
                assert!(v.is_nan() && v.is_sign_negative() == (c >= 0x80));
            } else {
                assert_eq!(v.to_bits(), want.to_bits(), "{c:#x}");
                assert_eq!(e4m3_from_f32(v), c, "round trip {c:#x}");
            }
        }
        assert_eq!(e4m3_to_f32(0x7E), 448.0);
        assert_eq!(e4m3_to_f32(0x01), p2(-9));
    }

    #[test]
    fn e4m3_matches_float8_on_a_sweep() {
        // Every 65537th bit pattern (all of them in the ignored exhaustive test).
        let step = if cfg!(miri) { 16_777_259 } else { 65_537 };
        for b in (0..=u32::MAX).step_by(step) {
            let x = f32::from_bits(b);
            assert_eq!(e4m3_from_f32(x), float8_code(x), "{b:#x}");
        }
    }

    #[test]
    #[ignore = "exhaustive over 2^32 inputs; run with --release -- --ignored"]
    fn exhaustive_e4m3() {
        for b in 0..=u32::MAX {
            let x = f32::from_bits(b);
            assert_eq!(e4m3_from_f32(x), float8_code(x), "{b:#x}");
            if b & 0x7FFF_FFFF < 0x43E8_0000 {
                assert_eq!(e4m3_mag_small(x), e4m3_mag(x), "{b:#x}");
            }
        }
    }

    #[test]
    fn e4m3_mag_small_matches_below_464() {
        let step = if cfg!(miri) { 1_000_003 } else { 4_093 };
        for b in (0..0x43E8_0000u32)
            .step_by(step)
            .chain([0x43E7_FFFF, 0x43E0_0000, 0x3C80_0000])
        {
            assert_eq!(
                e4m3_mag_small(f32::from_bits(b)),
                e4m3_mag(f32::from_bits(b)),
                "{b:#x}"
            );
        }
    }

    #[test]
    fn row_bytes() {
        assert_eq!(fp8_tile_row_bytes(300, 256, 64, false), Some(448));
        assert_eq!(fp8_tile_row_bytes(576, 512, 128, true), Some(656));
        assert_eq!(fp8_tile_row_bytes(40, 32, 16, false), Some(72));
        assert_eq!(fp8_tile_row_bytes(32, 32, 32, true), Some(36));
        assert_eq!(fp8_tile_row_bytes(32, 32, 0, false), None);
        assert_eq!(fp8_tile_row_bytes(32, 0, 16, false), None);
        assert_eq!(fp8_tile_row_bytes(32, 24, 16, false), None);
        assert_eq!(fp8_tile_row_bytes(16, 32, 16, false), None);
        assert_eq!(fp8_tile_row_bytes(usize::MAX, 1, 1, false), None);
        assert_eq!(
            fp8_tile_row_bytes(usize::MAX / 2, usize::MAX / 2, 1, false),
            None
        );
    }

    #[test]
    fn linspace_tile_scale_one() {
        // Tile 0 of the edge vector: linspace(-448, 448, 16) → scale 1, codes e4m3(x).
        let x: Vec<f32> = (0..16).map(|i| -448.0 + 896.0 * i as f32 / 15.0).collect();
        let row = quant(&x, 16, 16, false);
        assert_eq!(scale(&row, 16, 0), 1.0);
        for (i, &v) in x.iter().enumerate() {
            assert_eq!(row[i], e4m3_from_f32(v));
        }
        assert_eq!(row[0], 0xFE);
        assert_eq!(row[15], 0x7E);
    }

    #[test]
    fn zero_tile_scale_zero_codes_zero() {
        let mut x = vec![0.0f32; 40];
        x[1] = -0.0;
        for v in x.iter_mut().skip(16).take(16) {
            *v = 1.0;
        }
        let row = quant(&x, 32, 16, false);
        assert_eq!(&row[..16], &[0; 16]);
        assert_eq!(scale(&row, 32, 0).to_bits(), 0);
        assert_eq!(scale(&row, 32, 1), 1.0 / 448.0);
        let y = dequant(&row, 40, 32, 16, false);
        assert!(y.iter().all(|v| v.is_finite()));
        assert_eq!(&y[..16], &[0.0; 16]);
        // Underflowing scale: amax / 448 rounds to 0 → also codes 0.
        let tiny = [f32::from_bits(100), -f32::from_bits(3), 0.0, 0.0];
        let row = quant(&tiny, 4, 4, false);
        assert_eq!(&row[..4], &[0; 4]);
        assert_eq!(scale(&row, 4, 0), 0.0);
    }

    #[test]
    fn subnormal_codes_and_saturation() {
        // amax 3 → s = 3/448; 1e-5 / s ≈ 1.49e-3 → subnormal codes.
        let x = [3.0f32, 1e-5, -2e-5, 4e-5, 0.0, -3.0, 2.9999, 1.5];
        let row = quant(&x, 8, 8, false);
        let s = 3.0f32 / 448.0;
        assert_eq!(scale(&row, 8, 0), s);
        for i in 0..8 {
            assert_eq!(row[i], e4m3_from_f32(x[i] / s), "{i}");
        }
        assert!(row[1] > 0 && row[1] < 8, "{:#x}", row[1]);
        assert_eq!(row[0], 0x7E);
        assert_eq!(row[5], 0xFE);
        // A subnormal f32 scale: x / s can exceed 448 and saturates.
        let t = f32::from_bits(1_000);
        let x = [t, -t, t * 0.5, 0.0];
        let row = quant(&x, 4, 4, false);
        let s = t / 448.0;
        assert_eq!(scale(&row, 4, 0), s);
        for i in 0..4 {
            assert_eq!(row[i], e4m3_from_f32(x[i] / s));
        }
    }

    #[test]
    fn bf16_scale_rounding_and_tail() {
        let x: Vec<bf16> = (0..24)
            .map(|i| bf16::from_f32((i as f32 - 7.3) * 0.77))
            .collect();
        let row = quant(&x, 16, 8, true);
        assert_eq!(row.len(), 16 + 8 + 16);
        for t in 0..2 {
            let xt = &x[t * 8..t * 8 + 8];
            let amax = xt.iter().fold(0f32, |m, v| m.max(v.to_f32().abs()));
            let s = bf16::from_f32(amax / 448.0).to_f32();
            assert_eq!(scale(&row, 16, t), s);
            for (i, v) in xt.iter().enumerate() {
                assert_eq!(row[t * 8 + i], e4m3_from_f32(v.to_f32() / s));
            }
        }
        for (i, v) in x[16..].iter().enumerate() {
            assert_eq!(&row[24 + 2 * i..26 + 2 * i], &v.to_le_bytes());
        }
        // f32 and f16 callers with bf16 = true round to bf16 first.
        let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
        assert_eq!(quant(&xf, 16, 8, true), row);
        let xf2: Vec<f32> = xf.iter().map(|v| v + v * p2(-12)).collect();
        assert_eq!(quant(&xf2, 16, 8, true), row);
        let xh: Vec<f16> = x.iter().map(|v| f16::from_f32(v.to_f32())).collect();
        assert_eq!(quant(&xh, 16, 8, true), row);
    }

    #[test]
    fn f16_and_bf16_rows_match_f32() {
        let x: Vec<f32> = (0..40)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) * 0.31)
            .collect();
        let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        let xhf: Vec<f32> = xh.iter().map(|v| v.to_f32()).collect();
        assert_eq!(quant(&xh, 32, 16, false), quant(&xhf, 32, 16, false));
        let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
        let xbf: Vec<f32> = xb.iter().map(|v| v.to_f32()).collect();
        assert_eq!(quant(&xb, 32, 16, false), quant(&xbf, 32, 16, false));
        // Dequantize into every type: T::from_f32 of the f32 result.
        let row = quant(&x, 32, 16, false);
        let y = dequant(&row, 40, 32, 16, false);
        let mut yh = vec![f16::ZERO; 40];
        dequantize_fp8_tile(&row, 32, 16, false, &mut yh).expect("f16");
        let mut yb = vec![bf16::ZERO; 40];
        dequantize_fp8_tile(&row, 32, 16, false, &mut yb).expect("bf16");
        for i in 0..40 {
            assert_eq!(yh[i], f16::from_f32(y[i]));
            assert_eq!(yb[i], bf16::from_f32(y[i]));
        }
        assert_eq!(&y[32..], &x[32..]);
    }

    #[test]
    fn nan_and_inf_tiles() {
        let mut x = [1.0f32; 24];
        x[2] = f32::NAN;
        x[3] = -2.0;
        x[9] = f32::NEG_INFINITY;
        x[10] = -3.0;
        x[20] = f32::NAN; // tail: copied raw
        let row = quant(&x, 16, 8, false);
        assert!(scale(&row, 16, 0).is_nan());
        assert_eq!(&row[..4], &[0x7F, 0x7F, 0x7F, 0xFF]);
        assert_eq!(scale(&row, 16, 1), f32::INFINITY);
        assert_eq!(&row[8..11], &[0x00, 0xFF, 0x80]);
        let y = dequant(&row, 24, 16, 8, false);
        assert!(y[..16].iter().all(|v| v.is_nan()));
        assert!(y[20].is_nan());
        // bf16 mode: same rules.
        let row = quant(&x, 16, 8, true);
        assert!(scale(&row, 16, 0).is_nan());
        assert_eq!(&row[8..11], &[0x00, 0xFF, 0x80]);
    }

    #[test]
    fn errors_leave_outputs_untouched() {
        let x = [1.0f32; 40];
        let mut row = [0x55u8; 72];
        let e = |r: Result<()>| r.expect_err("must fail");
        assert_eq!(
            e(quantize_fp8_tile(&x, 32, 0, false, &mut row)),
            Error::InvalidFormat
        );
        assert_eq!(
            e(quantize_fp8_tile(&x, 0, 16, false, &mut row)),
            Error::InvalidFormat
        );
        assert_eq!(
            e(quantize_fp8_tile(&x, 24, 16, false, &mut row)),
            Error::InvalidFormat
        );
        assert_eq!(
            e(quantize_fp8_tile(&x[..16], 32, 16, false, &mut row)),
            Error::InvalidFormat
        );
        assert_eq!(
            e(quantize_fp8_tile(&x, 32, 16, false, &mut row[..71])),
            Error::LengthMismatch
        );
        assert_eq!(
            e(quantize_fp8_tile(&x, 32, 16, true, &mut row)),
            Error::LengthMismatch
        );
        assert_eq!(
            e(quantize_fp8_tile(&x[..39], 32, 16, false, &mut row)),
            Error::LengthMismatch
        );
        assert_eq!(row, [0x55; 72]);
        let mut y = [3f32; 40];
        assert_eq!(
            e(dequantize_fp8_tile(&row, 32, 0, false, &mut y)),
            Error::InvalidFormat
        );
        assert_eq!(
            e(dequantize_fp8_tile(&row, 48, 16, false, &mut y)),
            Error::InvalidFormat
        );
        assert_eq!(
            e(dequantize_fp8_tile(&row[..70], 32, 16, false, &mut y)),
            Error::LengthMismatch
        );
        assert_eq!(
            e(dequantize_fp8_tile(&row, 32, 16, false, &mut y[..39])),
            Error::LengthMismatch
        );
        assert_eq!(
            e(dequantize_fp8_tile(&row, 32, 16, true, &mut y)),
            Error::LengthMismatch
        );
        assert_eq!(y, [3.0; 40]);
    }

    #[cfg(not(miri))]
    mod props {
        use super::*;
        use proptest::prelude::*;

        fn value() -> impl Strategy<Value = f32> {
            prop_oneof![
                8 => -1e3f32..1e3f32,
                2 => (-35i32..35, -1f32..1f32).prop_map(|(e, m)| m * 10f32.powi(e)),
                1 => Just(0.0f32),
                1 => Just(-0.0f32),
            ]
        }

        /// (values, dv, tile) with d = dv + tail.
        fn row() -> impl Strategy<Value = (Vec<f32>, usize, usize)> {
            (
                prop_oneof![Just(1usize), Just(4), Just(16), Just(64)],
                1usize..4,
                0usize..6,
            )
                .prop_flat_map(|(tile, nt, tail)| {
                    (
                        prop::collection::vec(value(), tile * nt + tail),
                        Just(tile * nt),
                        Just(tile),
                    )
                })
        }

        /// Scalar reference (the formula as written, per element).
        fn reference(x: &[f32], dv: usize, tile: usize) -> Vec<u8> {
            let mut codes = Vec::new();
            let mut scales = Vec::new();
            for xt in x[..dv].chunks(tile) {
                let amax = xt.iter().fold(0f32, |m, v| m.max(v.abs()));
                let s = amax / 448.0;
                codes.extend(
                    xt.iter()
                        .map(|&v| if s == 0.0 { 0 } else { float8_code(v / s) }),
                );
                scales.extend_from_slice(&s.to_le_bytes());
            }
            codes.extend(scales);
            codes.extend(x[dv..].iter().flat_map(|v| v.to_le_bytes()));
            codes
        }

        proptest! {
            #[test]
            fn matches_reference((x, dv, tile) in row()) {
                prop_assert_eq!(quant(&x, dv, tile, false), reference(&x, dv, tile));
            }

            /// Round-trip bound. For a tile with a normal scale `s` (s = amax/448 in f32, or that
            /// rounded to bf16), `q = x / s` is within 448·(1 + 2^-8) of 0, and e4m3 rounding to
            /// nearest has relative error ≤ 2^-4 for normal codes and absolute error ≤ 2^-10 for
            /// subnormal ones (spacing 2^-9). Hence |y − x| ≤ s·max(2^-4·|x/s|, 2^-10) + f32
            /// rounding, i.e. `|y − x| ≤ 2^-4·|x| + 2^-10·s + 2^-22·amax`. Saturation cannot add
            /// error beyond that: |x/s| ≤ 448 for an f32 scale, and ≤ 449.75 (rounds to 448,
            /// error ≤ 1.75·s ≤ 2^-4·|x|) for a bf16 scale.
            #[test]
            fn roundtrip_error_bound((x, dv, tile) in row(), bf16 in any::<bool>()) {
                let x: Vec<f32> = if bf16 { x.iter().map(|&v| bf16::from_f32(v).to_f32()).collect() } else { x };
                let row = quant(&x, dv, tile, bf16);
                let y = dequant(&row, x.len(), dv, tile, bf16);
                for (t, (xt, yt)) in x[..dv].chunks(tile).zip(y.chunks(tile)).enumerate() {
                    let s = scale(&row, dv, t);
                    let amax = xt.iter().fold(0f32, |m, v| m.max(v.abs()));
                    prop_assert!(s.is_finite());
                    for (&xv, &yv) in xt.iter().zip(yt) {
                        prop_assert!(yv.is_finite());
                        let err = (yv - xv).abs();
                        if s >= f32::MIN_POSITIVE {
                            let bound = p2(-4) * xv.abs() + p2(-10) * s + p2(-22) * amax;
                            prop_assert!(err <= bound, "x {} y {} s {} bound {}", xv, yv, s, bound);
                        } else {
                            // Zero or subnormal scale (amax < 448·2^-126): codes saturate at
                            // most, so |y| ≤ 448·s ≤ amax + 448·2^-150 and signs agree.
                            prop_assert!(err <= amax + f32::from_bits(1 << 9), "x {} y {} s {}", xv, yv, s);
                        }
                    }
                }
                prop_assert_eq!(&y[dv..], &x[dv..]);
            }

            /// Requantizing a dequantized row reproduces every code of each tile whose old and
            /// new scales lie in [2^-100, 2^100]. Proof: y = e·s with e the code's e4m3 value is
            /// rounded at most twice (the f32 product, then to bf16 in bf16 mode), and s' differs
            /// from s by at most one f32 ulp (f32 mode: amax' = fl(448·s), s' = fl(amax'/448)) or
            /// one bf16 ulp (bf16 mode); so y/s' = e·(1 ± 2^-6) at worst, while the distance from e
            /// to the next rounding boundary is at least e·2^-4/1.875 (normal codes) or 2^-10
            /// (subnormal codes, and then |e·2^-6| ≤ 2^-12), and values above 448 saturate back to
            /// 448. The scale itself is reproduced to within that ulp (exactly when `448·s` is
            /// exact, e.g. s a power of two: see `requantize_power_of_two_scale`).
            #[test]
            fn requantize_reproduces_codes((x, dv, tile) in row(), bf16 in any::<bool>()) {
                let x: Vec<f32> = if bf16 { x.iter().map(|&v| bf16::from_f32(v).to_f32()).collect() } else { x };
                let row = quant(&x, dv, tile, bf16);
                let y = dequant(&row, x.len(), dv, tile, bf16);
                let row2 = quant(&y, dv, tile, bf16);
                let ulp = if bf16 { p2(-7) } else { p2(-23) };
                for t in 0..dv / tile {
                    let (s, s2) = (scale(&row, dv, t), scale(&row2, dv, t));
                    let range = p2(-100)..=p2(100);
                    if range.contains(&s) && range.contains(&s2) {
                        prop_assert_eq!(&row2[t * tile..(t + 1) * tile], &row[t * tile..(t + 1) * tile]);
                        prop_assert!((s2 - s).abs() <= s * ulp, "s {} s2 {}", s, s2);
                    }
                }
            }

            /// With a power-of-two scale (448·s exact) the whole row is a fixed point.
            #[test]
            fn requantize_power_of_two_scale(
                codes in prop::collection::vec(any::<u8>().prop_filter("finite", |c| c & 0x7F != 0x7F), 1..40),
                exp in -100i32..100,
                tail in prop::collection::vec(-1e3f32..1e3, 0..4),
                bf16 in any::<bool>(),
            ) {
                let s = p2(exp);
                let mut x: Vec<f32> = codes.iter().map(|&c| e4m3_to_f32(c) * s).collect();
                x[0] = 448.0 * s; // amax = 448·s
                let dv = x.len();
                x.extend(tail.iter().map(|&v| if bf16 { bf16::from_f32(v).to_f32() } else { v }));
                let row = quant(&x, dv, dv, bf16);
                prop_assert_eq!(scale(&row, dv, 0), s);
                let y = dequant(&row, x.len(), dv, dv, bf16);
                prop_assert_eq!(&y, &x);
                prop_assert_eq!(quant(&y, dv, dv, bf16), row);
            }

            /// Finite input never yields NaN codes (0x7F/0xFF) or non-finite scales, any type.
            #[test]
            fn finite_input_no_nan_codes((x, dv, tile) in row(), bf16 in any::<bool>()) {
                let row = quant(&x, dv, tile, bf16);
                prop_assert!(row[..dv].iter().all(|&c| c & 0x7F != 0x7F));
                for t in 0..dv / tile {
                    prop_assert!(scale(&row, dv, t).is_finite());
                }
                let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v.clamp(-65504.0, 65504.0))).collect();
                let rowh = quant(&xh, dv, tile, bf16);
                prop_assert!(rowh[..dv].iter().all(|&c| c & 0x7F != 0x7F));
            }
        }
    }
}
