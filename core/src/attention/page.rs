//! The page loop of attention: every query row of one sequence and layer over its pages, one
//! page of keys at a time (scores, one online-softmax rescale per page, weighted V rows), with
//! the kernels of `kernels` and, for each page, the best build `crate::arch` has for this CPU.

use super::Window;
use super::dispatch;
use crate::arch;
use crate::arch::query::{self, QueryCodes};
#[cfg(not(feature = "small-code"))]
use crate::arch::rows::PageRows;
use crate::arch::rows::Row;
use crate::error::Result;
use crate::format::{ElementFormat, Rotation};
use crate::numeric::floor::{exp_weight, scaled, state};

/// One page of keys for every query head of one query row (what `crate::arch` builds per ISA):
/// the fast kernels, or with `small-code` one rolled path per step (the same bits).
#[cfg(not(feature = "small-code"))]
pub(crate) use super::fast::attend_page;
/// A whole page of int8 (or f16) K and V rows, for ISAs that run it in its own loop (see
/// [`fast::attend_whole_page`](super::fast::attend_whole_page)).
#[cfg(all(
    not(feature = "small-code"),
    any(edgekv_arm_kernels, edgekv_aarch64_kernels)
))]
pub(crate) use super::fast::attend_whole_page;
/// Whether a page takes the whole-page loop.
#[cfg(not(feature = "small-code"))]
#[cfg_attr(
    not(any(edgekv_x86_kernels, edgekv_arm_kernels, edgekv_aarch64_kernels)),
    allow(unused_imports)
)]
pub(crate) use super::fast::whole_page_rows;
/// The same with the declined runs' general kernels of the ISA's choice (x86-64: out of line).
#[cfg(all(not(feature = "small-code"), edgekv_x86_kernels))]
pub(crate) use super::fast::{Declined, Inline, attend_whole_page_with};
#[cfg(feature = "small-code")]
pub(crate) use super::small::attend_page;

/// Keys per segment of a query row: a row whose keys span more pages than a segment holds is
/// computed segment by segment, each with its own online-softmax state (maximum, sum and
/// accumulators per head), merged into the first in order. A split call (see
/// `KvCache::attention_threads`) computes the segments on several threads and merges them in the
/// same order: the same bits. Rows of at most this many keys are one segment.
pub(crate) const SEGMENT_KEYS: usize = 2048;

/// Pages per segment for pages of `p` tokens.
#[inline]
pub(crate) const fn segment_pages(p: usize) -> usize {
    if p >= SEGMENT_KEYS {
        1
    } else {
        SEGMENT_KEYS / p
    }
}

/// Segments of the query row at position `t`.
#[inline]
pub(crate) fn segments(l: &Layout, t: u32) -> usize {
    (t as usize / l.page_tokens + 1).div_ceil(segment_pages(l.page_tokens))
}

/// f32 slots of scratch the merge of segments takes: one more accumulator row, maximum and sum
/// per query head.
pub(crate) const fn merge_slots(q_heads: usize, head_dim: usize) -> usize {
    q_heads * (head_dim + 2)
}

/// The parts of attention's scratch (see [`attend`]).
pub(crate) struct Scratch<'s> {
    max: &'s mut [f32],
    sum: &'s mut [f32],
    pub(super) scores: &'s mut [f32],
    /// A later segment's state, before it is merged.
    pub(super) seg_out: &'s mut [f32],
    pub(super) seg_max: &'s mut [f32],
    pub(super) seg_sum: &'s mut [f32],
    pub(super) q_rot: &'s mut [f32],
    pub(super) codes: &'s mut [i16],
    pub(super) qscales: &'s mut [f32],
}

/// f32 slots of [`Scratch`] for one query row (what `scratch_len_for` counts).
pub(crate) fn scratch_slots(l: &Layout) -> usize {
    let q_heads = l.kv_heads * l.group;
    let row = q_heads * l.head_dim;
    q_heads * (l.page_tokens + 2)
        + merge_slots(q_heads, l.head_dim)
        + if k_rotated(l) { row } else { 0 }
        + query::slots(q_heads, l.head_dim)
}

