//! Whole pages of int8 rows for a run of `G` query heads (1 to 4) per KV head with Helium (M55,
//! M85): the page kernels behind `Strategy::int8_pages`, generic in the run length (Gemma 3's
//! four heads over head_dim 256, Qwen3's two over 128, Llama 3.2's four over 64, SmolLM2's
//! three over 64). A page's rows lie a fixed stride apart, so each row is one pointer step, the
//! query's slices and scales are taken once per page, a chunk's integer sums of every group and
//! head come from one `asm!` loop nest (`mve_scores::page_sums`), its scores from them four rows
//! per vector, and the value accumulators of a block of lanes stay in registers across all of
//! the page's rows (up to [`CHUNK`] at a time). Each score and each output element takes its
//! terms in the portable kernels' order: the same bits.

use core::mem::MaybeUninit;

use super::mve_scores::{self, CHUNK, PageSums};
use super::mve_values::{self, AddRows, value_lanes};
use crate::arch::query::QueryCodes;
use crate::arch::rows::PageRows;

/// Groups per head row the score kernel takes (head_dim 256 in groups of 32).
const MAX_GROUPS: usize = 8;

/// Integer sums of a chunk: head `h`'s sum of row `r`'s group `b` at `(G·b + h)·CHUNK + r`
/// (four heads of [`MAX_GROUPS`] groups at most).
const SUMS: usize = 4 * MAX_GROUPS * CHUNK;

/// Whether the score loops take groups of `g` codes: whole chunks of 16
/// (`mve_scores::page_sums`), exact in `i32` up to 256.
#[inline(always)]
fn takes(g: usize) -> bool {
    g != 0 && g % 16 == 0 && g <= 256
}

/// `PageKernels::int8_page_scores` for a run of `G` heads: `scores[h·p + r]` for every row `r`
/// of `rows` (int8 K rows of group `g`), [`kernels::int8_scores`](crate::arch::kernels::int8_scores)'s
/// bits: the integer sums of up to [`CHUNK`] rows and all their groups in one `asm!` loop nest,
/// then each row's score from its groups in order, four rows at a time
/// (`mve_scores::scores_x4`). `false`, nothing written, unless the shape fits (`G` from 1 to 4,
/// `g` a multiple of 16 up to 256, head_dim a multiple of `g` of at most [`MAX_GROUPS`]
/// groups, every row's codes and scales within the view and the rows at least a head row
/// apart, a page of a multiple of four rows with its scales 2-aligned, `G` heads' `p` scores
/// within `scores`).
// Out of line: one copy per run length for the whole-page and the general page loops (inline in
// both, the chat firmware overflowed the M55's 512 KiB of code memory).
#[inline(never)]
pub(super) fn scores<const G: usize>(
    q: QueryCodes<'_>,
    rows: &PageRows<'_>,
    g: usize,
    scores: &mut [f32],
    p: usize,
) -> bool {
    let hd = q.codes.len() / G.max(1);
    if !(1..=4).contains(&G) || !takes(g) || hd % g != 0 || rows.n > p {
        return false;
    }
    let nb = hd / g;
    if !(1..=MAX_GROUPS).contains(&nb) || q.scales.len() < G * nb {
        return false;
    }
    // Every row's `hd` codes and `nb` scales within the view, rows at least `hd` bytes apart
    // (the key pointer steps over a row's codes, then on to the next row).
    if rows.row_bytes < hd || rows.scale_bytes < 2 * nb || rows.stride < hd {
        return false;
    }
    // The scales are gathered as halfwords and four scores stored at a time: a page of a
    // multiple of four rows, its scales aligned.
    if p % 4 != 0
        || rows.sstride % 2 != 0
        || rows.scales.as_ptr().align_offset(2) != 0
        || scores.len() < G * p
    {
        return false;
    }
    let mut qs = [[0f32; 4]; MAX_GROUPS];
    for (b, qs) in qs.iter_mut().enumerate().take(nb) {
        for (h, qs) in qs.iter_mut().enumerate().take(G) {
            *qs = q.scales[h * nb + b];
        }
    }
    let n = rows.n;
    // Each sum is written by `page_sums` before `scores_x4` reads it, except past the last row
    // of a last block of fewer than four (scores no one reads): cleared for such pages only.
    let mut isums = [MaybeUninit::<i32>::uninit(); SUMS];
    if n % 4 != 0 {
        isums.fill(MaybeUninit::new(0));
    }
    let codes = q.codes.as_ptr();
    let mut sums = PageSums {
        q: core::array::from_fn(|h| codes.wrapping_add(h.min(G - 1) * hd)),
        chunks: g / 16 - 1,
        advance: rows.stride - hd,
        back: nb * G * CHUNK * 4 - 4,
        q_end: codes.wrapping_add(hd),
        k_end: rows.vals.as_ptr(),
    };
    for r0 in (0..n).step_by(CHUNK) {
        let m = (n - r0).min(CHUNK);
        let k = rows.vals[r0 * rows.stride..].as_ptr();
        sums.k_end = k.wrapping_add(m * rows.stride);
        let out = isums.as_mut_ptr().cast::<i32>();
        // SAFETY: checked above: `1 ≤ G ≤ 4`, `nb ≥ 1` groups of `g` codes (a multiple of 16;
        // `chunks` the further 16s), each query row `hd = nb·g` codes within `q.codes`
        // (`q.codes.len() ≥ G·hd`), the chunk's `m ≥ 1` key rows `stride ≥ hd` bytes apart
        // within `rows.vals` (the view's `row_bytes ≥ hd`), so `k_end = k + m·stride` is
        // reached after row `m − 1`; `isums` holds `G · nb · CHUNK ≤ SUMS` sums; `back` and
        // `q_end` as the loops need.
        unsafe { mve_scores::page_sums::<G>(&sums, k, out) };
        scale4::<G>(&isums, rows, r0, m, &qs, nb, scores, p);
    }
    true
}

