//! Region binding: the data arena as one device base region plus per-page offsets — the model of
//! NPUs that take a few base pointers and fixed offsets (Ethos-U: at most 8 regions).

use edgekv::{Kv, KvCache, NO_PAGE, PageAllocator, PoolKind, SeqId};

use crate::{AddressMap, CacheMaintenance, DevAddr, HalError, line_aligned};

/// Offset written for a page released by a sliding window.
pub const NO_OFFSET: u32 = u32::MAX;

/// The base region a [`bind_region`] call bound: the cache's whole data arena.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RegionBinding {
    /// Device address of the arena's first byte: the value for the NPU's base-pointer register.
    pub base: DevAddr,
    /// CPU address of the arena's first byte.
    pub cpu: usize,
    /// Bytes of the region (the arena bytes the pools use).
    pub len: usize,
    /// Offsets written to each output slice: the sequence's pages.
    pub pages: usize,
}

/// Binds the data arena of `cache` as one base region and writes, for each page of `seq`, the
/// byte offset from the region base of its `(layer, kv)` values to `values` and of its scales to
/// `scales` ([`NO_OFFSET`] for released pages; `scales` is not touched for formats without
/// scales). The bound pages are cleaned so the device sees what the CPU wrote.
///
/// # Errors
///
/// [`HalError::Cache`] (unknown sequence, layer out of range), the map's errors if the arena is
/// not one device block, [`HalError::BufferTooSmall`] if an output slice is shorter than the
/// page table, [`HalError::Overflow`] if an offset does not fit in `u32`,
/// [`HalError::Misaligned`] if a page is not whole lines of `maint` (checked before any
/// maintenance), and whatever `maint` returns. The pages are cleaned before the offsets are
/// written: nothing is written to the outputs on any error.
#[allow(clippy::too_many_arguments)]
pub fn bind_region<'a, A: PageAllocator<'a>>(
    cache: &KvCache<'a, A>,
    map: &impl AddressMap,
    maint: &mut impl CacheMaintenance,
    seq: SeqId,
    layer: u16,
    kv: Kv,
    values: &mut [u32],
    scales: &mut [u32],
) -> Result<RegionBinding, HalError> {
    let table = cache.page_table(seq)?;
    let plan = cache.arena_plan();
    let cpu = cache.data_ptr() as usize;
    let region = RegionBinding {
        base: map.to_device(cpu, plan.data_bytes)?,
        cpu,
        len: plan.data_bytes,
        pages: table.len(),
    };
    let pools = [
        (PoolKind::values(kv), &*values),
        (PoolKind::scales(kv), &*scales),
    ];
    let line = maint.line_size();
    for (pool, out) in pools {
        if plan.geometry.pool_stride(pool) == 0 {
            continue;
        }
        if out.len() < table.len() {
            return Err(HalError::BufferTooSmall {
                needed: table.len() as u32,
            });
        }
        for &page in table.iter().filter(|&&p| p != NO_PAGE) {
            let slot = cache.slot_bytes(layer, pool, page)?;
            line_aligned(slot.as_ptr() as usize, slot.len(), line)?;
            u32::try_from(slot.as_ptr() as usize - cpu).map_err(|_| HalError::Overflow)?;
        }
    }
    // Clean every bound page, then write the offsets: a failing clean leaves the outputs as
    // they were.
    for pool in [PoolKind::values(kv), PoolKind::scales(kv)] {
        if plan.geometry.pool_stride(pool) == 0 {
            continue;
        }
        for &page in table.iter().filter(|&&p| p != NO_PAGE) {
            maint.clean_slice(cache.slot_bytes(layer, pool, page)?)?;
        }
    }
    for (pool, out) in [
        (PoolKind::values(kv), values),
        (PoolKind::scales(kv), scales),
    ] {
        if plan.geometry.pool_stride(pool) == 0 {
            continue;
        }
        for (o, &page) in out.iter_mut().zip(table) {
            *o = match cache.slot_bytes(layer, pool, page) {
                // Checked above: fits in u32.
                Ok(slot) if page != NO_PAGE => (slot.as_ptr() as usize - cpu) as u32,
                _ => NO_OFFSET,
            };
        }
    }
    Ok(region)
}
