//! The edgekv C ABI: every `ekv_*` function of `capi/include/edgekv.h`, which cbindgen generates
//! from this crate, built as the static library `libedgekv_capi.a` for vendor NPU SDKs (and as
//! an rlib for Rust callers of the same functions, e.g. the fuzz target).
//!
//! On a host (feature `std`, the default) the archive carries Rust's std; link it with
//! `-Wl,--gc-sections -lpthread -ldl -lm`. For firmware build it with `--no-default-features
//! --target <thumb target>`: the archive is then `no_std` and brings a panic handler that spins
//! (the library is written not to panic; the handler only guards against a bug). Feature
//! `ethosu` adds strong definitions of the Arm Ethos-U driver's hooks (module `ethosu`).
//!
//! # Model
//!
//! * **No allocation.** The caller owns all memory: the cache object (`ekv_cache_t`, a fixed-size
//!   opaque struct, e.g. a `static`), the data arena (pages; may be DMA- or NPU-visible RAM) and
//!   the metadata arena. `ekv_plan*` size the arenas; `ekv_cache_create` builds a cache in them.
//! * **Layer groups.** `ekv_grouped_plan*` and `ekv_grouped_cache_create` build a cache of layer
//!   groups (e.g. sliding-window layers in their own pages beside global ones) in the same
//!   `ekv_cache_t`; every per-layer call goes to the layer's group (see `grouped.rs`).
//! * **Status codes.** Every fallible call returns `EKV_OK` (0) or a negative `EKV_ERR_*` code,
//!   one per case of `edgekv::ConfigError`, `edgekv::Error`, `edgekv::snapshot::SnapshotError`
//!   and `edgekv_hal::HalError` plus the ABI's own (`EKV_ERR_NULL`,
//!   `EKV_ERR_BAD_HANDLE`, `EKV_ERR_MISALIGNED_POINTER`, `EKV_ERR_OVERLAP`...);
//!   `ekv_strerror` describes them. A failed call changes nothing and writes no output: every
//!   call checks everything first, then writes (except the documented "entries needed" counts
//!   of `EKV_ERR_BUFFER_TOO_SMALL`, and a gather whose final clean fails after the copy).
//! * **Handles.** Sequences are `uint64_t` (slot | generation << 16 | cache epoch << 32): a
//!   freed handle, or one of another cache instance (an earlier one in the same storage
//!   included), is `EKV_ERR_UNKNOWN_SEQUENCE`, even after its slot is reused.
//! * **Buffers** are a pointer plus a length in *elements* of the pointer's type (floats,
//!   `uint16_t`s, token ids, structs); bytes only for arenas. Calls never keep them.
//!
//! # What is checked, and what cannot be
//!
//! Checked on every call, before anything changes: NULL pointers (a NULL buffer is allowed only
//! with length 0; optional outputs are documented as such), alignment of every typed pointer,
//! lengths whose byte size overflows, enumeration values and reserved fields, overlap of
//! buffers with each other (where one is written) and with the cache's storage and arenas, and
//! the cache handle: a magic word bound to the storage's address marks a live cache, so NULL,
//! zeroed, destroyed, copied or moved storage and most foreign memory are `EKV_ERR_BAD_HANDLE`.
//! A busy flag makes a maintenance callback that calls back into the same cache `EKV_ERR_BUSY`.
//!
//! Not detectable (undefined behaviour, as in any C library): a pointer to memory that does not
//! exist or is too short for its stated length, storage or arenas used by the caller while the
//! cache is live, arenas freed before `ekv_cache_destroy`, and concurrent calls on one cache
//! from several threads or interrupts (the library takes no locks; serialize calls per cache).
//! Different caches are independent.
//!
//! # Panics
//!
//! None on any input: the code returns errors instead (and an `extern "C"` function that did
//! panic would abort, never unwind into C).
#![cfg_attr(not(feature = "std"), no_std)]
// Every module of this crate is FFI: raw pointers from C, `extern "C"` definitions. Each unsafe
// block has a `// SAFETY:` comment (the workspace denies `clippy::undocumented_unsafe_blocks`).
#![allow(unsafe_code)]
#![allow(clippy::too_many_arguments)]

