//! [`KvCache`]: arenas, pool and sequences tied together.

mod attend;
mod contiguous;
mod lifecycle;
mod prefix;
mod raw;
mod rows;
mod snapshot;
mod stats;
mod verify;
mod window;

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod window_tests;

pub use stats::Stats;
pub use verify::InvariantViolation;

use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::alloc::{FreeList, PageAllocator, PageId};
use crate::arena::zeroed;
use crate::error::{ConfigError, Error, Result};
use crate::plan::{CacheConfig, META_ALIGN, Plan, PlannedConfig, PoolKind, SEQ_RECORD_BYTES};
use crate::pool::{PagePool, PageState};
use crate::prefix::index::PrefixIndex;
use crate::prefix::{PageHasher, page_hash};
use crate::sequence::{SeqId, SeqInfo, SeqRecord, SeqSet};
use crate::shape::Kv;

/// A KV cache over two caller-supplied arenas: pages of keys and values for every layer, shared
/// by page id, handed out to sequences through per-sequence page tables.
///
/// `A` picks the allocator: [`FreeList`] (default; O(1), single pages) or
/// [`Bitmap`](crate::Bitmap) (first fit, needed for [`SeqMode::Contiguous`](crate::SeqMode)).
///
/// Every method that returns `Err` leaves the cache exactly as it was and writes none of its
/// output buffers.
///
/// ```
/// use edgekv::{ArenaBuf, CacheConfig, KvCache, Kv, SeqMode, Shape};
///
/// let cfg = CacheConfig::new(Shape { layers: 2, kv_heads: 1, head_dim: 4 }).with_page_tokens(4);
/// let mut data = ArenaBuf::<4096>::new();
/// let mut meta = ArenaBuf::<2048>::new();
/// let mut cache: KvCache = KvCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut())?;
///
/// let seq = cache.create_sequence(SeqMode::Paged)?;
/// let pos = cache.reserve(seq, 2)?; // positions 0 and 1
/// cache.write(seq, 1, Kv::K, pos, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])?;
/// let mut row = [0f32; 4];
/// cache.read(seq, 1, Kv::K, 1, &mut row)?;
/// assert_eq!(row, [5.0, 6.0, 7.0, 8.0]);
/// assert_eq!(cache.stats().pages_used, 1);
/// # Ok::<(), edgekv::Error>(())
/// ```
pub struct KvCache<'a, A: PageAllocator<'a> = FreeList<'a>> {
    config: CacheConfig,
    plan: Plan,
    data: &'a mut [u8],
    pool: PagePool<'a, A>,
    /// Registered pages by chained hash: the pool caches them when unreferenced, this cache
    /// drops them from the index when the pool evicts them.
    index: PrefixIndex<'a>,
    /// Sequence records and page tables.
    seqs: SeqSet<'a>,
    hasher: PageHasher,
}

/// The epoch of the last cache created in this process.
static EPOCH: AtomicU32 = AtomicU32::new(0);

/// A new cache instance's epoch: distinct from every other one of this process until the 32-bit
/// counter wraps (never 0). Without atomic read-modify-write (Armv6-M) the counter is a load and
/// a store: create caches from one execution context there.
pub(crate) fn next_epoch() -> u32 {
    #[cfg(target_has_atomic = "32")]
    let prev = EPOCH.fetch_add(1, Ordering::Relaxed);
    #[cfg(not(target_has_atomic = "32"))]
    let prev = {
        let e = EPOCH.load(Ordering::Relaxed);
        EPOCH.store(e.wrapping_add(1), Ordering::Relaxed);
        e
    };
    match prev.wrapping_add(1) {
        0 => next_epoch(),
        e => e,
    }
}