impl<'s> Scratch<'s> {
    /// Cuts `scratch` (at least `scratch_len_for` long) into its parts.
    pub(crate) fn split(l: &Layout, scratch: &'s mut [f32]) -> Self {
        let (hd, p) = (l.head_dim, l.page_tokens);
        let q_heads = l.kv_heads * l.group;
        let row = q_heads * hd;
        let (max, rest) = scratch.split_at_mut(q_heads);
        let (sum, rest) = rest.split_at_mut(q_heads);
        let (scores, rest) = rest.split_at_mut(q_heads * p);
        let (seg_out, rest) = rest.split_at_mut(row);
        let (seg_max, rest) = rest.split_at_mut(q_heads);
        let (seg_sum, rest) = rest.split_at_mut(q_heads);
        let (q_rot, rest) = rest.split_at_mut(if k_rotated(l) { row } else { 0 });
        let (codes, qscales) = query::split(rest, row);
        Scratch {
            max,
            sum,
            scores,
            seg_out,
            seg_max,
            seg_sum,
            q_rot,
            codes,
            qscales,
        }
    }
}

/// One segment's online-softmax state, owned: what a split call's threads hand back.
#[cfg(feature = "std")]
pub(crate) struct SegmentState {
    pub(crate) out: std::vec::Vec<f32>,
    pub(crate) max: std::vec::Vec<f32>,
    pub(crate) sum: std::vec::Vec<f32>,
}

#[cfg(feature = "std")]
impl Scratch<'_> {
    /// The state [`segment`] left for a first segment: its `row` accumulators, maxima, sums.
    pub(crate) fn state(&self, row: usize) -> SegmentState {
        SegmentState {
            out: self.seg_out[..row].to_vec(),
            max: self.max.to_vec(),
            sum: self.sum.to_vec(),
        }
    }
}

/// Whether K rows are rotated (`rotation` left out: never; such configurations do not plan).
#[inline(always)]
pub(super) fn k_rotated(l: &Layout) -> bool {
    cfg!(feature = "rotation") && l.k_rot.is_some()
}

/// Every query row `q` (`[n][q_heads][head_dim]`, absolute positions from `start`) over the keys
/// `[0, t]` of its position `t` (or the window's subset), into `out` (same shape). `page(i)` gives
/// the K and V bytes of the sequence's `i`-th page; the caller checked that every page a query
/// needs is there (an error from `page` ends the call with `out` partly written). `scratch` (at
/// least [`scratch_slots`] long) holds each query head's running max and sum, one page of scores
/// per head, a segment's state ([`SEGMENT_KEYS`]), the rotated query row (rotated K) and the
/// quantized one (int8 K); what is left past that holds a block of rows computed together
/// (`attention::block`, default builds), if it is long enough for two. With rotated V rows, each
/// output row is rotated back at the end.
///
/// `page` is a trait object, not a generic: the page loop and every kernel under it are then
/// compiled once, in this crate, instead of again in each crate that calls the (allocator-generic)
/// cache's attention — eleven copies in this workspace's test build.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend<'d>(
    l: &Layout,
    window: Option<Window>,
    start: u32,
    q: &[f32],
    out: &mut [f32],
    scratch: &mut [f32],
    page: &dyn Fn(usize) -> Result<PageSlices<'d>>,
) -> Result<()> {
    let row = l.kv_heads * l.group * l.head_dim;
    let (scratch, _rest) = scratch.split_at_mut(scratch_slots(l));
    let mut s = Scratch::split(l, scratch);
    #[cfg(not(feature = "small-code"))]
    {
        let n = q.len() / row;
        let b = super::block::rows_for(l, _rest.len()).min(n);
        if b > 1 {
            let mut blk = super::block::Block::split(l, b, _rest);
            let rows = q.chunks(b * row).zip(out.chunks_mut(b * row));
            for (i, (q, out)) in rows.enumerate() {
                let t0 = start + (i * b) as u32;
                if q.len() == row {
                    attend_row(l, window, t0, q, out, &mut s, page)?;
                } else {
                    super::block::attend_rows(l, window, t0, q, out, &mut s, &mut blk, page)?;
                }
            }
            return Ok(());
        }
    }
    for (qi, (q_row, out_row)) in q
        .chunks_exact(row)
        .zip(out.chunks_exact_mut(row))
        .enumerate()
    {
        attend_row(l, window, start + qi as u32, q_row, out_row, &mut s, page)?;
    }
    Ok(())
}

