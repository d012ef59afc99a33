//! Coalesced segment lists: a sequence's pages as (CPU address, device address, length) runs,
//! the descriptors a DMA engine with linked lists takes.

use edgekv::{KvCache, NO_PAGE, PageAllocator, PoolKind, SeqId};

use crate::{AddressMap, DevAddr, HalError};

/// A run of a sequence's pages that are neighbours in the arena and on the device: one
/// descriptor. Pages are whole pool slots (stride bytes each, padding included), so a segment
/// is always whole cache lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Segment {
    /// CPU address of the first byte.
    pub cpu: usize,
    /// Device address of the first byte.
    pub dev: DevAddr,
    /// Bytes: `pages` × the pool stride.
    pub len: usize,
    /// Index in the sequence's page table of the first page (its first position is
    /// `first_page × page_tokens`).
    pub first_page: u32,
    /// Pages in the run.
    pub pages: u32,
}

/// Calls `f` with every segment of `seq`'s pages in `pool` of `layer`, in position order:
/// consecutive table entries holding consecutive page ids merge while the device sees the
/// merged range as one block. Pages released by a sliding window end a segment.
pub(crate) fn for_each_segment<'a, A: PageAllocator<'a>>(
    cache: &KvCache<'a, A>,
    map: &impl AddressMap,
    seq: SeqId,
    layer: u16,
    pool: PoolKind,
    mut f: impl FnMut(Segment),
) -> Result<(), HalError> {
    let table = cache.page_table(seq)?;
    let bytes = cache.pool_bytes(layer, pool)?;
    let stride = cache.arena_plan().geometry.pool_stride(pool);
    if stride == 0 {
        return Ok(());
    }
    let base = bytes.as_ptr() as usize;
    let mut open: Option<(Segment, u16)> = None; // the segment and its last page id
    for (index, &page) in table.iter().enumerate() {
        if page == NO_PAGE {
            if let Some((seg, _)) = open.take() {
                f(seg);
            }
            continue;
        }
        let cpu = base + page as usize * stride;
        if let Some((seg, last)) = &mut open {
            if page.checked_sub(1) == Some(*last) {
                if let Ok(dev) = map.to_device(seg.cpu, seg.len + stride) {
                    if dev == seg.dev {
                        seg.len += stride;
                        seg.pages += 1;
                        *last = page;
                        continue;
                    }
                }
            }
        }
        if let Some((seg, _)) = open.take() {
            f(seg);
        }
        let seg = Segment {
            cpu,
            dev: map.to_device(cpu, stride)?,
            len: stride,
            // Table indices fit in u32: tables hold at most u16::MAX pages.
            first_page: index as u32,
            pages: 1,
        };
        open = Some((seg, page));
    }
    if let Some((seg, _)) = open {
        f(seg);
    }
    Ok(())
}

/// Writes the segments of `seq`'s pages in `pool` of `layer` into `out` and returns how many
/// there are. Pure: no cache maintenance (see [`read_view`](crate::read_view) for the view that
/// also cleans).
///
/// # Errors
///
/// [`HalError::Cache`] (unknown sequence, layer out of range), the map's errors for a page the
/// device cannot address, [`HalError::BufferTooSmall`] when `out` is shorter than the list (then
/// `out` is untouched).
///
/// ```
/// use edgekv::{ArenaBuf, CacheConfig, KvCache, Pool, SeqMode, Shape};
/// use edgekv_hal::{IdentityMap, Segment, segments};
///
/// let cfg = CacheConfig::new(Shape { layers: 1, kv_heads: 1, head_dim: 16 });
/// let (mut data, mut meta) = (ArenaBuf::<16384>::new(), ArenaBuf::<2048>::new());
/// let mut cache: KvCache = KvCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut())?;
/// let seq = cache.create_sequence(SeqMode::Paged)?;
/// cache.reserve(seq, 40)?; // three pages of 16 tokens, allocated in order: one segment
/// let mut out = [Segment::default(); 4];
/// assert_eq!(segments(&cache, &IdentityMap, seq, 0, Pool::KValues, &mut out)?, 1);
/// assert_eq!((out[0].pages, out[0].len), (3, 3 * 16 * 16 * 4));
/// # Ok::<(), edgekv_hal::HalError>(())
/// ```
pub fn segments<'a, A: PageAllocator<'a>>(
    cache: &KvCache<'a, A>,
    map: &impl AddressMap,
    seq: SeqId,
    layer: u16,
    pool: PoolKind,
    out: &mut [Segment],
) -> Result<usize, HalError> {
    let mut needed = 0usize;
    for_each_segment(cache, map, seq, layer, pool, |_| needed += 1)?;
    if needed > out.len() {
        return Err(HalError::BufferTooSmall {
            needed: needed as u32,
        });
    }
    let mut n = 0;
    for_each_segment(cache, map, seq, layer, pool, |s| {
        if let Some(slot) = out.get_mut(n) {
            *slot = s;
        }
        n += 1;
    })?;
    Ok(n)
}
