//! Attention of query rows over a sequence's pages.

use super::KvCache;
use crate::alloc::{NO_PAGE, PageAllocator};
use crate::attention::kernels::{Row, dot, scale_add};
use crate::attention::{AttentionParams, scratch_len};
use crate::error::{Error, Result};
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
            .get_mut(..scratch_len(params.q_heads, shape.kv_heads, self.config.page_tokens))
            .ok_or(Error::LengthMismatch)?;
        let (max, rest) = scratch.split_at_mut(group);
        let (sum, scores) = rest.split_at_mut(group);
        let table = self.table(slot);
        let g = &self.plan.geometry;
        let (k_fmt, v_fmt) = (self.config.k_format, self.config.v_format);
        let (k_row, v_row) = (g.k_row_bytes, g.v_row_bytes);
        let (k_srow, v_srow) = (g.k_scale_row_bytes, g.v_scale_row_bytes);
        let (k_head, v_head) = (k_row / kv_heads, v_row / kv_heads);
        let (k_shead, v_shead) = (k_srow / kv_heads, v_srow / kv_heads);

        for (qi, (q_rows, out_rows)) in q
            .chunks_exact(row)
            .zip(out.chunks_exact_mut(row))
            .enumerate()
        {
            let t = start + qi as u32;
            out_rows.fill(0.0);
            for kh in 0..kv_heads {
                let heads = kh * group * hd..(kh + 1) * group * hd;
                let (q_group, out_group) = (&q_rows[heads.clone()], &mut out_rows[heads]);
                max.fill(f32::NEG_INFINITY);
                sum.fill(0.0);
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
                    // Scores of the page's kept keys, for every head of the group.
                    for h in 0..group {
                        let qh = &q_group[h * hd..(h + 1) * hd];
                        let mut page_max = f32::NEG_INFINITY;
                        for j in (j0..j1).filter(|&j| kept(j)) {
                            let r = (j - j0) as usize;
                            let krow = Row {
                                vals: &kv.k[r * k_row + kh * k_head..][..k_head],
                                scales: &kv.ks[(r * k_srow + kh * k_shead).min(kv.ks.len())..],
                            };
                            let s = dot(k_fmt, qh, krow) * params.scale;
                            scores[h * p + r] = s;
                            page_max = page_max.max(s);
                        }
                        let new_max = max[h].max(page_max);
                        let mut keep = libm::expf(max[h] - new_max);
                        sum[h] *= keep;
                        let oh = &mut out_group[h * hd..(h + 1) * hd];
                        for j in (j0..j1).filter(|&j| kept(j)) {
                            let r = (j - j0) as usize;
                            let w = libm::expf(scores[h * p + r] - new_max);
                            sum[h] += w;
                            let vrow = Row {
                                vals: &kv.v[r * v_row + kh * v_head..][..v_head],
                                scales: &kv.vs[(r * v_srow + kh * v_shead).min(kv.vs.len())..],
                            };
                            scale_add(v_fmt, oh, keep, w, vrow);
                            keep = 1.0;
                        }
                        max[h] = new_max;
                    }
                }
                for (h, oh) in out_group.chunks_exact_mut(hd).enumerate() {
                    let inv = 1.0 / sum[h];
                    for o in oh {
                        *o *= inv;
                    }
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

struct PageSlices<'d> {
    k: &'d [u8],
    ks: &'d [u8],
    v: &'d [u8],
    vs: &'d [u8],
}
