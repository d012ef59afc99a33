//! Raw page slots: a sequence's pages in their stored bytes, for devices that read or produce
//! pages in the page format (DMA engines, NPUs, device mirrors) and for snapshots.

use super::KvCache;
use crate::alloc::{NO_PAGE, PageAllocator, PageId};
use crate::error::{ConfigError, Error, Result};
use crate::plan::PoolKind;
use crate::sequence::SeqId;

impl<'a, A: PageAllocator<'a>> KvCache<'a, A> {
    /// The data arena bytes the pools use (`plan.data_bytes` from [`data_ptr`](Self::data_ptr)):
    /// what a device maps as one region.
    pub fn arena_bytes(&self) -> &[u8] {
        self.data
    }

    /// All slots of `pool` in `layer`: `num_pages` slots of the pool's stride, page 0 first
    /// (empty for the scale pool of a full-precision format).
    ///
    /// # Errors
    ///
    /// [`LayerOutOfRange`](Error::LayerOutOfRange).
    pub fn pool_bytes(&self, layer: u16, pool: PoolKind) -> Result<&[u8]> {
        if layer >= self.config.shape.layers {
            return Err(Error::LayerOutOfRange);
        }
        let start = self.plan.pool_offset(layer, pool);
        let len = self.plan.num_pages as usize * self.plan.geometry.pool_stride(pool);
        self.data
            .get(start..start + len)
            .ok_or(ConfigError::Overflow.into())
    }

    /// The slot of `page` in `pool` of `layer`: its value bytes (`[page_tokens][kv_heads]
    /// [head_dim]` in the page format) or its scale bytes, padded to the pool stride.
    ///
    /// # Errors
    ///
    /// [`LayerOutOfRange`](Error::LayerOutOfRange), [`InvalidPage`](Error::InvalidPage).
    pub fn slot_bytes(&self, layer: u16, pool: PoolKind, page: PageId) -> Result<&[u8]> {
        let stride = self.plan.geometry.pool_stride(pool);
        let pool_bytes = self.pool_bytes(layer, pool)?;
        let start = (page as usize)
            .checked_mul(stride)
            .filter(|_| page < self.plan.num_pages)
            .ok_or(Error::InvalidPage)?;
        pool_bytes
            .get(start..start + stride)
            .ok_or(Error::InvalidPage)
    }

    /// Copies `bytes` (one whole slot: the pool stride) into the `index`-th page of `seq`'s page
    /// table in `pool` of `layer`, as stored bytes — no conversion, no quantization. A page shared
    /// with another sequence or published for prefix reuse is copied first (as
    /// [`write`](Self::write) does), so the write is never seen through anyone else.
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence),
    /// [`LayerOutOfRange`](Error::LayerOutOfRange), [`PositionOutOfRange`](Error::PositionOutOfRange)
    /// (`index` past the held pages, or a page released by a sliding window),
    /// [`LengthMismatch`](Error::LengthMismatch) (`bytes` is not one slot; a pool without scales
    /// has empty slots), [`OutOfPages`](Error::OutOfPages) (no page for the copy).
    pub fn write_slot(
        &mut self,
        seq: SeqId,
        layer: u16,
        pool: PoolKind,
        index: usize,
        bytes: &[u8],
    ) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        if layer >= self.config.shape.layers {
            return Err(Error::LayerOutOfRange);
        }
        match self.seqs.table(slot).get(index) {
            Some(&page) if page != NO_PAGE => {}
            _ => return Err(Error::PositionOutOfRange),
        }
        let stride = self.plan.geometry.pool_stride(pool);
        if bytes.len() != stride {
            return Err(Error::LengthMismatch);
        }
        let first = u32::try_from(index * self.config.page_tokens as usize)
            .map_err(|_| Error::PositionOutOfRange)?;
        self.make_writable(slot, first, 1)?;
        let page = self.seqs.table(slot)[index];
        let start = self.plan.pool_offset(layer, pool) + page as usize * stride;
        self.data[start..start + stride].copy_from_slice(bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        ArenaBuf, CacheConfig, ElementFormat, Error, Kv, KvCache, PoolKind, SeqMode, Shape,
    };

    fn config() -> CacheConfig {
        CacheConfig::new(Shape {
            layers: 2,
            kv_heads: 1,
            head_dim: 32,
        })
        .with_page_tokens(4)
        .with_formats(ElementFormat::F32, ElementFormat::Int8 { group: 32 })
    }

    #[test]
    fn raw_slots_round_trip_and_copy_on_write() {
        let (mut data, mut meta) = (ArenaBuf::<32768>::new(), ArenaBuf::<4096>::new());
        let mut cache: KvCache =
            KvCache::new(config(), data.as_uninit_mut(), meta.as_uninit_mut()).unwrap();
        let a = cache.create_sequence(SeqMode::Paged).unwrap();
        cache.reserve(a, 6).unwrap();
        let rows: [f32; 6 * 32] = core::array::from_fn(|i| i as f32 * 0.25 - 7.0);
        cache.write(a, 1, Kv::V, 0, &rows).unwrap();

        // Copy a's V pages of layer 1 (values and scales) into a fresh sequence b, raw.
        let b = cache.create_sequence(SeqMode::Paged).unwrap();
        cache.reserve(b, 6).unwrap();
        for index in 0..2 {
            for pool in [PoolKind::VValues, PoolKind::VScales] {
                let page = cache.page_table(a).unwrap()[index];
                let bytes = cache.slot_bytes(1, pool, page).unwrap().to_vec();
                cache.write_slot(b, 1, pool, index, &bytes).unwrap();
            }
        }
        let (mut ra, mut rb) = ([0f32; 6 * 32], [0f32; 6 * 32]);
        cache.read(a, 1, Kv::V, 0, &mut ra).unwrap();
        cache.read(b, 1, Kv::V, 0, &mut rb).unwrap();
        assert_eq!(ra.map(f32::to_bits), rb.map(f32::to_bits));

        // A forked child's raw write copies the shared page; the parent keeps its bytes.
        let c = cache.fork(a).unwrap();
        let page = cache.page_table(a).unwrap()[0];
        let before = cache
            .slot_bytes(1, PoolKind::VValues, page)
            .unwrap()
            .to_vec();
        let zeros = vec![0u8; before.len()];
        cache
            .write_slot(c, 1, PoolKind::VValues, 0, &zeros)
            .unwrap();
        assert_eq!(
            cache.slot_bytes(1, PoolKind::VValues, page).unwrap(),
            &before[..]
        );
        let copied = cache.page_table(c).unwrap()[0];
        assert_ne!(copied, page);
        assert_eq!(
            cache.slot_bytes(1, PoolKind::VValues, copied).unwrap(),
            &zeros[..]
        );
    }

    #[test]
    fn raw_slot_bad_input_is_refused_without_change() {
        let (mut data, mut meta) = (ArenaBuf::<32768>::new(), ArenaBuf::<4096>::new());
        let mut cache: KvCache =
            KvCache::new(config(), data.as_uninit_mut(), meta.as_uninit_mut()).unwrap();
        let a = cache.create_sequence(SeqMode::Paged).unwrap();
        cache.reserve(a, 4).unwrap();
        let stride = cache.arena_plan().geometry.v_stride;
        let ok = vec![1u8; stride];
        assert_eq!(
            cache.pool_bytes(2, PoolKind::KValues),
            Err(Error::LayerOutOfRange)
        );
        assert_eq!(
            cache.slot_bytes(0, PoolKind::KValues, u16::MAX),
            Err(Error::InvalidPage)
        );
        assert_eq!(
            cache.pool_bytes(0, PoolKind::KScales).map(<[u8]>::len),
            Ok(0)
        );
        assert_eq!(
            cache.write_slot(a, 2, PoolKind::VValues, 0, &ok),
            Err(Error::LayerOutOfRange)
        );
        assert_eq!(
            cache.write_slot(a, 0, PoolKind::VValues, 1, &ok),
            Err(Error::PositionOutOfRange)
        );
        assert_eq!(
            cache.write_slot(a, 0, PoolKind::VValues, 0, &ok[1..]),
            Err(Error::LengthMismatch)
        );
        assert_eq!(
            cache.write_slot(a, 0, PoolKind::KScales, 0, &ok),
            Err(Error::LengthMismatch)
        );
        let page = cache.page_table(a).unwrap()[0];
        assert!(
            cache
                .slot_bytes(0, PoolKind::VValues, page)
                .unwrap()
                .iter()
                .all(|&b| b == 0)
        );
        cache.free_sequence(a).unwrap();
        assert_eq!(
            cache.write_slot(a, 0, PoolKind::VValues, 0, &ok),
            Err(Error::UnknownSequence)
        );
    }
}
