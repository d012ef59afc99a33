//! Device addresses of cache pages.

use edgekv::{Kv, KvCache, PageAllocator, PageId, SeqId};

use crate::{AddressMap, DevAddr, HalError};

/// One page of one pool as a device sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PageRegion {
    /// Device address of the page's first byte.
    pub dev: DevAddr,
    /// CPU address of the page's first byte (for cache maintenance).
    pub cpu: usize,
    /// Bytes of the page slot (its pool stride: a multiple of the arena alignment, so whole
    /// cache lines for any line size up to it).
    pub len: usize,
}

/// The device view of value page `(layer, kv, page)` of `cache` through `map`.
///
/// ```
/// use edgekv::{ArenaBuf, CacheConfig, Kv, KvCache, SeqMode, Shape};
/// use edgekv_hal::{IdentityMap, page_region};
///
/// let cfg = CacheConfig::new(Shape { layers: 1, kv_heads: 1, head_dim: 16 });
/// let (mut data, mut meta) = (ArenaBuf::<8192>::new(), ArenaBuf::<2048>::new());
/// let mut cache: KvCache = KvCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut())?;
/// let seq = cache.create_sequence(SeqMode::Paged)?;
/// cache.reserve(seq, 1)?;
/// let page = cache.page_table(seq)?[0];
/// let r = page_region(&cache, &IdentityMap, 0, Kv::V, page)?;
/// assert_eq!(r.dev.0 as usize, r.cpu);
/// assert_eq!(r.len, 16 * 16 * 4); // 16 tokens × 16 f32
/// # Ok::<(), edgekv_hal::HalError>(())
/// ```
///
/// # Errors
///
/// [`Cache`](HalError::Cache) for a bad layer or page, and the address map's errors
/// ([`Unmapped`](HalError::Unmapped), [`Overflow`](HalError::Overflow)).
pub fn page_region<'a, A: PageAllocator<'a>>(
    cache: &KvCache<'a, A>,
    map: &impl AddressMap,
    layer: u16,
    kv: Kv,
    page: PageId,
) -> Result<PageRegion, HalError> {
    let bytes = cache.page_bytes(layer, kv, page)?;
    let cpu = bytes.as_ptr() as usize;
    let dev = map.to_device(cpu, bytes.len())?;
    Ok(PageRegion {
        dev,
        cpu,
        len: bytes.len(),
    })
}

/// Calls `f` with the device view of every page of a sequence's `(layer, kv)` pool, in position
/// order, skipping pages released by a sliding window; stops at the first error.
///
/// # Errors
///
/// [`Cache`](HalError::Cache) for an unknown sequence, then as [`page_region`].
pub fn for_each_page_region<'a, A: PageAllocator<'a>>(
    cache: &KvCache<'a, A>,
    map: &impl AddressMap,
    seq: SeqId,
    layer: u16,
    kv: Kv,
    mut f: impl FnMut(PageRegion),
) -> Result<(), HalError> {
    // Pages released by a sliding window (`NO_PAGE`) have no region.
    for &page in cache
        .page_table(seq)?
        .iter()
        .filter(|&&p| p != edgekv::NO_PAGE)
    {
        f(page_region(cache, map, layer, kv, page)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OffsetMap;
    use edgekv::{ArenaBuf, CacheConfig, Error, SeqMode, Shape};

    #[test]
    fn regions_follow_the_page_table_through_an_alias() {
        let cfg = CacheConfig::new(Shape {
            layers: 2,
            kv_heads: 1,
            head_dim: 16,
        })
        .with_page_tokens(4);
        let mut data = ArenaBuf::<{ 64 * 1024 }>::new();
        let mut meta = ArenaBuf::<16384>::new();
        assert!(
            KvCache::<edgekv::FreeList>::plan(&cfg, 64 * 1024)
                .unwrap()
                .meta
                .total
                <= 16384
        );
        let mut cache: KvCache =
            KvCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut()).unwrap();
        let base = cache.data_ptr() as usize;
        let map =
            OffsetMap::new(base, cache.arena_plan().data_bytes, DevAddr(0x6000_0000)).unwrap();
        let seq = cache.create_sequence(SeqMode::Paged).unwrap();
        cache.reserve(seq, 9).unwrap();
        let mut regions = std::vec::Vec::new();
        for_each_page_region(&cache, &map, seq, 1, Kv::K, |r| regions.push(r)).unwrap();
        assert_eq!(regions.len(), 3);
        for (r, &page) in regions.iter().zip(cache.page_table(seq).unwrap()) {
            let off = cache.arena_plan().page_offset(1, Kv::K, page).unwrap();
            assert_eq!(r.dev, DevAddr(0x6000_0000 + off as u64));
            assert_eq!(r.cpu, base + off);
            assert_eq!(r.len, 4 * 16 * 4);
            assert_eq!(r.len % 64, 0, "whole cache lines");
        }
        // A window that misses part of the arena maps nothing outside it.
        let short = OffsetMap::new(base, 64, DevAddr(0)).unwrap();
        assert_eq!(
            page_region(&cache, &short, 0, Kv::V, 0),
            Err(HalError::Unmapped)
        );
        assert_eq!(
            page_region(&cache, &map, 2, Kv::V, 0),
            Err(HalError::Cache(Error::LayerOutOfRange))
        );
        cache.free_sequence(seq).unwrap();
        assert_eq!(
            for_each_page_region(&cache, &map, seq, 0, Kv::K, |_| {}),
            Err(HalError::Cache(Error::UnknownSequence))
        );
    }
}
