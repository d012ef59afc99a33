//! A full consistency check of the pool, page tables and allocator.

use super::KvCache;
use crate::alloc::{NO_PAGE, PageAllocator};
use crate::pool::PageState;

/// Which invariant [`KvCache::check_invariants`] found broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct InvariantViolation(pub &'static str);

impl core::fmt::Display for InvariantViolation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.0)
    }
}

const IN_ALLOCATOR: u16 = 1;
const IN_LRU: u16 = 256;

impl<'a, A: PageAllocator<'a>> KvCache<'a, A> {
    /// Checks every invariant of the cache in O(pages + table entries), with `scratch` of at
    /// least `num_pages` entries (no heap): page tables hold valid pages covering exactly their
    /// sequence (contiguous ones hold one run); every refcount equals the number of page-table
    /// references; every page is in exactly one state — used pages in no free structure, cached
    /// pages in the LRU list exactly once, free pages in the allocator exactly once; the counts
    /// agree; registered pages are exactly those in the prefix index, each reachable from its
    /// hash's home bucket. For tests, fuzzing and after recovery from a suspected memory fault.
    ///
    /// # Errors
    ///
    /// The first [`InvariantViolation`] found.
    pub fn check_invariants(&self, scratch: &mut [u16]) -> Result<(), InvariantViolation> {
        let bad = |m| Err(InvariantViolation(m));
        let n = self.plan.num_pages as usize;
        let Some(count) = scratch.get_mut(..n) else {
            return bad("scratch shorter than num_pages");
        };
        count.fill(0);
        let p = self.config.page_tokens as usize;
        let mut live = 0;
        for (slot, r) in self.seqs.records().iter().enumerate() {
            if !r.live() {
                if r.held != 0 || r.len != 0 {
                    return bad("free slot holds pages or positions");
                }
                continue;
            }
            live += 1;
            let held = r.held as usize;
            let used = (r.len as usize).div_ceil(p);
            if held > self.plan.table_len || r.len > self.config.max_seq_tokens {
                return bad("sequence exceeds its table");
            }
            let covers = if r.contiguous() {
                held >= used
            } else {
                held == used
            };
            if !covers {
                return bad("page table does not cover the sequence length");
            }
            let table = self.seqs.table(slot);
            for (i, &page) in table.iter().enumerate() {
                if page == NO_PAGE && !r.contiguous() {
                    continue; // released by `slide`
                }
                let Some(c) = count.get_mut(page as usize) else {
                    return bad("page table entry out of range");
                };
                *c += 1;
                if r.contiguous() && page as usize != table[0] as usize + i {
                    return bad("contiguous sequence is not one run");
                }
            }
        }
        if live != self.seqs.live() {
            return bad("live sequence count is wrong");
        }
        for (page, &refs) in count.iter().enumerate() {
            let rc = match self.pool.state(page as u16) {
                Some(PageState::Used(rc)) => rc,
                _ => 0,
            };
            if rc != refs {
                return bad("refcount differs from page-table references");
            }
        }
        // Membership of free structures: allocator +1, LRU +256, used pages none.
        count.fill(0);
        let mut free_walk = 0usize;
        let mut out_of_range = false;
        self.pool
            .for_each_free(|pg| match count.get_mut(pg as usize) {
                Some(c) => {
                    *c = c.saturating_add(IN_ALLOCATOR);
                    free_walk += 1;
                }
                None => out_of_range = true,
            });
        let mut lru_walk = 0usize;
        self.pool
            .for_each_cached(|pg| match count.get_mut(pg as usize) {
                Some(c) => {
                    *c = c.saturating_add(IN_LRU);
                    lru_walk += 1;
                }
                None => out_of_range = true,
            });
        if out_of_range {
            return bad("free structure holds an out-of-range page");
        }
        if free_walk != self.pool.free_pages() || lru_walk != self.pool.cached_pages() {
            return bad("free or cached count differs from its structure");
        }
        for (page, &membership) in count.iter().enumerate() {
            let want = match self.pool.state(page as u16) {
                Some(PageState::Used(_)) => 0,
                Some(PageState::Free) => IN_ALLOCATOR,
                Some(PageState::Cached) => IN_LRU,
                None => return bad("page out of range"),
            };
            if membership != want {
                return bad("page is not in exactly one state");
            }
        }
        let index = &self.index;
        if index.enabled() {
            for page in 0..n as u16 {
                if self.pool.is_registered(page) != (index.reg(page) != 0) {
                    return bad("registered flag differs from the prefix index");
                }
            }
            if self.pool.registered_pages() != index.entries() {
                return bad("registered page count differs from the prefix index");
            }
            index.check().map_err(InvariantViolation)?;
        } else if self.pool.cached_pages() != 0 {
            return bad("cached pages without a prefix index");
        }
        Ok(())
    }
}
