//! Caches of layer groups over C: configuration defaults, plans (context for an arena, bytes for
//! a context), creation in an ordinary `ekv_cache_t`, and where a layer lives.
//!
//! A grouped cache is an `ekv_cache_t` like any other: every per-layer call (`ekv_write_*`,
//! `ekv_read_*`, `ekv_attention`, views, gather and ingest) goes to the layer's group, every
//! per-sequence call changes all groups or none. Its object (one cache per group) is larger
//! than `ekv_cache_t`, so it lives at the start of the metadata arena; the storage keeps a
//! reference to it.

use core::ffi::c_void;
use core::mem::{MaybeUninit, align_of, size_of};

use edgekv::{CacheConfig, FreeList, GroupedCache, META_ALIGN, PageAllocator};

use super::group_types::{EkvGroupedConfig, EkvGroupedPlan};
use super::handle::{AnyCache, Arenas, EkvCache, Handle};
use super::ptr::{Out, Span, disjoint, input, slice_mut};
use super::status::{
    EKV_ERR_ARENA_TOO_SMALL, EKV_ERR_LAYER_OUT_OF_RANGE, EKV_ERR_MISALIGNED_ARENA, EkvStatus, Fail,
    Res, status,
};
use super::types::EkvPlan;

/// The grouped cache type the ABI builds.
type Grouped = GroupedCache<'static, FreeList<'static>>;

// The object sits at the start of the metadata arena, which is aligned to `META_ALIGN`.
const _: () = assert!(align_of::<Grouped>() <= META_ALIGN);

/// Metadata bytes the grouped cache object takes before the groups' bookkeeping (a multiple of
/// `META_ALIGN`, so the bookkeeping that follows is aligned).
const fn object_bytes() -> usize {
    size_of::<Grouped>().next_multiple_of(META_ALIGN)
}

/// Fills `config` with the defaults of `ekv_config_init` in `config->base`, no window and no
/// listed group (one group of every layer: a cache that behaves as `ekv_cache_create`'s).
///
/// # Safety
///
/// `config` (required) is NULL or points to writable memory for an `ekv_grouped_config_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_grouped_config_init(
    config: *mut EkvGroupedConfig,
    layers: u16,
    kv_heads: u16,
    head_dim: u16,
) -> EkvStatus {
    status(Out::new(config).map(|out| {
        // SAFETY: checked non-null and aligned; writable by the caller's obligation.
        unsafe { out.set(EkvGroupedConfig::defaults(layers, kv_heads, head_dim)) }
    }))
}

/// Reads a grouped configuration and runs a planner on it, writing the plan to `out`.
///
/// # Safety
///
/// `config` is NULL or points to an `ekv_grouped_config_t`; `out` (required) is NULL or
/// writable.
unsafe fn plan_call(
    config: *const EkvGroupedConfig,
    out: *mut EkvGroupedPlan,
    f: impl Fn(&CacheConfig) -> Res<edgekv::GroupedPlan>,
) -> EkvStatus {
    status((|| {
        // SAFETY: forwarded obligation; the struct is copied out at once.
        let cfg = unsafe { input(config) }?.to_rust()?;
        let out = Out::new(out)?;
        let plan = EkvGroupedPlan::from_rust(&f(&cfg)?, object_bytes())?;
        // SAFETY: checked pointer, writable by the caller's obligation.
        unsafe { out.set(plan) };
        Ok(())
    })())
}

