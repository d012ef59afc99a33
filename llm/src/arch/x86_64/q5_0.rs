//! Q5_0 weights × Q8_0 activations in AVX2 and F16C: one weight row against one or several
//! activation rows, each weight block's five-bit values unpacked once for all of them. Q4_0's
//! blocks (no fifth bits, values `q − 8`, the block term `((f32)sumi · d_w) · d_a`) take the
//! same code with `FIVE = false`.

use core::arch::x86_64::*;

use super::super::Acts;
use super::super::rows::tiles;
use super::k_lanes::hsum;
use crate::quant::{BLOCK, QuantRow, f16_le};
use crate::quant::{q4_0, q5_0};

/// Activation rows per tile of [`matmul`] (prefill: each weight block unpacked once for four
/// tokens).
const TILE: usize = 4;

/// Bytes per block: Q5_0's, or Q4_0's.
const fn bytes(five: bool) -> usize {
    if five { q5_0::BYTES } else { q4_0::BYTES }
}

/// Block `b`'s 32 values of the row at `w` as unsigned bytes `q` (0..=31, the value is
/// `q − 16`; Q4_0: 0..=15, `q − 8`) in value order: the sixteen nibble bytes split (low
/// nibbles, values 0–15, then high nibbles, values 16–31), each with its fifth bit from `qh`
/// (bit `j` for value `j`).
///
/// # Safety
///
/// AVX2; the block's bytes readable.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn values<const FIVE: bool>(w: *const u8, b: usize) -> __m256i {
    // SAFETY: the caller's contract: 16 bytes at `w + b·bytes + 6` (Q4_0: `+ 2`), and `qh`'s 4
    // at `w + b·22 + 2`, read unaligned.
    unsafe {
        let at = w.add(b * bytes(FIVE));
        let raw = _mm_loadu_si128(at.add(if FIVE { 6 } else { 2 }).cast());
        let mask = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(raw, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
        let nibbles = _mm256_set_m128i(hi, lo);
        if !FIVE {
            return nibbles;
        }
        _mm256_or_si256(
            nibbles,
            fifth_bits((at.add(2) as *const i32).read_unaligned()),
        )
    }
}

/// 16 in byte `j` (0..32) where bit `j` of `qh` is set, 0 elsewhere (Q5_0's and Q5_1's fifth
/// bits).
///
/// # Safety
///
/// AVX2.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) unsafe fn fifth_bits(qh: i32) -> __m256i {
    // SAFETY: register-only AVX2 (the caller's contract).
    unsafe {
        // Byte `j` takes byte `j / 8` of `qh`, then keeps bit `j % 8` of it: 0xff where set.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(qh),
            _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                3, 3, 3, 3,
            ),
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
        _mm256_and_si256(set, _mm256_set1_epi8(0x10))
    }
}

/// The eight partial integer sums (`i32` lanes) of `Σ (q − 16) · a` (Q4_0: `q − 8`) over block
/// `b`, with the block's unsigned `values` and the activation codes at `qa`: `VPMADDUBSW` of `q`
/// (≤ 31) and of 16 (8) with the codes (no pair saturates: |2 · 31 · 128| < 2¹⁵), their difference (each pair
/// `(q − 16) · a` summed, |·| ≤ 4096: exact in i16), the pairs added by `VPMADDWD`. Exact.
///
/// # Safety
///
/// AVX2; bytes `[b·32, b·32 + 32)` of `qa` readable.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn block_sums<const FIVE: bool>(values: __m256i, qa: *const i8, b: usize) -> __m256i {
    // SAFETY: the caller's contract: 32 bytes at `qa + b·32`, read unaligned.
    unsafe {
        let codes = _mm256_loadu_si256(qa.add(b * BLOCK).cast());
        let pairs = _mm256_sub_epi16(
            _mm256_maddubs_epi16(values, codes),
            _mm256_maddubs_epi16(_mm256_set1_epi8(if FIVE { 16 } else { 8 }), codes),
        );
        _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
    }
}

/// One Q5_0 (Q4_0) row dotted with a Q8_0 row: `dot_q5_0_q8_0`'s (`dot_q4_0_q8_0`'s) bits.
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

/// One Q5_0 row dotted with `R` Q8_0 rows, each with `dot_q5_0_q8_0`'s bits when the rows have
/// the same length (otherwise the blocks every row has in common): four blocks at a time, their
/// values unpacked and f16 scales converted once for all rows, each row's four integer sums in
/// AVX2 and its four block terms `(d_w · d_a) · (f32)sumi` (Q4_0: `((f32)sumi · d_w) · d_a`) in
/// four lanes (`VMULPS`, no FMA),
/// then added to the row's sum one block after the other.
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
        blocks = blocks.min(r.qs.len() / BLOCK).min(r.d.len());
    }
    let wp = w.as_ptr();
    let mut sumf = [0.0f32; R];
    let mut b = 0;
    // SAFETY: every block read below is `< blocks`, within `w` and each row's `qs` and `d`.
    unsafe {
        while b + 4 <= blocks {
            let v = [
                values::<FIVE>(wp, b),
                values::<FIVE>(wp, b + 1),
                values::<FIVE>(wp, b + 2),
                values::<FIVE>(wp, b + 3),
            ];
            let half = |k: usize| (wp.add((b + k) * bytes) as *const i16).read_unaligned();
            let d = _mm_setr_epi16(half(0), half(1), half(2), half(3), 0, 0, 0, 0);
            let dw = _mm_cvtph_ps(d);
            for (r, sum) in a.iter().zip(&mut sumf) {
                let qa = r.qs.as_ptr();
                let (p0, p1) = (
                    block_sums::<FIVE>(v[0], qa, b),
                    block_sums::<FIVE>(v[1], qa, b + 1),
                );
                let (p2, p3) = (
                    block_sums::<FIVE>(v[2], qa, b + 2),
                    block_sums::<FIVE>(v[3], qa, b + 3),
                );
                // Lanes [block 0, 1, 2, 3] of each half, then the halves added: the four sums.
                let h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
                let sumi = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                let da = _mm_loadu_ps(r.d.as_ptr().add(b));
                // (d_w · d_a) · (f32)sumi (Q4_0: ((f32)sumi · d_w) · d_a), each lane as the
                // portable block term.
                let t = if FIVE {
                    _mm_mul_ps(_mm_mul_ps(dw, da), _mm_cvtepi32_ps(sumi))
                } else {
                    _mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(sumi), dw), da)
                };
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
            let dw = f16_le(w[at], w[at + 1]);
            for (r, sum) in a.iter().zip(&mut sumf) {
                let sumi = hsum(block_sums::<FIVE>(v, r.qs.as_ptr(), b)) as f32;
                *sum += if FIVE {
                    (dw * r.d[b]) * sumi
                } else {
                    (sumi * dw) * r.d[b]
                };
            }
            b += 1;
        }
    }
    sumf
}

/// `matmul_quant` of Q5_0 (`FIVE = false`: Q4_0) weights: each weight row against tiles of [`TILE`] activation rows
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
