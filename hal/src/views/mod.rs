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

use edgekv::{Kv, KvCache, PageAllocator, Pool, SeqId};

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

/// The pages of `(seq, layer, kv)` ready for a device to read: their value and scale segments
/// are written to `values` and `scales`, then every segment is cleaned so the device sees what
/// the CPU wrote.
///
/// # Errors
///
/// As [`segments`] (for `values` first, then `scales`; nothing is written to either unless both
/// fit), and [`HalError::Misaligned`] when a segment is not whole lines of `maint` (a line size
/// above the cache's arena alignment) — checked before any line is cleaned.
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
    let (vp, sp) = (Pool::values(kv), Pool::scales(kv));
    let need = |pool| {
        let mut n = 0u32;
        segments::for_each_segment(cache, map, seq, layer, pool, |_| n += 1).map(|()| n)
    };
    for (pool, out) in [(vp, &*values), (sp, &*scales)] {
        let needed = need(pool)?;
        if needed as usize > out.len() {
            return Err(HalError::BufferTooSmall { needed });
        }
    }
    let view = ReadView {
        values: segments(cache, map, seq, layer, vp, values)?,
        scales: segments(cache, map, seq, layer, sp, scales)?,
    };
    let (values, scales) = (&values[..view.values], &scales[..view.scales]);
    let line = maint.line_size();
    for s in values.iter().chain(scales) {
        line_aligned(s.cpu, s.len, line)?;
    }
    clean_segments(cache, maint, layer, vp, values)?;
    clean_segments(cache, maint, layer, sp, scales)?;
    Ok(view)
}

/// Cleans the pool bytes under each segment (whose alignment the caller checked).
fn clean_segments<'a, A: PageAllocator<'a>>(
    cache: &KvCache<'a, A>,
    maint: &mut impl CacheMaintenance,
    layer: u16,
    pool: Pool,
    segs: &[Segment],
) -> Result<(), HalError> {
    let bytes = cache.pool_bytes(layer, pool)?;
    let base = bytes.as_ptr() as usize;
    for s in segs {
        let start = s.cpu.wrapping_sub(base);
        let range = bytes
            .get(start..start.saturating_add(s.len))
            .ok_or(HalError::Overflow)?;
        maint.clean_slice(range)?;
    }
    Ok(())
}
