//! Sizing, creation and destruction of a cache, its statistics and namespace.

use core::ffi::c_void;
use core::mem::MaybeUninit;

use edgekv::{Bitmap, CacheConfig, FreeList, KvCache, PageAllocator};

use super::handle::{self, AnyCache, Arenas, EkvCache, Handle, dispatch, dispatch_flat};
use super::ptr::{Out, Span, disjoint, input, slice_mut};
use super::status::{EkvStatus, Res, status};
use super::types::{AllocKind, EkvConfig, EkvPlan, EkvStats};

/// Fills `config` with the defaults for a shape: 16-token f32 pages for K and V, 64-byte
/// alignment, 8 sequences of up to 8192 tokens, chunk = one page, a prefix index, the free-list
/// allocator, namespace 0. Sizes are checked later (`ekv_plan`, `ekv_cache_create`).
///
/// # Safety
///
/// `config` (required) is NULL or points to writable memory for an `ekv_config_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_config_init(
    config: *mut EkvConfig,
    layers: u16,
    kv_heads: u16,
    head_dim: u16,
) -> EkvStatus {
    status(Out::new(config).map(|out| {
        // SAFETY: checked non-null and aligned; writable by the caller's obligation.
        unsafe { out.set(EkvConfig::defaults(layers, kv_heads, head_dim)) }
    }))
}

/// Plans with the configuration's allocator.
fn plan_with(
    config: &CacheConfig,
    alloc: AllocKind,
    f: impl Fn(&CacheConfig, usize) -> Res<edgekv::Plan>,
) -> Res<EkvPlan> {
    let bits = match alloc {
        AllocKind::FreeList => FreeList::META_BITS_PER_PAGE,
        AllocKind::Bitmap => Bitmap::META_BITS_PER_PAGE,
    };
    Ok(EkvPlan::from_rust(&f(config, bits)?))
}

/// Reads a configuration and runs a planner on it, writing the plan to `out`.
///
/// # Safety
///
/// `config` is NULL or points to an `ekv_config_t`; `out` (required) is NULL or writable.
unsafe fn plan_call(
    config: *const EkvConfig,
    out: *mut EkvPlan,
    f: impl Fn(&CacheConfig, usize) -> Res<edgekv::Plan>,
) -> EkvStatus {
    status((|| {
        // SAFETY: forwarded obligation; the struct is copied out at once.
        let (cfg, alloc) = unsafe { input(config) }?.to_rust()?;
        let out = Out::new(out)?;
        let plan = plan_with(&cfg, alloc, f)?;
        // SAFETY: checked pointer, writable by the caller's obligation.
        unsafe { out.set(plan) };
        Ok(())
    })())
}

/// The plan for a data arena of `data_bytes`: as many pages as fit (at most 65535), and the
/// metadata bytes they need.
///
/// Errors (all `ekv_plan*`): `EKV_ERR_NULL`, `EKV_ERR_INVALID_ARGUMENT` (enumerations, reserved
/// fields), `EKV_ERR_ZERO_SIZE`, `EKV_ERR_PAGE_TOKENS_NOT_POWER_OF_TWO`,
/// `EKV_ERR_INVALID_ALIGNMENT`, `EKV_ERR_INVALID_CHUNK_SIZE`, `EKV_ERR_INVALID_FORMAT` (format
/// parameters that do not fit head_dim; a rotation needs head_dim a power of two up to 256),
/// `EKV_ERR_FORMAT_DISABLED`, `EKV_ERR_OVERFLOW`, `EKV_ERR_ARENA_TOO_SMALL` (not one page fits).
///
/// # Safety
///
/// `config` is NULL or points to an `ekv_config_t`; `out` (required) is NULL or points to
/// writable memory for an `ekv_plan_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_plan(
    config: *const EkvConfig,
    data_bytes: usize,
    out: *mut EkvPlan,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe { plan_call(config, out, |c, bits| Ok(c.plan(data_bytes, bits)?)) }
}

/// The plan for exactly `pages` pages: the arena sizes follow.
///
/// # Safety
///
/// As `ekv_plan`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_plan_pages(
    config: *const EkvConfig,
    pages: usize,
    out: *mut EkvPlan,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe { plan_call(config, out, |c, bits| Ok(c.plan_pages(pages, bits)?)) }
}

/// The plan for one buffer of `total_bytes` split into metadata then data
/// (`ekv_cache_create_split`).
///
/// # Safety
///
/// As `ekv_plan`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_plan_split(
    config: *const EkvConfig,
    total_bytes: usize,
    out: *mut EkvPlan,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe { plan_call(config, out, |c, bits| Ok(c.plan_split(total_bytes, bits)?)) }
}

