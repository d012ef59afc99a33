//! [`GroupedCache`]: a KV cache over several layer groups, one [`KvCache`] per group.
//!
//! Each group of the configuration ([`CacheConfig::group`]) is a cache of its own: its layers
//! (numbered in model order inside the group), formats, rotations and window
//! ([`CacheConfig::group_config`]), its pages in its own part of the data arena (at
//! [`GroupedPlan::data_offset`]) and its own pool, page tables and prefix index in its own part
//! of the metadata arena (the groups' metadata follow each other, each
//! [`MetaLayout::total`](crate::MetaLayout::total) bytes). The group caches share one epoch and
//! create, fork and free their sequences in the same slots, so one [`SeqId`] names a sequence
//! in every group. A per-layer call goes to the layer's group; a per-sequence call changes
//! every group or, on error, none.

mod lifecycle;
mod prefix;
mod rows;
mod snapshot;
#[cfg(test)]
mod snapshot_tests;
#[cfg(test)]
mod tests;

pub use prefix::GroupedPrefixHit;

use core::mem::MaybeUninit;

use crate::alloc::{FreeList, PageAllocator};
use crate::cache::{InvariantViolation, KvCache, Stats, next_epoch};
use crate::config::{CacheConfig, MAX_GROUPS};
use crate::error::{ConfigError, Error, Result};
use crate::plan::{GroupedPlan, META_ALIGN};
use crate::sequence::SeqId;

/// A KV cache over the layer groups of a [`CacheConfig`] (see the module docs of
/// `grouped`): one [`KvCache`] per group, one sequence handle for all of them. A windowed
/// group releases its pages as positions leave its window, while global groups keep theirs.
///
/// Every method that returns `Err` leaves every group exactly as it was: reserve, fork,
/// truncate, free, [`commit_prompt`](Self::commit_prompt), [`attach`](Self::attach) and
/// [`reuse_prefix`](Self::reuse_prefix) check every group (with the checks of the group
/// cache's own call) before changing any; create cannot fail in one group only (the groups
/// have the same free slots); a per-layer call changes one group, all or nothing.
///
/// A configuration of one group is a [`KvCache`] behind this type: every call goes to it
/// unchanged (the same pages, the same bits), contiguous sequences included. Over several
/// groups only paged sequences are supported.
///
/// ```
/// use edgekv::{
///     ArenaBuf, CacheConfig, GroupWindow, GroupedCache, Kv, LayerGroup, Layers, SeqMode, Shape,
/// };
///
/// // Layers 1 and 3 keep every position; layers 0 and 2 attend to the last 8.
/// let cfg = CacheConfig::new(Shape { layers: 4, kv_heads: 1, head_dim: 4 })
///     .with_page_tokens(4)
///     .with_sequences(2, 64)
///     .with_window(GroupWindow::new(8, 0))
///     .with_group(LayerGroup::new(Layers::Every { period: 2, first: 1 }));
/// let mut data = ArenaBuf::<16384>::new();
/// let mut meta = ArenaBuf::<4096>::new();
/// let mut cache: GroupedCache =
///     GroupedCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut())?;
///
/// let seq = cache.create_sequence(SeqMode::Paged)?;
/// for t in 0..32u32 {
///     cache.reserve(seq, 1)?;
///     for layer in 0..4 {
///         let row = [t as f32; 4];
///         cache.write_kv(seq, layer, t, &row, &row)?;
///     }
/// }
/// let mut row = [0f32; 4];
/// cache.read(seq, 3, Kv::K, 0, &mut row)?; // a global layer keeps position 0
/// assert_eq!(row, [0.0; 4]);
/// assert!(cache.read(seq, 2, Kv::K, 0, &mut row).is_err()); // released in the windowed group
/// // The windowed group holds the 2 pages of positions 24..32, the global one all 8.
/// let used = |g: usize| cache.group(g).map(|c| c.stats().pages_used);
/// assert_eq!((used(0), used(1)), (Some(2), Some(8)));
/// # Ok::<(), edgekv::Error>(())
/// ```
pub struct GroupedCache<'a, A: PageAllocator<'a> = FreeList<'a>> {
    config: CacheConfig,
    plan: GroupedPlan,
    /// Group `g`'s cache in slot `g`, for `g < plan.group_count()`.
    caches: [Option<KvCache<'a, A>>; MAX_GROUPS],
}

