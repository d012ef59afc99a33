//! The layout planner: how many pages fit in an arena, where each page lives, and how big each
//! arena must be. Every function is a `const fn`, so capacities can be checked at compile time.
//!
//! The layout contract is on [`Plan`] (public at the crate root).

mod geometry;
mod groups;
mod planned;

pub use crate::config::{CacheConfig, MIN_ALIGN};
use crate::error::{ConfigError, Error, Result};
use crate::shape::Kv;
#[allow(deprecated)]
pub use geometry::Pool;
pub use geometry::{PageGeometry, PoolKind};
pub use groups::GroupedPlan;
pub use planned::PlannedConfig;

/// Alignment the metadata arena must have.
pub const META_ALIGN: usize = 8;
/// Largest number of pages a cache manages (`u16` ids; `u16::MAX` is reserved as "none").
pub const MAX_PAGES: usize = u16::MAX as usize;
/// Bytes of one sequence record in the metadata arena.
pub(crate) const SEQ_RECORD_BYTES: usize = 16;

macro_rules! ck {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => return Err(ConfigError::Overflow),
        }
    };
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Err(e),
        }
    };
}

/// `tri!` in a function returning a runtime [`Error`]: a configuration error becomes
/// [`Error::Config`] (`From` is not `const`).
macro_rules! tri_config {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Err(Error::Config(e)),
        }
    };
}

const fn round_up(x: usize, align: usize) -> Option<usize> {
    // align is a power of two (checked by callers).
    match x.checked_add(align - 1) {
        Some(v) => Some(v & !(align - 1)),
        None => None,
    }
}

impl CacheConfig {
    /// Checks the configuration and derives the page geometry (of a configuration of one
    /// layer group; see [`group_geometry`](Self::group_geometry) for each group's).
    ///
    /// # Errors
    ///
    /// [`MultipleGroups`](ConfigError::MultipleGroups) for a configuration of several groups,
    /// after [`check_groups`](Self::check_groups)' errors;
    /// [`ZeroSize`](ConfigError::ZeroSize),
    /// [`PageTokensNotPowerOfTwo`](ConfigError::PageTokensNotPowerOfTwo),
    /// [`InvalidAlignment`](ConfigError::InvalidAlignment),
    /// [`InvalidChunkSize`](ConfigError::InvalidChunkSize), a format's
    /// [`InvalidFormat`](ConfigError::InvalidFormat) or
    /// [`FormatDisabled`](ConfigError::FormatDisabled), [`Overflow`](ConfigError::Overflow).
    pub const fn geometry(&self) -> Result<PageGeometry, ConfigError> {
        if self.group_count() > 1 {
            tri!(self.check_groups());
            return Err(ConfigError::MultipleGroups);
        }
        self.group_geometry(0)
    }

