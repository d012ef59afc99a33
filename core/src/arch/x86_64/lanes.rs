//! Reading rows eight values at a time with AVX2/F16C: the exact f32 widening and the `max|x|`
//! key, and narrowing 32 lanes of i32 codes to bytes.
//!
//! Every function here requires AVX2 and F16C (the `# Safety` of each); memory is only touched
//! through references of the exact size read or written.

use core::arch::x86_64::*;

use half::f16;

use crate::format::load::{F16Bits, Load, ViaElement};

/// A row element type the AVX2 kernels read eight at a time.
pub(super) trait Lanes: Copy {
    /// The portable loader of the same type: its keys, and the scalar code of the leftovers.
    type L: Load<R = Self>;

    /// Eight values widened to f32, exactly.
    ///
    /// # Safety
    ///
    /// The CPU supports AVX2 and F16C.
    unsafe fn load8(x: &[Self; 8]) -> __m256;

    /// The key of `max|x|`, equal to the portable [`Load::amax_key`] (NaN above inf). With
    /// `W32` the caller promises `x.len() % 32 == 0` (the leftover code is left out; were the
    /// promise broken, the leftovers would be ignored).
    ///
    /// # Safety
    ///
    /// The CPU supports AVX2 and F16C.
    unsafe fn amax_key<const W32: bool>(x: &[Self]) -> <Self::L as Load>::K;
}

impl Lanes for f32 {
    type L = ViaElement<f32>;

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8(x: &[f32; 8]) -> __m256 {
        // SAFETY: reads the 32 bytes of `x` (unaligned load); AVX per the caller.
        unsafe { _mm256_loadu_ps(x.as_ptr()) }
    }

    /// The maximum of the bits of `|x|` (a signed max: they are below 2^31); that is the bits
    /// of the element with the largest key, so its key is the maximum key.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn amax_key<const W32: bool>(x: &[f32]) -> i32 {
        // SAFETY: loads read whole chunks of 8 f32; AVX2 per the caller.
        let bits = unsafe {
            let abs = _mm256_set1_epi32(0x7FFF_FFFF);
            let mut acc = _mm256_setzero_si256();
            let mut xs = x.chunks_exact(8);
            for c in &mut xs {
                let v = _mm256_loadu_si256(c.as_ptr().cast());
                acc = _mm256_max_epi32(acc, _mm256_and_si256(v, abs));
            }
            let m = _mm_max_epi32(
                _mm256_castsi256_si128(acc),
                _mm256_extracti128_si256::<1>(acc),
            );
            let m = _mm_max_epi32(m, _mm_shuffle_epi32::<0b0100_1110>(m));
            let m = _mm_max_epi32(m, _mm_shuffle_epi32::<0b1011_0001>(m));
            let m = _mm_cvtsi128_si32(m) as u32;
            if W32 {
                m
            } else {
                xs.remainder()
                    .iter()
                    .fold(m, |m, v| m.max(v.to_bits() & 0x7FFF_FFFF))
            }
        };
        Self::L::key(f32::from_bits(bits))
    }
}

impl Lanes for f16 {
    type L = F16Bits;

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8(x: &[f16; 8]) -> __m256 {
        // SAFETY: reads the 16 bytes of `x` (unaligned load); F16C per the caller. The
        // conversion is exact (every f16 is an f32).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().cast())) }
    }

    /// The maximum of the 15-bit magnitudes, sixteen at a time (a signed max: they are below
    /// 2^15); that is the bits of the element with the largest key.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn amax_key<const W32: bool>(x: &[f16]) -> i16 {
        // SAFETY: loads read whole chunks of 16 or 8 f16; AVX2 per the caller.
        let bits = unsafe {
            let abs = _mm256_set1_epi16(0x7FFF);
            let mut acc = _mm256_setzero_si256();
            let mut xs = x.chunks_exact(16);
            for c in &mut xs {
                let v = _mm256_loadu_si256(c.as_ptr().cast());
                acc = _mm256_max_epi16(acc, _mm256_and_si256(v, abs));
            }
            let mut m = _mm_max_epi16(
                _mm256_castsi256_si128(acc),
                _mm256_extracti128_si256::<1>(acc),
            );
            let mut rest = xs.remainder().chunks_exact(8);
            if !W32 {
                for c in &mut rest {
                    let v = _mm_loadu_si128(c.as_ptr().cast());
                    m = _mm_max_epi16(m, _mm_and_si128(v, _mm256_castsi256_si128(abs)));
                }
            }
            // max = !min(!m) on these non-negative 16-bit lanes (PHMINPOSUW).
            let ones = _mm_set1_epi16(-1);
            let max = !(_mm_cvtsi128_si32(_mm_minpos_epu16(_mm_xor_si128(m, ones))) as u16);
            if W32 {
                max
            } else {
                rest.remainder()
                    .iter()
                    .fold(max, |m, v| m.max(v.to_bits() & 0x7FFF))
            }
        };
        Self::L::key(f16::from_bits(bits))
    }
}

/// A code byte: `i8` (Q8 codes, signed saturation) or `u8` (e4m3 codes, unsigned saturation).
pub(super) trait Byte: Copy {
    /// Whether the lanes are narrowed with unsigned saturation.
    const UNSIGNED: bool;
}

