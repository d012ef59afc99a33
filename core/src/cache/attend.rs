//! Attention of query rows over a sequence's pages.

use super::KvCache;
use crate::alloc::{NO_PAGE, PageAllocator};
use crate::attention::kernels::{Row, add_scaled, dot};
use crate::attention::{AttentionParams, scratch_len};
use crate::error::{Error, Result};
use crate::format::ElementFormat;
use crate::planner::Pool;
use crate::sequence::SeqId;
use crate::shape::Kv;

impl<'a, A: PageAllocator<'a>> KvCache<'a, A> {
    /// Causal attention of queries at absolute positions `[start, start + n)` of `seq` over its
    /// keys and values in `layer`: query position `t` attends to keys `[0, t]` (or the window's
    /// subset). `q` and `out` are `[n][q_heads][head_dim]` f32; `scratch` holds at least
    /// [`scratch_len`](crate::attention::scratch_len) f32s. Softmax runs online, one rescale per
    /// page, in f32 with `libm::expf`; int8 and fp8 pages are dequantized inside the dot products.
    /// Every query row is computed alone, in a fixed key order: chunking never changes results.
    ///
    /// Errors: [`UnknownSequence`](Error::UnknownSequence),
    /// [`LayerOutOfRange`](Error::LayerOutOfRange), [`HeadMismatch`](Error::HeadMismatch) (q_heads
    /// not a nonzero multiple of kv_heads), [`LengthMismatch`](Error::LengthMismatch) (`q` not a
    /// whole number of rows, `out` of another length, `scratch` too short),
    /// [`PositionOutOfRange`](Error::PositionOutOfRange) (queries past the reserved positions, or
    /// a kept key in a released page), [`ZeroSize`](Error::ZeroSize) (a window of 0).
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        seq: SeqId,
        layer: u16,
        start: u32,
        q: &[f32],
        out: &mut [f32],
        params: &AttentionParams,
        scratch: &mut [f32],
    ) -> Result<()> {
        let slot = self.slot(seq)?;
        let shape = self.config.shape;
        if layer >= shape.layers {
            return Err(Error::LayerOutOfRange);
        }
        let (kv_heads, hd) = (shape.kv_heads as usize, shape.head_dim as usize);
        let q_heads = params.q_heads as usize;
        if q_heads == 0 || q_heads % kv_heads != 0 {
            return Err(Error::HeadMismatch);
        }
        let row = q_heads * hd;
        if q.is_empty() || q.len() % row != 0 || out.len() != q.len() {
            return Err(Error::LengthMismatch);
        }
        let n = q.len() / row;
        let end = u32::try_from(n)
            .ok()
            .and_then(|n| start.checked_add(n))
            .ok_or(Error::PositionOutOfRange)?;
        if end > self.records[slot].len {
            return Err(Error::PositionOutOfRange);
        }
        if params.window.is_some_and(|w| w.window == 0) {
            return Err(Error::ZeroSize);
        }
        let p = self.config.page_tokens as usize;
        let group = q_heads / kv_heads;
        let scratch = scratch
            .get_mut(..scratch_len(params.q_heads, self.config.page_tokens))
            .ok_or(Error::LengthMismatch)?;
        let (max, rest) = scratch.split_at_mut(q_heads);
        let (sum, scores) = rest.split_at_mut(q_heads);
        let table = self.table(slot);
        let g = &self.plan.geometry;
        let (k_row, v_row) = (g.k_row_bytes, g.v_row_bytes);
        let (k_srow, v_srow) = (g.k_scale_row_bytes, g.v_scale_row_bytes);
        let layout = Layout {
            k_fmt: self.config.k_format,
            v_fmt: self.config.v_format,
            k_row,
            v_row,
            k_srow,
            v_srow,
            k_head: k_row / kv_heads,
            v_head: v_row / kv_heads,
            k_shead: k_srow / kv_heads,
            v_shead: v_srow / kv_heads,
            head_dim: hd,
            page_tokens: p,
            scale: params.scale,
        };

        for (qi, (q_rows, out_rows)) in q
            .chunks_exact(row)
            .zip(out.chunks_exact_mut(row))
            .enumerate()
        {
            let t = start + qi as u32;
            out_rows.fill(0.0);
            max.fill(f32::NEG_INFINITY);
            sum.fill(0.0);
            // Each page is visited once, for every KV head (pages are scattered in memory); each
            // head's arithmetic and key order are those of a head computed alone.
            for page_index in 0..=(t as usize / p) {
                let j0 = (page_index * p) as u32;
                let j1 = (j0 + p as u32).min(t + 1);
                let kept = |j: u32| params.window.is_none_or(|w| w.keeps(t, j));
                if !(j0..j1).any(kept) {
                    continue;
                }
                let page = table.get(page_index).copied().unwrap_or(NO_PAGE);
                if page == NO_PAGE {
                    return Err(Error::PositionOutOfRange);
                }
                let kv = self.page_slices(layer, page)?;
                for kh in 0..kv_heads {
                    let keys = Keys {
                        kv: &kv,
                        kh,
                        j0,
                        j1,
                        kept: &kept,
                    };
                    // Query heads in runs of up to four share each decoded K and V row.
                    let mut h0 = kh * group;
                    let h_end = (kh + 1) * group;
                    while h0 < h_end {
                        let n = (h_end - h0).min(4);
                        let heads = Heads {
                            q: &q_rows[h0 * hd..(h0 + n) * hd],
                            out: &mut out_rows[h0 * hd..(h0 + n) * hd],
                            max: &mut max[h0..h0 + n],
                            sum: &mut sum[h0..h0 + n],
                            scores: &mut scores[h0 * p..(h0 + n) * p],
                        };
                        match n {
                            1 => attend_page::<1, _>(&layout, &keys, heads),
                            2 => attend_page::<2, _>(&layout, &keys, heads),
                            3 => attend_page::<3, _>(&layout, &keys, heads),
                            _ => attend_page::<4, _>(&layout, &keys, heads),
                        }
                        h0 += n;
                    }
                }
            }
            for (h, oh) in out_rows.chunks_exact_mut(hd).enumerate() {
                let inv = 1.0 / sum[h];
                for o in oh {
                    *o *= inv;
                }
            }
        }
        Ok(())
    }

    /// The K and V value and scale bytes of `page` in `layer`.
    fn page_slices(&self, layer: u16, page: u16) -> Result<PageSlices<'_>> {
        let g = &self.plan.geometry;
        let slice = |pool: Pool, len: usize| -> Result<&[u8]> {
            let off = self
                .plan
                .slot_offset(layer, pool, page)
                .ok_or(Error::InvalidPage)?;
            self.data.get(off..off + len).ok_or(Error::InvalidPage)
        };
        let p = g.page_tokens as usize;
        Ok(PageSlices {
            k: slice(Pool::values(Kv::K), g.k_row_bytes * p)?,
            ks: slice(Pool::scales(Kv::K), g.k_scale_row_bytes * p)?,
            v: slice(Pool::values(Kv::V), g.v_row_bytes * p)?,
            vs: slice(Pool::scales(Kv::V), g.v_scale_row_bytes * p)?,
        })
    }
}