    /// Checks the configuration and derives the page geometry of layer group `g` (its layers,
    /// formats and rotations; see [`CacheConfig::group`]).
    ///
    /// # Errors
    ///
    /// As [`geometry`](Self::geometry) for one group, and
    /// [`check_groups`](Self::check_groups)' errors; [`EmptyGroup`](ConfigError::EmptyGroup)
    /// for `g` past the last group.
    pub const fn group_geometry(&self, g: usize) -> Result<PageGeometry, ConfigError> {
        let s = self.shape;
        if s.layers == 0
            || s.kv_heads == 0
            || s.head_dim == 0
            || self.page_tokens == 0
            || self.max_seqs == 0
            || self.max_seq_tokens == 0
        {
            return Err(ConfigError::ZeroSize);
        }
        if !self.page_tokens.is_power_of_two() {
            return Err(ConfigError::PageTokensNotPowerOfTwo);
        }
        if !self.align.is_power_of_two() || self.align < MIN_ALIGN {
            return Err(ConfigError::InvalidAlignment);
        }
        if self.chunk() % self.page_tokens as u32 != 0 {
            return Err(ConfigError::InvalidChunkSize);
        }
        tri!(self.check_groups());
        let group = match self.group(g) {
            Some(group) => group,
            None => return Err(ConfigError::EmptyGroup),
        };
        let layers = self.group_layers(g);
        let p = self.page_tokens as usize;
        let (heads, dim) = (s.kv_heads as usize, s.head_dim as usize);
        tri!(group.k_rotation.check(dim));
        tri!(group.v_rotation.check(dim));
        let k_row = tri!(group.k_format.row_bytes(heads, dim));
        let v_row = tri!(group.v_format.row_bytes(heads, dim));
        let k_srow = tri!(group.k_format.scale_row_bytes(heads, dim));
        let v_srow = tri!(group.v_format.scale_row_bytes(heads, dim));
        let k_page = ck!(k_row.checked_mul(p));
        let v_page = ck!(v_row.checked_mul(p));
        let k_spage = ck!(k_srow.checked_mul(p));
        let v_spage = ck!(v_srow.checked_mul(p));
        let k_stride = ck!(round_up(k_page, self.align));
        let v_stride = ck!(round_up(v_page, self.align));
        let k_sstride = ck!(round_up(k_spage, self.align));
        let v_sstride = ck!(round_up(v_spage, self.align));
        let layer_stride = ck!(
            ck!(ck!(k_stride.checked_add(k_sstride)).checked_add(v_stride)).checked_add(v_sstride)
        );
        let page_bytes = ck!(layer_stride.checked_mul(layers as usize));
        let table_len = ck!((self.max_seq_tokens as usize).checked_add(p - 1)) / p;
        Ok(PageGeometry {
            page_tokens: self.page_tokens,
            align: self.align,
            layers,
            k_row_bytes: k_row,
            v_row_bytes: v_row,
            k_scale_row_bytes: k_srow,
            v_scale_row_bytes: v_srow,
            k_stride,
            k_scale_stride: k_sstride,
            v_stride,
            v_scale_stride: v_sstride,
            layer_stride,
            page_bytes,
            natural: k_page == k_stride
                && v_page == v_stride
                && k_spage == k_sstride
                && v_spage == v_sstride,
            table_len,
        })
    }

    /// Plans a cache whose allocator keeps `alloc_bits_per_page` bits per page in metadata, over a
    /// data arena of `data_bytes`: as many pages as fit (at most [`MAX_PAGES`]).
    ///
    /// # Errors
    ///
    /// As [`geometry`](Self::geometry) and [`plan_pages`](Self::plan_pages);
    /// [`ArenaTooSmall`](ConfigError::ArenaTooSmall) when not one page fits.
    pub const fn plan(
        &self,
        data_bytes: usize,
        alloc_bits_per_page: usize,
    ) -> Result<Plan, ConfigError> {
        let geo = tri!(self.geometry());
        let mut pages = data_bytes / geo.page_bytes;
        if pages > MAX_PAGES {
            pages = MAX_PAGES;
        }
        if pages == 0 {
            return Err(ConfigError::ArenaTooSmall);
        }
        self.plan_pages(pages, alloc_bits_per_page)
    }

    /// Plans a cache of exactly `num_pages` pages (the arenas' sizes follow).
    ///
    /// # Errors
    ///
    /// As [`geometry`](Self::geometry); [`ZeroSize`](ConfigError::ZeroSize) for 0 pages,
    /// [`Overflow`](ConfigError::Overflow) past [`MAX_PAGES`] or for sizes past `usize`.
    pub const fn plan_pages(
        &self,
        num_pages: usize,
        alloc_bits_per_page: usize,
    ) -> Result<Plan, ConfigError> {
        let geo = tri!(self.geometry());
        self.plan_geometry(geo, self.window.is_some(), num_pages, alloc_bits_per_page)
    }