/// The plan for `seqs` sequences of `tokens_per_seq` tokens each, without sharing.
///
/// # Safety
///
/// As `ekv_plan`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_plan_for(
    config: *const EkvConfig,
    tokens_per_seq: u32,
    seqs: u16,
    out: *mut EkvPlan,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe {
        plan_call(config, out, |c, bits| {
            let sizes = c.bytes_for(tokens_per_seq, seqs, bits)?;
            Ok(c.plan_pages(sizes.pages as usize, bits)?)
        })
    }
}

/// The ABI version of this library (`EKV_ABI_VERSION` of the header it was built with): a
/// program compares it with the `EKV_ABI_VERSION` it was compiled against before any other
/// call, to catch a header / library mismatch at run time.
pub(crate) const ABI_VERSION: u32 = 3;

/// The ABI version the library implements: equal to the header's `EKV_ABI_VERSION` when header
/// and library match (check it at start-up; a mismatch means structs, handles or calls may
/// differ).
#[unsafe(no_mangle)]
pub extern "C" fn ekv_abi_version() -> u32 {
    ABI_VERSION
}

/// Bytes of `ekv_cache_t` this build of the library uses (<= `sizeof(ekv_cache_t)`).
#[unsafe(no_mangle)]
pub extern "C" fn ekv_cache_storage_size() -> usize {
    handle::state_size()
}

/// Alignment `ekv_cache_t` storage needs (that of `ekv_cache_t`).
#[unsafe(no_mangle)]
pub extern "C" fn ekv_cache_storage_align() -> usize {
    handle::storage_align()
}

/// Creates a cache in `cache` over a data arena and a metadata arena (sizes from `ekv_plan`):
/// as many pages as fit in `data`. Both arenas are zeroed up to the plan's sizes.
///
/// Errors: `EKV_ERR_NULL`, `EKV_ERR_MISALIGNED_POINTER` (storage), `EKV_ERR_INVALID_ARGUMENT`
/// (config enums), `EKV_ERR_OVERLAP` (storage, data and metadata must be disjoint),
/// `EKV_ERR_BUSY` (the storage holds a live cache), the planner's errors
/// (`EKV_ERR_ARENA_TOO_SMALL`, `EKV_ERR_MISALIGNED_ARENA`, `EKV_ERR_ZERO_SIZE`...).
///
/// # Safety
///
/// `cache` points to writable `ekv_cache_t` storage with initialized bytes (zeroed, or a
/// destroyed cache); `config` to an `ekv_config_t`; `data` and `meta` to `data_bytes` and
/// `meta_bytes` writable bytes. Until `ekv_cache_destroy`, the storage and both arenas belong to
/// the library: the caller must not read or write them (devices may, through the views'
/// maintenance protocol), and calls on one cache must not run concurrently from several
/// threads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_cache_create(
    cache: *mut EkvCache,
    config: *const EkvConfig,
    data: *mut c_void,
    data_bytes: usize,
    meta: *mut c_void,
    meta_bytes: usize,
) -> EkvStatus {
    let r = (|| {
        // SAFETY: forwarded obligation; copied out at once.
        let (cfg, alloc) = unsafe { input(config) }?.to_rust()?;
        let data = data.cast::<MaybeUninit<u8>>();
        let meta = meta.cast::<MaybeUninit<u8>>();
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        h.install(|storage| {
            let arenas = Arenas {
                storage,
                data: Span::of(data.cast_const(), data_bytes),
                meta: Span::of(meta.cast_const(), meta_bytes),
            };
            disjoint(&arenas.spans())?;
            // SAFETY: the caller hands both arenas to the library until destroy; they are
            // disjoint from each other and from the storage (checked above).
            let data = unsafe { slice_mut(data, data_bytes) }?;
            // SAFETY: as above.
            let meta = unsafe { slice_mut(meta, meta_bytes) }?;
            let any = match alloc {
                AllocKind::FreeList => AnyCache::List(KvCache::new(cfg, data, meta)?),
                AllocKind::Bitmap => AnyCache::Bitmap(KvCache::new(cfg, data, meta)?),
            };
            Ok((any, arenas))
        })
    })();
    status(r)
}

