//! Whole pages of int8 rows for a run of any `G` query heads (1 to 4) and any head_dim whose key
//! groups the ISA's integer dot products take: the Cortex-M page kernels behind
//! `Strategy::int8_pages` on DSP cores with an FPU (M4, M7, M33), for every run length (SmolLM2's
//! three heads over head_dim 64, Gemma 3's four over 256, Qwen3's two over 128, Llama 3.2's four
//! over 64). Generic in the run length: a page's rows lie a fixed stride apart, the query is
//! interleaved by head once per page (`dsp_runs::interleave_run`) for `dsp_runs`'s `asm!` score
//! loop nest (each key word decoded once for all the run's heads: `SXTB16`, then two `SMLAD` per
//! head), and the value accumulators of a block of lanes stay in registers across all of the
//! page's rows (`dsp_values::add_rows_wide`: eight lanes for runs of up to three heads;
//! `dsp_values::add_rows_four`: four for four heads). Each score and each output element takes its
//! terms in the portable kernels' order: the same bits.

use super::{dsp_runs, dsp_values};
use crate::arch::query::QueryCodes;
use crate::arch::rows::PageRows;
use core::mem::MaybeUninit;

/// The longest head row the score kernel takes.
const MAX_HD: usize = 256;

/// Words of the score kernel's query (`dsp_runs::RunScores::q`): four heads of [`MAX_HD`]
/// codes, two a word, and their scales (a group of 32 codes at least).
const QUERY_WORDS: usize = 4 * (MAX_HD / 2 + MAX_HD / 32);

/// Lanes of one step of the value kernel for a run of four heads (sixteen accumulators).
const V_LANES: usize = 4;

/// Lanes of one step of the value kernel for runs of up to three heads (24 accumulators).
const WIDE_LANES: usize = 8;

/// `PageKernels::int8_page_scores` for a run of `G` heads: `scores[h·p + r]` for every row `r`
/// of `rows` (int8 K rows of group `g`), [`kernels::int8_scores`](crate::arch::kernels::int8_scores)'s
/// bits, in one `asm!` loop nest (`dsp_runs::page_scores_run`) over the query interleaved by
/// head. `false`, nothing written, unless the shape fits (`g` a multiple of 32, head_dim a
/// multiple of `g` of at most [`MAX_HD`] codes, every row's codes and scales within the view,
/// `G` heads' `p` scores within `scores`, a run length the loop takes).
#[inline(always)]
pub(super) fn scores<const G: usize>(
    q: QueryCodes<'_>,
    rows: &PageRows<'_>,
    g: usize,
    scores: &mut [f32],
    p: usize,
) -> bool {
    let hd = q.codes.len() / G;
    let n = rows.n;
    if !matches!(G, 1..=4) || g == 0 || g % 32 != 0 || n == 0 || n > p {
        return false;
    }
    if hd % g != 0 || hd > MAX_HD {
        return false;
    }
    let nb = hd / g;
    if rows.row_bytes < hd
        || rows.stride < hd
        || rows.scale_bytes < 2 * nb
        || rows.sstride < 2 * nb
        || scores.len() < G * p
        || q.scales.len() < G * nb
    {
        return false;
    }
    // The query's codes two words at a time.
    let Ok(quads) = bytemuck::try_cast_slice::<i16, [u32; 2]>(q.codes) else {
        return false;
    };
    // The query as the loop reads it (`RunScores::q`): group by group, its quads interleaved by
    // head, then its scales. Every word written before the loop reads it: not cleared first.
    let mut qi = [MaybeUninit::<u32>::uninit(); QUERY_WORDS];
    let (words, gw) = (hd / 4, g / 4);
    let block = 2 * G * gw + G;
    for (b, blk) in qi.chunks_exact_mut(block).take(nb).enumerate() {
        // SAFETY: `gw ≥ 8`; head `h`'s quads `b·gw..(b + 1)·gw` lie at `h·words + b·gw`
        // within `quads` (`G·words` of them, aligned), `8·words` bytes apart; `blk` holds
        // `2·G·gw` words of them and `G` scales.
        unsafe {
            dsp_runs::interleave_run::<G>(
                blk.as_mut_ptr().cast(),
                quads[b * gw..].as_ptr().cast(),
                8 * words,
                gw,
            )
        };
        for (h, out) in blk[2 * G * gw..].iter_mut().enumerate() {
            out.write(q.scales[h * nb + b].to_bits());
        }
    }
    let at = nb * block;
    let mut st = dsp_runs::RunScores {
        q: qi.as_ptr().cast(),
        q_end: qi[at..].as_ptr().cast(),
        more_steps: g / 32 - 1,
        advance: rows.stride - hd,
        scale_advance: rows.sstride - 2 * nb,
        out_stride: 4 * p,
        rows: n,
        scales: rows.scales.as_ptr(),
        out: scores.as_mut_ptr(),
    };
    // SAFETY: `n ≥ 1`, `nb ≥ 1`; `qi` holds the run's query as `RunScores::q` lays it out up to
    // `q_end` (aligned, every word written above); rows `r < n` lie `stride` bytes apart within
    // the view, each with `hd` codes and `nb` scales (`sstride` apart; checked above); head
    // `h`'s score of row `r` lies at `h·p + r < G·p ≤ scores.len()`, which this function
    // borrows mutably.
    unsafe { dsp_runs::page_scores_run::<G>(&mut st, rows.vals.as_ptr()) }
}

