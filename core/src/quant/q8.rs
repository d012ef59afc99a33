//! Int8 groups with ggml's Q8_0 math, for any group size `g ≥ 1` dividing the row.
//!
//! Per group of `g` values: `amax = max|x|` (f32), `d = amax / 127` (f32),
//! `id = if d == 0 { 0 } else { 1 / d }`, `q = round_half_away_from_zero(x * id)` saturated to
//! `i8`, stored scale `f16(d)` (round to nearest even). Dequantization is `q as f32 * f32(scale)`.
//! With `g = 32` this is bit for bit ggml's `quantize_row_q8_0_ref` / gguf-py's `Q8_0`.
//!
//! Also home of the element loaders shared with the FP8 kernels ([`Load`], [`store_f32`]).
//!
//! Speed: the loops are written for LLVM's vectorizers (no per-element branches, no float→int
//! `as` casts on x86, where Rust's saturating casts stay scalar), and the group loop is software
//! pipelined so that the two divisions per group overlap with the next group's `max|x|`.

use core::marker::PhantomData;

use half::{bf16, f16};

use super::simd;
use crate::error::{Error, Result};
use crate::format::{Element, ElementFormat};

/// `0.5 - 2^-25`, the largest f32 below one half.
///
/// For every f32 `v`, `trunc(v + copysign(ROUND_BIAS, v))` equals `v.round()` (half away from
/// zero): a half-integer `n + 0.5` gives `n + 1 - 2^-25`, which rounds up to `n + 1` in f32, while
/// anything below it stays below `n + 1` (the classic `v + 0.5` fails on `0.49999997`). Checked on
/// all 2^32 inputs (the ignored `exhaustive_round_q8` test).
pub(super) const ROUND_BIAS: f32 = 0.499_999_97;

/// `round_half_away_from_zero(v)` saturated to `i8` (NaN → 0): exactly `v.round() as i8`.
#[inline(always)]
pub(super) fn round_q8(v: f32) -> i8 {
    let bias = f32::from_bits(ROUND_BIAS.to_bits() | (v.to_bits() & 0x8000_0000));
    (v + bias) as i8
}

/// 2^23: for `0 ≤ a < 2^23`, `a + M23` rounds `a` to an integer (nearest even) whose value is
/// the low mantissa bits of the sum.
#[cfg(any(test, target_arch = "x86", target_arch = "x86_64"))]
const M23: f32 = 8_388_608.0;

/// [`round_q8`] of `0 ≤ a < 127.5` (as a `u32` whose low byte is the code), without a
/// float→int conversion: `n = RNE(a)` is the low byte of `a + 2^23`, plus 1 on an exact tie
/// (`a − n == 0.5`; the subtraction is exact by Sterbenz's lemma). Equal to [`round_q8`] on
/// that range (all 2^31 values in the ignored `exhaustive_round_mag` test).
#[cfg(any(test, target_arch = "x86", target_arch = "x86_64"))]
#[inline(always)]
fn round_mag_magic(a: f32) -> u32 {
    let t = a + M23;
    let tie = (a - (t - M23) == 0.5) as u32;
    t.to_bits().wrapping_add(tie)
}

/// [`round_q8`] of `0 ≤ a < 127.5` through the cast (`trunc(a + ROUND_BIAS)`).
#[cfg(any(test, not(any(target_arch = "x86", target_arch = "x86_64"))))]
#[inline(always)]
fn round_mag_cast(a: f32) -> u32 {
    (a + ROUND_BIAS) as u32
}

/// `round_half_away_from_zero(a)` for `0 ≤ a < 127.5`, in the low byte. On x86 the magic-number
/// form, which vectorizes (LLVM keeps Rust's saturating float→int casts scalar there);
/// elsewhere the cast, which is native (ARM's FCVTZU/VCVT saturate).
#[inline(always)]
fn round_mag(a: f32) -> u32 {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        round_mag_magic(a)
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        round_mag_cast(a)
    }
}

/// Codes from magnitudes and signs, sixteen at a time (one 16-lane tree for LLVM's SLP
/// vectorizer): `|code| = round(mag(x) · pre · idp)` ([`round_mag`]), then the sign applied to
/// the bytes. `pre` is 1, or a power of two that makes `mag(x) · pre` exact.
#[inline(always)]
fn codes16_sm<L: Load>(x: &[L::R], codes: &mut [i8], idp: f32, pre: f32) {
    let code = |r| {
        let m = round_mag(L::mag_prescaled(r) * pre * idp) as u8;
        let s = L::neg_mask(r);
        ((m ^ s).wrapping_sub(s)) as i8
    };
    let mut xs = x.chunks_exact(16);
    let mut cs = codes.chunks_exact_mut(16);
    for (xc, cc) in (&mut xs).zip(&mut cs) {
        for (c, &r) in cc.iter_mut().zip(xc) {
            *c = code(r);
        }
    }
    for (c, &r) in cs.into_remainder().iter_mut().zip(xs.remainder()) {
        *c = code(r);
    }
}

