#![doc = include_str!("../README.md")]
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![deny(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![warn(clippy::missing_errors_doc)]

//! # Crate map
//!
//! - [`CacheConfig`]: what a cache is configured with; `const fn` layout planning: [`Plan`] (one
//!   group; the arena layout contract), [`GroupedPlan`] (layer groups), [`PageGeometry`].
//! - [`ArenaBuf`] / `HeapArena`: caller-supplied memory.
//! - [`PagePool`] with a pluggable [`PageAllocator`] ([`FreeList`], [`Bitmap`]).
//! - [`KvCache`]: sequences, page tables, row I/O, fork, truncate, contiguous mode.
//! - [`GroupedCache`]: one [`KvCache`] per layer group (e.g. windowed and global layers), one
//!   sequence handle for all, every per-sequence call all or nothing across groups.
//! - [`attention`]: causal GQA attention straight from pages, sliding window with sinks.
//! - [`prefix`]: common-prefix matcher, chunk planner, verified prefix index and reuse.
//! - [`snapshot`]: a sequence's KV saved to flash with a CRC and restored bit for bit.
//! - Errors: [`ConfigError`] (planner, arenas, set-up), [`Error`] (the cache's calls),
//!   [`snapshot::SnapshotError`] (images and flash); `?` converts them as callers need.

#[cfg(feature = "alloc")]
extern crate alloc as std_alloc;

mod alloc;
mod arch;
mod arena;
pub mod attention;
mod cache;
mod config;
mod error;
mod format;
mod grouped;
mod numeric;
mod plan;
mod pool;
pub mod prefix;
pub mod quant;
mod sequence;
mod shape;
pub mod snapshot;
#[cfg(test)]
mod testing;
#[cfg(feature = "std")]
mod workers;

pub use crate::alloc::{Bitmap, FreeList, NO_PAGE, PageAllocator, PageId};
/// Whether this AArch64 CPU has the dot-product extension (`SDOT`), probed once (the one
/// AArch64 detection of the workspace: the core's attention kernels and `edgekv-llm`'s matmul
/// kernels ask it).
#[cfg(target_arch = "aarch64")]
pub use arch::aarch64_dotprod;
/// Every kernel of this build against the portable one, bit for bit (feature `kernel-check`;
/// see `arch::check`).
#[cfg(all(feature = "kernel-check", not(feature = "small-code")))]
pub use arch::check as kernel_check;
pub use arena::ArenaBuf;
#[cfg(feature = "alloc")]
pub use arena::{HeapArena, HeapArenas};
pub use cache::{InvariantViolation, KvCache, Stats};
pub use config::{CacheConfig, GroupWindow, LayerGroup, LayerGroups, Layers, MAX_GROUPS};
pub use error::{ConfigError, Error, Result};
pub use format::{Element, ElementFormat, MAX_ROTATED_DIM, Rotation};
pub use grouped::{GroupedCache, GroupedPrefixHit};
pub use numeric::exp_in_place;
#[allow(deprecated)]
pub use plan::Pool;
pub use plan::{
    ArenaSizes, GroupedPlan, MAX_PAGES, META_ALIGN, MIN_ALIGN, MetaLayout, PageGeometry, Plan,
    PlannedConfig, PoolKind,
};
pub use pool::{PagePool, PageState};
pub use sequence::{SeqId, SeqInfo, SeqMode};
pub use shape::{Kv, Shape};
#[cfg(feature = "std")]
pub use workers::Workers;

/// The planner's types under their former path: the same items as at the crate root, their
/// canonical path (`edgekv::Plan`, `edgekv::GroupedPlan`, `edgekv::PageGeometry`...). The module
/// is marked deprecated (rustdoc shows it), but rustc does not warn on paths through a
/// deprecated module, so code using this path still builds without a warning:
///
/// ```
/// assert_eq!(edgekv::planner::MAX_PAGES, edgekv::MAX_PAGES);
/// ```
#[deprecated(
    note = "the planner's types are at the crate root: `edgekv::Plan`, `edgekv::PoolKind`..."
)]
pub mod planner {
    #[allow(deprecated)]
    pub use crate::plan::Pool;
    pub use crate::plan::{
        ArenaSizes, CacheConfig, GroupedPlan, MAX_PAGES, META_ALIGN, MIN_ALIGN, MetaLayout,
        PageGeometry, Plan, PoolKind,
    };
}
