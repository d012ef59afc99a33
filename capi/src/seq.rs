//! Sequences: create, free, fork, truncate, reserve, slide, and queries.

use edgekv::SeqId;
use edgekv::attention::Window;

use super::cache::query;
use super::handle::{AnyCache, EkvCache, Handle, dispatch, dispatch_flat};
use super::ptr::{Buf, Out, disjoint, opt_span};
use super::status::{EKV_ERR_BUFFER_TOO_SMALL, EkvStatus, Fail, status};
use super::types::{EKV_SEQ_CONTIGUOUS, EKV_SEQ_PAGED, EkvSeq, EkvSeqInfo, parse_mode};

/// Creates an empty sequence of `mode` (`EKV_SEQ_PAGED` or `EKV_SEQ_CONTIGUOUS`) and writes its
/// handle to `out`.
///
/// Errors: `EKV_ERR_INVALID_ARGUMENT` (`mode`), `EKV_ERR_TOO_MANY_SEQUENCES`,
/// `EKV_ERR_CONTIGUOUS_UNSUPPORTED` (contiguous without `EKV_ALLOC_BITMAP`).
///
/// # Safety
///
/// `cache` is NULL or points to readable `ekv_cache_t` storage; `out` (required) is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_seq_create(
    cache: *mut EkvCache,
    mode: u32,
    out: *mut EkvSeq,
) -> EkvStatus {
    // SAFETY: the caller's obligation (see `# Safety`).
    let h = unsafe { Handle::new(cache) };
    // SAFETY: `out` is NULL or writable (see `# Safety`).
    status(unsafe {
        query(h, out, |c| {
            let m = parse_mode(mode)?;
            Ok(dispatch!(c, c => c.create_sequence(m))?.to_raw())
        })
    })
}

/// Frees a sequence: each of its pages loses this sequence's reference; a page no other
/// sequence holds returns to the allocator, or, if published for prefix reuse, stays cached
/// (evictable, least recently cached first) for later lookups. The handle is then
/// `EKV_ERR_UNKNOWN_SEQUENCE` everywhere.
///
/// # Safety
///
/// `cache` is NULL or points to readable `ekv_cache_t` storage.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_seq_free(cache: *mut EkvCache, seq: EkvSeq) -> EkvStatus {
    // SAFETY: the caller's obligation (see `# Safety`).
    let h = unsafe { Handle::new(cache) };
    status(h.with(|c, _| Ok(dispatch!(c, c => c.free_sequence(SeqId::from_raw(seq)))?)))
}

/// Forks a sequence: the child (written to `out`) sees the same positions and data. A paged
/// child shares the full pages (reference counted: a later write to either sequence copies the
/// page first) and gets a copy of the partial tail page; a contiguous child gets its own run (a
/// copy). Errors: `EKV_ERR_UNKNOWN_SEQUENCE`, `EKV_ERR_TOO_MANY_SEQUENCES`,
/// `EKV_ERR_OUT_OF_PAGES`, `EKV_ERR_NO_CONTIGUOUS_RUN`. Forking a sequence with pages released by
/// `ekv_seq_slide` is allowed: the child has the same released positions (attention under the
/// same window, or a narrower one, works; reads of released positions are
/// `EKV_ERR_POSITION_OUT_OF_RANGE` as for the parent).
///
/// # Safety
///
/// As `ekv_seq_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_seq_fork(
    cache: *mut EkvCache,
    seq: EkvSeq,
    out: *mut EkvSeq,
) -> EkvStatus {
    // SAFETY: the caller's obligation (see `# Safety`).
    let h = unsafe { Handle::new(cache) };
    // SAFETY: `out` is NULL or writable (see `# Safety`).
    status(unsafe {
        query(h, out, |c| {
            Ok(dispatch!(c, c => c.fork(SeqId::from_raw(seq)))?.to_raw())
        })
    })
}