/// The scores of rows `r0..r0 + m` (within a chunk, `m ≤ CHUNK`) of a run of `G` heads from
/// their integer sums, four rows per `mve_scores::scores_x4`. A last block of fewer than four rows
/// reads the last row's scales for the rest and writes scores past row `m` that no one reads
/// (within the page's `p`, a multiple of four: `scores` checked it, the scales' alignment and
/// `scores.len() ≥ G·p`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn scale4<const G: usize>(
    isums: &[MaybeUninit<i32>; SUMS],
    rows: &PageRows<'_>,
    r0: usize,
    m: usize,
    qs: &[[f32; 4]; MAX_GROUPS],
    nb: usize,
    scores: &mut [f32],
    p: usize,
) {
    let half = rows.sstride / 2;
    let full = scale_offsets(half, 3);
    let out = scores.as_mut_ptr();
    for j in (0..m).step_by(4) {
        let offs = if j + 4 <= m {
            full
        } else {
            scale_offsets(half, m - 1 - j)
        };
        let sc = rows.scales[(r0 + j) * rows.sstride..].as_ptr();
        // SAFETY: the sums of rows `j..j + 4` of every group and head lie within `isums`
        // (`j + 4 ≤ CHUNK`, `G·nb ≤ 4·MAX_GROUPS`), written by `page_sums` (rows `< m`) or
        // cleared (`scores`); each gathered scale is row `r0 + j + min(i, last)`'s (a row of
        // the page, `< n`) group `b < nb`, 2-aligned (checked in `scores`); `qs` holds `nb`
        // groups; the four scores of each head at `h·p + r0 + j` lie within `scores`
        // (`r0 + j < n ≤ p`, `p` a multiple of four, `scores.len() ≥ G·p`).
        unsafe {
            mve_scores::scores_x4::<G>(
                isums[j..].as_ptr().cast(),
                sc,
                &offs,
                qs.as_ptr(),
                nb,
                out.wrapping_add(r0 + j),
                4 * p,
            )
        };
    }
}

/// The offsets in halfwords of four rows' scales from the first's, rows `half` halfwords apart:
/// rows past `last` read row `last`'s (a last block of fewer than four rows).
#[inline(always)]
fn scale_offsets(half: usize, last: usize) -> [u32; 4] {
    core::array::from_fn(|i| (i.min(last) * half) as u32)
}

