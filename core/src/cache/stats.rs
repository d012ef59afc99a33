//! Pool and cache statistics.

use super::KvCache;
use crate::alloc::PageAllocator;

/// A snapshot of the cache's occupancy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Stats {
    /// Pages in the pool.
    pub pages_total: u16,
    /// Pages in the allocator.
    pub pages_free: u16,
    /// Pages referenced by at least one sequence.
    pub pages_used: u16,
    /// Unreferenced pages kept for prefix reuse (evictable).
    pub pages_cached: u16,
    /// Pages published in the prefix index (used or cached).
    pub pages_registered: u16,
    /// Cached pages evicted since the cache was created.
    pub evictions: u64,
    /// Live sequences.
    pub sequences: u16,
    /// Reserved positions summed over live sequences.
    pub tokens: u64,
    /// Data-arena bytes of one page id (all layers, K and V, values and scales, with padding).
    pub page_bytes: usize,
    /// Data-arena bytes held by used pages.
    pub bytes_used: usize,
    /// Data-arena bytes per token position of a full page (`page_bytes / page_tokens`).
    pub bytes_per_token: usize,
}

impl<'a, A: PageAllocator<'a>> KvCache<'a, A> {
    /// Occupancy statistics (O(max_seqs)).
    pub fn stats(&self) -> Stats {
        let total = self.plan.num_pages;
        let free = self.pool.free_pages() as u16;
        let cached = self.pool.cached_pages() as u16;
        let used = total - free - cached;
        let page_bytes = self.plan.geometry.page_bytes;
        Stats {
            pages_total: total,
            pages_free: free,
            pages_used: used,
            pages_cached: cached,
            pages_registered: self.pool.registered_pages() as u16,
            evictions: self.pool.evictions(),
            sequences: self.seqs.live(),
            tokens: self
                .seqs
                .records()
                .iter()
                .filter(|r| r.live())
                .map(|r| r.len as u64)
                .sum(),
            page_bytes,
            bytes_used: used as usize * page_bytes,
            bytes_per_token: page_bytes / self.config.page_tokens as usize,
        }
    }
}