/// How a kernel reads one element type: a sort key for `max|x|`, and the exact f32 value.
///
/// Kernels are generic over this so that f16 rows use a branch-free bit conversion that LLVM
/// vectorizes (`half`'s scalar `to_f32` is an out-of-line call per element on x86 hosts).
pub(super) trait Load {
    /// The stored element.
    type R: Copy;
    /// Totally ordered key of `|x|`: for non-NaN values, `key(a) < key(b)` iff `|a| < |b|`; every
    /// NaN sorts above +inf, so a NaN anywhere makes the maximum a NaN.
    type K: Copy + Ord;
    /// The key of `0.0`.
    const K0: Self::K;
    /// `1 / PRESCALE` where [`Load::f32_prescaled`] returns `x · PRESCALE` (a power of two).
    const INV_PRESCALE: f32 = 1.0;
    /// The key of `|r|`.
    fn key(r: Self::R) -> Self::K;
    /// The value `|x|` of a key, exact (inf and NaN included).
    fn key_f32(k: Self::K) -> f32;
    /// The exact f32 value of a **finite** element (inf/NaN may give any value).
    fn f32(r: Self::R) -> f32;
    /// The exact f32 value of any element (NaN stays NaN with its sign).
    fn f32_any(r: Self::R) -> f32;
    /// `x · PRESCALE` for a finite element, exact (a cheaper widening for f16).
    #[inline(always)]
    fn f32_prescaled(r: Self::R) -> f32 {
        Self::f32(r)
    }
    /// `|x| · PRESCALE` for a finite element, exact.
    fn mag_prescaled(r: Self::R) -> f32;
    /// 0xFF if the sign bit is set, else 0.
    fn neg_mask(r: Self::R) -> u8;
    /// A byte whose top bit is the sign bit (the rest is unspecified). Written as a signed
    /// saturating narrowing, which LLVM turns into pack instructions on whole vectors.
    fn sign_byte(r: Self::R) -> u8;
    /// The key of `max|x|` ([`Load::K0`] for an empty slice). (A plain fold: LLVM vectorizes
    /// integer max reductions well, and does worse with hand-made lanes.)
    #[inline(always)]
    fn amax_key(x: &[Self::R]) -> Self::K {
        x.iter().fold(Self::K0, |m, &r| m.max(Self::key(r)))
    }
    /// `max|x|` as f32, exact: +inf if there is an infinity and no NaN, NaN if there is a NaN,
    /// 0 for an empty slice.
    #[inline(always)]
    fn amax(x: &[Self::R]) -> f32 {
        Self::key_f32(Self::amax_key(x))
    }
}

/// Any [`Element`] through its own `to_f32` (ideal for f32 and bf16).
pub(super) struct ViaElement<T>(PhantomData<T>);

/// See [`ViaElement`]'s key.
const KEY_BIAS: i32 = 1 << 30;

impl<T: Element> Load for ViaElement<T> {
    type R = T;
    type K = i32;
    const K0: i32 = -KEY_BIAS;
    /// `|x|`'s bits minus 2^30: the same order, but LLVM cannot prove the keys non-negative and
    /// keeps a signed max, which SSE2 does in fewer instructions than an unsigned one.
    #[inline(always)]
    fn key(r: T) -> i32 {
        ((r.to_f32().to_bits() & 0x7FFF_FFFF) as i32).wrapping_sub(KEY_BIAS)
    }
    #[inline(always)]
    fn key_f32(k: i32) -> f32 {
        f32::from_bits(k.wrapping_add(KEY_BIAS) as u32)
    }
    #[inline(always)]
    fn f32(r: T) -> f32 {
        r.to_f32()
    }
    #[inline(always)]
    fn f32_any(r: T) -> f32 {
        r.to_f32()
    }
    #[inline(always)]
    fn mag_prescaled(r: T) -> f32 {
        f32::from_bits(r.to_f32().to_bits() & 0x7FFF_FFFF)
    }
    #[inline(always)]
    fn neg_mask(r: T) -> u8 {
        ((r.to_f32().to_bits() as i32) >> 31) as u8
    }
    #[inline(always)]
    fn sign_byte(r: T) -> u8 {
        (r.to_f32().to_bits() as i32).clamp(-128, 127) as i8 as u8
    }
}

/// f16 through bit operations: `max|x|` on the 15-bit magnitudes and a vectorizable widening.
pub(super) struct F16Bits;

/// See [`F16Bits`]'s key.
const F16_KEY_BIAS: i16 = 1 << 14;

/// 2^112: rebiases an f16 exponent (bias 15) placed in an f32 (bias 127).
const TWO_POW_112: f32 = f32::from_bits((127 + 112) << 23);

impl Load for F16Bits {
    type R = f16;
    type K = i16;
    const K0: i16 = -F16_KEY_BIAS;
    const INV_PRESCALE: f32 = TWO_POW_112;
    /// The 15-bit magnitude minus 2^14 (signed, for the same reason as [`KEY_BIAS`]).
    #[inline(always)]
    fn key(r: f16) -> i16 {
        ((r.to_bits() & 0x7FFF) as i16) - F16_KEY_BIAS
    }
    /// Branch-free: finite keys through the exact widening, 0x7C00 and above to inf or a quiet
    /// NaN.
    #[inline(always)]
    fn key_f32(k: i16) -> f32 {
        let k = (k + F16_KEY_BIAS) as u32;
        let finite = (f32::from_bits(k << 13) * TWO_POW_112).to_bits();
        let special = (k << 13) | select(k > 0x7C00, 0x7FC0_0000, 0x7F80_0000);
        f32::from_bits(select(k >= 0x7C00, special, finite))
    }
    #[inline(always)]
    fn f32(r: f16) -> f32 {
        Self::f32_prescaled(r) * TWO_POW_112
    }
    #[inline(always)]
    fn f32_any(r: f16) -> f32 {
        r.to_f32()
    }
    /// The f16 bits sign-extended and shifted so that bit 31 is the sign and bits 13..28 the
    /// exponent and mantissa: the f32 `x · 2^-112`, exact for normal and subnormal f16.
    #[inline(always)]
    fn f32_prescaled(r: f16) -> f32 {
        let wide = (r.to_bits() as i16 as i32 as u32) << 13;
        f32::from_bits(wide & 0x8FFF_E000)
    }
    #[inline(always)]
    fn mag_prescaled(r: f16) -> f32 {
        f32::from_bits(((r.to_bits() & 0x7FFF) as u32) << 13)
    }
    #[inline(always)]
    fn neg_mask(r: f16) -> u8 {
        ((r.to_bits() as i16) >> 15) as u8
    }
    #[inline(always)]
    fn sign_byte(r: f16) -> u8 {
        (r.to_bits() as i16).clamp(-128, 127) as i8 as u8
    }
}