    /// The plan of `num_pages` pages of geometry `geo` (one group's; `windowed`: its page
    /// table spans `max_seq_tokens`, as released pages leave room for more positions).
    pub(crate) const fn plan_geometry(
        &self,
        geo: PageGeometry,
        windowed: bool,
        num_pages: usize,
        alloc_bits_per_page: usize,
    ) -> Result<Plan, ConfigError> {
        if num_pages == 0 {
            return Err(ConfigError::ZeroSize);
        }
        if num_pages > MAX_PAGES {
            return Err(ConfigError::Overflow);
        }
        let data_bytes = ck!(geo.page_bytes.checked_mul(num_pages));
        // No sequence can hold more pages than the pool has (unless it releases them).
        let table_len = if windowed || geo.table_len < num_pages {
            geo.table_len
        } else {
            num_pages
        };
        let index_tokens = if self.prefix_index {
            self.page_tokens as usize
        } else {
            0
        };
        let meta = tri!(MetaLayout::new(
            num_pages,
            self.max_seqs as usize,
            table_len,
            alloc_bits_per_page,
            index_tokens
        ));
        Ok(Plan {
            geometry: geo,
            num_pages: num_pages as u16,
            table_len,
            data_bytes,
            meta,
        })
    }

    /// Plans one buffer of `total_bytes` (aligned to `align`) split into a metadata arena at its
    /// start and a data arena at the next multiple of `align`: as many pages as fit.
    ///
    /// # Errors
    ///
    /// As [`plan`](Self::plan).
    pub const fn plan_split(
        &self,
        total_bytes: usize,
        alloc_bits_per_page: usize,
    ) -> Result<Plan, ConfigError> {
        let geo = tri!(self.geometry());
        let mut lo = 0usize; // largest page count known to fit
        let mut hi = total_bytes / geo.page_bytes; // upper bound
        if hi > MAX_PAGES {
            hi = MAX_PAGES;
        }
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            let fits = match self.plan_pages(mid, alloc_bits_per_page) {
                Ok(p) => match p.split_bytes() {
                    Some(total) => total <= total_bytes,
                    None => false,
                },
                Err(_) => false,
            };
            if fits {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        if lo == 0 {
            return Err(ConfigError::ArenaTooSmall);
        }
        self.plan_pages(lo, alloc_bits_per_page)
    }

    /// Arena sizes for `seqs` sequences of `tokens_per_seq` tokens each, without sharing.
    ///
    /// # Errors
    ///
    /// A runtime [`Error`], as a cache would refuse the request:
    /// [`TooManySequences`](Error::TooManySequences) past `max_seqs`,
    /// [`SequenceFull`](Error::SequenceFull) past `max_seq_tokens`, and [`Error::Config`] with
    /// [`ZeroSize`](ConfigError::ZeroSize) for zero tokens or sequences or the planner's errors.
    pub const fn bytes_for(
        &self,
        tokens_per_seq: u32,
        seqs: u16,
        alloc_bits_per_page: usize,
    ) -> Result<ArenaSizes> {
        if tokens_per_seq == 0 || seqs == 0 {
            return Err(Error::Config(ConfigError::ZeroSize));
        }
        if seqs > self.max_seqs {
            return Err(Error::TooManySequences);
        }
        if tokens_per_seq > self.max_seq_tokens {
            return Err(Error::SequenceFull);
        }
        let p = self.page_tokens as usize;
        // geometry() below rejects p == 0; guard the division here first.
        if p == 0 {
            return Err(Error::Config(ConfigError::ZeroSize));
        }
        let per_seq = (tokens_per_seq as usize).div_ceil(p);
        let pages = tri_config!(match per_seq.checked_mul(seqs as usize) {
            Some(v) => Ok(v),
            None => Err(ConfigError::Overflow),
        });
        let plan = tri_config!(self.plan_pages(pages, alloc_bits_per_page));
        Ok(ArenaSizes {
            pages: plan.num_pages,
            data: plan.data_bytes,
            meta: plan.meta.total,
        })
    }
}

/// A checked plan: the page count and both arenas' layouts. [`KvCache::arena_plan`](crate::KvCache::arena_plan)
/// returns the one a cache was built with.
///
/// # Data arena layout (byte for byte; part of the contract)
///
/// For each layer `l` in order, four pools follow each other, each holding `num_pages` slots of
/// its own stride: K values, K scales, V values, V scales. A pool's stride is its page size rounded
/// up to the arena alignment, so no two pages share a cache line. Full-precision formats have no
/// scales (stride 0). Inside a value page, elements are token-major: `[page_tokens][kv_heads]
/// [head_dim]`, little-endian. So the byte offset of `(layer, K|V, page)` is
///
/// ```text
/// layer * num_pages * layer_stride + pool_start(K|V) * num_pages + page * value_stride(K|V)
/// ```
///
/// where `layer_stride = k_stride + k_scale_stride + v_stride + v_scale_stride` and
/// `pool_start(K) = 0`, `pool_start(V) = k_stride + k_scale_stride`.
///
/// When a page's natural size is already a multiple of the alignment ([`PageGeometry::natural`]),
/// a contiguous run of pages is one linear `[tokens][kv_heads][head_dim]` tensor.
///
/// # Metadata arena layout
///
/// Sections, each starting at a multiple of [`META_ALIGN`]: refcounts (`u16` per page), cached-LRU
/// links (two `u16` per page), page flags (`u8` per page), the allocator's words
/// (`META_BITS_PER_PAGE` bits per page, rounded up to `u32` words), sequence records (16 bytes
/// each), page tables (`u16` per page slot, `max_seqs` × `table_len`), and the prefix index when
/// configured (see [`MetaLayout::index`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Plan {
    /// Page geometry.
    pub geometry: PageGeometry,
    /// Pages in the pool.
    pub num_pages: u16,
    /// Page-table slots per sequence: `min(geometry.table_len, num_pages)`.
    pub table_len: usize,
    /// Bytes of the data arena the pools use (the arena may be larger).
    pub data_bytes: usize,
    /// Metadata arena layout.
    pub meta: MetaLayout,
}

