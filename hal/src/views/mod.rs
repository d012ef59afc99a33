//! Device views of a sequence's pages: what DMA engines and NPUs are given, with the cache
//! maintenance each direction needs.
//!
//! * Device reads pages: [`read_view`] (segment lists) or [`bind_region`] (one base region plus
//!   page offsets) clean the pages first.
//! * Device reads a dense tensor: [`gather`] copies pages into a staging tensor, then cleans it.
//! * Device wrote K/V rows: [`ingest`] invalidates the staging buffer, then quantizes the rows
//!   into pages.
//!
//! Every view checks all its ranges against the cache line before the first maintenance call,
//! so an error means no line was touched.

mod buffers;
mod region;
mod segments;
mod staging;

pub use buffers::{device_input, device_output, take_output};
pub use region::{NO_OFFSET, RegionBinding, bind_region};
pub use segments::{Segment, segments};
pub use staging::{gather, ingest};

use edgekv::{Kv, KvCache, PageAllocator, PoolKind, SeqId};

use crate::{AddressMap, CacheMaintenance, HalError, line_aligned};

/// How many segments a [`read_view`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ReadView {
    /// Segments of the value pages.
    pub values: usize,
    /// Segments of the scale pages (0 for full-precision formats).
    pub scales: usize,
}

/// The pages of `(seq, layer, kv)` ready for a device to read: every value and scale segment is
/// cleaned so the device sees what the CPU wrote, then the segments are written to `values` and
/// `scales`.
///
/// # Errors
///
/// As [`segments`] (for `values` first, then `scales`), [`HalError::BufferTooSmall`] when either
/// list does not fit (no maintenance runs then), [`HalError::Misaligned`] when a segment is not
/// whole lines of `maint` (a line size above the cache's arena alignment; checked before any
/// line is cleaned), and whatever `maint` returns. Everything is checked and cleaned before the
/// outputs are written: on any error neither `values` nor `scales` was written.
#[allow(clippy::too_many_arguments)]
pub fn read_view<'a, A: PageAllocator<'a>>(
    cache: &KvCache<'a, A>,
    map: &impl AddressMap,
    maint: &mut impl CacheMaintenance,
    seq: SeqId,
    layer: u16,
    kv: Kv,
    values: &mut [Segment],
    scales: &mut [Segment],
) -> Result<ReadView, HalError> {
    let view = clean_view(
        cache,
        map,
        maint,
        seq,
        layer,
        kv,
        (values.len(), scales.len()),
    )?;
    // Cannot fail: the same lists were just computed.
    segments(cache, map, seq, layer, PoolKind::values(kv), values)?;
    segments(cache, map, seq, layer, PoolKind::scales(kv), scales)?;
    Ok(view)
}

/// The checks and maintenance of [`read_view`] without its outputs: counts the value and scale
/// segments, fails with [`HalError::BufferTooSmall`] if they exceed `capacity` (values,
/// scales), checks every segment is whole lines of `maint`, then cleans them all. For callers
/// that write the segment lists themselves afterwards (the C ABI writes them into C buffers).
///
/// # Errors
///
/// As [`read_view`].
pub fn clean_view<'a, A: PageAllocator<'a>>(
    cache: &KvCache<'a, A>,
    map: &impl AddressMap,
    maint: &mut impl CacheMaintenance,
    seq: SeqId,
    layer: u16,
    kv: Kv,
    capacity: (usize, usize),
) -> Result<ReadView, HalError> {
    let (vp, sp) = (PoolKind::values(kv), PoolKind::scales(kv));
    let need = |pool| {
        let mut n = 0usize;
        segments::for_each_segment(cache, map, seq, layer, pool, |_| n += 1).map(|()| n)
    };
    let view = ReadView {
        values: need(vp)?,
        scales: need(sp)?,
    };
    for (needed, cap) in [(view.values, capacity.0), (view.scales, capacity.1)] {
        if needed > cap {
            return Err(HalError::BufferTooSmall {
                // A page table holds at most u16::MAX pages.
                needed: needed as u32,
            });
        }
    }
    let line = maint.line_size();
    for pool in [vp, sp] {
        let mut bad = Ok(());
        segments::for_each_segment(cache, map, seq, layer, pool, |s| {
            if bad.is_ok() {
                bad = line_aligned(s.cpu, s.len, line).map(|_| ());
            }
        })?;
        bad?;
    }
    for pool in [vp, sp] {
        let bytes = cache.pool_bytes(layer, pool)?;
        let base = bytes.as_ptr() as usize;
        let mut done = Ok(());
        segments::for_each_segment(cache, map, seq, layer, pool, |s| {
            if done.is_ok() {
                let start = s.cpu.wrapping_sub(base);
                done = bytes
                    .get(start..start.saturating_add(s.len))
                    .ok_or(HalError::Overflow)
                    .and_then(|range| maint.clean_slice(range));
            }
        })?;
        done?;
    }
    Ok(view)
}
