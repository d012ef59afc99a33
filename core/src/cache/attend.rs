//! [`KvCache::attention`]: the sequence's pages resolved and checked here; the computation is
//! `crate::attention`'s.

use super::KvCache;
use crate::alloc::{NO_PAGE, PageAllocator};
use crate::attention::page::{Layout, PageSlices, attend};
#[cfg(feature = "std")]
use crate::attention::page::{Scratch, SegmentState, finish_row, merge, segment, segments};
use crate::attention::{AttentionParams, group_scratch_len};
#[cfg(feature = "std")]
use crate::attention::{BLOCK_ROWS, block_len};
use crate::error::{ConfigError, Error, Result};
use crate::plan::PoolKind;
use crate::sequence::SeqId;
use crate::shape::Kv;
#[cfg(feature = "std")]
use crate::workers::Workers;

impl<'a, A: PageAllocator<'a>> KvCache<'a, A> {
    /// Causal attention of queries at absolute positions `[start, start + n)` of `seq` over its
    /// keys and values in `layer`: query position `t` attends to keys `[0, t]` (or the window's
    /// subset). `q` and `out` are `[n][q_heads][head_dim]` f32; `scratch` holds at least
    /// [`CacheConfig::scratch_len`](crate::CacheConfig::scratch_len)`(q_heads, 1)` f32s; with
    /// `scratch_len(q_heads, rows)` f32s, up to
    /// [`BLOCK_ROWS`](crate::attention::BLOCK_ROWS) consecutive rows are computed in one pass
    /// over the pages they share (each K and V row read once for all of them), with the bits of
    /// one row at a time. Softmax runs online, one rescale per
    /// page, in f32 with `libm::expf`'s exact bits (evaluated eight weights at a time); fp8 pages
    /// are dequantized inside the dot products, int8 keys score against the query rounded to
    /// 16-bit codes per key group (exact integer sums per group; see the crate README), int8
    /// values are dequantized as they are accumulated. Every query row's arithmetic is its own,
    /// in a fixed key order: chunking and blocks never change results. On x86-64 CPUs with AVX2 and F16C the
    /// page loop runs a build for those instructions (chosen at run time; the same bits).
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence),
    /// [`LayerOutOfRange`](Error::LayerOutOfRange), [`HeadMismatch`](Error::HeadMismatch) (q_heads
    /// not a nonzero multiple of kv_heads), [`LengthMismatch`](Error::LengthMismatch) (`q` not a
    /// whole number of rows, `out` of another length, `scratch` too short),
    /// [`PositionOutOfRange`](Error::PositionOutOfRange) (queries past the reserved positions, or
    /// a kept key in a released page), [`Config`](Error::Config)([`ZeroSize`](crate::ConfigError::ZeroSize)) (a window of 0). Without a
    /// window in `params`, the layer's group's configured window applies
    /// ([`CacheConfig::window`](crate::CacheConfig::window)). Everything,
    /// every key page any query needs included, is checked before anything is computed: on
    /// error neither `out` nor `scratch` was written.
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
        let params = &self.layer_params(layer, params);
        let (layout, table) = self.attention_layout(seq, layer, start, q, out, params, || {
            scratch.len() >= group_scratch_len(&self.config, params.q_heads)
        })?;
        attend(&layout, params.window, start, q, out, scratch, &|i| {
            // Present and in range: `attention_layout` made sure before `out` was touched.
            let page = table.get(i).copied().unwrap_or(NO_PAGE);
            self.page_slices(layer, page)
        })
    }

    /// [`attention`](Self::attention) on up to `threads` threads (`std`), each with its own
    /// scratch, bit for bit [`attention`](Self::attention)'s results at any thread count.
    /// Several query rows (prefill) go to the threads round robin in blocks of up to
    /// [`BLOCK_ROWS`](crate::attention::BLOCK_ROWS) (see [`attention`](Self::attention)).
    /// One row over more than 2,048 keys (decode at long context) is split by key segments:
    /// each thread computes whole segments, merged in segment order as one call merges them.
    /// One row within one segment runs on the calling thread (a split would cost more than it
    /// saves). `threads` is capped at the rows or segments (0 counts as 1).
    ///
    /// The threads are started and joined in each call (~45 µs on a Linux SoC); a decode loop
    /// should keep a [`Workers`](crate::Workers) team and call
    /// [`attention_on`](Self::attention_on) instead.
    ///
    /// # Errors
    ///
    /// Those of [`attention`](Self::attention) (scratch aside: each thread allocates its own),
    /// checked before any thread starts; on error `out` was not written.
    #[cfg(feature = "std")]
    #[allow(clippy::too_many_arguments)]
    pub fn attention_threads(
        &self,
        seq: SeqId,
        layer: u16,
        start: u32,
        q: &[f32],
        out: &mut [f32],
        params: &AttentionParams,
        threads: usize,
    ) -> Result<()>
    where
        Self: Sync,
    {
        self.attention_team(
            seq,
            layer,
            start,
            q,
            out,
            params,
            &mut Team::Scoped(threads),
        )
    }

    /// [`attention_threads`](Self::attention_threads) on a [`Workers`](crate::Workers) team kept
    /// between calls: the same split, the same bits, without starting threads. The team comes
    /// last, where [`attention_threads`](Self::attention_threads) takes its thread count.
    ///
    /// # Errors
    ///
    /// As [`attention_threads`](Self::attention_threads).
    #[cfg(feature = "std")]
    #[allow(clippy::too_many_arguments)]
    pub fn attention_workers(
        &self,
        seq: SeqId,
        layer: u16,
        start: u32,
        q: &[f32],
        out: &mut [f32],
        params: &AttentionParams,
        workers: &mut Workers,
    ) -> Result<()>
    where
        Self: Sync,
    {
        self.attention_team(
            seq,
            layer,
            start,
            q,
            out,
            params,
            &mut Team::Workers(workers),
        )
    }

    /// [`attention_workers`](Self::attention_workers) with the team first (the former argument
    /// order).
    ///
    /// # Errors
    ///
    /// As [`attention_workers`](Self::attention_workers).
    #[cfg(feature = "std")]
    #[allow(clippy::too_many_arguments)]
    #[deprecated(
        note = "the team now comes last, as `attention_threads`' thread count: \
                `attention_workers(seq, layer, start, q, out, params, workers)`"
    )]
    pub fn attention_on(
        &self,
        workers: &mut Workers,
        seq: SeqId,
        layer: u16,
        start: u32,
        q: &[f32],
        out: &mut [f32],
        params: &AttentionParams,
    ) -> Result<()>
    where
        Self: Sync,
    {
        self.attention_workers(seq, layer, start, q, out, params, workers)
    }

    /// The split of [`attention_threads`](Self::attention_threads) on `team`.
    #[cfg(feature = "std")]
    #[allow(clippy::too_many_arguments)]
    fn attention_team(
        &self,
        seq: SeqId,
        layer: u16,
        start: u32,
        q: &[f32],
        out: &mut [f32],
        params: &AttentionParams,
        team: &mut Team<'_>,
    ) -> Result<()>
    where
        Self: Sync,
    {
        let params = &self.layer_params(layer, params);
        let (layout, table) = self.attention_layout(seq, layer, start, q, out, params, || true)?;
        let heads = layout.kv_heads * layout.group;
        let need = group_scratch_len(&self.config, params.q_heads);
        let page = |i: usize| {
            let page = table.get(i).copied().unwrap_or(NO_PAGE);
            self.page_slices(layer, page)
        };
        let row = heads * layout.head_dim;
        let n = q.len() / row;
        if n == 1 {
            if segments(&layout, start) > 1 && team.threads() > 1 {
                return self.segments_on(&layout, params, start, q, out, team, &page);
            }
            // On a kept team only: starting threads costs more than one short row's attention.
            if layout.kv_heads > 1 && team.threads() > 1 && matches!(team, Team::Workers(_)) {
                return self.heads_on(&layout, params, start, q, out, team, &page);
            }
            // One row, one segment: nothing to split that would pay for a thread.
            let mut s = std::vec![0f32; need];
            return attend(&layout, params.window, start, q, out, &mut s, &page);
        }
        // Several rows (prefill): each row's bits do not depend on the rows computed with it,
        // so blocks of rows go to threads round robin (later rows see more keys), each thread
        // with its own scratch, room for a block included.
        let t = team.threads().clamp(1, n);
        let b = n.div_ceil(t).min(BLOCK_ROWS);
        let blocks = n.div_ceil(b);
        let t = t.min(blocks);
        let need = need
            + block_len(
                params.q_heads,
                layout.page_tokens as u16,
                layout.head_dim as u16,
                b,
            );
        let rows_of = |k: usize| -> Result<std::vec::Vec<f32>> {
            let mut s = std::vec![0f32; need];
            let mut o = std::vec![0f32; blocks.div_ceil(t) * b * row];
            for (j, i) in (k..blocks).step_by(t).enumerate() {
                let rows = b.min(n - i * b);
                let (qi, oi) = (
                    &q[i * b * row..][..rows * row],
                    &mut o[j * b * row..][..rows * row],
                );
                attend(
                    &layout,
                    params.window,
                    start + (i * b) as u32,
                    qi,
                    oi,
                    &mut s,
                    &page,
                )?;
            }
            Ok(o)
        };
        // Every page was checked above, so no thread fails; still, `out` is written only when
        // all succeeded.
        let parts = team.run(t, rows_of)?;
        for (k, o) in parts.iter().enumerate() {
            for (j, i) in (k..blocks).step_by(t).enumerate() {
                let rows = b.min(n - i * b);
                out[i * b * row..][..rows * row].copy_from_slice(&o[j * b * row..][..rows * row]);
            }
        }
        Ok(())
    }

    /// One query row's key segments on up to `team.threads()` threads, each segment from a
    /// fresh state into its own buffers, then merged in order into `out` and finished (see
    /// `attention_threads`).
    #[cfg(feature = "std")]
    #[allow(clippy::too_many_arguments)]
    fn segments_on<'d>(
        &self,
        layout: &Layout,
        params: &AttentionParams,
        t: u32,
        q: &[f32],
        out: &mut [f32],
        team: &mut Team<'_>,
        page: &(dyn Fn(usize) -> Result<PageSlices<'d>> + Sync),
    ) -> Result<()> {
        let segs = segments(layout, t);
        let n = team.threads().clamp(1, segs);
        let need = group_scratch_len(&self.config, params.q_heads);
        let q_heads = layout.kv_heads * layout.group;
        // Thread `k` computes segments `k·segs/n..(k+1)·segs/n`, each kept whole.
        let run = |k: usize| -> Result<std::vec::Vec<SegmentState>> {
            let mut buf = std::vec![0f32; need];
            let mut states = std::vec::Vec::new();
            for seg in k * segs / n..(k + 1) * segs / n {
                let mut s = Scratch::split(layout, &mut buf);
                segment(layout, params.window, t, q, seg, &mut s, page, None)?;
                states.push(s.state(q_heads * layout.head_dim));
            }
            Ok(states)
        };
        let parts = team.run(n, run)?;
        let mut it = parts.into_iter().flatten();
        let Some(mut first) = it.next() else {
            return Ok(());
        };
        for s in it {
            merge(
                layout,
                &mut first.out,
                &mut first.max,
                &mut first.sum,
                &s.out,
                &s.max,
                &s.sum,
            );
        }
        finish_row(layout, &mut first.out, &first.sum);
        out.copy_from_slice(&first.out);
        Ok(())
    }

    /// One query row within one key segment, its KV heads shared between up to
    /// `team.threads()` threads (head `kh` on thread `kh mod n`), each head computed alone over
    /// its part of every page ([`PageSlices::head`]), into the thread's buffer, then copied into
    /// `out`: the one-call bits, since no head's arithmetic depends on another's.
    #[cfg(feature = "std")]
    #[allow(clippy::too_many_arguments)]
    fn heads_on<'d>(
        &self,
        layout: &Layout,
        params: &AttentionParams,
        t: u32,
        q: &[f32],
        out: &mut [f32],
        team: &mut Team<'_>,
        page: &(dyn Fn(usize) -> Result<PageSlices<'d>> + Sync),
    ) -> Result<()> {
        let heads = layout.kv_heads;
        let n = team.threads().clamp(1, heads);
        let one = layout.one_head();
        let run = layout.group * layout.head_dim;
        let need = group_scratch_len(&self.config, params.q_heads);
        let on = |k: usize| -> Result<std::vec::Vec<f32>> {
            let mut s = std::vec![0f32; need];
            let mut o = std::vec![0f32; heads.div_ceil(n) * run];
            for (j, kh) in (k..heads).step_by(n).enumerate() {
                let head_page = |i: usize| page(i).map(|p| p.head(layout, kh));
                let (qh, oh) = (&q[kh * run..][..run], &mut o[j * run..][..run]);
                attend(&one, params.window, t, qh, oh, &mut s, &head_page)?;
            }
            Ok(o)
        };
        // Every page was checked by the caller, so no thread fails; still, `out` is written only
        // when all succeeded.
        let parts = team.run(n, on)?;
        for (k, o) in parts.iter().enumerate() {
            for (j, kh) in (k..heads).step_by(n).enumerate() {
                out[kh * run..][..run].copy_from_slice(&o[j * run..][..run]);
            }
        }
        Ok(())
    }

    /// The checks of [`attention`](Self::attention) (`scratch_ok` says whether the caller's
    /// scratch is long enough), in its order, and the layout and page table of the call.
    #[allow(clippy::too_many_arguments)]
    fn attention_layout(
        &self,
        seq: SeqId,
        layer: u16,
        start: u32,
        q: &[f32],
        out: &[f32],
        params: &AttentionParams,
        scratch_ok: impl FnOnce() -> bool,
    ) -> Result<(Layout, &[u16])> {
        let slot = self.seqs.slot(seq)?;
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
        if end > self.seqs.record(slot).len {
            return Err(Error::PositionOutOfRange);
        }
        if params.window.is_some_and(|w| w.window == 0) {
            return Err(ConfigError::ZeroSize.into());
        }
        if !scratch_ok() {
            return Err(Error::LengthMismatch);
        }
        let table = self.seqs.table(slot);
        // Every key page any query needs, checked before `out` is written.
        self.check_key_pages(table, start, end, params.window)?;
        let g = &self.plan.geometry;
        let (k_row, v_row) = (g.k_row_bytes, g.v_row_bytes);
        let (k_srow, v_srow) = (g.k_scale_row_bytes, g.v_scale_row_bytes);
        let layout = Layout {
            k_fmt: self.config.k_format,
            v_fmt: self.config.v_format,
            k_rot: self.config.k_rotation,
            v_rot: self.config.v_rotation,
            k_row,
            v_row,
            k_srow,
            v_srow,
            k_head: k_row / kv_heads,
            v_head: v_row / kv_heads,
            k_shead: k_srow / kv_heads,
            v_shead: v_srow / kv_heads,
            kv_heads,
            group: q_heads / kv_heads,
            row_group: q_heads / kv_heads,
            head_dim: hd,
            page_tokens: self.config.page_tokens as usize,
            scale: params.scale,
        };
        Ok((layout, table))
    }

    /// The K and V value and scale bytes of `page` in `layer`.
    fn page_slices(&self, layer: u16, page: u16) -> Result<PageSlices<'_>> {
        let g = &self.plan.geometry;
        let slice = |pool: PoolKind, len: usize| -> Result<&[u8]> {
            let off = self
                .plan
                .slot_offset(layer, pool, page)
                .ok_or(Error::InvalidPage)?;
            self.data.get(off..off + len).ok_or(Error::InvalidPage)
        };
        let p = g.page_tokens as usize;
        Ok(PageSlices {
            k: slice(PoolKind::values(Kv::K), g.k_row_bytes * p)?,
            ks: slice(PoolKind::scales(Kv::K), g.k_scale_row_bytes * p)?,
            v: slice(PoolKind::values(Kv::V), g.v_row_bytes * p)?,
            vs: slice(PoolKind::scales(Kv::V), g.v_scale_row_bytes * p)?,
        })
    }
}