/// The query row `q_row` at position `t` into `out_row`, segment by segment.
fn attend_row<'d>(
    l: &Layout,
    window: Option<Window>,
    t: u32,
    q_row: &[f32],
    out_row: &mut [f32],
    s: &mut Scratch<'_>,
    page: &dyn Fn(usize) -> Result<PageSlices<'d>>,
) -> Result<()> {
    let row = out_row.len();
    for k in 0..segments(l, t) {
        if k == 0 {
            segment(l, window, t, q_row, 0, s, page, None)?;
            out_row.copy_from_slice(&s.seg_out[..row]);
        } else {
            segment(l, window, t, q_row, k, s, page, Some(&mut *out_row))?;
        }
    }
    finish_row(l, out_row, s.sum);
    Ok(())
}

/// Which keys the query row at position `t` sees (of those up to `t`): all, or the window's.
/// One function, so that every caller's `Keys` has the same type (one build of the page
/// kernels).
#[inline(always)]
pub(super) fn kept_by(window: Option<Window>, t: u32) -> impl Fn(u32) -> bool + Copy {
    move |j| window.is_none_or(|w| w.keeps(t, j))
}

/// Segment `k` of the query row `q_row` at position `t`: its keys' online softmax from a fresh
/// state. Into `s.seg_out` / `s.max` / `s.sum` for the first segment (`merge_into` `None`), or
/// merged into the state so far (`merge_into`: its accumulators; its maxima and sums in `s`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn segment<'d>(
    l: &Layout,
    window: Option<Window>,
    t: u32,
    q_row: &[f32],
    k: usize,
    s: &mut Scratch<'_>,
    page: &dyn Fn(usize) -> Result<PageSlices<'d>>,
    merge_into: Option<&mut [f32]>,
) -> Result<()> {
    let p = l.page_tokens;
    let q_rows = if k_rotated(l) {
        s.q_rot.copy_from_slice(q_row);
        prepare_query(l, Some(&mut *s.q_rot), &[], s.codes, s.qscales);
        &*s.q_rot
    } else {
        prepare_query(l, None, q_row, s.codes, s.qscales);
        q_row
    };
    let first = merge_into.is_none();
    let (max, sum) = if first {
        (&mut *s.max, &mut *s.sum)
    } else {
        (&mut *s.seg_max, &mut *s.seg_sum)
    };
    s.seg_out.fill(0.0);
    max.fill(f32::NEG_INFINITY);
    sum.fill(0.0);
    let per = segment_pages(p);
    let last = t as usize / p;
    for page_index in k * per..((k + 1) * per).min(last + 1) {
        let j0 = (page_index * p) as u32;
        let j1 = (j0 + p as u32).min(t + 1);
        let kept = kept_by(window, t);
        if !(j0..j1).any(kept) {
            continue;
        }
        let kv = page(page_index)?;
        let keys = Keys {
            kv: &kv,
            j0,
            j1,
            kept: &kept,
        };
        let heads = Heads {
            q: q_rows,
            qc: QueryCodes {
                codes: &*s.codes,
                scales: &*s.qscales,
            },
            out: &mut *s.seg_out,
            max: &mut *max,
            sum: &mut *sum,
            scores: &mut *s.scores,
        };
        dispatch::attend_page(l, &keys, heads);
    }
    if let Some(acc) = merge_into {
        merge(l, acc, s.max, s.sum, s.seg_out, s.seg_max, s.seg_sum);
    }
    Ok(())
}

/// Query rows `q` (whole heads) as the page kernels take them: `rotate`, the same rows, rotated
/// in place for rotated keys (then `q` is ignored), then quantized into `codes` and `scales` for
/// int8 keys. Out of line: one copy for the row and block paths.
#[inline(never)]
pub(super) fn prepare_query(
    l: &Layout,
    rotate: Option<&mut [f32]>,
    q: &[f32],
    codes: &mut [i16],
    scales: &mut [f32],
) {
    let q = match rotate {
        Some(r) => {
            for h in r.chunks_exact_mut(l.head_dim) {
                l.k_rot.forward(h);
            }
            &*r
        }
        None => q,
    };
    if let Some(g) = query::int8_group(l.k_fmt) {
        query::quantize(q, g, l.scale, codes, scales);
        arch::arrange_query(codes, g);
    }
}

