//! Device views over C: segment lists, read views, region bindings, gather and ingest.

use core::mem::{align_of, size_of};

use edgekv::{KvCache, PageAllocator, PoolKind, SeqId};

use super::handle::{AnyCache, Arenas, EkvCache, Handle, dispatch_layer};
use super::maint::{EkvMaintenance, Maint};
use super::map::{EkvAddressMap, Map};
use super::ptr::{Buf, Out, Span, disjoint, optional};
use super::status::{EKV_ERR_BUFFER_TOO_SMALL, EkvStatus, Fail, Res, status};
use super::types::{EkvSeq, parse_kv, parse_pool};
use edgekv_hal::{HalError, Segment};

/// A run of a sequence's pages that are neighbours in the arena and on the device: one DMA
/// descriptor. Pages are whole pool slots (the pool stride: page bytes rounded up to
/// `config.align`, padding included), so a segment is always whole cache lines; its bytes are
/// laid out as `ekv_plan_t` describes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EkvSegment {
    /// CPU address of the first byte.
    pub cpu: usize,
    /// Device address of the first byte.
    pub dev: u64,
    /// Bytes: `pages` x the pool stride.
    pub len: usize,
    /// Index in the sequence's page table of the first page (its first position is
    /// `first_page x page_tokens`).
    pub first_page: u32,
    /// Pages in the run.
    pub pages: u32,
}

impl From<Segment> for EkvSegment {
    fn from(s: Segment) -> Self {
        EkvSegment {
            cpu: s.cpu,
            dev: s.dev.0,
            len: s.len,
            first_page: s.first_page,
            pages: s.pages,
        }
    }
}

/// What `ekv_bind_region` bound: the cache's data arena as one device base region.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EkvRegion {
    /// Device address of the arena's first byte: the NPU base-pointer value.
    pub base: u64,
    /// CPU address of the arena's first byte.
    pub cpu: usize,
    /// Bytes of the region.
    pub len: usize,
    /// Offsets written to each output array (the sequence's pages); on
    /// `EKV_ERR_BUFFER_TOO_SMALL`, the entries needed.
    pub pages: usize,
}

// The Rust segments are built inside the caller's `ekv_segment_t` array, then converted in place
// (last first), so no list length is bounded by a stack buffer. Element `i` of the converted
// array never overlaps a Rust segment `j < i` still to be converted because a Rust segment is no
// larger than a C one.
const _: () = assert!(size_of::<Segment>() <= size_of::<EkvSegment>());
const _: () = assert!(align_of::<Segment>() <= align_of::<EkvSegment>());

/// Runs `f` on `n` default [`Segment`]s laid out at the start of `buf`, then converts them in
/// place to [`EkvSegment`]s (whatever `f` returned).
///
/// # Safety
///
/// `buf` is an output buffer of at least `n` elements, writable and not otherwise referenced.
unsafe fn in_c_buffer<R>(
    buf: &Buf<EkvSegment>,
    n: usize,
    f: impl FnOnce(&mut [Segment]) -> R,
) -> R {
    let n = n.min(buf.len());
    if n == 0 {
        return f(&mut []);
    }
    let base = buf.ptr().cast::<Segment>();
    for i in 0..n {
        // SAFETY: `i < n <= len`: inside the buffer, as `i * size_of::<Segment>() <=
        // i * size_of::<EkvSegment>()`; aligned (buffer aligned for EkvSegment, whose alignment
        // is at least Segment's, and Segment's size is a multiple of its alignment).
        unsafe { base.add(i).write(Segment::default()) };
    }
    // SAFETY: `n` initialized, aligned Segments in memory the caller gave us exclusively.
    let r = f(unsafe { core::slice::from_raw_parts_mut(base, n) });
    for i in (0..n).rev() {
        // SAFETY: Segment `i` (bytes `[i*R, (i+1)*R)`, R = its size) is initialized, written
        // above or by `f`. Only C elements `> i` were written so far, and those start at
        // `(i+1)*C >= (i+1)*R` (C >= R, asserted): Segment `i` is intact.
        let s = unsafe { base.add(i).read() };
        // SAFETY: inside the buffer, aligned for EkvSegment; its bytes `[i*C, (i+1)*C)` cover
        // only Segments `>= i`, all read already.
        unsafe { buf.ptr().add(i).write(EkvSegment::from(s)) };
    }
    r
}