/// The plan of a grouped configuration over a data arena of `data_bytes`: groups that keep
/// every position get the same page count, as many as fit; a windowed group at most what its
/// sequences can hold (`max_seqs x` its per-sequence bound); `out->context_tokens` is the
/// longest sequence the arena then holds.
///
/// Errors: those of `ekv_plan`; for the groups `EKV_ERR_TOO_MANY_GROUPS` (`group_count` past
/// `EKV_MAX_LISTED_GROUPS`), `EKV_ERR_INVALID_GROUP` (a run or period of 0, a window of 0),
/// `EKV_ERR_GROUP_LAYER_OUT_OF_RANGE` (a layer not below `layers`),
/// `EKV_ERR_LAYER_IN_TWO_GROUPS` (overlapping groups), `EKV_ERR_EMPTY_GROUP` (the listed groups
/// take every layer: the base group has none), `EKV_ERR_INVALID_ARGUMENT` (a layers kind,
/// reserved or unused fields, an allocator other than `EKV_ALLOC_FREE_LIST`).
///
/// # Safety
///
/// `config` is NULL or points to an `ekv_grouped_config_t`; `out` (required) is NULL or points
/// to writable memory for an `ekv_grouped_plan_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_grouped_plan(
    config: *const EkvGroupedConfig,
    data_bytes: usize,
    out: *mut EkvGroupedPlan,
) -> EkvStatus {
    let bits = FreeList::META_BITS_PER_PAGE;
    // SAFETY: forwarded obligations.
    unsafe { plan_call(config, out, |c| Ok(c.plan_groups(data_bytes, bits)?)) }
}

/// The plan (and so the arena bytes) for `seqs` sequences of `tokens_per_seq` positions each
/// without sharing: a group that keeps every position gets their pages, a windowed group at
/// most what its window holds.
///
/// Errors: as `ekv_grouped_plan`; `EKV_ERR_ZERO_SIZE` for zero tokens or sequences,
/// `EKV_ERR_OVERFLOW` past `max_seqs` or `max_seq_tokens`.
///
/// # Safety
///
/// As `ekv_grouped_plan`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_grouped_plan_for(
    config: *const EkvGroupedConfig,
    tokens_per_seq: u32,
    seqs: u16,
    out: *mut EkvGroupedPlan,
) -> EkvStatus {
    let bits = FreeList::META_BITS_PER_PAGE;
    // SAFETY: forwarded obligations.
    unsafe {
        plan_call(config, out, |c| {
            Ok(c.plan_groups_for(tokens_per_seq, seqs, bits)?)
        })
    }
}

/// Creates a cache of layer groups in `cache` over a data arena and a metadata arena (sizes
/// from `ekv_grouped_plan`): each group gets its pages as `ekv_grouped_plan` shares them out,
/// the cache object takes the start of `meta`. Both arenas are zeroed up to the plan's sizes.
/// The handle then works with every `ekv_*` call taking an `ekv_cache_t`: per-layer calls go to
/// the layer's group (attention takes the group's window unless the parameters set one), a
/// sequence handle names the sequence in every group, and per-sequence calls (create, free,
/// reserve, fork, truncate, prefix commit / lookup / attach / reuse) change every group or none.
/// A windowed group releases pages as positions leave its window (reads of them are
/// `EKV_ERR_POSITION_OUT_OF_RANGE`; a truncation back past what it kept is
/// `EKV_ERR_TRUNCATE_BEYOND_WINDOW`). Calls whose shape assumes one page table per sequence
/// (`ekv_seq_slide`, `ekv_seq_page_table`, `ekv_cache_plan`, `ekv_set_namespace`, snapshots)
/// return `EKV_ERR_MULTIPLE_GROUPS` on a grouped cache; `ekv_seq_info` reports the length,
/// prompt and mode, the smallest capacity and the largest page count of the groups.
///
/// Errors: as `ekv_cache_create` and `ekv_grouped_plan`; `EKV_ERR_MISALIGNED_ARENA` (`meta`
/// not aligned to `meta_align`), `EKV_ERR_ARENA_TOO_SMALL`.
///
/// # Safety
///
/// As `ekv_cache_create`, with `config` pointing to an `ekv_grouped_config_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_grouped_cache_create(
    cache: *mut EkvCache,
    config: *const EkvGroupedConfig,
    data: *mut c_void,
    data_bytes: usize,
    meta: *mut c_void,
    meta_bytes: usize,
) -> EkvStatus {
    let r = (|| {
        // SAFETY: forwarded obligation; copied out at once.
        let cfg = unsafe { input(config) }?.to_rust()?;
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
            if meta.as_ptr().addr() % META_ALIGN != 0 {
                return Err(Fail(EKV_ERR_MISALIGNED_ARENA));
            }
            let (object, rest) = meta
                .split_at_mut_checked(object_bytes())
                .ok_or(Fail(EKV_ERR_ARENA_TOO_SMALL))?;
            let grouped = GroupedCache::new(cfg, data, rest)?;
            let slot = object.as_mut_ptr().cast::<Grouped>();
            // SAFETY: `object` is `object_bytes() >= size_of::<Grouped>()` writable bytes of
            // the metadata arena, aligned (the arena is aligned to `META_ALIGN`, asserted to
            // cover the type's alignment), owned by the library until destroy and disjoint
            // from the arenas the groups keep (`rest`, `data`).
            unsafe { slot.write(grouped) };
            // SAFETY: just initialized; the only reference, kept in the storage until destroy
            // (which forgets it: the cache owns nothing but borrowed memory).
            let grouped = unsafe { &mut *slot };
            Ok((AnyCache::Grouped(grouped), arenas))
        })
    })();
    status(r)
}

