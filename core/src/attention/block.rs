//! The multi-row page pass of prefill: a block of consecutive query rows walks the pages once,
//! and each page every row sees whole (all its keys kept by every row of the block) is one call
//! of the page kernel for all of the block's query heads, so each K and V row is read and decoded
//! once per run of heads across rows instead of once per row.
//!
//! The block's heads are laid out KV head by KV head (row `b`'s query head `kh·group + i` is
//! head `kh·rows·group + b·group + i` of a layout with `rows · group` query heads per KV head),
//! so the page kernel sees one longer group. Every head's arithmetic in the kernel is what it
//! would be alone, so each row's results are those of computing it alone: the same pages in the
//! same order, the same segments merged in the same order. Pages some row sees only in part (the
//! block's last keys, a window's edge) are computed row by row on that row's state.

use super::dispatch;
use super::page::{
    Heads, Keys, Layout, PageSlices, Scratch, finish_row, k_rotated, kept_by, merge, prepare_query,
    segment_pages, segments,
};
use super::{Window, block_len};
use crate::arch::query::{self, QueryCodes};
use crate::error::Result;

/// Query rows one block computes together, at most.
pub(crate) const MAX_ROWS: usize = 8;

/// The most rows (up to [`MAX_ROWS`]) whose block fits in `room` slots; 1 if not two. A block
/// of `b` rows takes `block_scratch_len(.., b)` slots: the block's query rows (rotated for
/// rotated keys) and quantized query, its accumulators, maxima, sums and a page of scores per
/// head, and each row's merged maxima and sums (see [`Block::split`]).
pub(crate) fn rows_for(l: &Layout, room: usize) -> usize {
    let q_heads = (l.kv_heads * l.group) as u16;
    (2..=MAX_ROWS)
        .rev()
        .find(|&b| block_len(q_heads, l.page_tokens as u16, l.head_dim as u16, b) <= room)
        .unwrap_or(1)
}

/// A block's scratch, its heads in the block's order (see the module's text) but for `row_max`
/// and `row_sum` (row by row, each in query-head order).
pub(crate) struct Block<'s> {
    q: &'s mut [f32],
    codes: &'s mut [i16],
    scales: &'s mut [f32],
    out: &'s mut [f32],
    max: &'s mut [f32],
    sum: &'s mut [f32],
    scores: &'s mut [f32],
    row_max: &'s mut [f32],
    row_sum: &'s mut [f32],
}

impl<'s> Block<'s> {
    /// Cuts `room` (at least `block_scratch_len(.., rows)` long) into a block of `rows` rows.
    pub(crate) fn split(l: &Layout, rows: usize, room: &'s mut [f32]) -> Self {
        let heads = rows * l.kv_heads * l.group;
        let all = heads * l.head_dim;
        let (q, rest) = room.split_at_mut(all);
        let (codes, rest) = rest.split_at_mut(query::slots(heads, l.head_dim));
        let (codes, scales) = query::split(codes, all);
        let (out, rest) = rest.split_at_mut(all);
        let (max, rest) = rest.split_at_mut(heads);
        let (sum, rest) = rest.split_at_mut(heads);
        let (scores, rest) = rest.split_at_mut(heads * l.page_tokens);
        let (row_max, rest) = rest.split_at_mut(heads);
        let row_sum = &mut rest[..heads];
        Block {
            q,
            codes,
            scales,
            out,
            max,
            sum,
            scores,
            row_max,
            row_sum,
        }
    }
}

/// For row `b` of a block of `rows`: `(natural, block)`, the first query head of each KV head's
/// run in the row's own order and in the block's (`group` heads each).
fn runs(l: &Layout, rows: usize, b: usize) -> impl Iterator<Item = (usize, usize)> {
    let g = l.group;
    (0..l.kv_heads).map(move |kh| (kh * g, (kh * rows + b) * g))
}

/// Copies row `b`'s heads (`per` values each) between the block's order and the row's own:
/// from the block's `from` into the row's `to` if `into_row`, else from the row's `from` into the
/// block's `to`. Out of line: a handful of short copies, called per row and page edge, not per key.
#[inline(never)]
fn copy_runs<T: Copy>(
    l: &Layout,
    rows: usize,
    b: usize,
    per: usize,
    from: &[T],
    to: &mut [T],
    into_row: bool,
) {
    let n = l.group * per;
    for (h, v) in runs(l, rows, b) {
        let (f, t) = if into_row { (v, h) } else { (h, v) };
        to[t * per..][..n].copy_from_slice(&from[f * per..][..n]);
    }
}