/// Segments `pool` of `(seq, layer)` needs (without writing any).
fn needed<'a, A: PageAllocator<'a>>(
    c: &KvCache<'a, A>,
    map: &Map,
    seq: SeqId,
    layer: u16,
    pool: PoolKind,
) -> Res<usize> {
    match edgekv_hal::segments(c, map, seq, layer, pool, &mut []) {
        Ok(n) => Ok(n),
        Err(HalError::BufferTooSmall { needed }) => Ok(needed as usize),
        Err(e) => Err(e.into()),
    }
}

/// The memory of a live cache as spans, plus extra ones, checked pairwise disjoint.
pub(super) fn check_disjoint(a: &Arenas, extra: &[Span]) -> Res<()> {
    let [s, d, m] = a.spans();
    let mut all = [Span::EMPTY; 8];
    all[0] = s;
    all[1] = d;
    all[2] = m;
    for (dst, src) in all[3..].iter_mut().zip(extra) {
        *dst = *src;
    }
    disjoint(&all[..3 + extra.len().min(5)])
}

/// Checks and copies a C address map and maintenance struct.
///
/// # Safety
///
/// `map`, `maint` NULL or readable structs (and a table map's entries readable).
pub(super) unsafe fn device_args(
    map: *const EkvAddressMap,
    maint: *const EkvMaintenance,
) -> Res<(Map, Maint)> {
    // SAFETY: forwarded obligations; the struct and its entries are copied.
    let map = unsafe { Map::new(optional(map)?) }?;
    // SAFETY: forwarded obligation; copied.
    let maint = Maint::new(unsafe { optional(maint) }?)?;
    Ok((map, maint))
}

/// Runs `f` with the cache, map and maintenance; a failed callback turns the error into
/// `EKV_ERR_MAINTENANCE`.
pub(super) fn with_device<R>(
    h: Handle,
    (map, mut maint): (Map, Maint),
    f: impl FnOnce(&mut AnyCache, &Arenas, &Map, &mut Maint) -> Res<R>,
) -> Res<R> {
    h.with(|c, a| f(c, a, &map, &mut maint))
        .map_err(|e| maint.error(e))
}

/// Writes the segments of `seq`'s pages in `pool` (`EKV_POOL_*`) of `layer` to `out`
/// (`capacity` entries) and their number to `count`. No cache maintenance. With `capacity`
/// too small: `EKV_ERR_BUFFER_TOO_SMALL`, `count` = entries needed, `out` untouched. `map` NULL
/// is the identity. Segments come in position order: consecutive page-table entries holding
/// consecutive page ids merge while the device sees the merged range as one block; pages
/// released by `ekv_seq_slide` are left out (they end a segment). A segment covers whole pages:
/// rows past the sequence's length hold whatever the page last held. Scale pools of formats
/// without scales give no segments.
///
/// Errors: `EKV_ERR_INVALID_ARGUMENT` (`pool`), `EKV_ERR_UNKNOWN_SEQUENCE`,
/// `EKV_ERR_LAYER_OUT_OF_RANGE`, the map's (`EKV_ERR_UNMAPPED`...), `EKV_ERR_BUFFER_TOO_SMALL`.
///
/// # Safety
///
/// `cache` NULL or readable `ekv_cache_t` storage; `map` NULL or readable; `out` NULL (with
/// `capacity` 0) or writable for `capacity` entries; `count` (required) NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_segments(
    cache: *mut EkvCache,
    map: *const EkvAddressMap,
    seq: EkvSeq,
    layer: u16,
    pool: u32,
    out: *mut EkvSegment,
    capacity: usize,
    count: *mut usize,
) -> EkvStatus {
    let r = (|| {
        let pool = parse_pool(pool)?;
        let out = Buf::output(out, capacity)?;
        let count = Out::new(count)?;
        let seq = SeqId::from_raw(seq);
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        // SAFETY: the caller's obligation (see `# Safety`).
        let dev = unsafe { device_args(map, core::ptr::null()) }?;
        let (n, r) = with_device(h, dev, |c, a, map, _| {
            check_disjoint(a, &[out.span(), count.span()])?;
            dispatch_layer!(c, c, layer => {
                let n = needed(c, map, seq, layer, pool)?;
                if n > out.len() {
                    return Ok((n, Err(Fail(EKV_ERR_BUFFER_TOO_SMALL))));
                }
                // SAFETY: writable, exclusive (disjoint from the cache and `count`).
                let r = unsafe {
                    in_c_buffer(&out, n, |segs| edgekv_hal::segments(c, map, seq, layer, pool, segs))
                };
                // Cannot fail: the same list was just counted.
                r?;
                Ok((n, Ok(())))
            })
        })?;
        // SAFETY: checked, writable by the caller's obligation.
        unsafe { count.set(n) };
        r
    })();
    status(r)
}

