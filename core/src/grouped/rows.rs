//! Per-layer calls: each goes to the layer's group, with the layer's index in that group.

use super::GroupedCache;
use crate::alloc::{PageAllocator, PageId};
use crate::attention::AttentionParams;
use crate::error::Result;
use crate::format::Element;
use crate::sequence::SeqId;
use crate::shape::Kv;
#[cfg(feature = "std")]
use crate::workers::Workers;

impl<'a, A: PageAllocator<'a>> GroupedCache<'a, A> {
    /// Writes rows of one layer's K or V for positions `[start, start + n)` into the layer's
    /// group (see [`KvCache::write`](crate::KvCache::write)).
    ///
    /// # Errors
    ///
    /// As [`KvCache::write`](crate::KvCache::write);
    /// [`LayerOutOfRange`](crate::Error::LayerOutOfRange) past the shape's layers,
    /// [`PositionOutOfRange`](crate::Error::PositionOutOfRange) also for positions a windowed
    /// group released.
    pub fn write<T: Element>(
        &mut self,
        seq: SeqId,
        layer: u16,
        kv: Kv,
        start: u32,
        rows: &[T],
    ) -> Result<()> {
        let (c, l) = self.route_mut(layer)?;
        c.write(seq, l, kv, start, rows)
    }

    /// Writes K and V rows of one layer for the same positions in one call (see
    /// [`KvCache::write_kv`](crate::KvCache::write_kv)).
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write) and [`KvCache::write_kv`](crate::KvCache::write_kv).
    pub fn write_kv<T: Element>(
        &mut self,
        seq: SeqId,
        layer: u16,
        start: u32,
        k: &[T],
        v: &[T],
    ) -> Result<()> {
        let (c, l) = self.route_mut(layer)?;
        c.write_kv(seq, l, start, k, v)
    }

    /// Reads rows of one layer's K or V (see [`KvCache::read`](crate::KvCache::read)).
    ///
    /// # Errors
    ///
    /// As [`KvCache::read`](crate::KvCache::read): positions a windowed group released are
    /// [`PositionOutOfRange`](crate::Error::PositionOutOfRange).
    pub fn read<T: Element>(
        &self,
        seq: SeqId,
        layer: u16,
        kv: Kv,
        start: u32,
        out: &mut [T],
    ) -> Result<()> {
        let (c, l) = self.route(layer)?;
        c.read(seq, l, kv, start, out)
    }

    /// Checks a [`read`](Self::read) without reading (see
    /// [`KvCache::check_read`](crate::KvCache::check_read)).
    ///
    /// # Errors
    ///
    /// Those of [`read`](Self::read).
    pub fn check_read(&self, seq: SeqId, layer: u16, start: u32, elems: usize) -> Result<()> {
        let (c, l) = self.route(layer)?;
        c.check_read(seq, l, start, elems)
    }

    /// Checks a [`write`](Self::write) without writing (see
    /// [`KvCache::check_write`](crate::KvCache::check_write)).
    ///
    /// # Errors
    ///
    /// Those of [`write`](Self::write).
    pub fn check_write(&self, seq: SeqId, layer: u16, start: u32, elems: usize) -> Result<()> {
        let (c, l) = self.route(layer)?;
        c.check_write(seq, l, start, elems)
    }

    /// Causal attention of queries at positions `[start, start + n)` over one layer's keys and
    /// values (see [`KvCache::attention`](crate::KvCache::attention)). Without a window in
    /// `params`, the layer's group's configured window applies. `scratch` holds at least
    /// [`scratch_len`](Self::scratch_len) f32s.
    ///
    /// # Errors
    ///
    /// As [`KvCache::attention`](crate::KvCache::attention); on error neither `out` nor
    /// `scratch` was written.
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
        let (c, l) = self.route(layer)?;
        c.attention(seq, l, start, q, out, params, scratch)
    }

    /// [`attention`](Self::attention) on up to `threads` threads (see
    /// [`KvCache::attention_threads`](crate::KvCache::attention_threads)).
    ///
    /// # Errors
    ///
    /// As [`KvCache::attention_threads`](crate::KvCache::attention_threads).
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
        crate::KvCache<'a, A>: Sync,
    {
        let (c, l) = self.route(layer)?;
        c.attention_threads(seq, l, start, q, out, params, threads)
    }

    /// [`attention`](Self::attention) on a [`Workers`] team, given last (see
    /// [`KvCache::attention_workers`](crate::KvCache::attention_workers)).
    ///
    /// # Errors
    ///
    /// As [`KvCache::attention_workers`](crate::KvCache::attention_workers).
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
        crate::KvCache<'a, A>: Sync,
    {
        let (c, l) = self.route(layer)?;
        c.attention_workers(seq, l, start, q, out, params, workers)
    }

    /// The bytes of one value page `(layer, kv, page)` of the layer's group (page ids are the
    /// group's: see [`group`](Self::group)`(g)?.page_table(seq)`).
    ///
    /// # Errors
    ///
    /// As [`KvCache::page_bytes`](crate::KvCache::page_bytes).
    pub fn page_bytes(&self, layer: u16, kv: Kv, page: PageId) -> Result<&[u8]> {
        let (c, l) = self.route(layer)?;
        c.page_bytes(l, kv, page)
    }

    /// `layer`'s group and its index in that group (`None` past the shape's layers): see
    /// [`CacheConfig::layer_group`](crate::CacheConfig::layer_group).
    pub fn layer_group(&self, layer: u16) -> Option<(usize, u16)> {
        self.config.layer_group(layer)
    }
}
