//! Q6_K weights × Q8_K activations in AVX2: one weight row against one or several activation
//! rows, each super-block's six-bit values unpacked (in [`by_lane`] order) and its scales read
//! once for all of them.

use core::arch::x86_64::*;

use super::super::Acts;
use super::super::rows::tiles_k;
use super::k_lanes::{Lanes, by_lane};
use crate::gguf::QK_K;
use crate::quant::q6_k::BYTES;
use crate::quant::{QuantRow, f16_le};

/// Activation rows per tile of [`matmul`] (prefill: each super-block unpacked once for four
/// tokens).
const TILE: usize = 4;

/// One super-block, unpacked.
struct Block {
    /// The eight 32-value chunks' unsigned six-bit values `q` (0..=63, the value is `q − 32`),
    /// each in [`by_lane`] order.
    values: [__m256i; 8],
    /// Chunk `c`'s two i8 scales (of its values 0–15 and 16–31) as i16, alternating: the
    /// `VPMADDWD` partner of [`by_lane`]'s pairs.
    scales: [__m256i; 8],
    /// `d` (f16 → f32, exact).
    d: f32,
}

/// Unpacks the super-block `wb` (`BYTES` bytes).
///
/// # Safety
///
/// AVX2.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn unpack(wb: &[u8]) -> Block {
    // SAFETY: `wb` holds the 210 bytes (the caller's block count): 32 bytes read unaligned at
    // `64·h`, `64·h + 32` and `128 + 32·h` for h < 2; the rest is register-only AVX2.
    unsafe {
        let p = wb.as_ptr();
        let (m4, m30) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30));
        let mut values = [_mm256_setzero_si256(); 8];
        for h in 0..2 {
            let l0 = _mm256_loadu_si256(p.add(64 * h).cast());
            let l1 = _mm256_loadu_si256(p.add(64 * h + 32).cast());
            let qh = _mm256_loadu_si256(p.add(128 + 32 * h).cast());
            // Bits 0–1, 2–3, 4–5, 6–7 of `qh` moved to bits 4–5 of each byte.
            let top = [
                _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30),
                _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30),
                _mm256_and_si256(qh, m30),
                _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30),
            ];
            let low = [
                _mm256_and_si256(l0, m4),
                _mm256_and_si256(l1, m4),
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
            ];
            for k in 0..4 {
                values[4 * h + k] = by_lane(_mm256_or_si256(low[k], top[k]));
            }
        }
        let s = |g: usize| wb[192 + g] as i8 as i16 as u16 as u32;
        let mut scales = [_mm256_setzero_si256(); 8];
        for (c, sc) in scales.iter_mut().enumerate() {
            *sc = _mm256_set1_epi32((s(2 * c) | (s(2 * c + 1) << 16)) as i32);
        }
        Block {
            values,
            scales,
            d: f16_le(wb[208], wb[209]),
        }
    }
}

/// The super-block's eight lane sums `aux32[l]` (in lane order) with the 256 activation codes at
/// `qa`: per chunk `VPMADDUBSW` of `q` (≤ 63) and of 32 with the codes (no pair saturates:
/// |2 · 63 · 128| < 2¹⁵), their difference (each pair `(q − 32) · a` summed, |·| ≤ 8192: exact
/// in i16), `VPMADDWD` with the chunk's two scales, added. Exact.
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
        let k32 = _mm256_set1_epi8(32);
        for c in 0..8 {
            let codes = by_lane(_mm256_loadu_si256(qa.add(32 * c).cast()));
            let pairs = _mm256_sub_epi16(
                _mm256_maddubs_epi16(blk.values[c], codes),
                _mm256_maddubs_epi16(k32, codes),
            );
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, blk.scales[c]));
        }
        acc
    }
}

/// One Q6_K row dotted with a Q8_K row: `dot_q6_k_q8_k`'s bits.
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

/// One Q6_K row dotted with `R` Q8_K rows, each with `dot_q6_k_q8_k`'s bits when the rows have
/// the same length (otherwise the super-blocks every row has in common): each super-block
/// unpacked once for all rows; per row its eight lane sums in AVX2 and `sums[l] += (d_w · d_a)
/// · (f32)aux32[l]` in eight lanes, the lanes added in order at the end.
///
/// # Safety
///
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn dot_rows<const R: usize>(w: &[u8], a: &[QuantRow<'_>; R]) -> [f32; R] {
    // The portable `zip`'s block count.
    let mut blocks = w.len() / BYTES;
    for r in a {
        blocks = blocks.min(r.qs.len() / QK_K).min(r.d.len());
    }
    // SAFETY: register-only AVX.
    let mut lanes = [unsafe { Lanes::new() }; R];
    // SAFETY: every super-block read below is `< blocks`: within `w` and each row's `qs`, `d`.
    unsafe {
        for b in 0..blocks {
            let blk = unpack(&w[b * BYTES..][..BYTES]);
            for (r, l) in a.iter().zip(&mut lanes) {
                let aux32 = lane_sums(&blk, r.qs.as_ptr().add(b * QK_K));
                l.block(aux32, blk.d * r.d[b]);
            }
        }
        let mut out = [0f32; R];
        for (o, l) in out.iter_mut().zip(lanes) {
            *o = l.total();
        }
        out
    }
}

/// `matmul_quant` of Q6_K weights: each weight row against tiles of [`TILE`] activation rows
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