impl<'a, A: PageAllocator<'a>> GroupedCache<'a, A> {
    /// Plans a grouped cache with this allocator over a data arena of `data_bytes` (see
    /// [`CacheConfig::plan_groups`]): the pages of each group, and in
    /// [`meta_bytes`](GroupedPlan::meta_bytes) the metadata arena's size; `const`, so arenas
    /// can be sized at compile time.
    ///
    /// # Errors
    ///
    /// As [`CacheConfig::plan_groups`].
    pub const fn plan(config: &CacheConfig, data_bytes: usize) -> Result<GroupedPlan, ConfigError> {
        config.plan_groups(data_bytes, A::META_BITS_PER_PAGE)
    }

    /// Plans a grouped cache with this allocator and exactly `pages[g]` pages in group `g` (see
    /// [`CacheConfig::plan_group_pages`]); `const`.
    ///
    /// # Errors
    ///
    /// As [`CacheConfig::plan_group_pages`].
    pub const fn plan_pages(
        config: &CacheConfig,
        pages: &[usize],
    ) -> Result<GroupedPlan, ConfigError> {
        config.plan_group_pages(pages, A::META_BITS_PER_PAGE)
    }

    /// Creates a grouped cache with as many pages as fit in `data` (aligned to `config.align`;
    /// shared out as [`CacheConfig::plan_groups`] does), keeping its bookkeeping in `meta`
    /// (aligned to [`META_ALIGN`], at least [`meta_bytes`](GroupedPlan::meta_bytes)). Both
    /// arenas are zeroed; bytes past the plan's needs are left untouched.
    ///
    /// # Errors
    ///
    /// As [`CacheConfig::plan_groups`] for the configuration;
    /// [`MisalignedArena`](ConfigError::MisalignedArena) or
    /// [`ArenaTooSmall`](ConfigError::ArenaTooSmall) for an arena.
    pub fn new(
        config: CacheConfig,
        data: &'a mut [MaybeUninit<u8>],
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<Self, ConfigError> {
        let plan = Self::plan(&config, data.len())?;
        Self::with_plan(config, plan, data, meta)
    }

    /// Creates a grouped cache with exactly `pages[g]` pages in group `g` (see
    /// [`plan_pages`](Self::plan_pages)).
    ///
    /// # Errors
    ///
    /// As [`CacheConfig::plan_group_pages`] and [`new`](Self::new).
    pub fn with_pages(
        config: CacheConfig,
        pages: &[usize],
        data: &'a mut [MaybeUninit<u8>],
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<Self, ConfigError> {
        let plan = Self::plan_pages(&config, pages)?;
        Self::with_plan(config, plan, data, meta)
    }

    fn with_plan(
        config: CacheConfig,
        plan: GroupedPlan,
        data: &'a mut [MaybeUninit<u8>],
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<Self, ConfigError> {
        if data.as_ptr() as usize % config.align != 0 || meta.as_ptr() as usize % META_ALIGN != 0 {
            return Err(ConfigError::MisalignedArena);
        }
        if data.len() < plan.data_bytes || meta.len() < plan.meta_bytes {
            return Err(ConfigError::ArenaTooSmall);
        }
        let epoch = next_epoch();
        let mut caches: [Option<KvCache<'a, A>>; MAX_GROUPS] = core::array::from_fn(|_| None);
        let (mut data, mut meta) = (data, meta);
        for (g, slot) in caches.iter_mut().enumerate().take(plan.group_count()) {
            let (Some(group_plan), Some(group_config)) = (plan.group(g), config.group_config(g))
            else {
                return Err(ConfigError::EmptyGroup);
            };
            let (d, rest) = data
                .split_at_mut_checked(group_plan.data_bytes)
                .ok_or(ConfigError::ArenaTooSmall)?;
            data = rest;
            let (m, rest) = meta
                .split_at_mut_checked(group_plan.meta.total)
                .ok_or(ConfigError::ArenaTooSmall)?;
            meta = rest;
            *slot = Some(KvCache::with_plan_epoch(
                group_config,
                *group_plan,
                d,
                m,
                epoch,
            )?);
        }
        Ok(GroupedCache {
            config,
            plan,
            caches,
        })
    }

    /// The configuration (of every group).
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// The plan of every group (pages, offsets, context).
    pub fn grouped_plan(&self) -> &GroupedPlan {
        &self.plan
    }

    /// Layer groups.
    pub fn group_count(&self) -> usize {
        self.plan.group_count()
    }

    /// Group `g`'s cache, read-only (its page tables, pool, stats, page bytes and invariants;
    /// its layers are numbered inside the group, see [`CacheConfig::layer_group`]), or `None`
    /// past the last group. A handle of this cache names the same sequence there.
    pub fn group(&self, g: usize) -> Option<&KvCache<'a, A>> {
        self.caches.get(g).and_then(Option::as_ref)
    }

    /// The group caches, in group order.
    fn groups(&self) -> impl Iterator<Item = &KvCache<'a, A>> {
        self.caches.iter().flatten()
    }

    /// The group caches, in group order, to change.
    fn groups_mut(&mut self) -> impl Iterator<Item = &mut KvCache<'a, A>> {
        self.caches.iter_mut().flatten()
    }

    /// Group 0's cache (every configuration has it).
    fn first(&self) -> Result<&KvCache<'a, A>> {
        self.group(0).ok_or(Error::Config(ConfigError::EmptyGroup))
    }

    /// Whether there is more than one group (the all-or-nothing paths are then needed).
    fn several(&self) -> bool {
        self.plan.group_count() > 1
    }

    /// The cache of `layer`'s group and the layer's index in it.
    fn route(&self, layer: u16) -> Result<(&KvCache<'a, A>, u16)> {
        let (g, index) = self.locate(layer)?;
        Ok((self.group(g).ok_or(Error::LayerOutOfRange)?, index))
    }

    /// The cache of `layer`'s group, to change, and the layer's index in it.
    fn route_mut(&mut self, layer: u16) -> Result<(&mut KvCache<'a, A>, u16)> {
        let (g, index) = self.locate(layer)?;
        let cache = self.caches.get_mut(g).and_then(Option::as_mut);
        Ok((cache.ok_or(Error::LayerOutOfRange)?, index))
    }

    /// `layer`'s group and index in it. A layer past the shape's goes to group 0 as it is
    /// (past that group's layers too): its cache then refuses it with
    /// [`LayerOutOfRange`](Error::LayerOutOfRange) after checking the sequence and the slices,
    /// the errors and order of a [`KvCache`]'s.
    fn locate(&self, layer: u16) -> Result<(usize, u16)> {
        if !self.several() {
            return Ok((0, layer));
        }
        Ok(self.config.layer_group(layer).unwrap_or((0, layer)))
    }

    /// Reserved positions of a sequence (the same in every group).
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence).
    pub fn seq_len(&self, seq: SeqId) -> Result<u32> {
        self.first()?.seq_len(seq)
    }

    /// The f32s of scratch [`attention`](Self::attention) needs for `q_heads` query heads on
    /// any layer: the most any group needs ([`CacheConfig::scratch_len`]`(q_heads, 1)`).
    pub fn scratch_len(&self, q_heads: u16) -> usize {
        self.groups()
            .map(|c| c.config().scratch_len(q_heads, 1))
            .max()
            .unwrap_or(0)
    }

    /// Occupancy summed over the groups (saturating): pages and bytes of every pool, evictions
    /// of all; sequences and tokens counted once (they are the same in every group);
    /// `page_bytes` and `bytes_per_token` are one page id's / one position's bytes in every
    /// group together. Each group's own: [`group`](Self::group)`(g)?.stats()`.
    pub fn stats(&self) -> Stats {
        let mut total = Stats::default();
        for (g, c) in self.groups().enumerate() {
            let s = c.stats();
            if g == 0 {
                total.sequences = s.sequences;
                total.tokens = s.tokens;
            }
            // Page counts saturate at `u16::MAX` (each group has up to that many).
            total.pages_total = total.pages_total.saturating_add(s.pages_total);
            total.pages_free = total.pages_free.saturating_add(s.pages_free);
            total.pages_used = total.pages_used.saturating_add(s.pages_used);
            total.pages_cached = total.pages_cached.saturating_add(s.pages_cached);
            total.pages_registered = total.pages_registered.saturating_add(s.pages_registered);
            total.evictions = total.evictions.saturating_add(s.evictions);
            total.page_bytes = total.page_bytes.saturating_add(s.page_bytes);
            total.bytes_used = total.bytes_used.saturating_add(s.bytes_used);
            total.bytes_per_token = total.bytes_per_token.saturating_add(s.bytes_per_token);
        }
        total
    }

    /// Checks every group's invariants ([`KvCache::check_invariants`], with `scratch` of at
    /// least the largest group's page count) and that the groups agree on every sequence: the
    /// same live slots, generations, lengths, prompts and modes.
    ///
    /// # Errors
    ///
    /// The first [`InvariantViolation`] found.
    pub fn check_invariants(&self, scratch: &mut [u16]) -> Result<(), InvariantViolation> {
        let bad = |m| Err(InvariantViolation(m));
        let Some(first) = self.group(0) else {
            return bad("no group 0");
        };
        for c in self.groups() {
            c.check_invariants(scratch)?;
            let (a, b) = (first.seq_records(), c.seq_records());
            if a.len() != b.len() {
                return bad("groups differ in sequence slots");
            }
            for (x, y) in a.iter().zip(b) {
                if x.live() != y.live()
                    || x.generation != y.generation
                    || x.len != y.len
                    || x.prompt != y.prompt
                    || x.flags != y.flags
                {
                    return bad("groups differ in a sequence");
                }
            }
        }
        if self.groups().count() != self.plan.group_count() {
            return bad("a group has no cache");
        }
        Ok(())
    }
}