/// The pages of `(seq, layer, kv)` ready for a device to read: every segment is cleaned
/// through `maint` (NULL: no cache), then the value segments are written to `values`, scale
/// segments (int8 formats) to `scales` and their counts to `n_values` / `n_scales`. With a
/// capacity too small: `EKV_ERR_BUFFER_TOO_SMALL`, both counts hold the entries needed, the
/// arrays are untouched and no maintenance ran. `EKV_ERR_MISALIGNED` when a segment is not
/// whole lines of `maint->line_size` (a line above `config.align`), checked before any line is
/// cleaned. On any other error (`EKV_ERR_MAINTENANCE` included) nothing is written.
///
/// # Safety
///
/// As `ekv_segments`, for both arrays and counts; `maint` NULL or a readable struct whose
/// callbacks are safe to call with its `ctx` and line-aligned ranges of the data arena.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_read_view(
    cache: *mut EkvCache,
    map: *const EkvAddressMap,
    maint: *const EkvMaintenance,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    values: *mut EkvSegment,
    values_capacity: usize,
    scales: *mut EkvSegment,
    scales_capacity: usize,
    n_values: *mut usize,
    n_scales: *mut usize,
) -> EkvStatus {
    let r = (|| {
        let kv = parse_kv(kv)?;
        let values = Buf::output(values, values_capacity)?;
        let scales = Buf::output(scales, scales_capacity)?;
        let (n_values, n_scales) = (Out::new(n_values)?, Out::new(n_scales)?);
        let seq = SeqId::from_raw(seq);
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        // SAFETY: the caller's obligation (see `# Safety`).
        let dev = unsafe { device_args(map, maint) }?;
        let (nv, ns, r) = with_device(h, dev, |c, a, map, maint| {
            let spans = [
                values.span(),
                scales.span(),
                n_values.span(),
                n_scales.span(),
            ];
            check_disjoint(a, &spans)?;
            dispatch_layer!(c, c, layer => {
                let nv = needed(c, map, seq, layer, PoolKind::values(kv))?;
                let ns = needed(c, map, seq, layer, PoolKind::scales(kv))?;
                if nv > values.len() || ns > scales.len() {
                    return Ok((nv, ns, Err(Fail(EKV_ERR_BUFFER_TOO_SMALL))));
                }
                // Checks and cleans everything first: on error no output is written.
                let caps = (values.len(), scales.len());
                edgekv_hal::clean_view(c, map, maint, seq, layer, kv, caps)?;
                // SAFETY: both writable, exclusive (disjoint from each other, the cache and
                // the counts).
                let r = unsafe {
                    in_c_buffer(&values, nv, |v| {
                        edgekv_hal::segments(c, map, seq, layer, PoolKind::values(kv), v)
                    })
                    .and_then(|_| {
                        in_c_buffer(&scales, ns, |s| {
                            edgekv_hal::segments(c, map, seq, layer, PoolKind::scales(kv), s)
                        })
                    })
                };
                // Cannot fail: the same lists were just counted and cleaned.
                r?;
                Ok((nv, ns, Ok(())))
            })
        })?;
        // SAFETY: checked, writable by the caller's obligation.
        unsafe {
            n_values.set(nv);
            n_scales.set(ns);
        }
        r
    })();
    status(r)
}