/// The plan of a live cache by groups: a grouped cache's, or for a cache of
/// `ekv_cache_create` one group of every layer (its `ekv_plan_t`, context
/// `min(max_seq_tokens, token_capacity)`).
///
/// # Safety
///
/// `cache` is NULL or points to readable `ekv_cache_t` storage; `out` (required) is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_grouped_cache_plan(
    cache: *mut EkvCache,
    out: *mut EkvGroupedPlan,
) -> EkvStatus {
    // SAFETY: the caller's obligation (see `# Safety`).
    let h = unsafe { Handle::new(cache) };
    // SAFETY: `out` is NULL or writable (see `# Safety`).
    status(unsafe {
        super::cache::query(h, out, |c| match c {
            AnyCache::Grouped(g) => EkvGroupedPlan::from_rust(g.grouped_plan(), object_bytes()),
            AnyCache::List(c) => Ok(one_group(c.config(), c.arena_plan())),
            AnyCache::Bitmap(c) => Ok(one_group(c.config(), c.arena_plan())),
        })
    })
}

/// The grouped view of a cache of one group.
fn one_group(config: &CacheConfig, plan: &edgekv::Plan) -> EkvGroupedPlan {
    let mut out = EkvGroupedPlan {
        group_count: 1,
        context_tokens: config
            .max_seq_tokens
            .min(u32::try_from(plan.token_capacity()).unwrap_or(u32::MAX)),
        data_bytes: plan.data_bytes,
        meta_bytes: plan.meta.total,
        data_align: plan.geometry.align,
        meta_align: META_ALIGN,
        ..EkvGroupedPlan::default()
    };
    out.groups[0] = EkvPlan::from_rust(plan);
    out
}

/// Where `layer` lives: its group (0 for a cache of one group) to `group` and its index in that
/// group (layers of a group are numbered in model order) to `index` (both optional). The index
/// is what the group's part of the data arena is laid out by (`ekv_grouped_plan_t`).
///
/// Errors: `EKV_ERR_LAYER_OUT_OF_RANGE` (not below `layers`), `EKV_ERR_BAD_HANDLE`,
/// `EKV_ERR_OVERLAP`.
///
/// # Safety
///
/// `cache` is NULL or points to readable `ekv_cache_t` storage; `group` and `index` NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_layer_group(
    cache: *mut EkvCache,
    layer: u16,
    group: *mut u32,
    index: *mut u16,
) -> EkvStatus {
    let r = (|| {
        let group = Out::optional(group)?;
        let index = Out::optional(index)?;
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        let (g, i) = h.with(|c, a| {
            let [s, d, m] = a.spans();
            let (gs, is) = (super::ptr::opt_span(&group), super::ptr::opt_span(&index));
            disjoint(&[gs, is, s, d, m])?;
            let config = match c {
                AnyCache::Grouped(g) => g.config(),
                AnyCache::List(c) => c.config(),
                AnyCache::Bitmap(c) => c.config(),
            };
            config
                .layer_group(layer)
                .ok_or(Fail(EKV_ERR_LAYER_OUT_OF_RANGE))
        })?;
        if let Some(out) = group {
            // SAFETY: checked, writable by the caller's obligation.
            unsafe { out.set(g as u32) };
        }
        if let Some(out) = index {
            // SAFETY: checked, writable by the caller's obligation.
            unsafe { out.set(i) };
        }
        Ok(())
    })();
    status(r)
}