/// Query rows `q` (`[rows][q_heads][head_dim]`, 2 ≤ rows ≤ the block's) at positions `t0..` into
/// `out`, with the bits of `attend`'s row by row computation (see the module's text). `s` serves
/// as one row's state for the pages computed row by row and for the merges.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
pub(crate) fn attend_rows<'d>(
    l: &Layout,
    window: Option<Window>,
    t0: u32,
    q: &[f32],
    out: &mut [f32],
    s: &mut Scratch<'_>,
    blk: &mut Block<'_>,
    page: &dyn Fn(usize) -> Result<PageSlices<'d>>,
) -> Result<()> {
    let (hd, p) = (l.head_dim, l.page_tokens);
    let q_heads = l.kv_heads * l.group;
    let row = q_heads * hd;
    let rows = q.len() / row;
    let heads = rows * q_heads;
    let vl = Layout {
        group: rows * l.group,
        ..*l
    };
    let Block {
        q: bq,
        codes,
        scales,
        out: bout,
        max: bmax,
        sum: bsum,
        scores,
        row_max,
        row_sum,
    } = blk;
    let bq = &mut bq[..heads * hd];
    for b in 0..rows {
        copy_runs(l, rows, b, hd, &q[b * row..][..row], bq, false);
    }
    let int8 = query::int8_group(l.k_fmt);
    let nb = int8.map_or(0, |g| hd / g);
    // Groups never span heads (`g` divides `head_dim`): each head's codes are its own.
    let codes_all = &mut codes[..heads * hd];
    if k_rotated(l) {
        prepare_query(l, Some(&mut *bq), &[], codes_all, scales);
    } else {
        prepare_query(l, None, bq, codes_all, scales);
    }
    let t_last = t0 + rows as u32 - 1;
    let per = segment_pages(p);
    let last = t_last as usize / p;
    let whole = kept_by(window, t_last);
    for k in 0..segments(l, t_last) {
        bout[..heads * hd].fill(0.0);
        bmax[..heads].fill(f32::NEG_INFINITY);
        bsum[..heads].fill(0.0);
        for pi in k * per..((k + 1) * per).min(last + 1) {
            let j0 = (pi * p) as u32;
            let j1 = j0 + p as u32;
            // Seen whole by the last row, by every row: a key the last row keeps is kept by the
            // earlier ones (nearer to it), and every key is at most `t0`.
            if j1 <= t0 + 1 && (j0..j1).all(whole) {
                let kv = page(pi)?;
                let keys = Keys {
                    kv: &kv,
                    j0,
                    j1,
                    kept: &whole,
                };
                let heads = Heads {
                    q: bq,
                    qc: QueryCodes {
                        codes: &codes[..heads * hd],
                        scales: &scales[..heads * nb],
                    },
                    out: &mut bout[..heads * hd],
                    max: &mut bmax[..heads],
                    sum: &mut bsum[..heads],
                    scores: &mut scores[..heads * p],
                };
                dispatch::attend_page(&vl, &keys, heads);
                continue;
            }
            let mut kv = None;
            for b in 0..rows {
                let t = t0 + b as u32;
                let kept = kept_by(window, t);
                let j1 = j1.min(t + 1);
                if j0 > t || !(j0..j1).any(kept) {
                    continue;
                }
                let kv = match &kv {
                    Some(kv) => kv,
                    None => kv.insert(page(pi)?),
                };
                // The row's own query (rotated, or the caller's) and quantized query.
                let q_row = if k_rotated(l) {
                    copy_runs(l, rows, b, hd, bq, s.q_rot, true);
                    &*s.q_rot
                } else {
                    &q[b * row..][..row]
                };
                if int8.is_some() {
                    copy_runs(l, rows, b, hd, codes, s.codes, true);
                    copy_runs(l, rows, b, nb, scales, s.qscales, true);
                }
                state(
                    l,
                    rows,
                    b,
                    (bout, bmax, bsum),
                    (s.seg_out, s.seg_max, s.seg_sum),
                    true,
                );
                let keys = Keys {
                    kv,
                    j0,
                    j1,
                    kept: &kept,
                };
                let heads = Heads {
                    q: q_row,
                    qc: QueryCodes {
                        codes: &*s.codes,
                        scales: &*s.qscales,
                    },
                    out: &mut s.seg_out[..row],
                    max: &mut *s.seg_max,
                    sum: &mut *s.seg_sum,
                    scores: &mut *s.scores,
                };
                dispatch::attend_page(l, &keys, heads);
                state(
                    l,
                    rows,
                    b,
                    (bout, bmax, bsum),
                    (s.seg_out, s.seg_max, s.seg_sum),
                    false,
                );
            }
        }
        // Each row's segment into its state so far, as `attend` merges it.
        for b in 0..rows {
            let t = t0 + b as u32;
            if k >= segments(l, t) {
                continue;
            }
            state(
                l,
                rows,
                b,
                (bout, bmax, bsum),
                (s.seg_out, s.seg_max, s.seg_sum),
                true,
            );
            let out_row = &mut out[b * row..][..row];
            let (m, z) = (
                &mut row_max[b * q_heads..][..q_heads],
                &mut row_sum[b * q_heads..][..q_heads],
            );
            if k == 0 {
                out_row.copy_from_slice(&s.seg_out[..row]);
                m.copy_from_slice(s.seg_max);
                z.copy_from_slice(s.seg_sum);
            } else {
                merge(l, out_row, m, z, s.seg_out, s.seg_max, s.seg_sum);
            }
        }
    }
    for (b, out_row) in out.chunks_exact_mut(row).enumerate() {
        finish_row(l, out_row, &row_sum[b * q_heads..][..q_heads]);
    }
    Ok(())
}

/// Row `b`'s softmax state (accumulators, maxima, sums) between the block (`block`) and one
/// row's (`row`, a segment's state in `Scratch`): into `row` if `to_row`, else back.
fn state(
    l: &Layout,
    rows: usize,
    b: usize,
    block: (&mut [f32], &mut [f32], &mut [f32]),
    row: (&mut [f32], &mut [f32], &mut [f32]),
    to_row: bool,
) {
    let pairs = [
        (block.0, row.0, l.head_dim),
        (block.1, row.1, 1),
        (block.2, row.2, 1),
    ];
    for (block, row, per) in pairs {
        if to_row {
            copy_runs(l, rows, b, per, block, row, true);
        } else {
            copy_runs(l, rows, b, per, row, block, false);
        }
    }
}
