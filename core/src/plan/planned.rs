//! A configuration checked and planned once, ahead of the cache ([`PlannedConfig`]): in a
//! `const`, at compile time, so that firmware carries none of the configuration checks.

use super::{CacheConfig, Plan};
use crate::error::ConfigError;

/// A [`CacheConfig`] with its [`Plan`] for a data arena and an allocator, both checked: what
/// [`KvCache::from_planned`](crate::KvCache::from_planned) builds a cache of, checking only the
/// arenas.
///
/// Made by [`PlannedConfig::new`] (a `const fn`), it cannot be made unchecked or changed
/// afterwards. In a `const` item the configuration's checks run at compile time, and a firmware
/// that builds its cache this way links none of them: on a Cortex-M4 (`small-code`, opt-level
/// "s"), about 1.2 KiB less code than [`KvCache::new`](crate::KvCache::new), which plans at run
/// time.
///
/// ```
/// use edgekv::{CacheConfig, FreeList, KvCache, PageAllocator, PlannedConfig, Shape};
///
/// const BITS: usize = <FreeList<'static> as PageAllocator<'static>>::META_BITS_PER_PAGE;
/// const PLANNED: PlannedConfig = match PlannedConfig::new(
///     CacheConfig::new(Shape { layers: 2, kv_heads: 1, head_dim: 8 }).with_page_tokens(4),
///     16 * 1024,
///     BITS,
/// ) {
///     Ok(p) => p,
///     Err(_) => panic!("the cache does not plan"), // a compile-time error
/// };
/// let mut data = edgekv::ArenaBuf::<{ 16 * 1024 }>::new();
/// let mut meta = edgekv::ArenaBuf::<{ PLANNED.plan().meta.total }>::new();
/// let cache: KvCache =
///     KvCache::from_planned(&PLANNED, data.as_uninit_mut(), meta.as_uninit_mut()).unwrap();
/// assert_eq!(cache.layout(), PLANNED.plan());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PlannedConfig {
    config: CacheConfig,
    plan: Plan,
    alloc_bits_per_page: usize,
}

impl PlannedConfig {
    /// Checks `config` and plans it over a data arena of `data_bytes` for an allocator of
    /// `alloc_bits_per_page` metadata bits a page ([`PageAllocator::META_BITS_PER_PAGE`]), as
    /// [`CacheConfig::plan`] does.
    ///
    /// # Errors
    ///
    /// As [`CacheConfig::plan`].
    ///
    /// [`PageAllocator::META_BITS_PER_PAGE`]: crate::PageAllocator::META_BITS_PER_PAGE
    pub const fn new(
        config: CacheConfig,
        data_bytes: usize,
        alloc_bits_per_page: usize,
    ) -> Result<Self, ConfigError> {
        match config.plan(data_bytes, alloc_bits_per_page) {
            Ok(plan) => Ok(PlannedConfig {
                config,
                plan,
                alloc_bits_per_page,
            }),
            Err(e) => Err(e),
        }
    }

    /// The checked configuration.
    pub const fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// Its plan: the arenas' sizes (`plan().data_bytes`, `plan().meta.total`) and layout.
    pub const fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The allocator's metadata bits a page the plan was made for.
    pub const fn alloc_bits_per_page(&self) -> usize {
        self.alloc_bits_per_page
    }
}
