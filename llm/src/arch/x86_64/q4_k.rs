//! Q4_K weights × Q8_K activations in AVX2: one weight row against one or several activation
//! rows, each super-block's nibbles unpacked (in [`by_lane`] order) and its scales read once for
//! all of them. Q5_K's super-blocks (`q5_k.rs`) differ only in their fifth bits: the same code
//! with `FIVE`.

use core::arch::x86_64::*;

use super::super::Acts;
use super::super::rows::tiles_k;
use super::k_lanes::{Lanes, by_lane, hsum};
use crate::gguf::QK_K;
use crate::quant::q4_k::{BYTES, packed_scales, scale_min};
use crate::quant::q5_k;
use crate::quant::{QuantRow, f16_le};

/// Activation rows per tile of [`matmul`] (prefill: each super-block unpacked once for four
/// tokens).
const TILE: usize = 4;

/// One super-block, unpacked.
struct Block {
    /// The eight 32-value chunks' values (0..=15, Q5_K 0..=31), each in [`by_lane`] order.
    values: [__m256i; 8],
    /// Each chunk's 6-bit scale, in every i16 lane.
    scales: [__m256i; 8],
    /// The minimum of each 16 values (`m[j / 2]`), as i16.
    mins: __m256i,
    /// `d` and `dmin` (f16 → f32, exact).
    d: f32,
    dmin: f32,
}

/// 16 in each byte of `qh` whose bit `c` is set, 0 elsewhere.
///
/// # Safety
///
/// AVX2.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn fifth_bits(qh: __m256i, c: usize) -> __m256i {
    // SAFETY: register-only AVX2 (the caller's contract).
    unsafe {
        let bit = _mm256_set1_epi8(1 << c);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
        _mm256_and_si256(set, _mm256_set1_epi8(16))
    }
}

/// Unpacks the super-block `wb` (Q4_K: 144 bytes; `FIVE`: Q5_K, 176 bytes, the 32 bytes of
/// fifth bits `qh` before the nibbles, bit `c` of `qh[l]` the fifth bit of value `32·c + l`).
///
/// # Safety
///
/// AVX2.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn unpack<const FIVE: bool>(wb: &[u8]) -> Block {
    let sc = packed_scales(wb);
    let pairs: [(u8, u8); 8] = core::array::from_fn(|j| scale_min(j, &sc));
    let nibbles_at = if FIVE { 48 } else { 16 };
    // SAFETY: `wb` holds the 144 (176) bytes (the caller's block count): 32 bytes read
    // unaligned at `nibbles_at + 32·i` for i < 4, and at 16; the rest is register-only AVX2.
    unsafe {
        let mask = _mm256_set1_epi8(0x0f);
        let (mut values, mut scales) = ([_mm256_setzero_si256(); 8], [_mm256_setzero_si256(); 8]);
        let qh = _mm256_loadu_si256(wb.as_ptr().add(16).cast());
        for i in 0..4 {
            let q = _mm256_loadu_si256(wb.as_ptr().add(nibbles_at + 32 * i).cast());
            let mut lo = _mm256_and_si256(q, mask);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
            if FIVE {
                lo = _mm256_or_si256(lo, fifth_bits(qh, 2 * i));
                hi = _mm256_or_si256(hi, fifth_bits(qh, 2 * i + 1));
            }
            values[2 * i] = by_lane(lo);
            values[2 * i + 1] = by_lane(hi);
        }
        for (s, p) in scales.iter_mut().zip(&pairs) {
            *s = _mm256_set1_epi16(p.0 as i16);
        }
        let m = |j: usize| pairs[j].1 as i16;
        let mins = _mm256_setr_epi16(
            m(0),
            m(0),
            m(1),
            m(1),
            m(2),
            m(2),
            m(3),
            m(3),
            m(4),
            m(4),
            m(5),
            m(5),
            m(6),
            m(6),
            m(7),
            m(7),
        );
        Block {
            values,
            scales,
            mins,
            d: f16_le(wb[0], wb[1]),
            dmin: f16_le(wb[2], wb[3]),
        }
    }
}

/// The super-block's eight lane sums `aux32[l]` (in lane order) with the 256 activation codes at
/// `qa`: per chunk `VPMADDUBSW` (a value ≤ 31 times a code: no pair saturates) and `VPMADDWD`
/// with the chunk's scale, added. Exact.
///
/// # Safety
///
/// AVX2; 256 bytes at `qa` readable.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn lane_sums(blk: &Block, qa: *const i8) -> __m256i {
    // SAFETY: the caller's contract: 32 bytes at `qa + 32·c`, c < 8, read unaligned.
    unsafe {
        let mut acc = _mm256_setzero_si256();
        for c in 0..8 {
            let codes = by_lane(_mm256_loadu_si256(qa.add(32 * c).cast()));
            let pairs = _mm256_maddubs_epi16(blk.values[c], codes);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, blk.scales[c]));
        }
        acc
    }
}

/// One Q4_K (`FIVE`: Q5_K) row dotted with a Q8_K row: `dot_q4_k_q8_k`'s
/// (`dot_q5_k_q8_k`'s) bits.
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

/// One Q4_K row dotted with `R` Q8_K rows, each with `dot_q4_k_q8_k`'s bits when the rows have
/// the same length (otherwise the super-blocks every row has in common): each super-block
/// unpacked once for all rows; per row its eight lane sums in AVX2, `sums[l] += (d_w · d_a) ·
/// (f32)aux32[l]` in eight lanes, the minimums `Σ bsums[j] · m[j / 2]` by `VPMADDWD` and
/// `sumf −= (dmin_w · d_a) · (f32)sumi`, the lanes added to `sumf` in order at the end.
///
/// # Safety
///
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn dot_rows<const R: usize, const FIVE: bool>(
    w: &[u8],
    a: &[QuantRow<'_>; R],
) -> [f32; R] {
    let bytes = if FIVE { q5_k::BYTES } else { BYTES };
    // The portable `zip`'s block count.
    let mut blocks = w.len() / bytes;
    for r in a {
        blocks = blocks
            .min(r.qs.len() / QK_K)
            .min(r.d.len())
            .min(r.bsums.len() / (QK_K / 16));
    }
    // SAFETY: register-only AVX.
    let mut lanes = [unsafe { Lanes::new() }; R];
    // SAFETY: every super-block read below is `< blocks`: within `w` and each row's `qs`, `d`,
    // `bsums`.
    unsafe {
        for b in 0..blocks {
            let blk = unpack::<FIVE>(&w[b * bytes..][..bytes]);
            for (r, l) in a.iter().zip(&mut lanes) {
                let da = r.d[b];
                l.block(lane_sums(&blk, r.qs.as_ptr().add(b * QK_K)), blk.d * da);
                let bs = _mm256_loadu_si256(r.bsums.as_ptr().add(b * (QK_K / 16)).cast());
                l.minus(blk.dmin * da, hsum(_mm256_madd_epi16(bs, blk.mins)));
            }
        }
        let mut out = [0f32; R];
        for (o, l) in out.iter_mut().zip(lanes) {
            *o = l.total();
        }
        out
    }
}

/// `matmul_quant` of Q4_K (`FIVE`: Q5_K) weights: each weight row against tiles of [`TILE`] activation rows
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
    tiles_k(
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