/// `PageKernels::int8_page_values` for a run of `G` heads: `acc[h·d + i] += w[h·p + r] ·
/// rows[r][i]` for every row `r` of `rows` (int8 V rows of group `g`) in order,
/// [`kernels::int8_add_scaled_rows`](crate::arch::kernels::int8_add_scaled_rows)'s bits: per
/// chunk and group, each row's weights times its scale four rows per vector
/// (`mve_values::weights_x4`), then one `asm!` loop nest over the group's blocks of lanes and the
/// rows (`mve_values::add_rows`). `false`, nothing written, unless the shape fits (`G` from 1 to
/// 4, `g` a multiple of the kernel's lanes, head_dim a multiple of `g`, every row's values and
/// scales within the view, a page of a multiple of four rows with its scales 2-aligned, `G`
/// heads' `p` weights within `w`).
// Out of line, as `scores`.
#[inline(never)]
pub(super) fn values<const G: usize>(
    acc: &mut [f32],
    w: &[f32],
    p: usize,
    rows: &PageRows<'_>,
    g: usize,
) -> bool {
    let d = acc.len() / G.max(1);
    let n = rows.n;
    let lanes = value_lanes(G);
    if !(1..=4).contains(&G) || g == 0 || g % lanes != 0 || d % g != 0 || n > p || w.len() < G * p {
        return false;
    }
    // Every row's `d` value bytes and f16 scale of every group lie within the view (so do the
    // pointers below).
    if rows.row_bytes < d || rows.scale_bytes < 2 * (d / g) {
        return false;
    }
    // The scales are gathered as halfwords and four rows' weights read at a time: a page of a
    // multiple of four rows, its scales aligned.
    if p % 4 != 0 || rows.sstride % 2 != 0 || rows.scales.as_ptr().align_offset(2) != 0 {
        return false;
    }
    let acc_ptr = acc.as_mut_ptr();
    // `kernels::scale_weights`'s products, each chunk's and group's in turn: each row written
    // (`weights4`) before it is read.
    let mut ps = [MaybeUninit::<[f32; 4]>::uninit(); CHUNK];
    for r0 in (0..n).step_by(CHUNK) {
        let m = (n - r0).min(CHUNK);
        for (k, off) in (0..d).step_by(g).enumerate() {
            weights4::<G>(&mut ps, w, p, rows, r0, m, k);
            let first = rows.vals[r0 * rows.stride + off..].as_ptr();
            let mut pv = AddRows {
                ps: ps.as_ptr().cast(),
                n: m,
                head: 4 * d,
                blocks: g / lanes,
            };
            // SAFETY: `acc_ptr` derives from the whole `acc` slice (borrowed mutably by this
            // function, no other reference to it in use), f32-aligned; for each block
            // `at = b·lanes < g`, the heads' blocks at `h·d + off + at` lie within `acc`
            // (`off + g ≤ d`, `acc.len() ≥ G·d`); rows `r0..r0 + m` (≤ n) lie `rows.stride`
            // apart from `first`, each one's bytes `[off + at, off + at + lanes)` within its `d`
            // bytes, within `rows.vals` (the view's `row_bytes ≥ d`); `ps` holds `m ≤ CHUNK`
            // rows, written by `weights4`; `g / lanes ≥ 1`.
            unsafe {
                mve_values::add_rows::<G>(&mut pv, acc_ptr.wrapping_add(off), first, rows.stride)
            };
        }
    }
    true
}

/// `ps[j][h] = w_h[r0 + j] · s_j` for rows `j < m` of a chunk (`m ≤ CHUNK`) and the run's heads'
/// weights `w_h = w[h·p..]`, `s_j` row `r0 + j`'s f16 scale of group `k`: four rows per
/// `mve_values::weights_x4`. A last block of fewer than four rows reads the last row's scale and
/// weights past row `m` that no one reads (within `w`: `p` a multiple of four, `w.len() ≥ G·p`,
/// both checked by `values`, as the scales' alignment).
#[inline(always)]
fn weights4<const G: usize>(
    ps: &mut [MaybeUninit<[f32; 4]>; CHUNK],
    w: &[f32],
    p: usize,
    rows: &PageRows<'_>,
    r0: usize,
    m: usize,
    k: usize,
) {
    let (half, whole) = (rows.sstride / 2, m / 4);
    // Both calls: each gathered scale is group `k`'s of a row `< r0 + m ≤ n`, 2-aligned (checked
    // by `values`); the weights `w[h·p + r0 + j..][..4]` of each block `j` lie within `w`
    // (`r0 + j < n ≤ p`, `p` a multiple of four, `w.len() ≥ G·p`); `ps[j..j + 4]` lies within
    // `ps` (`j + 4 ≤ CHUNK`).
    if whole > 0 {
        let sc = rows.scales[r0 * rows.sstride + 2 * k..].as_ptr();
        let offs = scale_offsets(half, 3);
        let (ps, w) = (ps.as_mut_ptr().cast(), w[r0..].as_ptr());
        let step = 4 * rows.sstride;
        // SAFETY: as above, for the `whole` blocks of four rows from `r0`.
        unsafe { mve_values::weights_x4::<G>(w, 4 * p, sc, step, &offs, ps, whole) };
    }
    let j = 4 * whole;
    if j < m {
        // A last block of fewer than four rows.
        let sc = rows.scales[(r0 + j) * rows.sstride + 2 * k..].as_ptr();
        let offs = scale_offsets(half, m - 1 - j);
        let (ps, w) = (ps[j..].as_mut_ptr().cast(), w[r0 + j..].as_ptr());
        // SAFETY: as above, for the one block from `r0 + j` (its offsets stay on rows `< m`).
        unsafe { mve_values::weights_x4::<G>(w, 4 * p, sc, 0, &offs, ps, 1) };
    }
}