/// Values rounded to bf16 first (FP8 tiles of bf16 "input dtype" from f32 or f16 callers).
pub(super) struct Bf16Of<L>(PhantomData<L>);

impl<L: Load> Load for Bf16Of<L> {
    type R = L::R;
    type K = i32;
    const K0: i32 = 0;
    #[inline(always)]
    fn key(r: L::R) -> i32 {
        (Self::f32_any(r).to_bits() & 0x7FFF_FFFF) as i32
    }
    #[inline(always)]
    fn key_f32(k: i32) -> f32 {
        f32::from_bits(k as u32)
    }
    #[inline(always)]
    fn f32(r: L::R) -> f32 {
        bf16::from_f32(L::f32(r)).to_f32()
    }
    #[inline(always)]
    fn f32_any(r: L::R) -> f32 {
        bf16::from_f32(L::f32_any(r)).to_f32()
    }
    #[inline(always)]
    fn mag_prescaled(r: L::R) -> f32 {
        f32::from_bits(Self::f32(r).to_bits() & 0x7FFF_FFFF)
    }
    /// Rounding to bf16 keeps the sign (NaN payloads aside, which the fast paths never see).
    #[inline(always)]
    fn neg_mask(r: L::R) -> u8 {
        L::neg_mask(r)
    }
    #[inline(always)]
    fn sign_byte(r: L::R) -> u8 {
        L::sign_byte(r)
    }
}

/// Writes `src` into `dst` (same length) with `T::from_f32` semantics (round to nearest even).
/// f16 goes through `half`'s slice conversion (F16C on x86 hosts with `std`).
pub(super) fn store_f32<T: Element>(src: &[f32], dst: &mut [T]) {
    use half::slice::HalfFloatSliceExt;
    match T::FORMAT {
        ElementFormat::F32 => {
            if let Ok(d) = bytemuck::try_cast_slice_mut::<T, f32>(dst) {
                if d.len() == src.len() {
                    d.copy_from_slice(src);
                }
                return;
            }
        }
        ElementFormat::F16 => {
            if let Ok(d) = bytemuck::try_cast_slice_mut::<T, f16>(dst) {
                if d.len() == src.len() {
                    d.convert_from_f32_slice(src);
                }
                return;
            }
        }
        _ => {}
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = T::from_f32(s);
    }
}

/// Stack buffer length (f32 values) for conversions to f16/bf16 outputs.
pub(super) const BUF: usize = 64;