/// Shortens a sequence to `len` positions: a paged sequence releases the pages past `len`
/// (published ones stay cached), a contiguous one keeps its run as capacity; the committed
/// prompt is cut to `len`. A page kept shared is copied by the next write into it.
///
/// Errors: `EKV_ERR_UNKNOWN_SEQUENCE`, `EKV_ERR_TRUNCATE_BEYOND_LENGTH` (`len` above the
/// length), `EKV_ERR_POSITION_OUT_OF_RANGE` (the new last page was released by `ekv_seq_slide`),
/// `EKV_ERR_TRUNCATE_BEYOND_WINDOW` (a windowed layer group of a grouped cache released
/// positions a query at `len` would see; no group changed).
///
/// # Safety
///
/// As `ekv_seq_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_seq_truncate(
    cache: *mut EkvCache,
    seq: EkvSeq,
    len: u32,
) -> EkvStatus {
    // SAFETY: the caller's obligation (see `# Safety`).
    let h = unsafe { Handle::new(cache) };
    status(h.with(|c, _| Ok(dispatch!(c, c => c.truncate(SeqId::from_raw(seq), len))?)))
}

/// Reserves `n` more positions at the end of a sequence (all or nothing), allocating pages for
/// every layer, and writes the first new position to `first` (optional: may be NULL). It also
/// secures the pages the writes into the new positions need: a shared or published tail page is
/// copied now, so writing the reserved positions cannot fail with `EKV_ERR_OUT_OF_PAGES` (until
/// the sequence is forked or its pages are published by `ekv_commit_prompt` again; rewriting
/// positions before `first` may still need a copy).
///
/// Errors: `EKV_ERR_UNKNOWN_SEQUENCE`, `EKV_ERR_SEQUENCE_FULL` past `max_seq_tokens` (however
/// far, even past `UINT32_MAX`), `EKV_ERR_OUT_OF_PAGES` (new pages plus the tail copy),
/// `EKV_ERR_NO_CONTIGUOUS_RUN`.
///
/// # Safety
///
/// `cache` as `ekv_seq_free`; `first` (optional) NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_seq_reserve(
    cache: *mut EkvCache,
    seq: EkvSeq,
    n: u32,
    first: *mut u32,
) -> EkvStatus {
    let r = (|| {
        let first = Out::optional(first)?;
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        let pos = h.with(|c, a| {
            let [s, d, m] = a.spans();
            disjoint(&[opt_span(&first), s, d, m])?;
            Ok(dispatch!(c, c => c.reserve(SeqId::from_raw(seq), n))?)
        })?;
        if let Some(out) = first {
            // SAFETY: checked, writable by the caller's obligation.
            unsafe { out.set(pos) };
        }
        Ok(())
    })();
    status(r)
}

/// Releases the pages of a paged sequence that no query at a position >= `from` can see under
/// the window (`sinks` leading positions, `window` most recent, as `ekv_attention_params_t`):
/// those wholly inside `[sinks, from + 1 - window)`. Writes the pages released to `released`
/// (optional: may be NULL). Call it once attention for every position below `from` is done
/// (typically `from` = length after each decode step), with the window attention uses.
///
/// Released pages read 0xFFFF in `ekv_seq_page_table` (0xFFFFFFFF offsets in
/// `ekv_bind_region`, left out of segment lists); positions keep their absolute values, and
/// reading, writing or gathering a released position, or attending to one as a kept key, is
/// `EKV_ERR_POSITION_OUT_OF_RANGE`. A shared page loses this sequence's reference only, a
/// published one becomes cached. A sequence with released pages cannot be snapshotted
/// (`EKV_ERR_WINDOWED_SEQUENCE`).
///
/// Errors: `EKV_ERR_UNKNOWN_SEQUENCE`, `EKV_ERR_NOT_PAGED`, `EKV_ERR_ZERO_SIZE` (`window` 0),
/// `EKV_ERR_POSITION_OUT_OF_RANGE` (`from` past the length).
///
/// # Safety
///
/// As `ekv_seq_reserve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_seq_slide(
    cache: *mut EkvCache,
    seq: EkvSeq,
    sinks: u32,
    window: u32,
    from: u32,
    released: *mut u16,
) -> EkvStatus {
    let r = (|| {
        let released = Out::optional(released)?;
        let w = Window { sinks, window };
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        let n = h.with(|c, a| {
            let [s, d, m] = a.spans();
            disjoint(&[opt_span(&released), s, d, m])?;
            Ok(dispatch_flat!(c, c => c.slide(SeqId::from_raw(seq), &w, from))?)
        })?;
        if let Some(out) = released {
            // SAFETY: checked, writable by the caller's obligation.
            unsafe { out.set(n) };
        }
        Ok(())
    })();
    status(r)
}