impl<'a, A: PageAllocator<'a>> KvCache<'a, A> {
    /// Plans a cache with this allocator over a data arena of `data_bytes` (see
    /// [`CacheConfig::plan`]); `const`, so arenas can be sized at compile time.
    ///
    /// # Errors
    ///
    /// As [`CacheConfig::plan`].
    pub const fn plan(config: &CacheConfig, data_bytes: usize) -> Result<Plan, ConfigError> {
        config.plan(data_bytes, A::META_BITS_PER_PAGE)
    }

    /// Plans a cache with this allocator and exactly `pages` pages (see
    /// [`CacheConfig::plan_pages`]); `const`.
    ///
    /// # Errors
    ///
    /// As [`CacheConfig::plan_pages`].
    pub const fn plan_pages(config: &CacheConfig, pages: usize) -> Result<Plan, ConfigError> {
        config.plan_pages(pages, A::META_BITS_PER_PAGE)
    }

    /// Creates a cache with as many pages as fit in `data` (aligned to `config.align`), keeping
    /// its bookkeeping in `meta` (aligned to [`META_ALIGN`], at least `plan.meta.total` bytes).
    /// Both arenas are zeroed; bytes past the plan's needs are left untouched.
    ///
    /// # Errors
    ///
    /// As [`CacheConfig::plan`] for the configuration;
    /// [`MisalignedArena`](ConfigError::MisalignedArena) or
    /// [`ArenaTooSmall`](ConfigError::ArenaTooSmall) for an arena.
    pub fn new(
        config: CacheConfig,
        data: &'a mut [MaybeUninit<u8>],
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<Self, ConfigError> {
        let plan = config.plan(data.len(), A::META_BITS_PER_PAGE)?;
        Self::with_plan(config, plan, data, meta)
    }

    /// Creates a cache of a configuration checked and planned beforehand (at compile time when
    /// `planned` is a `const`): only the arenas are checked, as in [`new`](Self::new). The
    /// cache's plan is `planned.plan()`; `data` and `meta` need at least its `data_bytes` and
    /// `meta.total` bytes.
    ///
    /// # Errors
    ///
    /// [`PlannedForOtherAllocator`](ConfigError::PlannedForOtherAllocator) when `planned` was
    /// made for other than `A::META_BITS_PER_PAGE`;
    /// [`MisalignedArena`](ConfigError::MisalignedArena) or
    /// [`ArenaTooSmall`](ConfigError::ArenaTooSmall) for an arena.
    pub fn from_planned(
        planned: &PlannedConfig,
        data: &'a mut [MaybeUninit<u8>],
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<Self, ConfigError> {
        if planned.alloc_bits_per_page() != A::META_BITS_PER_PAGE {
            return Err(ConfigError::PlannedForOtherAllocator);
        }
        Self::with_plan(*planned.config(), *planned.plan(), data, meta)
    }

    /// Creates a cache in one buffer (aligned to `config.align`): metadata at its start, data at
    /// the next aligned offset, as many pages as fit ([`CacheConfig::plan_split`]).
    ///
    /// # Errors
    ///
    /// As [`CacheConfig::plan_split`];
    /// [`MisalignedArena`](ConfigError::MisalignedArena) for a misaligned buffer.
    pub fn new_split(
        config: CacheConfig,
        buf: &'a mut [MaybeUninit<u8>],
    ) -> Result<Self, ConfigError> {
        let plan = config.plan_split(buf.len(), A::META_BITS_PER_PAGE)?;
        if buf.as_ptr() as usize % config.align != 0 {
            return Err(ConfigError::MisalignedArena);
        }
        let (meta, data) = buf
            .split_at_mut_checked(plan.split_data_offset())
            .ok_or(ConfigError::ArenaTooSmall)?;
        Self::with_plan(config, plan, data, meta)
    }

    fn with_plan(
        config: CacheConfig,
        plan: Plan,
        data: &'a mut [MaybeUninit<u8>],
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<Self, ConfigError> {
        Self::with_plan_epoch(config, plan, data, meta, next_epoch())
    }

    /// A cache of `plan` (one of `config`'s) over `data` and `meta`, whose handles carry
    /// `epoch`: the caches of one grouped cache share theirs, so that one handle names a
    /// sequence in each.
    pub(crate) fn with_plan_epoch(
        config: CacheConfig,
        plan: Plan,
        data: &'a mut [MaybeUninit<u8>],
        meta: &'a mut [MaybeUninit<u8>],
        epoch: u32,
    ) -> Result<Self, ConfigError> {
        if data.as_ptr() as usize % config.align != 0 || meta.as_ptr() as usize % META_ALIGN != 0 {
            return Err(ConfigError::MisalignedArena);
        }
        let data = data
            .get_mut(..plan.data_bytes)
            .ok_or(ConfigError::ArenaTooSmall)?;
        let meta = meta
            .get_mut(..plan.meta.total)
            .ok_or(ConfigError::ArenaTooSmall)?;
        let data = zeroed(data);
        let meta = zeroed(meta);

        let m = &plan.meta;
        let split = |buf: &'a mut [u8], at: usize| {
            buf.split_at_mut_checked(at).ok_or(ConfigError::Overflow)
        };
        let (rc, rest) = split(meta, m.lru)?;
        let (links, rest) = split(rest, m.flags - m.lru)?;
        let (flags, rest) = split(rest, m.allocator - m.flags)?;
        let (alloc, rest) = split(rest, m.seqs - m.allocator)?;
        let (seqs, rest) = split(rest, m.tables - m.seqs)?;
        let (tables, index) = split(rest, m.index - m.tables)?;
        let cast16 = |b: &'a mut [u8]| -> Result<&'a mut [u16], ConfigError> {
            bytemuck::try_cast_slice_mut(b).map_err(|_| ConfigError::MisalignedArena)
        };
        let seqs = seqs
            .get_mut(..config.max_seqs as usize * SEQ_RECORD_BYTES)
            .ok_or(ConfigError::ArenaTooSmall)?;
        let records: &mut [SeqRecord] =
            bytemuck::try_cast_slice_mut(seqs).map_err(|_| ConfigError::MisalignedArena)?;
        let tables = cast16(tables)?;
        let tables = tables
            .get_mut(..config.max_seqs as usize * plan.table_len)
            .ok_or(ConfigError::ArenaTooSmall)?;
        let index = if m.index_buckets == 0 {
            PrefixIndex::disabled()
        } else {
            let n = plan.num_pages as usize;
            let tokens = n * config.page_tokens as usize;
            let cast64 = |b: &'a mut [u8]| -> Result<&'a mut [u64], ConfigError> {
                bytemuck::try_cast_slice_mut(b).map_err(|_| ConfigError::MisalignedArena)
            };
            let (hashes, rest) = split(index, 8 * n)?;
            let (regs, rest) = split(rest, 8 * n)?;
            let (parents, rest) = split(rest, 8 * n)?;
            let (ids, rest) = split(rest, 4 * tokens)?;
            let buckets = rest
                .get_mut(..2 * m.index_buckets)
                .ok_or(ConfigError::ArenaTooSmall)?;
            let ids =
                bytemuck::try_cast_slice_mut(ids).map_err(|_| ConfigError::MisalignedArena)?;
            PrefixIndex::new(
                config.page_tokens as usize,
                cast64(hashes)?,
                cast64(regs)?,
                cast64(parents)?,
                ids,
                cast16(buckets)?,
            )
        };
        let pool = PagePool::new(plan.num_pages, cast16(rc)?, cast16(links)?, flags, alloc)?;
        Ok(KvCache {
            config,
            plan,
            data,
            pool,
            index,
            seqs: SeqSet::new(records, tables, plan.table_len, epoch),
            hasher: page_hash,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// The plan the cache was built with: its page count, page geometry and both arenas' layouts
    /// (every pool's offset in the data arena, see [`Plan`]).
    pub fn arena_plan(&self) -> &Plan {
        &self.plan
    }

    /// The plan the cache was built with.
    #[deprecated(note = "renamed: `arena_plan` (it returns the arenas' `Plan`)")]
    pub fn layout(&self) -> &Plan {
        &self.plan
    }

    /// The page pool (read-only: states, refcounts, free and cached pages).
    pub fn pool(&self) -> &PagePool<'a, A> {
        &self.pool
    }

    /// The state of `page`, or `None` if out of range.
    pub fn page_state(&self, page: PageId) -> Option<PageState> {
        self.pool.state(page)
    }

    /// A sequence's page table: the pages holding its positions, in order (for a contiguous
    /// sequence, its whole run, including capacity past its length). Pages released by
    /// [`slide`](Self::slide) read as [`NO_PAGE`](crate::NO_PAGE).
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence).
    pub fn page_table(&self, seq: SeqId) -> Result<&[PageId]> {
        let slot = self.seqs.slot(seq)?;
        Ok(self.seqs.table(slot))
    }

    /// Length, pages, capacity and mode of a sequence.
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence).
    pub fn sequence(&self, seq: SeqId) -> Result<SeqInfo> {
        let slot = self.seqs.slot(seq)?;
        let r = self.seqs.record(slot);
        Ok(SeqInfo {
            len: r.len,
            pages: r.held,
            capacity: r.held as u32 * self.config.page_tokens as u32,
            mode: r.mode(),
            prompt: r.prompt,
        })
    }

    /// Reserved positions of a sequence.
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence).
    pub fn seq_len(&self, seq: SeqId) -> Result<u32> {
        Ok(self.seqs.record(self.seqs.slot(seq)?).len)
    }

    /// The bytes of one value page `(layer, kv, page)` in the data arena (for devices and tests).
    ///
    /// # Errors
    ///
    /// [`LayerOutOfRange`](Error::LayerOutOfRange), [`InvalidPage`](Error::InvalidPage) (past the
    /// pool).
    pub fn page_bytes(&self, layer: u16, kv: Kv, page: PageId) -> Result<&[u8]> {
        if layer >= self.config.shape.layers {
            return Err(Error::LayerOutOfRange);
        }
        let off = self
            .plan
            .page_offset(layer, kv, page)
            .ok_or(Error::InvalidPage)?;
        let len = self.plan.geometry.stride(kv);
        self.data.get(off..off + len).ok_or(Error::InvalidPage)
    }

    /// The data arena's address (for address maps and device descriptors).
    pub fn data_ptr(&self) -> *const u8 {
        self.data.as_ptr()
    }

    /// Every sequence record, by slot (for a grouped cache's checks).
    pub(crate) fn seq_records(&self) -> &[SeqRecord] {
        self.seqs.records()
    }

    // ---- internal helpers ----

    /// Tokens per page.
    #[inline]
    fn page_len(&self) -> usize {
        self.config.page_tokens as usize
    }

    #[inline]
    fn pages_for(&self, tokens: u32) -> usize {
        (tokens as usize).div_ceil(self.config.page_tokens as usize)
    }

    /// Whether `rec` is a contiguous sequence. Never over an allocator without runs (such a cache
    /// refuses to create one), so those builds drop the contiguous paths.
    #[inline]
    fn contiguous(rec: &SeqRecord) -> bool {
        A::CONTIGUOUS && rec.contiguous()
    }

    /// One page with refcount 1 from the pool; a cached page it evicts leaves the prefix index.
    #[cfg_attr(feature = "small-code", inline(never))]
    fn alloc_page(&mut self) -> Result<PageId> {
        self.pool.alloc_evicting(|v| self.index.remove(v))
    }

    /// Copies `count` consecutive pages starting at `src` onto those starting at `dst`, in every
    /// pool of every layer (values and scales).
    fn copy_pages(&mut self, src: PageId, dst: PageId, count: usize) {
        let g = self.plan.geometry;
        for layer in 0..g.layers {
            for pool in PoolKind::ALL {
                let stride = g.pool_stride(pool);
                if stride == 0 {
                    continue;
                }
                let base = self.plan.pool_offset(layer, pool);
                let from = base + src as usize * stride;
                self.data
                    .copy_within(from..from + count * stride, base + dst as usize * stride);
            }
        }
    }
}