/// Where [`KvCache::attention_threads`] and [`KvCache::attention_on`] run their shares.
#[cfg(feature = "std")]
enum Team<'w> {
    /// Scoped threads started and joined in each call, at most this many.
    Scoped(usize),
    /// A team kept between calls.
    Workers(&'w mut Workers),
}

#[cfg(feature = "std")]
impl Team<'_> {
    /// Threads available, the calling one included.
    fn threads(&self) -> usize {
        match self {
            Team::Scoped(n) => (*n).max(1),
            Team::Workers(w) => w.threads(),
        }
    }

    /// `f(0)` … `f(n − 1)` (`n` capped at [`threads`](Self::threads)), the calling thread
    /// running `f(0)`; their results in order, or the first error. A panic in a thread is
    /// resumed here.
    fn run<T: Send>(
        &mut self,
        n: usize,
        f: impl Fn(usize) -> Result<T> + Sync,
    ) -> Result<std::vec::Vec<T>> {
        let n = n.clamp(1, self.threads());
        match self {
            Team::Scoped(_) => on_threads(n, f),
            Team::Workers(w) => {
                let slots: std::vec::Vec<std::sync::Mutex<Option<Result<T>>>> =
                    (0..n).map(|_| std::sync::Mutex::new(None)).collect();
                w.run(n, &|k| {
                    let r = f(k);
                    *slots[k]
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(r);
                });
                slots
                    .into_iter()
                    .map(|s| {
                        s.into_inner()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .expect("Workers::run calls every index below n")
                    })
                    .collect()
            }
        }
    }
}

/// `f(0)` … `f(n − 1)` on `n` threads (the calling one runs `f(0)`), their results in order, or
/// the first error; a panic in a thread is resumed here.
#[cfg(feature = "std")]
fn on_threads<T: Send>(
    n: usize,
    f: impl Fn(usize) -> Result<T> + Sync,
) -> Result<std::vec::Vec<T>> {
    let f = &f;
    let parts: std::vec::Vec<Result<T>> = std::thread::scope(|sc| {
        let spawned: std::vec::Vec<_> = (1..n).map(|k| sc.spawn(move || f(k))).collect();
        let mut parts = std::vec![f(0)];
        for h in spawned {
            parts.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        parts
    });
    parts.into_iter().collect()
}
