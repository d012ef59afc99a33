//! Q4_1 weights × Q8_1 activations in AVX2 and F16C: one weight row against one or several
//! activation rows, each weight block's nibbles unpacked once for all of them. Q5_1's blocks
//! (`d`, `m`, then four bytes of fifth bits before the nibbles) take the same code with `FIVE`.

use core::arch::x86_64::*;

use super::super::Acts;
use super::super::rows::tiles;
use super::q5_0::fifth_bits;
use crate::quant::{BLOCK, QuantRow, f16_le};
use crate::quant::{q4_1, q5_1};

/// Activation rows per tile of [`matmul`] (prefill: each weight block unpacked once for four
/// tokens).
const TILE: usize = 4;

/// Bytes per block: Q4_1's, or Q5_1's.
const fn bytes(five: bool) -> usize {
    if five { q5_1::BYTES } else { q4_1::BYTES }
}

/// Block `b`'s 32 values of the row at `w` as bytes 0..=15 (Q5_1: 0..=31): the sixteen nibble
/// bytes split, low nibbles first (Q5_1: each with its fifth bit, bit `j` of `qh` for value
/// `j`).
///
/// # Safety
///
/// AVX2; the block's bytes readable.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn values<const FIVE: bool>(w: *const u8, b: usize) -> __m256i {
    // SAFETY: the caller's contract: 16 bytes at `w + b·20 + 4` (Q5_1: `w + b·24 + 8`, and
    // `qh`'s 4 at `+ 4`), read unaligned.
    unsafe {
        let at = w.add(b * bytes(FIVE));
        let raw = _mm_loadu_si128(at.add(if FIVE { 8 } else { 4 }).cast());
        let mask = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(raw, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
        let nibbles = _mm256_set_m128i(hi, lo);
        if !FIVE {
            return nibbles;
        }
        _mm256_or_si256(
            nibbles,
            fifth_bits((at.add(4) as *const i32).read_unaligned()),
        )
    }
}

/// The eight partial integer sums (`i32` lanes) of a block's `values` with the activation codes
/// of block `b` at `qa`: multiplied and paired by `VPMADDUBSW` (an unsigned value ≤ 31 times a
/// code ≥ −128: no pair saturates), the pairs added by `VPMADDWD`. Exact.
///
/// # Safety
///
/// AVX2; bytes `[b·32, b·32 + 32)` of `qa` readable.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn block_sums(values: __m256i, qa: *const i8, b: usize) -> __m256i {
    // SAFETY: the caller's contract: 32 bytes at `qa + b·32`, read unaligned.
    unsafe {
        let codes = _mm256_loadu_si256(qa.add(b * BLOCK).cast());
        let pairs = _mm256_maddubs_epi16(values, codes);
        _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
    }
}

/// One Q4_1 (`FIVE`: Q5_1) row dotted with a Q8_1 row: `dot_q4_1_q8_1`'s (`dot_q5_1_q8_1`'s)
/// bits.
///
/// # Safety
///
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn dot<const FIVE: bool>(w: &[u8], a: &QuantRow<'_>) -> f32 {
    let a = [QuantRow {
        qs: a.qs,
        d: a.d,
        s: a.s,
        bsums: a.bsums,
    }];
    // SAFETY: the caller's contract.
    unsafe { dot_rows::<1, FIVE>(w, &a)[0] }
}