/// Creates a cache in one buffer (aligned to `config.align`): metadata at its start, data at
/// the next aligned offset, as many pages as fit (`ekv_plan_split`).
///
/// # Safety
///
/// As `ekv_cache_create`, with `buf` for both arenas.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_cache_create_split(
    cache: *mut EkvCache,
    config: *const EkvConfig,
    buf: *mut c_void,
    bytes: usize,
) -> EkvStatus {
    let r = (|| {
        // SAFETY: forwarded obligation; copied out at once.
        let (cfg, alloc) = unsafe { input(config) }?.to_rust()?;
        let buf = buf.cast::<MaybeUninit<u8>>();
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        h.install(|storage| {
            let arenas = Arenas {
                storage,
                data: Span::of(buf.cast_const(), bytes),
                meta: Span::EMPTY,
            };
            disjoint(&arenas.spans())?;
            // SAFETY: the caller hands the buffer to the library until destroy; it is
            // disjoint from the storage (checked above).
            let buf = unsafe { slice_mut(buf, bytes) }?;
            let any = match alloc {
                AllocKind::FreeList => AnyCache::List(KvCache::new_split(cfg, buf)?),
                AllocKind::Bitmap => AnyCache::Bitmap(KvCache::new_split(cfg, buf)?),
            };
            Ok((any, arenas))
        })
    })();
    status(r)
}

/// Destroys a cache: its storage and arenas return to the caller (nothing else to free). Later
/// calls with the handle fail with `EKV_ERR_BAD_HANDLE`.
///
/// # Safety
///
/// `cache` is NULL or points to readable `ekv_cache_t` storage.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_cache_destroy(cache: *mut EkvCache) -> EkvStatus {
    // SAFETY: the caller's obligation (see `# Safety`).
    let h = unsafe { Handle::new(cache) };
    status(h.destroy())
}

/// Whether `cache` holds a live cache: `EKV_OK`, or why not (`EKV_ERR_NULL`,
/// `EKV_ERR_BAD_HANDLE`, `EKV_ERR_BUSY`...).
///
/// # Safety
///
/// As `ekv_cache_destroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_cache_check(cache: *mut EkvCache) -> EkvStatus {
    // SAFETY: the caller's obligation (see `# Safety`).
    let h = unsafe { Handle::new(cache) };
    status(h.with(|_, _| Ok(())))
}

/// Runs `f` with the live cache and an output checked to lie outside its memory, then writes
/// the output.
///
/// # Safety
///
/// `out` NULL or writable for a `T`.
pub(crate) unsafe fn query<T>(
    h: Handle,
    out: *mut T,
    f: impl FnOnce(&mut AnyCache) -> Res<T>,
) -> Res<()> {
    let out = Out::new(out)?;
    let value = h.with(|c, arenas| {
        let [s, d, m] = arenas.spans();
        disjoint(&[out.span(), s, d, m])?;
        f(c)
    })?;
    // SAFETY: checked pointer, writable by the caller's obligation, not the cache's memory.
    unsafe { out.set(value) };
    Ok(())
}

/// Occupancy statistics.
///
/// # Safety
///
/// `cache` is NULL or points to readable `ekv_cache_t` storage; `out` (required) is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_cache_stats(cache: *mut EkvCache, out: *mut EkvStats) -> EkvStatus {
    // SAFETY: the caller's obligation (see `# Safety`).
    let h = unsafe { Handle::new(cache) };
    // SAFETY: `out` is NULL or writable (see `# Safety`).
    status(unsafe {
        query(h, out, |c| {
            Ok(EkvStats::from_rust(&dispatch!(c, c => c.stats())))
        })
    })
}

/// The plan of a live cache (page count, arena sizes, geometry).
///
/// # Safety
///
/// As `ekv_cache_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_cache_plan(cache: *mut EkvCache, out: *mut EkvPlan) -> EkvStatus {
    // SAFETY: the caller's obligation (see `# Safety`).
    let h = unsafe { Handle::new(cache) };
    // SAFETY: `out` is NULL or writable (see `# Safety`).
    status(unsafe {
        query(h, out, |c| {
            Ok(EkvPlan::from_rust(dispatch_flat!(c, c => c.arena_plan())))
        })
    })
}

/// Switches the prefix namespace (e.g. another adapter is loaded): later lookups and commits
/// chain from `namespace`. Pages published under the old one are never found under the new one
/// (the namespace is part of every first page's identity) and are evicted in time; committing a
/// sequence whose published pages belong to the old namespace fails with
/// `EKV_ERR_PROMPT_MISMATCH`.
///
/// # Safety
///
/// `cache` is NULL or points to readable `ekv_cache_t` storage.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_set_namespace(cache: *mut EkvCache, namespace: u64) -> EkvStatus {
    // SAFETY: the caller's obligation (see `# Safety`).
    let h = unsafe { Handle::new(cache) };
    status(h.with(|c, _| {
        dispatch_flat!(c, c => c.set_namespace(namespace));
        Ok(())
    }))
}