impl Plan {
    /// Tokens the pool holds when every page is full.
    pub const fn token_capacity(&self) -> usize {
        self.num_pages as usize * self.geometry.page_tokens as usize
    }

    /// Byte offset in the data arena of the value page `(layer, kv, page)`, or `None` when an index
    /// is out of range.
    #[inline]
    pub const fn page_offset(&self, layer: u16, kv: Kv, page: u16) -> Option<usize> {
        self.slot_offset(layer, PoolKind::values(kv), page)
    }

    /// Byte offset in the data arena of the scale page `(layer, kv, page)` (meaningful only for
    /// formats with a scale pool), or `None` when an index is out of range.
    #[inline]
    pub const fn scale_offset(&self, layer: u16, kv: Kv, page: u16) -> Option<usize> {
        self.slot_offset(layer, PoolKind::scales(kv), page)
    }

    /// Byte offset in the data arena of `page`'s slot in `pool` of `layer`, or `None` when an
    /// index is out of range.
    #[inline]
    pub const fn slot_offset(&self, layer: u16, pool: PoolKind, page: u16) -> Option<usize> {
        if layer >= self.geometry.layers || page >= self.num_pages {
            return None;
        }
        Some(self.pool_offset(layer, pool) + page as usize * self.geometry.pool_stride(pool))
    }

    /// Byte offset of page 0 of `pool` in `layer` (`layer < layers`, else meaningless).
    #[inline]
    pub const fn pool_offset(&self, layer: u16, pool: PoolKind) -> usize {
        let g = &self.geometry;
        let n = self.num_pages as usize;
        let before = match pool {
            PoolKind::KValues => 0,
            PoolKind::KScales => g.k_stride,
            PoolKind::VValues => g.k_stride + g.k_scale_stride,
            PoolKind::VScales => g.k_stride + g.k_scale_stride + g.v_stride,
        };
        // Cannot overflow for layer < layers: the total, data_bytes, was computed with checks.
        layer as usize * n * g.layer_stride + before * n
    }

