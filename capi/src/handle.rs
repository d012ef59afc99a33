//! The cache object: caller-owned storage (`ekv_cache_t`) holding a [`KvCache`] over caller
//! arenas (or a reference to a [`GroupedCache`] kept at the start of its metadata arena), a
//! magic word that makes dead or foreign handles an error code, and a busy flag that turns
//! re-entry from a callback into [`EKV_ERR_BUSY`] instead of aliased `&mut`s.

use core::mem::{align_of, size_of};

use edgekv::{Bitmap, FreeList, GroupedCache, KvCache};

use super::ptr::Span;
use super::status::{EKV_ERR_BAD_HANDLE, EKV_ERR_BUSY, EKV_ERR_MISALIGNED_POINTER, Fail, Res};

/// `uint64_t` words of `ekv_cache_t`: room for the cache state on 64-bit hosts, with margin
/// for growth (`ekv_cache_storage_size()` tells how much a build uses).
pub const EKV_CACHE_STORAGE_WORDS: usize = 160;

/// Storage for one cache, owned by the caller (static, stack or any memory; no heap is used).
/// Opaque: only the library reads or writes it. Zero it (or leave it destroyed) before
/// `ekv_cache_create`; do not copy or move it while the cache is live (a moved copy is
/// rejected with `EKV_ERR_BAD_HANDLE`).
#[repr(C)]
pub struct EkvCache {
    /// Opaque.
    pub opaque: [u64; EKV_CACHE_STORAGE_WORDS],
}

/// A cache with either allocator, or a grouped cache.
pub(crate) enum AnyCache {
    /// Free-list allocator.
    List(KvCache<'static, FreeList<'static>>),
    /// Bitmap allocator (contiguous sequences).
    Bitmap(KvCache<'static, Bitmap<'static>>),
    /// A cache of layer groups (`ekv_grouped_cache_create`). The object is larger than
    /// `ekv_cache_t` (one cache per group), so it lives at the start of the caller's metadata
    /// arena (`ekv_grouped_plan_t.meta_bytes` counts it) and the storage keeps this reference:
    /// `sizeof(ekv_cache_t)` and every existing call stay as they were.
    Grouped(&'static mut GroupedCache<'static, FreeList<'static>>),
}

/// Runs `$body` with `$c` bound to the cache, whatever its kind: the body's calls must exist
/// on [`KvCache`] and [`GroupedCache`] alike (per-layer and per-sequence calls do).
macro_rules! dispatch {
    ($any:expr, $c:ident => $body:expr) => {
        match $any {
            $crate::handle::AnyCache::List($c) => $body,
            $crate::handle::AnyCache::Bitmap($c) => $body,
            $crate::handle::AnyCache::Grouped($c) => $body,
        }
    };
}
pub(crate) use dispatch;

/// Runs `$body` with `$c` bound to a cache of one layer group, whatever its allocator; a grouped
/// cache returns `EKV_ERR_MULTIPLE_GROUPS` from the enclosing closure (calls whose shape assumes
/// one page table per sequence: slide, page table, snapshots, namespace, plan).
macro_rules! dispatch_flat {
    ($any:expr, $c:ident => $body:expr) => {
        match $any {
            $crate::handle::AnyCache::List($c) => $body,
            $crate::handle::AnyCache::Bitmap($c) => $body,
            $crate::handle::AnyCache::Grouped(_) => {
                return Err($crate::status::Fail(
                    $crate::status::EKV_ERR_MULTIPLE_GROUPS,
                ));
            }
        }
    };
}
pub(crate) use dispatch_flat;

/// Runs `$body` with `$c` bound to the cache holding layer `$layer` (a variable), read-only,
/// and `$layer` rebound to the layer's index there: the cache itself, or the layer's group of a
/// grouped cache (a layer past the shape's stays as it is in group 0, which refuses it as a
/// one-group cache does).
macro_rules! dispatch_layer {
    ($any:expr, $c:ident, $layer:ident => $body:expr) => {
        match $any {
            $crate::handle::AnyCache::List($c) => $body,
            $crate::handle::AnyCache::Bitmap($c) => $body,
            $crate::handle::AnyCache::Grouped(g) => {
                let (group, $layer) = g.layer_group($layer).unwrap_or((0, $layer));
                let Some($c) = g.group(group) else {
                    return Err($crate::status::Fail(
                        $crate::status::EKV_ERR_LAYER_OUT_OF_RANGE,
                    ));
                };
                $body
            }
        }
    };
}
pub(crate) use dispatch_layer;

/// What lives in an [`EkvCache`].
#[repr(C)]
pub(crate) struct State {
    /// [`MAGIC`] xor the storage's address while live; anything else otherwise.
    magic: usize,
    /// Nonzero while a call is running (callbacks may re-enter).
    busy: usize,
    /// The arenas given at creation (whole, as passed), for overlap checks.
    pub(crate) arenas: Arenas,
    /// The cache.
    pub(crate) cache: AnyCache,
}

/// The memory a live cache owns: its storage and both arenas as passed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arenas {
    /// The `ekv_cache_t`.
    pub(crate) storage: Span,
    /// The data arena.
    pub(crate) data: Span,
    /// The metadata arena (empty for a split cache: it is inside `data`).
    pub(crate) meta: Span,
}