/// Merges a later segment's state (`out2`, `max2`, `sum2`) into the state so far, head by head:
/// both rescaled to the larger maximum, `out = out · e^(m − M) + out2 · e^(m2 − M)`, the sums
/// alike. A segment that kept no key (maximum −∞) changes nothing.
#[allow(clippy::too_many_arguments)]
pub(crate) fn merge(
    l: &Layout,
    out: &mut [f32],
    max: &mut [f32],
    sum: &mut [f32],
    out2: &[f32],
    max2: &[f32],
    sum2: &[f32],
) {
    let hd = l.head_dim;
    for h in 0..l.kv_heads * l.group {
        let m2 = max2[h];
        if m2 == f32::NEG_INFINITY {
            continue;
        }
        let m = max[h].max(m2);
        let (a, b) = (exp_weight(max[h] - m), exp_weight(m2 - m));
        // Each term floored, then the sum: no subnormal operand or result (see `floor`).
        for (o, &o2) in out[h * hd..(h + 1) * hd].iter_mut().zip(&out2[h * hd..]) {
            *o = state(scaled(*o, a) + scaled(o2, b));
        }
        sum[h] = sum[h] * a + sum2[h] * b;
        max[h] = m;
    }
}

/// One head's online-softmax step to a page's new maximum `new_max`: its outputs and sum
/// rescaled by the weight `exp(max − new_max)` (products floored, see `floor`), then the maximum
/// moved. The one rescale of both page kernels (`attention::fast`, `attention::small`).
#[inline(always)]
pub(crate) fn rescale(out: &mut [f32], max: &mut f32, sum: &mut f32, new_max: f32) {
    // An unchanged finite maximum rescales by exp(0) = 1: skipping it changes no bit.
    if new_max != *max || !new_max.is_finite() {
        let keep = exp_weight(*max - new_max);
        *sum *= keep;
        for o in out {
            *o = scaled(*o, keep);
        }
        *max = new_max;
    }
}

/// The end of a query row: each computed head's output divided by its sum, rotated back for
/// rotated V rows. Out of line: one copy for the row and block paths.
#[inline(never)]
pub(crate) fn finish_row(l: &Layout, out_row: &mut [f32], sum: &[f32]) {
    let hd = l.head_dim;
    let v_rot = cfg!(feature = "rotation") && l.v_rot.is_some();
    for (h, oh) in out_row.chunks_exact_mut(hd).enumerate() {
        let inv = 1.0 / sum[h];
        for o in oh.iter_mut() {
            *o = scaled(*o, inv);
        }
        if v_rot {
            l.v_rot.inverse(oh);
        }
    }
}

/// Formats and byte geometry of the rows `attend_page` reads.
#[derive(Clone, Copy)]
pub(crate) struct Layout {
    pub(crate) k_fmt: ElementFormat,
    pub(crate) v_fmt: ElementFormat,
    /// How K and V rows were rotated before they were stored.
    pub(crate) k_rot: Rotation,
    pub(crate) v_rot: Rotation,
    /// Value and scale bytes of one token (all heads) and of one head, for K and V.
    pub(crate) k_row: usize,
    pub(crate) v_row: usize,
    pub(crate) k_srow: usize,
    pub(crate) v_srow: usize,
    pub(crate) k_head: usize,
    pub(crate) v_head: usize,
    pub(crate) k_shead: usize,
    pub(crate) v_shead: usize,
    pub(crate) kv_heads: usize,
    /// Query heads per KV head.
    pub(crate) group: usize,
    /// Query heads per KV head of one query row (`group`, but in a block of rows' layout).
    #[cfg_attr(feature = "small-code", allow(dead_code))]
    pub(crate) row_group: usize,
    pub(crate) head_dim: usize,
    pub(crate) page_tokens: usize,
    pub(crate) scale: f32,
}