    /// Bytes of one buffer split into metadata then data ([`CacheConfig::plan_split`]).
    pub const fn split_bytes(&self) -> Option<usize> {
        match round_up(self.meta.total, self.geometry.align) {
            Some(m) => m.checked_add(self.data_bytes),
            None => None,
        }
    }

    /// Offset of the data arena inside a split buffer.
    pub const fn split_data_offset(&self) -> usize {
        // Checked in plan_split / split_bytes: cannot overflow for a valid plan.
        (self.meta.total + self.geometry.align - 1) & !(self.geometry.align - 1)
    }
}

/// Offsets of the metadata sections (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct MetaLayout {
    /// Refcounts: `u16` per page.
    pub refcounts: usize,
    /// Cached-LRU links: `[prev; n]` then `[next; n]`, `u16` each.
    pub lru: usize,
    /// Page flags: `u8` per page.
    pub flags: usize,
    /// Allocator words.
    pub allocator: usize,
    /// Bytes of the allocator section.
    pub allocator_bytes: usize,
    /// Sequence records.
    pub seqs: usize,
    /// Page tables.
    pub tables: usize,
    /// Prefix index (empty without one): per page a hash, a registration id and its parent's
    /// (`u64` each), then the page's token ids (`u32` × `page_tokens`), then the hash table's
    /// buckets (`u16`, [`MetaLayout::index_buckets`] of them).
    pub index: usize,
    /// Buckets of the prefix index's hash table (a power of two ≥ 2 × pages; 0 without one).
    pub index_buckets: usize,
    /// Total bytes.
    pub total: usize,
}

impl MetaLayout {
    const fn new(
        pages: usize,
        seqs: usize,
        table_len: usize,
        alloc_bits: usize,
        index_tokens: usize,
    ) -> Result<Self, ConfigError> {
        let refcounts = 0;
        let lru = ck!(round_up(refcounts + ck!(pages.checked_mul(2)), META_ALIGN));
        let flags = ck!(round_up(
            ck!(lru.checked_add(ck!(pages.checked_mul(4)))),
            META_ALIGN
        ));
        let allocator = ck!(round_up(ck!(flags.checked_add(pages)), META_ALIGN));
        let allocator_bytes = ck!(ck!(pages.checked_mul(alloc_bits)).checked_add(31)) / 32 * 4;
        let seq_records = ck!(round_up(
            ck!(allocator.checked_add(allocator_bytes)),
            META_ALIGN
        ));
        let tables = ck!(round_up(
            ck!(seq_records.checked_add(ck!(seqs.checked_mul(SEQ_RECORD_BYTES)))),
            META_ALIGN
        ));
        let table_bytes = ck!(ck!(seqs.checked_mul(table_len)).checked_mul(2));
        let index = ck!(round_up(ck!(tables.checked_add(table_bytes)), META_ALIGN));
        let (index_buckets, index_bytes) = if index_tokens == 0 {
            (0, 0)
        } else {
            let buckets = ck!(ck!(pages.checked_mul(2)).checked_next_power_of_two());
            let per_page = ck!(ck!(index_tokens.checked_mul(4)).checked_add(24));
            let bytes = ck!(ck!(pages.checked_mul(per_page)).checked_add(buckets * 2));
            (buckets, bytes)
        };
        let total = ck!(round_up(ck!(index.checked_add(index_bytes)), META_ALIGN));
        Ok(MetaLayout {
            refcounts,
            lru,
            flags,
            allocator,
            allocator_bytes,
            seqs: seq_records,
            tables,
            index,
            index_buckets,
            total,
        })
    }
}

/// Arena sizes answered by [`CacheConfig::bytes_for`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ArenaSizes {
    /// Pages needed.
    pub pages: u16,
    /// Data arena bytes.
    pub data: usize,
    /// Metadata arena bytes.
    pub meta: usize,
}

#[cfg(test)]
mod groups_tests;
#[cfg(test)]
mod tests;