impl Arenas {
    /// The three spans, for [`disjoint`](super::ptr::disjoint) checks against caller buffers.
    pub(crate) fn spans(&self) -> [Span; 3] {
        [self.storage, self.data, self.meta]
    }
}

const _: () = assert!(size_of::<State>() <= size_of::<EkvCache>());
const _: () = assert!(align_of::<State>() <= align_of::<EkvCache>());

/// Mixed with the storage address: a live cache's magic word.
const MAGIC: usize = 0x6b76_6361_6368_6521_u64 as usize; // "kvcache!"

/// The magic word of a live cache in storage at `addr`.
fn magic_for(addr: usize) -> usize {
    MAGIC ^ addr
}

/// Checks a storage pointer: non-null and aligned.
fn storage_ptr(h: *mut EkvCache) -> Res<*mut State> {
    if h.is_null() {
        return Err(Fail(super::status::EKV_ERR_NULL));
    }
    if !h.is_aligned() {
        return Err(Fail(EKV_ERR_MISALIGNED_POINTER));
    }
    Ok(h.cast::<State>())
}

/// Whether the storage at `s` holds a live cache.
///
/// # Safety
///
/// `s` is non-null, aligned, and points to `size_of::<EkvCache>()` readable bytes.
unsafe fn is_live(s: *mut State) -> bool {
    // SAFETY: the magic word is the first field; the caller guarantees the bytes are readable.
    // A raw read through the field pointer creates no reference that could alias a `&mut` to
    // `cache` held by an outer call.
    let magic = unsafe { core::ptr::addr_of!((*s).magic).read() };
    magic == magic_for(s.addr())
}

/// A cache handle from C whose caller vouched for the storage (see [`Handle::new`]).
#[derive(Clone, Copy)]
pub(crate) struct Handle(*mut EkvCache);

impl Handle {
    /// Wraps a handle.
    ///
    /// # Safety
    ///
    /// `h` is NULL or points to readable `ekv_cache_t` storage (writable for
    /// [`install`](Self::install) and [`destroy`](Self::destroy)); if it holds a live cache, the
    /// obligations of `ekv_cache_create` hold (its memory is the library's, and no call on it
    /// runs concurrently from another thread).
    pub(crate) unsafe fn new(h: *mut EkvCache) -> Self {
        Handle(h)
    }

    /// Installs a new cache built by `build` (given the storage's span).
    pub(crate) fn install(self, build: impl FnOnce(Span) -> Res<(AnyCache, Arenas)>) -> Res<()> {
        // SAFETY: the obligation of `Handle::new`.
        unsafe { install(self.0, build) }
    }

    /// Runs `f` on the live cache, refusing dead handles and re-entry.
    pub(crate) fn with<R>(self, f: impl FnOnce(&mut AnyCache, &Arenas) -> Res<R>) -> Res<R> {
        // SAFETY: the obligation of `Handle::new`.
        unsafe { with_cache(self.0, f) }
    }

    /// Destroys the cache.
    pub(crate) fn destroy(self) -> Res<()> {
        // SAFETY: the obligation of `Handle::new`.
        unsafe { destroy(self.0) }
    }
}

