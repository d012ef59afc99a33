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

/// `f32`s of scratch [`KvCache::attention`](crate::KvCache::attention) needs without rotated
/// keys: per query head a running max and sum, one page of scores, a later key segment's
/// maximum, sum and outputs (rows of more than 2,048 keys are computed in segments), and its
/// query row quantized for int8 keys (16-bit codes and per-group scales):
/// `q_heads · (page_tokens + 4 + 2 · head_dim)`. [`scratch_len_for`] answers for any
/// configuration.
pub const fn scratch_len(q_heads: u16, page_tokens: u16, head_dim: u16) -> usize {
    q_heads as usize * (page_tokens as usize + 2)
        + super::page::merge_slots(q_heads as usize, head_dim as usize)
        + crate::arch::query::slots(q_heads as usize, head_dim as usize)
}

/// Query rows [`KvCache::attention`](crate::KvCache::attention) computes together at most (see
/// [`block_scratch_len`]; 1 in `small-code` builds).
pub const BLOCK_ROWS: usize = super::block_rows();

/// `f32`s of scratch that let [`KvCache::attention`](crate::KvCache::attention) compute up to
/// `rows` query rows (at most [`BLOCK_ROWS`]) in one pass over the pages they share, on top of
/// [`scratch_len`] / [`scratch_len_for`]: `rows · q_heads · (3 · head_dim + page_tokens + 4)` for
/// two rows or more, else 0. Prefill gets faster (each K and V row read and decoded once for all
/// of the block's rows; 1.2–1.5× on x86-64), the bits stay those of one row at a time. Attention
/// takes the largest block its scratch holds.
pub const fn block_scratch_len(
    q_heads: u16,
    page_tokens: u16,
    head_dim: u16,
    rows: usize,
) -> usize {
    let rows = if rows < BLOCK_ROWS { rows } else { BLOCK_ROWS };
    if rows < 2 {
        0
    } else {
        rows * q_heads as usize * (3 * head_dim as usize + page_tokens as usize + 4)
    }
}

/// [`scratch_len_for`] plus [`block_scratch_len`]: the scratch with which attention in a cache
/// configured as `config` computes up to `rows` query rows together.
pub const fn scratch_len_rows(config: &CacheConfig, q_heads: u16, rows: usize) -> usize {
    scratch_len_for(config, q_heads)
        + block_scratch_len(q_heads, config.page_tokens, config.shape.head_dim, rows)
}

/// `f32`s of scratch [`KvCache::attention`](crate::KvCache::attention) needs in a cache
/// configured as `config`: [`scratch_len`], plus room for each query row rotated
/// (`q_heads · head_dim`) when keys are rotated.
pub const fn scratch_len_for(config: &CacheConfig, q_heads: u16) -> usize {
    let hd = config.shape.head_dim;
    let base = scratch_len(q_heads, config.page_tokens, hd);
    if config.k_rotation.is_some() {
        base + q_heads as usize * hd as usize
    } else {
        base
    }
}