/// `PageKernels::int8_page_values` for a run of `G` heads: `acc[h·d + i] += w[h·p + r] ·
/// rows[r][i]` for every row `r` of `rows` (int8 V rows of group `g`) in order,
/// [`kernels::int8_add_scaled_rows`](crate::arch::kernels::int8_add_scaled_rows)'s bits: each
/// row's weights times its group's scale (`kernels::scale_weights`'s products), then each
/// product of that and a code added in row order. `false`, nothing written, unless the shape
/// fits (`g` a multiple of [`WIDE_LANES`] for runs of up to three heads, of [`V_LANES`] for
/// four; every format's groups are multiples of 32), head_dim a multiple of `g`, every row's values and
/// scales within the view, `G` heads' `p` weights within `w`, a run length the loops take).
#[inline(always)]
pub(super) fn values<const G: usize>(
    acc: &mut [f32],
    w: &[f32],
    p: usize,
    rows: &PageRows<'_>,
    g: usize,
) -> bool {
    let d = acc.len() / G;
    let n = rows.n;
    // Runs of up to three heads take eight lanes a step, runs of four four.
    let lanes = if G < 4 { WIDE_LANES } else { V_LANES };
    if !matches!(G, 1..=4) || g == 0 || g % lanes != 0 || d % g != 0 || n == 0 || n > p {
        return false;
    }
    if w.len() < G * p || rows.row_bytes < d || rows.scale_bytes < 2 * (d / g) {
        return false;
    }
    /// Rows whose weights × scales are taken at a time.
    const CHUNK: usize = 16;
    // Each chunk's and group's products written before the value loop reads them.
    let mut ps = [MaybeUninit::<[f32; G]>::uninit(); CHUNK];
    let (vals, accp) = (rows.vals.as_ptr(), acc.as_mut_ptr());
    for r0 in (0..n).step_by(CHUNK) {
        let m = (n - r0).min(CHUNK);
        for (k, off) in (0..d).step_by(g).enumerate() {
            let sc = rows.scales[r0 * rows.sstride + 2 * k..].as_ptr();
            // SAFETY: `m ≥ 1` rows of `ps`; head `h`'s weights `w[h·p + r0..][..m]` lie within
            // `w` (`r0 + m ≤ n ≤ p`, `w.len() ≥ G·p`); row `r0 + j`'s scale of group `k < d / g`
            // lies at `(r0 + j)·sstride + 2k`, within `rows.scales` (the view, checked above).
            unsafe {
                dsp_values::weights_run::<G>(
                    ps.as_mut_ptr().cast(),
                    w[r0..].as_ptr(),
                    p,
                    sc,
                    rows.sstride,
                    m,
                )
            };
            for at in (off..off + g).step_by(lanes) {
                let heads = accp.wrapping_add(at);
                let row = vals.wrapping_add(r0 * rows.stride + at);
                let ps = ps.as_ptr().cast();
                // SAFETY: `m ≥ 1`; `at + lanes ≤ d` (`lanes` divides `g`, which divides `d`)
                // and `acc.len() ≥ G·d`: each head's block `[h·d + at, h·d + at + lanes)` lies
                // within `acc`, which this function borrows mutably (no other reference in
                // use); `ps` holds the `m` rows' products, written above; rows `r0..r0 + m`
                // (≤ n) lie `stride` apart from `row`, each one's bytes `[at, at + lanes)`
                // within its `d` value bytes, within the view.
                unsafe {
                    if G < 4 {
                        dsp_values::add_rows_wide::<G>(heads, d, ps, m, row, rows.stride)
                    } else {
                        dsp_values::add_rows_four::<G>(heads, d, ps, m, row, rows.stride)
                    }
                };
            }
        }
    }
    true
}