impl Layout {
    /// This layout for one KV head and its group of query heads ([`PageSlices::head`] gives
    /// that head's page): each query head's bits are those of the whole row's call, since every
    /// head is computed on its own.
    #[cfg(feature = "std")]
    pub(crate) fn one_head(&self) -> Self {
        Layout {
            kv_heads: 1,
            ..*self
        }
    }

    /// KV head `kh` of token `r` of a K (`v == false`) or V page.
    #[inline(always)]
    pub(super) fn row<'p>(&self, kv: &PageSlices<'p>, v: bool, r: usize, kh: usize) -> Row<'p> {
        let (vals, scales, row, srow, head, shead) = if v {
            (
                kv.v,
                kv.vs,
                self.v_row,
                self.v_srow,
                self.v_head,
                self.v_shead,
            )
        } else {
            (
                kv.k,
                kv.ks,
                self.k_row,
                self.k_srow,
                self.k_head,
                self.k_shead,
            )
        };
        Row {
            vals: &vals[r * row + kh * head..][..head],
            scales: &scales[(r * srow + kh * shead).min(scales.len())..],
        }
    }

    /// KV head `kh` of tokens `0..n` (`n ≥ 1`) of a K (`v == false`) or V page, as strided
    /// bytes.
    #[cfg(not(feature = "small-code"))]
    #[inline(always)]
    pub(super) fn page_rows<'p>(
        &self,
        kv: &PageSlices<'p>,
        v: bool,
        kh: usize,
        n: usize,
    ) -> PageRows<'p> {
        let (vals, scales, stride, sstride, head, shead) = if v {
            let (a, b) = (kv.v, kv.vs);
            (a, b, self.v_row, self.v_srow, self.v_head, self.v_shead)
        } else {
            let (a, b) = (kv.k, kv.ks);
            (a, b, self.k_row, self.k_srow, self.k_head, self.k_shead)
        };
        // The plan's geometry puts every row of a page within the page's slices (the general
        // loop's `row` slices them the same way).
        PageRows::new(
            &vals[kh * head..],
            &scales[(kh * shead).min(scales.len())..],
            stride,
            sstride,
            n,
            head,
            shead,
        )
        .expect("a page's rows lie within its slices")
    }
}

/// The keys of one page one query row sees: positions `[j0, j1)` filtered by `kept`.
pub(crate) struct Keys<'k, F: Fn(u32) -> bool> {
    pub(crate) kv: &'k PageSlices<'k>,
    pub(super) j0: u32,
    pub(super) j1: u32,
    pub(super) kept: &'k F,
}

/// The state of one query row, all query heads: query rows, output accumulators, running maxima
/// and sums, and one page of scores each (`head_dim` and `page_tokens` apart).
pub(crate) struct Heads<'h> {
    pub(super) q: &'h [f32],
    /// `q` quantized for int8 keys (see `arch::query`; stale otherwise).
    pub(super) qc: QueryCodes<'h>,
    pub(super) out: &'h mut [f32],
    pub(super) max: &'h mut [f32],
    pub(super) sum: &'h mut [f32],
    pub(super) scores: &'h mut [f32],
}

/// The K and V value and scale bytes of one page in one layer.
pub(crate) struct PageSlices<'d> {
    pub(crate) k: &'d [u8],
    pub(crate) ks: &'d [u8],
    pub(crate) v: &'d [u8],
    pub(crate) vs: &'d [u8],
}

impl<'d> PageSlices<'d> {
    /// KV head `kh` of `l`'s page alone: the slices from that head's first row on, which a
    /// layout of one KV head ([`Layout::one_head`]) reads as `l` reads head `kh` (rows keep
    /// their stride; a format without per-head scales keeps them all).
    #[cfg(feature = "std")]
    pub(crate) fn head(&self, l: &Layout, kh: usize) -> Self {
        let from = |b: &'d [u8], at: usize| &b[at.min(b.len())..];
        PageSlices {
            k: from(self.k, kh * l.k_head),
            ks: from(self.ks, kh * l.k_shead),
            v: from(self.v, kh * l.v_head),
            vs: from(self.vs, kh * l.v_shead),
        }
    }
}