/// Length, capacity, committed prompt, pages and mode of a sequence.
///
/// # Safety
///
/// As `ekv_seq_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_seq_info(
    cache: *mut EkvCache,
    seq: EkvSeq,
    out: *mut EkvSeqInfo,
) -> EkvStatus {
    // SAFETY: the caller's obligation (see `# Safety`).
    let h = unsafe { Handle::new(cache) };
    // SAFETY: `out` is NULL or writable (see `# Safety`).
    status(unsafe {
        query(h, out, |c| {
            let seq = SeqId::from_raw(seq);
            let i = match c {
                AnyCache::List(c) => c.sequence(seq)?,
                AnyCache::Bitmap(c) => c.sequence(seq)?,
                AnyCache::Grouped(g) => grouped_info(g, seq)?,
            };
            Ok(EkvSeqInfo {
                len: i.len,
                capacity: i.capacity,
                prompt: i.prompt,
                pages: i.pages,
                mode: match i.mode {
                    edgekv::SeqMode::Contiguous => EKV_SEQ_CONTIGUOUS as u16,
                    _ => EKV_SEQ_PAGED as u16,
                },
            })
        })
    })
}

/// Copies a sequence's page table (page ids in position order; 0xFFFF for pages released by a
/// sliding window) to `pages` (`capacity` entries) and writes its length to `count`. With
/// `capacity` too small: `EKV_ERR_BUFFER_TOO_SMALL`, `count` = entries needed, `pages`
/// untouched.
///
/// # Safety
///
/// `cache` as `ekv_seq_free`; `pages` NULL (with `capacity` 0) or writable for `capacity`
/// `uint16_t`s; `count` (required) NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_seq_page_table(
    cache: *mut EkvCache,
    seq: EkvSeq,
    pages: *mut u16,
    capacity: usize,
    count: *mut usize,
) -> EkvStatus {
    let r = (|| {
        let count = Out::new(count)?;
        let out = Buf::output(pages, capacity)?;
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        let r = h.with(|c, a| {
            let [s, d, m] = a.spans();
            disjoint(&[out.span(), count.span(), s, d, m])?;
            let table = dispatch_flat!(c, c => c.page_table(SeqId::from_raw(seq)))?;
            // SAFETY: writable by the caller's obligation, disjoint from the cache's memory
            // and from `count`.
            let out = unsafe { out.get_mut() };
            if let Some(dst) = out.get_mut(..table.len()) {
                dst.copy_from_slice(table);
                Ok(Ok(table.len()))
            } else {
                Ok(Err(table.len()))
            }
        })?;
        let (n, result) = match r {
            Ok(n) => (n, Ok(())),
            Err(n) => (n, Err(Fail(EKV_ERR_BUFFER_TOO_SMALL))),
        };
        // SAFETY: checked, writable by the caller's obligation.
        unsafe { count.set(n) };
        result
    })();
    status(r)
}

/// A sequence of a grouped cache as one: length, prompt and mode (the same in every group), the
/// smallest capacity and the largest page count of the groups (enough entries for the
/// `ekv_bind_region` outputs of any layer).
fn grouped_info(
    g: &edgekv::GroupedCache<'static, edgekv::FreeList<'static>>,
    seq: SeqId,
) -> Result<edgekv::SeqInfo, edgekv::Error> {
    let mut info: Option<edgekv::SeqInfo> = None;
    for k in (0..g.group_count()).filter_map(|i| g.group(i)) {
        let i = k.sequence(seq)?;
        info = Some(match info {
            None => i,
            Some(mut a) => {
                a.capacity = a.capacity.min(i.capacity);
                a.pages = a.pages.max(i.pages);
                a
            }
        });
    }
    info.ok_or(edgekv::Error::UnknownSequence)
}