mod cache;
#[cfg(feature = "ethosu")]
mod ethosu_abi;
mod group_types;
mod grouped;
mod handle;
mod maint;
mod map;
mod prefix;
mod ptr;
mod rows;
mod seq;
mod snapshot;
mod staging;
mod status;
mod types;
mod views;

#[cfg(test)]
mod contract_tests;
#[cfg(test)]
mod grouped_tests;
#[cfg(test)]
mod tests;

pub use cache::{
    ekv_abi_version, ekv_cache_check, ekv_cache_create, ekv_cache_create_split, ekv_cache_destroy,
    ekv_cache_plan, ekv_cache_stats, ekv_cache_storage_align, ekv_cache_storage_size,
    ekv_config_init, ekv_plan, ekv_plan_for, ekv_plan_pages, ekv_plan_split, ekv_set_namespace,
};
#[cfg(feature = "ethosu")]
pub use ethosu_abi::{EkvEthosuHooks, ekv_ethosu_last_error, ekv_ethosu_register};
pub use group_types::{
    EKV_LAYERS_EVERY, EKV_LAYERS_RUN, EKV_MAX_GROUPS, EKV_MAX_LISTED_GROUPS, EkvGroupedConfig,
    EkvGroupedPlan, EkvLayerGroup, EkvWindow,
};
pub use grouped::{
    ekv_grouped_cache_create, ekv_grouped_cache_plan, ekv_grouped_config_init, ekv_grouped_plan,
    ekv_grouped_plan_for, ekv_layer_group,
};
pub use handle::{EKV_CACHE_STORAGE_WORDS, EkvCache};
pub use maint::{EkvMaintFn, EkvMaintenance};
pub use map::{
    EKV_MAP_IDENTITY, EKV_MAP_MAX_ENTRIES, EKV_MAP_OFFSET, EKV_MAP_TABLE, EkvAddressMap,
    EkvMapEntry,
};
pub use prefix::{ekv_commit_prompt, ekv_prefix_attach, ekv_prefix_lookup, ekv_reuse_prefix};
pub use rows::{
    ekv_attention, ekv_attention_block_scratch_len, ekv_attention_params_init,
    ekv_attention_scratch_len, ekv_cache_attention_scratch_len, ekv_cache_scratch_len,
    ekv_read_f16, ekv_read_f32, ekv_write_f16, ekv_write_f32, ekv_write_kv_f16, ekv_write_kv_f32,
};
pub use seq::{
    ekv_seq_create, ekv_seq_fork, ekv_seq_free, ekv_seq_info, ekv_seq_page_table, ekv_seq_reserve,
    ekv_seq_slide, ekv_seq_truncate,
};
pub use snapshot::{ekv_restore_from_buffer, ekv_snapshot_size, ekv_snapshot_to_buffer};
pub use staging::{ekv_gather_f16, ekv_gather_f32, ekv_ingest_f16, ekv_ingest_f32};
#[cfg(feature = "ethosu")]
pub(crate) use status::hal_code as hal_status;
pub use status::*;
pub use types::{
    EKV_ALLOC_BITMAP, EKV_ALLOC_FREE_LIST, EKV_FORMAT_BF16, EKV_FORMAT_F16, EKV_FORMAT_F32,
    EKV_FORMAT_FP8_TILE, EKV_FORMAT_INT8, EKV_FORMAT_Q4_0, EKV_FORMAT_Q4_1, EKV_K,
    EKV_POOL_K_SCALES, EKV_POOL_K_VALUES, EKV_POOL_V_SCALES, EKV_POOL_V_VALUES,
    EKV_ROTATION_HADAMARD, EKV_ROTATION_NONE, EKV_ROTATION_SIGNED_HADAMARD, EKV_SEQ_CONTIGUOUS,
    EKV_SEQ_PAGED, EKV_V, EkvAttentionParams, EkvConfig, EkvFormat, EkvPlan, EkvPrefixHit, EkvSeq,
    EkvSeqInfo, EkvStats,
};
pub use views::{EkvRegion, EkvSegment, ekv_bind_region, ekv_read_view, ekv_segments};

// Last, so the header lists the driver's hooks after the `ekv_*` functions.
#[cfg(feature = "ethosu")]
pub mod ethosu;

/// Spins forever: the library never panics on caller input, so this guards only against a bug.
#[cfg(all(not(feature = "std"), not(test)))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {
        core::hint::spin_loop();
    }
}
