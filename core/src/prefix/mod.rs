//! Prefix reuse: the common-prefix matcher, the chained page hash, the prefill chunk planner and
//! the verified prefix index behind [`KvCache::lookup`](crate::KvCache::lookup),
//! [`KvCache::attach`](crate::KvCache::attach), [`KvCache::commit_prompt`](crate::KvCache::commit_prompt)
//! and [`KvCache::reuse_prefix`](crate::KvCache::reuse_prefix).
//!
//! The promise: a reused prefix is bit-identical to a cold prefill. Three rules give it:
//! only prompt tokens prefilled in chunks aligned to absolute multiples of C are published
//! (whole chunks only), a reuse is aligned down to C, and the last prompt token is always
//! recomputed. Every hash hit is verified against the stored token ids of the page and the
//! identity of its parent, so a collision never reuses wrong KV.

mod chunks;
mod hash;
pub(crate) mod index;
mod matcher;
#[cfg(any(test, feature = "small-code"))]
mod xxh3;

pub use chunks::{PrefillChunks, plan_prefill, reuse_boundary};
pub use hash::{PageHasher, namespace, page_hash};
pub use matcher::common_prefix_len;

/// The result of [`KvCache::lookup`](crate::KvCache::lookup): how much of a prompt can be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PrefixHit {
    /// Tokens to reuse: verified, aligned down to the chunk size, below the prompt's length.
    pub tokens: u32,
    /// Pages holding them.
    pub pages: u16,
    /// Leading tokens matched by verified pages (up to the cap), before chunk alignment.
    pub matched: u32,
    /// Registration id of the last reused page (0 when nothing is reused).
    pub(crate) last: u64,
}

impl PrefixHit {
    /// No reuse.
    pub const NONE: PrefixHit = PrefixHit {
        tokens: 0,
        pages: 0,
        matched: 0,
        last: 0,
    };
}
