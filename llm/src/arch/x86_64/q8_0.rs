//! Q8_0 weights × Q8_0 activations in AVX2 and F16C.

use core::arch::x86_64::*;

use super::super::Acts;
use super::super::rows::by_four;
use crate::quant::q8_0::BYTES;
use crate::quant::{BLOCK, QuantRow, f16_le};

/// The eight partial integer sums (`i32` lanes) of block `b` of the row at `w` with the
/// activation codes at `qa`: both sides' codes sign-extended to 16 bits, multiplied and paired
/// by `VPMADDWD` (exact for every code, −128 included). Exact.
///
/// # Safety
///
/// AVX2; bytes `[b·34 + 2, b·34 + 34)` of `w` and `[b·32, b·32 + 32)` of `qa` readable.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn block_sums(w: *const u8, qa: *const i8, b: usize) -> __m256i {
    // SAFETY: the caller's contract: 32 bytes at `w + b·34 + 2` and at `qa + b·32`, read
    // unaligned.
    unsafe {
        let wv = _mm256_loadu_si256(w.add(b * BYTES + 2).cast());
        let av = _mm256_loadu_si256(qa.add(b * BLOCK).cast());
        let lo = _mm256_madd_epi16(
            _mm256_cvtepi8_epi16(_mm256_castsi256_si128(wv)),
            _mm256_cvtepi8_epi16(_mm256_castsi256_si128(av)),
        );
        let hi = _mm256_madd_epi16(
            _mm256_cvtepi8_epi16(_mm256_extracti128_si256(wv, 1)),
            _mm256_cvtepi8_epi16(_mm256_extracti128_si256(av, 1)),
        );
        _mm256_add_epi32(lo, hi)
    }
}

/// One Q8_0 row dotted with a Q8_0 row: `dot_q8_0_q8_0`'s bits.
///
/// # Safety
///
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn dot(w: &[u8], a: &QuantRow<'_>) -> f32 {
    // The portable `zip`'s block count.
    let blocks = (w.len() / BYTES).min(a.qs.len() / BLOCK).min(a.d.len());
    let (wp, qa) = (w.as_ptr(), a.qs.as_ptr());
    let mut sumf = 0.0f32;
    let mut b = 0;
    // SAFETY: every block read below is `< blocks`, within `w`, `a.qs` and `a.d`.
    unsafe {
        while b + 4 <= blocks {
            let (p0, p1) = (block_sums(wp, qa, b), block_sums(wp, qa, b + 1));
            let (p2, p3) = (block_sums(wp, qa, b + 2), block_sums(wp, qa, b + 3));
            // Lanes [block 0, 1, 2, 3] of each half, then the halves added: the four sums.
            let h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
            let sumi = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            let half = |k: usize| (wp.add((b + k) * BYTES) as *const i16).read_unaligned();
            let d = _mm_setr_epi16(half(0), half(1), half(2), half(3), 0, 0, 0, 0);
            let dw = _mm_cvtph_ps(d);
            let da = _mm_loadu_ps(a.d.as_ptr().add(b));
            // (f32)sumi · (d_w · d_a), each lane as the portable block term.
            let t = _mm_mul_ps(_mm_cvtepi32_ps(sumi), _mm_mul_ps(dw, da));
            let mut terms = [0f32; 4];
            _mm_storeu_ps(terms.as_mut_ptr(), t);
            for term in terms {
                sumf += term;
            }
            b += 4;
        }
        while b < blocks {
            let p = block_sums(wp, qa, b);
            let q = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
            let q = _mm_hadd_epi32(q, q);
            let sumi = _mm_cvtsi128_si32(_mm_hadd_epi32(q, q));
            let at = b * BYTES;
            sumf += sumi as f32 * (f16_le(w[at], w[at + 1]) * a.d[b]);
            b += 1;
        }
    }
    sumf
}

/// `matmul_quant` of Q8_0 weights, each output by [`dot`].
///
/// # Safety
///
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn matmul(
    w: &[u8],
    row_bytes: usize,
    rows: usize,
    a: &Acts<'_>,
    n: usize,
    out: &mut [f32],
) -> bool {
    let one = |r: &[u8], a: &QuantRow<'_>| {
        // SAFETY: the caller checked AVX2 and F16C.
        unsafe { dot(r, a) }
    };
    let four = |w: [&[u8]; 4], a: &QuantRow<'_>| w.map(|r| one(r, a));
    by_four(w, row_bytes, rows, a, n, out, four, one)
}
