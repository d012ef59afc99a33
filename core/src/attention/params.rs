//! What to compute: the score scale, grouped query heads, an optional sliding window with
//! sinks; and the scratch a call needs.

use crate::config::CacheConfig;
use crate::shape::Shape;

/// A sliding window with attention sinks: query position `t` sees key `j ≤ t` when `j < sinks`
/// or `t − j < window`. Positions keep their absolute values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Window {
    /// Leading positions always kept (attention sinks).
    pub sinks: u32,
    /// Most recent positions kept, the query's own included (≥ 1).
    pub window: u32,
}

impl Window {
    /// Whether query position `query` sees key position `key` (`key ≤ query`).
    #[inline]
    pub const fn keeps(&self, query: u32, key: u32) -> bool {
        key < self.sinks || query - key < self.window
    }
}

/// How to compute attention.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AttentionParams {
    /// Query heads: a multiple of the cache's KV heads (grouped-query attention).
    pub q_heads: u16,
    /// Score scale (default `1 / sqrt(head_dim)`).
    pub scale: f32,
    /// Sliding window with sinks, or full causal attention.
    pub window: Option<Window>,
}

impl AttentionParams {
    /// Full causal attention with `q_heads` query heads and scale `1 / sqrt(head_dim)`.
    pub fn new(shape: Shape, q_heads: u16) -> Self {
        AttentionParams {
            q_heads,
            scale: 1.0 / libm::sqrtf(shape.head_dim as f32),
            window: None,
        }
    }

    /// Sets the score scale.
    pub const fn with_scale(mut self, scale: f32) -> Self {
        self.scale = scale;
        self
    }

    /// Restricts attention to `sinks` leading and `window` most recent positions.
    pub const fn with_window(mut self, sinks: u32, window: u32) -> Self {
        self.window = Some(Window { sinks, window });
        self
    }
}

/// `f32`s of scratch one query row needs without rotated keys: per query head a running max and
/// sum, one page of scores, a later key segment's maximum, sum and outputs (rows of more than
/// 2,048 keys are computed in segments), and its query row quantized for int8 keys (16-bit
/// codes and per-group scales): `q_heads · (page_tokens + 4 + 2 · head_dim)`.
pub(crate) const fn row_scratch_len(q_heads: u16, page_tokens: u16, head_dim: u16) -> usize {
    q_heads as usize * (page_tokens as usize + 2)
        + super::page::merge_slots(q_heads as usize, head_dim as usize)
        + crate::arch::query::slots(q_heads as usize, head_dim as usize)
}

/// `f32`s of scratch on top of [`row_scratch_len`] that let up to `rows` query rows (at most
/// [`BLOCK_ROWS`]) be computed in one pass over the pages they share:
/// `rows · q_heads · (3 · head_dim + page_tokens + 4)` for two rows or more, else 0.
pub(crate) const fn block_len(q_heads: u16, page_tokens: u16, head_dim: u16, rows: usize) -> usize {
    let rows = if rows < BLOCK_ROWS { rows } else { BLOCK_ROWS };
    if rows < 2 {
        0
    } else {
        rows * q_heads as usize * (3 * head_dim as usize + page_tokens as usize + 4)
    }
}

/// `f32`s of scratch one query row needs in a cache of one layer group configured as `config`:
/// [`row_scratch_len`], plus room for the query row rotated (`q_heads · head_dim`) when keys
/// are rotated.
pub(crate) const fn group_scratch_len(config: &CacheConfig, q_heads: u16) -> usize {
    let hd = config.shape.head_dim;
    let base = row_scratch_len(q_heads, config.page_tokens, hd);
    if config.k_rotation.is_some() {
        base + q_heads as usize * hd as usize
    } else {
        base
    }
}

impl CacheConfig {
    /// `f32`s of scratch attention with `q_heads` query heads needs in a cache configured so
    /// ([`KvCache::attention`](crate::KvCache::attention),
    /// [`GroupedCache::attention`](crate::GroupedCache::attention)), on any layer of any layer
    /// group, to compute up to `rows` query rows together: one row's scratch (`q_heads ·
    /// (page_tokens + 4 + 2 · head_dim)`, plus `q_heads · head_dim` with rotated keys) and, for
    /// `rows ≥ 2`, `rows · q_heads · (3 · head_dim + page_tokens + 4)` more (`rows` capped at
    /// [`BLOCK_ROWS`]). With `rows` ≤ 1 it is the least attention takes. More rows make prefill
    /// faster (each K and V row read and decoded once for all of a block's rows; 1.2–1.5× on
    /// x86-64), the bits stay those of one row at a time: attention takes the largest block its
    /// scratch holds. `const`, so a static scratch can be sized at compile time.
    pub const fn scratch_len(&self, q_heads: u16, rows: usize) -> usize {
        let mut most = 0;
        let mut g = 0;
        while g < self.group_count() {
            if let Some(c) = self.group_config(g) {
                let n = group_scratch_len(&c, q_heads)
                    + block_len(q_heads, c.page_tokens, c.shape.head_dim, rows);
                if n > most {
                    most = n;
                }
            }
            g += 1;
        }
        most
    }
}

/// Query rows attention computes together at most (see [`CacheConfig::scratch_len`]; 1 in
/// `small-code` builds).
pub const BLOCK_ROWS: usize = super::block_rows();

/// A configuration of one group with this page size and head size, for the deprecated
/// shape-based queries.
const fn shape_config(page_tokens: u16, head_dim: u16) -> CacheConfig {
    CacheConfig::new(Shape {
        layers: 1,
        kv_heads: 1,
        head_dim,
    })
    .with_page_tokens(page_tokens)
}

/// `f32`s of scratch attention needs without rotated keys:
/// `q_heads · (page_tokens + 4 + 2 · head_dim)`.
#[deprecated(note = "one query per configuration: `CacheConfig::scratch_len(q_heads, 1)`")]
pub const fn scratch_len(q_heads: u16, page_tokens: u16, head_dim: u16) -> usize {
    shape_config(page_tokens, head_dim).scratch_len(q_heads, 1)
}

/// `f32`s of scratch beyond one row's that let attention compute up to `rows` query rows
/// together: `rows · q_heads · (3 · head_dim + page_tokens + 4)` for two rows or more, else 0.
#[deprecated(
    note = "one query per configuration: `CacheConfig::scratch_len(q_heads, rows)` (it includes \
            the one row's scratch)"
)]
pub const fn block_scratch_len(
    q_heads: u16,
    page_tokens: u16,
    head_dim: u16,
    rows: usize,
) -> usize {
    let c = shape_config(page_tokens, head_dim);
    c.scratch_len(q_heads, rows) - c.scratch_len(q_heads, 1)
}

/// The scratch with which attention in a cache configured as `config` computes up to `rows`
/// query rows together.
#[deprecated(note = "one query per configuration: `CacheConfig::scratch_len(q_heads, rows)`")]
pub const fn scratch_len_rows(config: &CacheConfig, q_heads: u16, rows: usize) -> usize {
    config.scratch_len(q_heads, rows)
}

/// `f32`s of scratch attention needs in a cache configured as `config`, one row at a time.
#[deprecated(note = "one query per configuration: `CacheConfig::scratch_len(q_heads, 1)`")]
pub const fn scratch_len_for(config: &CacheConfig, q_heads: u16) -> usize {
    config.scratch_len(q_heads, 1)
}