/// Quantizes `x` in groups of `group` values into `codes` (one per value) and `scales` (one per
/// group), with ggml Q8_0 math (see the module docs).
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
/// [`Error::InvalidFormat`] if `group == 0`; [`Error::LengthMismatch`] if `group` does not divide
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
    check_q8(x.len(), group, codes.len(), scales.len())?;
    if T::FORMAT == ElementFormat::F16 {
        if let Ok(h) = bytemuck::try_cast_slice::<T, f16>(x) {
            if !simd::q8_f16(h, group, codes, scales) {
                quantize_groups::<F16Bits>(h, group, codes, scales);
            }
            return Ok(());
        }
    }
    if T::FORMAT == ElementFormat::F32 {
        if let Ok(f) = bytemuck::try_cast_slice::<T, f32>(x) {
            if simd::q8_f32(f, group, codes, scales) {
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
/// [`Error::InvalidFormat`] if `group == 0`; [`Error::LengthMismatch`] if `group` does not divide
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
        return Err(Error::InvalidFormat);
    }
    if n % group != 0 || codes != n || scales != n / group {
        return Err(Error::LengthMismatch);
    }
    Ok(())
}

/// Groups per block: their `max|x|`, scales and inverse scales are computed together (vectorized
/// across groups), then the codes group by group.
pub(super) const NB: usize = 16;

/// The scale math of a block of [`NB`] groups, from their `max|x|` keys (unused lanes hold
/// [`Load::K0`]).
pub(super) struct BlockScales {
    /// `max|x|` per group (f32, exact).
    pub amax: [f32; NB],
    /// `1 / d`, or 0 when `d == 0`.
    pub ids: [f32; NB],
    /// Whether [`quantize_codes_fast`] applies (`d` zero or normal, `max|x|` finite).
    pub fast: [bool; NB],
    /// The stored scales' f16 bits.
    pub bits: [u16; NB],
}

/// [`BlockScales`] of the keys, in fixed-size lanes so that the math vectorizes across groups.
#[inline(always)]
pub(super) fn block_scales<L: Load>(keys: &[L::K; NB]) -> BlockScales {
    let mut b = BlockScales {
        amax: [0f32; NB],
        ids: [0f32; NB],
        fast: [false; NB],
        bits: [0u16; NB],
    };
    for (i, &k) in keys.iter().enumerate() {
        let a = L::key_f32(k);
        let d = a / 127.0;
        b.amax[i] = a;
        b.ids[i] = f32::from_bits(select(d == 0.0, 0, (1.0 / d).to_bits()));
        // d normal (or 0) and finite: the vectorized codes apply.
        b.fast[i] = (d == 0.0) | ((d >= f32::MIN_POSITIVE) & (a <= f32::MAX));
        // A NaN scale is the canonical NaN (no payload from the input).
        b.bits[i] = f16_bits_rne(f32::from_bits(select(
            a.is_nan(),
            f32::NAN.to_bits(),
            d.to_bits(),
        )));
    }
    b
}

/// The group loop, in blocks of [`NB`] groups. (Not specialized on constant group sizes: fully
/// unrolled groups leave the `max|x|` reductions to the SLP vectorizer, which does worse.)
pub(super) fn quantize_groups<L: Load>(x: &[L::R], g: usize, codes: &mut [i8], scales: &mut [f16]) {
    for ((xb, cb), sb) in x
        .chunks(NB * g)
        .zip(codes.chunks_mut(NB * g))
        .zip(scales.chunks_mut(NB))
    {
        let mut keys = [L::K0; NB];
        for (k, xg) in keys.iter_mut().zip(xb.chunks_exact(g)) {
            *k = L::amax_key(xg);
        }
        let b = block_scales::<L>(&keys);
        for (s, &bits) in sb.iter_mut().zip(&b.bits) {
            *s = f16::from_bits(bits);
        }
        for (((xg, cg), &a), (&id, &f)) in xb
            .chunks_exact(g)
            .zip(cb.chunks_exact_mut(g))
            .zip(&b.amax)
            .zip(b.ids.iter().zip(&b.fast))
        {
            if f {
                quantize_codes_fast::<L>(xg, id, cg);
            } else {
                quantize_codes_slow::<L>(xg, a, id, cg);
            }
        }
    }
}

/// `if c { a } else { b }` on bits, as masks (so that LLVM keeps it branch-free and vectorizes).
#[inline(always)]
fn select(c: bool, a: u32, b: u32) -> u32 {
    let m = (c as u32).wrapping_neg();
    (a & m) | (b & !m)
}

/// `f16::from_f32(v).to_bits()` (round to nearest even; overflow to inf; a NaN becomes the
/// canonical quiet NaN with its sign), inline and branch-free (it vectorizes across groups):
/// `half`'s conversion is an out-of-line call on x86 hosts. The normal range rounds on the bits;
/// the subnormal range lets the FPU round (adding 0.5 puts the f16 subnormal spacing 2^-24 at the
/// f32 ulp). Equal to `half` on every non-NaN f32 (the ignored `exhaustive_f16_bits_rne` test).
#[inline(always)]
fn f16_bits_rne(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = (x >> 16) & 0x8000;
    let a = x & 0x7FFF_FFFF;
    // ≥ 65536 (or inf/NaN): everything from 65520 up rounds to inf.
    let big = select(a > 0x7F80_0000, 0x7E00, 0x7C00);
    // Below 2^-14: f16 subnormal or zero.
    let sub = (f32::from_bits(a) + 0.5)
        .to_bits()
        .wrapping_sub(0x3F00_0000);
    let odd = (a >> 13) & 1;
    let normal = a.wrapping_sub(112 << 23).wrapping_add(0xFFF + odd) >> 13;
    let o = select(a >= 0x4780_0000, big, select(a < 0x3880_0000, sub, normal));
    (o | sign) as u16
}

/// The codes of a group whose `d = max|x| / 127` is 0 or a normal f32 and `max|x|` finite:
/// `|x·id| ≤ max|x|·id ≤ 127·(1 + 2^-22) < 127.5` for every (finite) x.
#[inline(always)]
pub(super) fn quantize_codes_fast<L: Load>(x: &[L::R], id: f32, codes: &mut [i8]) {
    let idp = id * L::INV_PRESCALE;
    if idp <= f32::MAX {
        // x·id = (x·PRESCALE)·(id/PRESCALE) exactly (powers of two), so the same rounding.
        codes16_sm::<L>(x, codes, idp, 1.0);
    } else {
        // id/PRESCALE overflows: undo the prescale first (exact), then x·id.
        codes16_sm::<L>(x, codes, id, L::INV_PRESCALE);
    }
}

/// The codes of a group that [`quantize_codes_fast`] does not take: non-finite `max|x|`, or
/// `d` subnormal (`max|x| < 127·2^-126`: `1/d` is imprecise or inf, codes may saturate).
#[inline(never)]
pub(super) fn quantize_codes_slow<L: Load>(x: &[L::R], amax: f32, id: f32, codes: &mut [i8]) {
    if !amax.is_finite() {
        // inf: d = inf, id = 0, every x * 0 is 0 or NaN; NaN: d and id are NaN. Codes 0 either way.
        codes.fill(0);
    } else {
        for (c, &r) in codes.iter_mut().zip(x) {
            *c = round_q8(L::f32(r) * id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `2^e` for a normal exponent, exactly (`powi` is not exact under Miri).
    fn p2(e: i32) -> f32 {
        f32::from_bits(((127 + e) as u32) << 23)
    }

    fn q8<T: Element>(x: &[T], g: usize) -> (Vec<i8>, Vec<f16>) {
        let mut q = vec![0i8; x.len()];
        let mut s = vec![f16::ZERO; x.len() / g];
        quantize_q8(x, g, &mut q, &mut s).expect("quantize");
        (q, s)
    }

    fn dq(q: &[i8], s: &[f16], g: usize) -> Vec<f32> {
        let mut y = vec![0f32; q.len()];
        dequantize_q8(q, s, g, &mut y).expect("dequantize");
        y
    }

    /// Scalar reference: the formula exactly as ggml writes it (`roundf`, per element).
    fn reference(x: &[f32], g: usize) -> (Vec<i8>, Vec<f16>) {
        let mut q = Vec::new();
        let mut s = Vec::new();
        for xg in x.chunks(g) {
            let amax = xg
                .iter()
                .fold(0f32, |m, v| if v.abs() > m { v.abs() } else { m });
            let amax = if xg.iter().any(|v| v.is_nan()) {
                f32::NAN
            } else {
                amax
            };
            let d = amax / 127.0;
            let id = if d == 0.0 { 0.0 } else { 1.0 / d };
            q.extend(xg.iter().map(|&v| (v * id).round() as i8));
            s.push(if d.is_nan() {
                f16::NAN
            } else {
                f16::from_f32(d)
            });
        }
        (q, s)
    }

    #[test]
    fn round_q8_ties_and_edges() {
        let cases = [
            (0.0f32, 0i8),
            (-0.0, 0),
            (0.5, 1),
            (-0.5, -1),
            (1.5, 2),
            (2.5, 3),
            (-2.5, -3),
            (0.499_999_97, 0),
            (-0.499_999_97, 0),
            (126.5, 127),
            (127.49, 127),
            (127.5, 127),
            (-127.5, -128),
            (1e30, 127),
            (-1e30, -128),
            (f32::INFINITY, 127),
            (f32::NEG_INFINITY, -128),
            (f32::NAN, 0),
            (8_388_609.0, 127),
        ];
        for (v, want) in cases {
            assert_eq!(round_q8(v), want, "{v}");
        }
    }

    #[test]
    fn simple_group() {
        let x = [0.5f32, -1.0, 0.25, 1.27];
        let (q, s) = q8(&x, 4);
        assert_eq!(q, [50, -100, 25, 127]);
        assert_eq!(s[0], f16::from_f32(1.27 / 127.0));
    }

    #[test]
    fn zeros_and_negative_zero() {
        let x = [0.0f32, -0.0, 0.0, -0.0];
        let (q, s) = q8(&x, 2);
        assert_eq!(q, [0; 4]);
        assert_eq!(s.iter().map(|s| s.to_bits()).collect::<Vec<_>>(), [0, 0]);
        let y = dq(&q, &s, 2);
        assert!(y.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn ties_after_scaling() {
        // amax 127 → d = 1, id = 1: x * id is x exactly.
        let x = [127.0f32, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5];
        let (q, s) = q8(&x, 8);
        assert_eq!(q, [127, 1, -1, 2, -2, 3, -3, 127]);
        assert_eq!(s[0], f16::ONE);
    }

    #[test]
    fn f16_scale_underflow_keeps_codes() {
        // d = 1e-9 is below f16's smallest subnormal (~6e-8): stored scale 0, codes from f32 d.
        let x = [127e-9f32, -63.5e-9, 1e-9, 0.0];
        let (q, s) = q8(&x, 4);
        assert_eq!(s[0].to_bits(), 0);
        assert_eq!(q, reference(&x, 4).0);
        assert_eq!(q[0], 127);
        assert_eq!(q[1], -64);
        assert_eq!(dq(&q, &s, 4), [0.0; 4]);
    }

    #[test]
    fn f16_scale_overflow_is_inf() {
        let x = [1e8f32, -5e7, 1.0, 0.0];
        let (q, s) = q8(&x, 4);
        assert_eq!(s[0], f16::INFINITY);
        assert_eq!(q, [127, -64, 0, 0]);
        let y = dq(&q, &s, 4);
        assert_eq!(y[0], f32::INFINITY);
        assert_eq!(y[1], f32::NEG_INFINITY);
        assert!(y[2].is_nan()); // 0 * inf
    }

    #[test]
    fn subnormal_amax_saturates_not_panics() {
        // d is a tiny f32 subnormal: 1/d overflows to inf, codes saturate.
        let tiny = f32::from_bits(200);
        let x = [tiny, -tiny, 0.0, f32::from_bits(1)];
        let (q, s) = q8(&x, 4);
        assert_eq!(q, reference(&x, 4).0);
        assert_eq!(s[0].to_bits(), 0);
    }

    #[test]
    fn nan_and_inf_poison_only_their_group() {
        let x = [
            1.0f32,
            f32::NAN,
            2.0,
            3.0,
            1.0,
            f32::INFINITY,
            -2.0,
            0.0,
            1.0,
            -1.0,
            0.5,
            0.0,
        ];
        let (q, s) = q8(&x, 4);
        assert!(s[0].is_nan());
        assert_eq!(s[1], f16::INFINITY);
        assert_eq!(&q[..8], &[0; 8]);
        assert_eq!(&q[8..], &[127, -127, 64, 0]);
        let y = dq(&q, &s, 4);
        assert!(y[..8].iter().all(|v| v.is_nan()));
        assert!(y[8..].iter().all(|v| !v.is_nan()));
        // The same for f16 and bf16 rows.
        let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        assert_eq!(q8(&h, 4).0, q);
        let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
        assert_eq!(q8(&b, 4).0, q);
    }

    #[test]
    fn matches_reference_on_mixed_groups() {
        let x: Vec<f32> = (0..384)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 0.013 * (1 + i % 5) as f32)
            .collect();
        for g in [1, 2, 3, 32, 64, 128, 96, 384] {
            let (q, s) = q8(&x, g);
            let (rq, rs) = reference(&x, g);
            assert_eq!(q, rq, "g = {g}");
            assert_eq!(s, rs, "g = {g}");
        }
    }

    #[test]
    fn f16_and_bf16_rows_match_f32_rows() {
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.37)
            .collect();
        let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        let hf: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
        let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
        let bf: Vec<f32> = b.iter().map(|v| v.to_f32()).collect();
        for g in [16, 32, 64, 256] {
            assert_eq!(q8(&h, g), q8(&hf, g));
            assert_eq!(q8(&b, g), q8(&bf, g));
        }
        // Dequantizing into f16 / bf16 rounds the f32 result.
        let (q, s) = q8(&x, 32);
        let y = dq(&q, &s, 32);
        let mut yh = vec![f16::ZERO; 256];
        dequantize_q8(&q, &s, 32, &mut yh).expect("f16 out");
        let mut yb = vec![bf16::ZERO; 256];
        dequantize_q8(&q, &s, 32, &mut yb).expect("bf16 out");
        for i in 0..256 {
            assert_eq!(yh[i], f16::from_f32(y[i]));
            assert_eq!(yb[i], bf16::from_f32(y[i]));
        }
    }

    /// Every f16 bit pattern (a stride under Miri) through the branch-free conversions, against
    /// `half`. NaN policy: `key_f32` gives what `half` gives for `|x|` (quiet bit set, payload
    /// shifted up by 13, sign cleared), bit for bit; `f32`/`mag_prescaled` are only used on
    /// finite values; the sign helpers take the sign bit of any pattern, NaN included.
    #[test]
    fn f16_bit_widening_is_exact() {
        let step = if cfg!(miri) { 251 } else { 1 };
        for b in (0..=u16::MAX).step_by(step) {
            let h = f16::from_bits(b);
            let neg = b & 0x8000 != 0;
            if h.is_finite() {
                assert_eq!(F16Bits::f32(h).to_bits(), h.to_f32().to_bits(), "{b:#x}");
                let pre = (F16Bits::f32_prescaled(h) as f64) * f64::from_bits((1023 + 112) << 52);
                assert_eq!(pre, h.to_f32() as f64, "{b:#x}");
                let mag = (F16Bits::mag_prescaled(h) as f64) * f64::from_bits((1023 + 112) << 52);
                assert_eq!(mag, h.to_f32().abs() as f64, "{b:#x}");
                assert_eq!(
                    F16Bits::mag_prescaled(h) * TWO_POW_112,
                    h.to_f32().abs(),
                    "{b:#x}"
                );
            }
            assert_eq!(
                F16Bits::key_f32(F16Bits::key(h)).to_bits(),
                h.to_f32().abs().to_bits(),
                "{b:#x}"
            );
            assert_eq!(F16Bits::neg_mask(h), if neg { 0xFF } else { 0 }, "{b:#x}");
            assert_eq!(F16Bits::sign_byte(h) >= 0x80, neg, "{b:#x}");
        }
    }

    /// The f32 and bf16 loaders' sign helpers and magnitudes on every bf16 pattern (a stride
    /// under Miri), widened to f32.
    #[test]
    fn element_sign_and_magnitude() {
        let step = if cfg!(miri) { 251 } else { 1 };
        for b in (0..=u16::MAX).step_by(step) {
            let v = bf16::from_bits(b);
            let f = v.to_f32();
            let neg = b & 0x8000 != 0;
            for (m, n, g) in [
                (
                    ViaElement::<f32>::mag_prescaled(f),
                    ViaElement::<f32>::neg_mask(f),
                    ViaElement::<f32>::sign_byte(f),
                ),
                (
                    ViaElement::<bf16>::mag_prescaled(v),
                    ViaElement::<bf16>::neg_mask(v),
                    ViaElement::<bf16>::sign_byte(v),
                ),
            ] {
                assert_eq!(m.to_bits(), f.abs().to_bits(), "{b:#x}");
                assert_eq!(n, if neg { 0xFF } else { 0 }, "{b:#x}");
                assert_eq!(g >= 0x80, neg, "{b:#x}");
            }
        }
    }

    #[test]
    fn small_f16_groups_match_f32() {
        // amax below 127·2^-16: id·2^112 overflows f32, the codes undo the prescale first; and
        // down to f16 subnormals (d subnormal in f32 never happens for f16 input: amax ≥ 2^-24).
        let mut h = Vec::new();
        for e in 0..40u16 {
            let top = (0x2000u16.saturating_sub(e * 0x100)).max(1);
            for i in 0..32u16 {
                let b = (top / 32 * i + e) % top.max(1);
                h.push(f16::from_bits(if i % 3 == 0 { b | 0x8000 } else { b }));
            }
            h.push(f16::from_bits(top));
        }
        h.truncate(h.len() / 32 * 32);
        let hf: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
        for g in [1, 8, 32] {
            assert_eq!(q8(&h, g), reference(&hf, g), "g = {g}");
        }
    }

    #[test]
    fn errors_leave_outputs_untouched() {
        let x = [1.0f32; 8];
        let mut q = [5i8; 8];
        let mut s = [f16::ONE; 2];
        let bad = |r: Result<()>, e: Error| assert_eq!(r, Err(e));
        bad(quantize_q8(&x, 0, &mut q, &mut s), Error::InvalidFormat);
        bad(quantize_q8(&x, 3, &mut q, &mut s), Error::LengthMismatch);
        bad(
            quantize_q8(&x, 4, &mut q[..7], &mut s),
            Error::LengthMismatch,
        );
        bad(
            quantize_q8(&x, 4, &mut q, &mut s[..1]),
            Error::LengthMismatch,
        );
        bad(quantize_q8(&x, 8, &mut q, &mut s), Error::LengthMismatch);
        assert_eq!(q, [5; 8]);
        assert_eq!(s, [f16::ONE; 2]);
        let mut y = [7f32; 8];
        bad(dequantize_q8(&q, &s, 0, &mut y), Error::InvalidFormat);
        bad(dequantize_q8(&q, &s, 3, &mut y), Error::LengthMismatch);
        bad(dequantize_q8(&q[..4], &s, 4, &mut y), Error::LengthMismatch);
        bad(dequantize_q8(&q, &s[..1], 4, &mut y), Error::LengthMismatch);
        bad(dequantize_q8(&q, &s, 4, &mut y[..4]), Error::LengthMismatch);
        assert_eq!(y, [7.0; 8]);
        // Empty rows are fine.
        assert_eq!(quantize_q8::<f32>(&[], 4, &mut [], &mut []), Ok(()));
        assert_eq!(dequantize_q8::<f32>(&[], &[], 4, &mut []), Ok(()));
    }

    #[test]
    fn round_mag_matches_on_its_range() {
        // The f32 in [0, 127.5) are the bit patterns below 0x42FF_0000; sample them (all in the
        // ignored exhaustive test), plus every tie.
        let step = if cfg!(miri) { 1_000_003 } else { 997 };
        let ties = (0..127).map(|k| (k as f32 + 0.5).to_bits());
        for b in (0..0x42FF_0000u32).step_by(step).chain(ties) {
            let v = f32::from_bits(b);
            assert_eq!(round_mag_magic(v) as u8, round_q8(v) as u8, "{v:e}");
            assert_eq!(round_mag_cast(v) as u8, round_q8(v) as u8, "{v:e}");
        }
    }

    #[test]
    fn amax_lanes() {
        type L = ViaElement<f32>;
        let mut x: Vec<f32> = (0..37).map(|i| (i as f32 - 18.0) * 0.5).collect();
        assert_eq!(L::amax(&x), 9.0);
        x[36] = -20.0; // in the remainder
        assert_eq!(L::amax(&x), 20.0);
        x[3] = f32::NEG_INFINITY;
        assert_eq!(L::amax(&x), f32::INFINITY);
        x[35] = f32::NAN;
        assert!(L::amax(&x).is_nan());
        x[3] = 0.0;
        assert!(L::amax(&x).is_nan());
        assert_eq!(L::amax(&[]), 0.0);
        assert_eq!(L::amax(&[-0.0]).to_bits(), 0);
        let h: Vec<f16> = (0..40).map(|i| f16::from_f32(i as f32 - 30.0)).collect();
        assert_eq!(F16Bits::amax(&h), 30.0);
        let mut h2 = h.clone();
        h2[20] = f16::NAN;
        assert!(F16Bits::amax(&h2).is_nan());
        h2[20] = f16::NEG_INFINITY;
        assert_eq!(F16Bits::amax(&h2), f32::INFINITY);
    }

    #[test]
    fn f16_prescaled_product_is_exact() {
        // (x·2^-112)·(id·2^112) == x·id for every f16 x and a few ids.
        let step = if cfg!(miri) { 127 } else { 1 };
        for id in [1.0f32, 0.3, 127.0 / 3.0, 1e-3, 65000.0] {
            let idp = id * TWO_POW_112;
            for b in (0..0x7C00u16).step_by(step) {
                for h in [f16::from_bits(b), f16::from_bits(b | 0x8000)] {
                    assert_eq!(
                        (F16Bits::f32_prescaled(h) * idp).to_bits(),
                        (h.to_f32() * id).to_bits()
                    );
                }
            }
        }
    }

    /// `round_mag_*` against `round_q8` on every f32 in [0, 127.5).
    #[test]
    #[ignore = "exhaustive over 2^30 inputs; run with --release -- --ignored"]
    fn exhaustive_round_mag() {
        for b in 0..0x42FF_0000u32 {
            let v = f32::from_bits(b);
            assert_eq!(round_mag_magic(v) as u8, round_q8(v) as u8, "{b:#x}");
            assert_eq!(round_mag_cast(v) as u8, round_q8(v) as u8, "{b:#x}");
        }
    }

    #[test]
    fn f16_bits_rne_matches_half() {
        let step = if cfg!(miri) { 16_777_259 } else { 65_521 };
        let special = [
            0x4780_0000u32,
            0x477F_F000,
            0x477F_EFFF,
            0x3880_0000,
            0x387F_FFFF,
            0x3300_0000,
            0x3300_0001,
            0x7F80_0000,
            0,
        ];
        for b in (0..=u32::MAX)
            .step_by(step)
            .chain(special)
            .chain(special.map(|b| b | 0x8000_0000))
        {
            let v = f32::from_bits(b);
            if !v.is_nan() {
                assert_eq!(f16_bits_rne(v), f16::from_f32(v).to_bits(), "{b:#x}");
            }
        }
        assert_eq!(f16_bits_rne(f32::NAN), f16::NAN.to_bits());
    }

    #[test]
    #[ignore = "exhaustive over 2^32 inputs; run with --release -- --ignored"]
    fn exhaustive_f16_bits_rne() {
        for b in 0..=u32::MAX {
            let v = f32::from_bits(b);
            if !v.is_nan() {
                assert_eq!(f16_bits_rne(v), f16::from_f32(v).to_bits(), "{b:#x}");
            }
        }
    }

    /// `round_q8` against `f32::round` on every f32 (about 10 s in release).
    #[test]
    #[ignore = "exhaustive over 2^32 inputs; run with --release -- --ignored"]
    fn exhaustive_round_q8() {
        for b in 0..=u32::MAX {
            let v = f32::from_bits(b);
            assert_eq!(round_q8(v), v.round() as i8, "{b:#x}");
        }
    }

    #[cfg(not(miri))]
    mod props {
        use super::*;
        use proptest::prelude::*;

        /// Finite f32 values of mixed magnitudes (about 1e-30 .. 1e30) with some exact zeros.
        fn value() -> impl Strategy<Value = f32> {
            prop_oneof![
                8 => -1e3f32..1e3f32,
                2 => (-30i32..30, -1f32..1f32).prop_map(|(e, m)| m * 10f32.powi(e)),
                1 => Just(0.0f32),
                1 => Just(-0.0f32),
            ]
        }

        fn row() -> impl Strategy<Value = (Vec<f32>, usize)> {
            prop_oneof![Just(1usize), Just(3), Just(8), Just(32), Just(64)].prop_flat_map(|g| {
                (1usize..5).prop_flat_map(move |n| (prop::collection::vec(value(), n * g), Just(g)))
            })
        }

        proptest! {
            /// Matches the scalar `roundf` reference bit for bit.
            #[test]
            fn matches_reference((x, g) in row()) {
                prop_assert_eq!(q8(&x, g), reference(&x, g));
            }

            /// The round-trip bound. Let `d` be the f32 scale the codes come from and `s` the
            /// stored scale widened to f32. Each `x·id` is within `3·2^-24·127` of `x/d`, so
            /// `|q·d − x| ≤ d/2 + 2^-16·d`, and `|q·s − x| ≤ d/2 + 127·|s − d| + 2^-16·d`
            /// (plus the f32 rounding of `q·s`). For `s` an f16 normal, `|s − d| ≤ 2^-11·d`, so
            /// `|y − x| ≤ 0.5621·d`; when `s == d` exactly it is the classic `d/2`. If `s` rounds
            /// to 0 the bound is `128·d ≈ amax`; if it overflows to inf, y is ±inf/NaN (not
            /// checked here, see `f16_scale_overflow_is_inf`).
            #[test]
            fn roundtrip_error_bound((x, g) in row()) {
                let (q, s) = q8(&x, g);
                let y = dq(&q, &s, g);
                for (gi, (xg, yg)) in x.chunks(g).zip(y.chunks(g)).enumerate() {
                    let amax = xg.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let d = amax / 127.0;
                    let sf = s[gi].to_f32();
                    if sf.is_infinite() {
                        continue;
                    }
                    let slack = p2(-16) * d + p2(-22) * amax;
                    let general = 0.5 * d + 127.0 * (sf - d).abs() + slack;
                    let normal = (p2(-14)..=65504.0).contains(&sf);
                    for (&xv, &yv) in xg.iter().zip(yg) {
                        prop_assert!(yv.is_finite());
                        let err = (yv - xv).abs();
                        prop_assert!(err <= general, "x {} y {} d {} s {}", xv, yv, d, sf);
                        if normal {
                            let bound = if sf == d { 0.5 * d } else { 0.5621 * d } + slack;
                            prop_assert!(err <= bound, "x {} y {} d {} s {}", xv, yv, d, sf);
                        }
                    }
                }
            }

            /// Requantizing dequantized values reproduces codes and scales for every group whose
            /// stored scale `s` is finite and non-zero. Proof: then `d` is a normal f32, the
            /// element with `|x| = amax` gets `|q| = 127` (`amax·id = 127·(1 ± 3·2^-24)`) and no
            /// code exceeds it; `y = q·s` is exact (7 × 11 significant bits); so the new
            /// `amax' = 127·s`, `d' = s` exactly, and `y·(1/s) = q·(1 ± 2^-23)` rounds back to q.
            /// (With `s` = 0 or inf the group dequantizes to 0 or NaN, so it cannot hold.)
            #[test]
            fn requantize_reproduces_codes((x, g) in row()) {
                let (q, s) = q8(&x, g);
                let y = dq(&q, &s, g);
                let (q2, s2) = q8(&y, g);
                for gi in 0..s.len() {
                    let sf = s[gi].to_f32();
                    if sf.is_finite() && sf != 0.0 {
                        prop_assert_eq!(&q2[gi * g..(gi + 1) * g], &q[gi * g..(gi + 1) * g]);
                        prop_assert_eq!(s2[gi], s[gi]);
                    }
                }
            }

            /// The same fixed point from exact multiples of an f16 scale (every f16 exponent).
            #[test]
            fn requantize_exact_multiples(
                qs in prop::collection::vec(-127i8..=127, 1..5usize).prop_map(|mut v| { v[0] = -127; v }),
                bits in 1u16..0x7C00,
            ) {
                let d = f16::from_bits(bits).to_f32();
                let x: Vec<f32> = qs.iter().map(|&q| q as f32 * d).collect();
                let g = x.len();
                let (q, s) = q8(&x, g);
                prop_assert_eq!(s[0].to_f32(), d);
                prop_assert_eq!(&q, &qs);
            }

            /// Finite input: finite scales never NaN, codes in range, no panics (any type).
            #[test]
            fn finite_inputs_never_nan((x, g) in row()) {
                let (_, s) = q8(&x, g);
                prop_assert!(s.iter().all(|s| !s.is_nan()));
                let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
                let (_, sh) = q8(&h, g);
                prop_assert!(sh.iter().all(|s| !s.is_nan()));
            }
        }
    }
}