/// Formats and byte geometry of the rows [`attend_page`] reads.
struct Layout {
    k_fmt: ElementFormat,
    v_fmt: ElementFormat,
    /// Value and scale bytes of one token (all heads) and of one head, for K and V.
    k_row: usize,
    v_row: usize,
    k_srow: usize,
    v_srow: usize,
    k_head: usize,
    v_head: usize,
    k_shead: usize,
    v_shead: usize,
    head_dim: usize,
    page_tokens: usize,
    scale: f32,
}

/// The keys of one page one query row sees: KV head `kh`, positions `[j0, j1)` filtered by `kept`.
struct Keys<'k, F: Fn(u32) -> bool> {
    kv: &'k PageSlices<'k>,
    kh: usize,
    j0: u32,
    j1: u32,
    kept: &'k F,
}

/// A run of query heads of one KV group: their query rows, output accumulators, running maxima
/// and sums, and one page of scores each (`head_dim` and `page_tokens` apart).
struct Heads<'h> {
    q: &'h [f32],
    out: &'h mut [f32],
    max: &'h mut [f32],
    sum: &'h mut [f32],
    scores: &'h mut [f32],
}

/// One page of keys for `G` query heads: the scores, one online-softmax rescale per head, then
/// the weighted V rows. Every K and V row is decoded once for all `G` heads; each head's
/// arithmetic, in order, is what it would be alone.
#[inline(always)]
fn attend_page<const G: usize, F: Fn(u32) -> bool>(
    l: &Layout,
    keys: &Keys<'_, F>,
    heads: Heads<'_>,
) {
    let (hd, p, kv, kh) = (l.head_dim, l.page_tokens, keys.kv, keys.kh);
    let Heads {
        q,
        out,
        max,
        sum,
        scores,
    } = heads;
    let qs: [&[f32]; G] = core::array::from_fn(|h| &q[h * hd..][..hd]);
    let mut page_max = [f32::NEG_INFINITY; G];
    for j in keys.j0..keys.j1 {
        if !(keys.kept)(j) {
            continue;
        }
        let r = (j - keys.j0) as usize;
        let krow = Row {
            vals: &kv.k[r * l.k_row + kh * l.k_head..][..l.k_head],
            scales: &kv.ks[(r * l.k_srow + kh * l.k_shead).min(kv.ks.len())..],
        };
        let d = dot(l.k_fmt, qs, krow);
        for h in 0..G {
            let s = d[h] * l.scale;
            scores[h * p + r] = s;
            page_max[h] = page_max[h].max(s);
        }
    }
    let mut it = out.chunks_exact_mut(hd);
    let mut oh: [&mut [f32]; G] = core::array::from_fn(|_| match it.next() {
        Some(o) => o,
        None => unreachable!(),
    });
    for h in 0..G {
        let new_max = max[h].max(page_max[h]);
        let keep = libm::expf(max[h] - new_max);
        sum[h] *= keep;
        for o in oh[h].iter_mut() {
            *o *= keep;
        }
        max[h] = new_max;
    }
    for j in keys.j0..keys.j1 {
        if !(keys.kept)(j) {
            continue;
        }
        let r = (j - keys.j0) as usize;
        let w: [f32; G] = core::array::from_fn(|h| libm::expf(scores[h * p + r] - max[h]));
        for h in 0..G {
            sum[h] += w[h];
        }
        let vrow = Row {
            vals: &kv.v[r * l.v_row + kh * l.v_head..][..l.v_head],
            scales: &kv.vs[(r * l.v_srow + kh * l.v_shead).min(kv.vs.len())..],
        };
        add_scaled(l.v_fmt, &mut oh, w, vrow);
    }
}

struct PageSlices<'d> {
    k: &'d [u8],
    ks: &'d [u8],
    v: &'d [u8],
    vs: &'d [u8],
}
