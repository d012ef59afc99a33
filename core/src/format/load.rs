//! How the reference codecs read one element type ([`Load`]): a sort key for `max|x|` and the
//! exact f32 value, branch-free so that LLVM vectorizes; and how they write f32 results back
//! ([`store_f32`]). Shared by every quantized format and by the ISA kernels in `crate::arch`.

use core::marker::PhantomData;

use half::{bf16, f16};

use super::{Element, ElementFormat};

/// How a kernel reads one element type: a sort key for `max|x|`, and the exact f32 value.
///
/// Kernels are generic over this so that f16 rows use a branch-free bit conversion that LLVM
/// vectorizes (`half`'s scalar `to_f32` is an out-of-line call per element on x86 hosts).
pub(crate) trait Load {
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
pub(crate) struct ViaElement<T>(PhantomData<T>);

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
pub(crate) struct F16Bits;

/// See [`F16Bits`]'s key.
const F16_KEY_BIAS: i16 = 1 << 14;

/// 2^112: rebiases an f16 exponent (bias 15) placed in an f32 (bias 127).
pub(crate) const TWO_POW_112: f32 = f32::from_bits((127 + 112) << 23);

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
pub(crate) struct Bf16Of<L>(PhantomData<L>);

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
pub(crate) fn store_f32<T: Element>(src: &[f32], dst: &mut [T]) {
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
pub(crate) const BUF: usize = 64;

/// `if c { a } else { b }` on bits, as masks (so that LLVM keeps it branch-free and vectorizes).
#[inline(always)]
pub(crate) fn select(c: bool, a: u32, b: u32) -> u32 {
    let m = (c as u32).wrapping_neg();
    (a & m) | (b & !m)
}