/// Binds the data arena as one device base region (Ethos-U style): writes to `values` the byte
/// offset from the region base of each page of `seq`'s `(layer, kv)` values, and to `scales` of
/// its scales (int8 formats only; otherwise `scales` is untouched and may be NULL), 0xFFFFFFFF
/// for pages released by a window; cleans the bound pages; writes the region to `out`. Each
/// array needs the sequence's page count (`ekv_seq_info().pages`) entries; with fewer:
/// `EKV_ERR_BUFFER_TOO_SMALL` and `out->pages` = entries needed. The pages are cleaned before
/// anything is written: on any other error nothing is. The offsets follow the arena layout of
/// `ekv_plan_t`. Other errors: the map's when the arena is not one device block
/// (`EKV_ERR_UNMAPPED`...), `EKV_ERR_ADDRESS_OVERFLOW` (an offset past `UINT32_MAX`),
/// `EKV_ERR_MISALIGNED` (a page not whole lines of `maint->line_size`, checked before any
/// maintenance), `EKV_ERR_MAINTENANCE`.
///
/// For a grouped cache (`ekv_grouped_cache_create`) the region is the layer's group's part of
/// the data arena (from `data + data_offset[group]`, `out->cpu`), laid out by the layer's index
/// in its group (`ekv_layer_group`).
///
/// The region is the data arena: for `ekv_cache_create` the `data` pointer given, for
/// `ekv_cache_create_split` the data part of the buffer, which starts after the metadata at
/// `buf + round_up(plan.meta_bytes, config.align)` (`out->cpu` reports it), not at `buf`.
///
/// # Safety
///
/// `cache`, `map`, `maint` as `ekv_read_view`; `values` / `scales` NULL (with capacity 0) or
/// writable for their capacities; `out` (required) NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_bind_region(
    cache: *mut EkvCache,
    map: *const EkvAddressMap,
    maint: *const EkvMaintenance,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    values: *mut u32,
    values_capacity: usize,
    scales: *mut u32,
    scales_capacity: usize,
    out: *mut EkvRegion,
) -> EkvStatus {
    let r = (|| {
        let kv = parse_kv(kv)?;
        let values = Buf::output(values, values_capacity)?;
        let scales = Buf::output(scales, scales_capacity)?;
        let out = Out::new(out)?;
        let seq = SeqId::from_raw(seq);
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        // SAFETY: the caller's obligation (see `# Safety`).
        let dev = unsafe { device_args(map, maint) }?;
        let (region, r) = with_device(h, dev, |c, a, map, maint| {
            check_disjoint(a, &[values.span(), scales.span(), out.span()])?;
            // SAFETY: writable (caller), pairwise disjoint and outside the cache.
            let (v, s) = unsafe { (values.get_mut(), scales.get_mut()) };
            let r = dispatch_layer!(c, c, layer => {
                edgekv_hal::bind_region(c, map, maint, seq, layer, kv, v, s)
            });
            Ok(match r {
                Ok(b) => (
                    EkvRegion {
                        base: b.base.0,
                        cpu: b.cpu,
                        len: b.len,
                        pages: b.pages,
                    },
                    Ok(()),
                ),
                Err(HalError::BufferTooSmall { needed }) => (
                    EkvRegion {
                        pages: needed as usize,
                        ..EkvRegion::default()
                    },
                    Err(Fail(EKV_ERR_BUFFER_TOO_SMALL)),
                ),
                Err(e) => return Err(maint.error(e.into())),
            })
        })?;
        // SAFETY: checked, writable by the caller's obligation.
        unsafe { out.set(region) };
        r
    })();
    status(r)
}
