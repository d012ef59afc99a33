//! Q8_0 weights × Q8_0 activations in AVX2 and F16C: one weight row against one or several
//! activation rows, each weight block's codes widened once for all of them.

use core::arch::x86_64::*;

use super::super::Acts;
use super::super::rows::tiles;
use crate::quant::q8_0::BYTES;
use crate::quant::{BLOCK, QuantRow, f16_le};

/// Activation rows per tile of [`matmul`] (prefill, and every row of logits: each weight block
/// widened once for four tokens).
const TILE: usize = 4;

/// Block `b`'s 32 codes of the row at `w` sign-extended to 16 bits (codes 0–15, 16–31).
///
/// # Safety
///
/// AVX2; bytes `[b·34 + 2, b·34 + 34)` of `w` readable.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn values(w: *const u8, b: usize) -> [__m256i; 2] {
    // SAFETY: the caller's contract: 32 bytes at `w + b·34 + 2`, read unaligned.
    unsafe {
        let wv = _mm256_loadu_si256(w.add(b * BYTES + 2).cast());
        [
            _mm256_cvtepi8_epi16(_mm256_castsi256_si128(wv)),
            _mm256_cvtepi8_epi16(_mm256_extracti128_si256(wv, 1)),
        ]
    }
}

/// The eight partial integer sums (`i32` lanes) of a block's widened `values` with the
/// activation codes of block `b` at `qa`: the codes sign-extended to 16 bits, multiplied and
/// paired by `VPMADDWD` (exact for every code, −128 included). Exact.
///
/// # Safety
///
/// AVX2; bytes `[b·32, b·32 + 32)` of `qa` readable.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn block_sums(values: [__m256i; 2], qa: *const i8, b: usize) -> __m256i {
    // SAFETY: the caller's contract: 32 bytes at `qa + b·32`, read unaligned.
    unsafe {
        let av = _mm256_loadu_si256(qa.add(b * BLOCK).cast());
        let lo = _mm256_madd_epi16(values[0], _mm256_cvtepi8_epi16(_mm256_castsi256_si128(av)));
        let hi = _mm256_madd_epi16(
            values[1],
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
    let a = [QuantRow {
        qs: a.qs,
        d: a.d,
        s: a.s,
        bsums: a.bsums,
    }];
    // SAFETY: the caller's contract.
    unsafe { dot_rows(w, &a)[0] }
}

/// One Q8_0 row dotted with `R` Q8_0 rows, each with `dot_q8_0_q8_0`'s bits when the rows have
/// the same length (otherwise the blocks every row has in common): four blocks at a time, their codes widened and f16 scales converted
/// once for all rows, each row's four integer sums in AVX2 and its four block terms by the
/// portable expression in four lanes (`VMULPS`, no FMA), then added to the row's sum one block
/// after the other.
///
/// # Safety
///
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn dot_rows<const R: usize>(w: &[u8], a: &[QuantRow<'_>; R]) -> [f32; R] {
    // The portable `zip`'s block count.
    let mut blocks = w.len() / BYTES;
    for r in a {
        blocks = blocks.min(r.qs.len() / BLOCK).min(r.d.len());
    }
    let wp = w.as_ptr();
    let mut sumf = [0.0f32; R];
    let mut b = 0;
    // SAFETY: every block read below is `< blocks`, within `w` and each row's `qs` and `d`.
    unsafe {
        while b + 4 <= blocks {
            let v = [
                values(wp, b),
                values(wp, b + 1),
                values(wp, b + 2),
                values(wp, b + 3),
            ];
            let half = |k: usize| (wp.add((b + k) * BYTES) as *const i16).read_unaligned();
            let d = _mm_setr_epi16(half(0), half(1), half(2), half(3), 0, 0, 0, 0);
            let dw = _mm_cvtph_ps(d);
            for (r, sum) in a.iter().zip(&mut sumf) {
                let qa = r.qs.as_ptr();
                let (p0, p1) = (block_sums(v[0], qa, b), block_sums(v[1], qa, b + 1));
                let (p2, p3) = (block_sums(v[2], qa, b + 2), block_sums(v[3], qa, b + 3));
                // Lanes [block 0, 1, 2, 3] of each half, then the halves added: the four sums.
                let h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
                let sumi = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                let da = _mm_loadu_ps(r.d.as_ptr().add(b));
                // (f32)sumi · (d_w · d_a), each lane as the portable block term.
                let t = _mm_mul_ps(_mm_cvtepi32_ps(sumi), _mm_mul_ps(dw, da));
                let mut terms = [0f32; 4];
                _mm_storeu_ps(terms.as_mut_ptr(), t);
                for term in terms {
                    *sum += term;
                }
            }
            b += 4;
        }
        while b < blocks {
            let v = values(wp, b);
            let at = b * BYTES;
            let dw = f16_le(w[at], w[at + 1]);
            for (r, sum) in a.iter().zip(&mut sumf) {
                let p = block_sums(v, r.qs.as_ptr(), b);
                let q = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
                let q = _mm_hadd_epi32(q, q);
                let sumi = _mm_cvtsi128_si32(_mm_hadd_epi32(q, q));
                *sum += sumi as f32 * (dw * r.d[b]);
            }
            b += 1;
        }
    }
    sumf
}

/// `matmul_quant` of Q8_0 weights: each weight row against tiles of [`TILE`] activation rows
/// ([`dot_rows`]), the activation rows after the last tile one at a time ([`dot`]).
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
    let many = |w: [&[u8]; 1], a: &[QuantRow<'_>; TILE]| {
        // SAFETY: as above.
        [unsafe { dot_rows(w[0], a) }]
    };
    tiles(
        w,
        row_bytes,
        rows,
        a,
        n,
        out,
        many,
        |w, a| [one(w[0], a)],
        one,
    )
}