impl Byte for i8 {
    const UNSIGNED: bool = false;
}

impl Byte for u8 {
    const UNSIGNED: bool = true;
}

/// A per-lane code: eight f32 values to eight i32 codes in the range of the code byte.
pub(super) trait Code8 {
    /// The code byte.
    type B: Byte;
    /// Whether the byte's top bit is the sign bit of the value, which [`Code8::code8`] leaves
    /// out: it is taken from the values with saturating packs, 32 lanes at a time.
    const SIGN_OF_X: bool;
    /// The codes of `v`.
    ///
    /// # Safety
    ///
    /// The CPU supports AVX2 and F16C.
    unsafe fn code8(&self, v: __m256) -> __m256i;
}

/// i32 lanes (four vectors in order) narrowed to 32 bytes by 128-bit lane: `a0 b0 c0 d0 | a1
/// b1 c1 d1` in runs of four (the order of AVX2's pack instructions).
///
/// # Safety
///
/// The CPU supports AVX2.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn pack32(v: [__m256i; 4], unsigned: bool) -> __m256i {
    // SAFETY: register operations only.
    unsafe {
        if unsigned {
            let ab = _mm256_packus_epi32(v[0], v[1]);
            let cd = _mm256_packus_epi32(v[2], v[3]);
            _mm256_packus_epi16(ab, cd)
        } else {
            let ab = _mm256_packs_epi32(v[0], v[1]);
            let cd = _mm256_packs_epi32(v[2], v[3]);
            _mm256_packs_epi16(ab, cd)
        }
    }
}

/// i32 lanes (one vector) narrowed to 8 bytes (the low half).
///
/// # Safety
///
/// The CPU supports AVX2.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn pack8(v: __m256i, unsigned: bool) -> __m128i {
    // SAFETY: register operations only.
    unsafe {
        let (lo, hi) = (_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        if unsigned {
            let w = _mm_packus_epi32(lo, hi);
            _mm_packus_epi16(w, w)
        } else {
            let w = _mm_packs_epi32(lo, hi);
            _mm_packs_epi16(w, w)
        }
    }
}

/// Writes `op`'s codes of `x` into `out` (same length) for the longest prefix whose length is a
/// multiple of 8 (of 32 with `W32`), 32 values per store; returns that length (the caller codes
/// the rest).
///
/// Signs ([`Code8::SIGN_OF_X`]): a signed saturating pack of f32 bits keeps the sign (−0.0 is
/// `i32::MIN`, +0.0 is 0), so the same pack tree as the codes puts each value's sign in the
/// top bit of its byte.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn map_codes<T: Lanes, O: Code8, const W32: bool>(
    x: &[T],
    out: &mut [O::B],
    op: &O,
) -> usize {
    let w = if W32 { 32 } else { 8 };
    let n = x.len().min(out.len()) / w * w;
    let (Some(xs), Some(outs)) = (x.get(..n), out.get_mut(..n)) else {
        return 0;
    };
    let mut x32 = xs.chunks_exact(32);
    let mut o32 = outs.chunks_exact_mut(32);
    let unsigned = <O::B as Byte>::UNSIGNED;
    // SAFETY: AVX2 and F16C per the caller; memory only through the fixed-size chunks.
    unsafe {
        let top = _mm256_set1_epi8(i8::MIN);
        for (xc, oc) in (&mut x32).zip(&mut o32) {
            let mut v = [_mm256_setzero_ps(); 4];
            for (v, c) in v.iter_mut().zip(xc.chunks_exact(8)) {
                if let Some(c) = c.first_chunk::<8>() {
                    *v = T::load8(c);
                }
            }
            // (No closures: on older compilers they do not inherit the target features.)
            let [v0, v1, v2, v3] = v;
            let c = [op.code8(v0), op.code8(v1), op.code8(v2), op.code8(v3)];
            let mut p = pack32(c, unsigned);
            if O::SIGN_OF_X {
                let bits = [
                    _mm256_castps_si256(v0),
                    _mm256_castps_si256(v1),
                    _mm256_castps_si256(v2),
                    _mm256_castps_si256(v3),
                ];
                let s = pack32(bits, false);
                p = _mm256_or_si256(p, _mm256_and_si256(s, top));
            }
            // Runs of four back in order.
            let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            if let Some(oc) = oc.first_chunk_mut::<32>() {
                _mm256_storeu_si256(oc.as_mut_ptr().cast(), p);
            }
        }
        if !W32 {
            let rest = x32.remainder().chunks_exact(8);
            for (xc, oc) in rest.zip(o32.into_remainder().chunks_exact_mut(8)) {
                if let (Some(xc), Some(oc)) = (xc.first_chunk::<8>(), oc.first_chunk_mut::<8>()) {
                    let v = T::load8(xc);
                    let mut p = pack8(op.code8(v), unsigned);
                    if O::SIGN_OF_X {
                        let s = pack8(_mm256_castps_si256(v), false);
                        p = _mm_or_si128(p, _mm_and_si128(s, _mm256_castsi256_si128(top)));
                    }
                    _mm_storel_epi64(oc.as_mut_ptr().cast(), p);
                }
            }
        }
    }
    n
}