/// Installs a new cache in `h`.
///
/// # Safety
///
/// `h` must point to writable `ekv_cache_t` storage (initialized bytes, e.g. zeroed) that
/// nothing else uses while the cache is live; the arenas inside `cache` must stay valid and
/// unaliased until [`destroy`].
unsafe fn install(
    h: *mut EkvCache,
    build: impl FnOnce(Span) -> Res<(AnyCache, Arenas)>,
) -> Res<()> {
    let s = storage_ptr(h)?;
    // SAFETY: `s` is non-null and aligned; the storage is readable by the caller's obligation.
    if unsafe { is_live(s) } {
        return Err(Fail(EKV_ERR_BUSY));
    }
    let (cache, arenas) = build(super::ptr::Span::of(h.cast_const(), 1))?;
    let state = State {
        magic: magic_for(s.addr()),
        busy: 0,
        arenas,
        cache,
    };
    // SAFETY: the storage is writable, large and aligned enough (asserted above), and holds no
    // live cache, so nothing is overwritten that is still in use (`State` has no drop glue to
    // skip: the previous bytes are not a live value).
    unsafe { s.write(state) };
    Ok(())
}

/// Runs `f` on the live cache in `h`, refusing dead handles and re-entry.
///
/// # Safety
///
/// `h` must be NULL or point to readable `ekv_cache_t` storage; if it holds a live cache, the
/// caller's obligations of `ekv_cache_create` hold (no concurrent call on the same cache from
/// another thread).
unsafe fn with_cache<R>(
    h: *mut EkvCache,
    f: impl FnOnce(&mut AnyCache, &Arenas) -> Res<R>,
) -> Res<R> {
    let s = storage_ptr(h)?;
    // SAFETY: non-null, aligned, readable (caller).
    if !unsafe { is_live(s) } {
        return Err(Fail(EKV_ERR_BAD_HANDLE));
    }
    // SAFETY: live storage: `busy` is an initialized field; raw accesses to it never alias the
    // `&mut` to `cache` an outer (re-entered) call may hold, as the fields are disjoint.
    let busy = unsafe { core::ptr::addr_of_mut!((*s).busy) };
    // SAFETY: as above.
    if unsafe { busy.read() } != 0 {
        return Err(Fail(EKV_ERR_BUSY));
    }
    // SAFETY: as above.
    unsafe { busy.write(1) };
    // SAFETY: live storage holds an initialized `State`; `arenas` is only ever read.
    let arenas = unsafe { core::ptr::addr_of!((*s).arenas).read() };
    // SAFETY: the busy flag guarantees no other call on this cache holds a reference to
    // `cache` (re-entrant calls stop at the flag; concurrent threads are excluded by the
    // caller's obligation), so this `&mut` is unique while it lives.
    let cache = unsafe { &mut *core::ptr::addr_of_mut!((*s).cache) };
    let r = f(cache, &arenas);
    // SAFETY: as for the write above; the `&mut` to `cache` is dead by now.
    unsafe { busy.write(0) };
    r
}

/// Destroys the cache in `h`: the storage and arenas return to the caller.
///
/// # Safety
///
/// As [`with_cache`].
unsafe fn destroy(h: *mut EkvCache) -> Res<()> {
    // Checks liveness and the busy flag; a destroy from inside a callback is refused.
    // SAFETY: forwarded obligation.
    unsafe { with_cache(h, |_, _| Ok(())) }?;
    let s = storage_ptr(h)?;
    // SAFETY: live storage (checked above); the cache holds no resources besides borrowed
    // memory, so forgetting it is its whole destruction. Zeroing the magic word makes later
    // calls with this handle fail with EKV_ERR_BAD_HANDLE.
    unsafe { core::ptr::addr_of_mut!((*s).magic).write(0) };
    Ok(())
}

/// Bytes of `ekv_cache_t` the library needs (at most `sizeof(ekv_cache_t)`).
pub(crate) const fn state_size() -> usize {
    size_of::<State>()
}

/// Alignment `ekv_cache_t` storage needs.
pub(crate) const fn storage_align() -> usize {
    align_of::<EkvCache>()
}