/// One Q4_1 row dotted with `R` Q8_1 rows, each with `dot_q4_1_q8_1`'s bits when the rows have
/// the same length (otherwise the blocks every row has in common): four blocks at a time, their nibbles unpacked and f16 scales
/// converted once for all rows, each row's four integer sums in AVX2 and its four block terms
/// by the portable expression in four lanes (`VMULPS`, `VADDPS`, no FMA), then added to the
/// row's sum one block after the other.
///
/// # Safety
///
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn dot_rows<const R: usize, const FIVE: bool>(
    w: &[u8],
    a: &[QuantRow<'_>; R],
) -> [f32; R] {
    let bytes = bytes(FIVE);
    // The portable `zip`'s block count.
    let mut blocks = w.len() / bytes;
    for r in a {
        blocks = blocks.min(r.qs.len() / BLOCK).min(r.d.len()).min(r.s.len());
    }
    let wp = w.as_ptr();
    let mut sumf = [0.0f32; R];
    let mut b = 0;
    // SAFETY: every block read below is `< blocks`, within `w` and each row's `qs`, `d`, `s`.
    unsafe {
        while b + 4 <= blocks {
            let v = [
                values::<FIVE>(wp, b),
                values::<FIVE>(wp, b + 1),
                values::<FIVE>(wp, b + 2),
                values::<FIVE>(wp, b + 3),
            ];
            // Each block's `d`, `m` as one word: halves [d0 m0 d1 m1 …] to [d0 d1 d2 d3 m0 …].
            let word = |k: usize| (wp.add((b + k) * bytes) as *const i32).read_unaligned();
            let dm = _mm_setr_epi32(word(0), word(1), word(2), word(3));
            let order = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
            let scales = _mm256_cvtph_ps(_mm_shuffle_epi8(dm, order));
            let (dw, mw) = (
                _mm256_castps256_ps128(scales),
                _mm256_extractf128_ps(scales, 1),
            );
            for (r, sum) in a.iter().zip(&mut sumf) {
                let qa = r.qs.as_ptr();
                let (p0, p1) = (block_sums(v[0], qa, b), block_sums(v[1], qa, b + 1));
                let (p2, p3) = (block_sums(v[2], qa, b + 2), block_sums(v[3], qa, b + 3));
                // Lanes [block 0, 1, 2, 3] of each half, then the halves added: the four sums.
                let h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
                let sumi = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                let da = _mm_loadu_ps(r.d.as_ptr().add(b));
                let sa = _mm_loadu_ps(r.s.as_ptr().add(b));
                // (d_w · d_a) · (f32)sumi + m_w · s_a, each lane as the portable block term.
                let t = _mm_add_ps(
                    _mm_mul_ps(_mm_mul_ps(dw, da), _mm_cvtepi32_ps(sumi)),
                    _mm_mul_ps(mw, sa),
                );
                let mut terms = [0f32; 4];
                _mm_storeu_ps(terms.as_mut_ptr(), t);
                for term in terms {
                    *sum += term;
                }
            }
            b += 4;
        }
        while b < blocks {
            let v = values::<FIVE>(wp, b);
            let at = b * bytes;
            let (dw, mw) = (f16_le(w[at], w[at + 1]), f16_le(w[at + 2], w[at + 3]));
            for (r, sum) in a.iter().zip(&mut sumf) {
                let p = block_sums(v, r.qs.as_ptr(), b);
                let q = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
                let q = _mm_hadd_epi32(q, q);
                let sumi = _mm_cvtsi128_si32(_mm_hadd_epi32(q, q));
                *sum += (dw * r.d[b]) * sumi as f32 + mw * r.s[b];
            }
            b += 1;
        }
    }
    sumf
}

/// `matmul_quant` of Q4_1 (`FIVE`: Q5_1) weights: each weight row against tiles of [`TILE`] activation rows
/// ([`dot_rows`]), the activation rows after the last tile one at a time ([`dot`]).
///
/// # Safety
///
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn matmul<const FIVE: bool>(
    w: &[u8],
    row_bytes: usize,
    rows: usize,
    a: &Acts<'_>,
    n: usize,
    out: &mut [f32],
) -> bool {
    let one = |r: &[u8], a: &QuantRow<'_>| {
        // SAFETY: the caller checked AVX2 and F16C.
        unsafe { dot::<FIVE>(r, a) }
    };
    let many = |w: [&[u8]; 1], a: &[QuantRow<'_>; TILE]| {
        // SAFETY: as above.
        [unsafe { dot_rows::<TILE, FIVE>(w[0], a) }]
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
