//! The prefix index: which registered page holds which chained hash, with the token ids and chain
//! links that verify every hit.
//!
//! Per page: its chained hash, its registration id (unique, never reused; 0 = unregistered), its
//! parent's registration id (for a first page: a tag of the namespace, top bit set) and its token
//! ids. A hit on page `i` must match
//! the hash, the tokens, and the parent's registration id of the page matched at `i − 1`, so by
//! induction a hit's whole prefix is verified token for token: a hash collision, or a parent that
//! was evicted and whose page id was registered again, can never match.
//!
//! The hash table is open addressing with linear probing over `u16` page ids (a power of two
//! ≥ 2 × pages buckets, so it is at most half full) and backward-shift deletion (no tombstones).
//! Equal hashes may coexist (forced collisions, duplicate pages); lookups check every candidate.

use crate::alloc::{NO_PAGE, PageId};

/// Hashes, links, tokens and buckets of the prefix index, in the metadata arena.
pub(crate) struct PrefixIndex<'a> {
    page_tokens: usize,
    hashes: &'a mut [u64],
    regs: &'a mut [u64],
    parents: &'a mut [u64],
    tokens: &'a mut [u32],
    buckets: &'a mut [u16],
    next_reg: u64,
    entries: usize,
}

/// What a page was registered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The chained hash.
    pub hash: u64,
    /// Its parent's registration id (for a first page, the namespace's tag).
    pub parent: u64,
}

impl<'a> PrefixIndex<'a> {
    /// An index that holds nothing (the cache was configured without one).
    pub fn disabled() -> Self {
        PrefixIndex {
            page_tokens: 0,
            hashes: &mut [],
            regs: &mut [],
            parents: &mut [],
            tokens: &mut [],
            buckets: &mut [],
            next_reg: 1,
            entries: 0,
        }
    }

    /// An empty index over zeroed sections sized for `pages` pages (`buckets.len()` a power of
    /// two > pages).
    pub fn new(
        page_tokens: usize,
        hashes: &'a mut [u64],
        regs: &'a mut [u64],
        parents: &'a mut [u64],
        tokens: &'a mut [u32],
        buckets: &'a mut [u16],
    ) -> Self {
        buckets.fill(NO_PAGE);
        regs.fill(0);
        PrefixIndex {
            page_tokens,
            hashes,
            regs,
            parents,
            tokens,
            buckets,
            next_reg: 1,
            entries: 0,
        }
    }

    /// Whether the cache keeps an index.
    #[inline]
    pub fn enabled(&self) -> bool {
        !self.buckets.is_empty()
    }

    /// Registered pages.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// The registration id of `page` (0 when unregistered or out of range).
    #[inline]
    pub fn reg(&self, page: PageId) -> u64 {
        self.regs.get(page as usize).copied().unwrap_or(0)
    }

    /// What `page` was registered with, if it is registered.
    pub fn entry(&self, page: PageId) -> Option<Entry> {
        let p = page as usize;
        match (self.reg(page), self.hashes.get(p), self.parents.get(p)) {
            (1.., Some(&hash), Some(&parent)) => Some(Entry { hash, parent }),
            _ => None,
        }
    }

    /// The token ids `page` was registered with (meaningful only when registered).
    pub fn tokens(&self, page: PageId) -> &[u32] {
        let p = page as usize * self.page_tokens;
        self.tokens.get(p..p + self.page_tokens).unwrap_or(&[])
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        hash as usize & (self.buckets.len() - 1)
    }

    /// The registered page with this hash, parent and tokens, if any (bounded probe).
    pub fn find(&self, hash: u64, parent: u64, tokens: &[u32]) -> Option<PageId> {
        if !self.enabled() {
            return None;
        }
        let mask = self.buckets.len() - 1;
        let mut i = self.home(hash);
        for _ in 0..self.buckets.len() {
            // Buckets are masked in range and hold pages in range: `get` only spares the panics.
            let page = *self.buckets.get(i)?;
            if page == NO_PAGE {
                return None;
            }
            let p = page as usize;
            if self.hashes.get(p) == Some(&hash)
                && self.parents.get(p) == Some(&parent)
                && self.tokens(page) == tokens
            {
                return Some(page);
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Registers an unregistered `page` (tokens of exactly one page) and returns its registration
    /// id. The caller checked that the index is enabled and the page in range and unregistered.
    pub fn insert(&mut self, page: PageId, hash: u64, parent: u64, tokens: &[u32]) -> u64 {
        let p = page as usize;
        let reg = self.next_reg;
        self.next_reg += 1;
        self.hashes[p] = hash;
        self.regs[p] = reg;
        self.parents[p] = parent;
        let t = p * self.page_tokens;
        self.tokens[t..t + self.page_tokens].copy_from_slice(tokens);
        let mask = self.buckets.len() - 1;
        let mut i = self.home(hash);
        // At most half full: an empty bucket exists.
        while self.buckets[i] != NO_PAGE {
            i = (i + 1) & mask;
        }
        self.buckets[i] = page;
        self.entries += 1;
        reg
    }

    /// Unregisters `page` (no-op if it is not registered).
    pub fn remove(&mut self, page: PageId) {
        let p = page as usize;
        // Registered pages, buckets (masked) and the pages they hold are in range: `get` only
        // spares the panics.
        let (1.., Some(&hash)) = (self.reg(page), self.hashes.get(p)) else {
            return;
        };
        let mask = self.buckets.len() - 1;
        let mut i = self.home(hash);
        let mut found = false;
        for _ in 0..self.buckets.len() {
            if self.buckets.get(i) == Some(&page) {
                found = true;
                break;
            }
            i = (i + 1) & mask;
        }
        if let Some(r) = self.regs.get_mut(p) {
            *r = 0;
        }
        if !found {
            return;
        }
        // Backward-shift deletion: pull later entries of the probe run into the hole when their
        // home lies at or before it (cyclically).
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let q = self.buckets.get(j).copied().unwrap_or(NO_PAGE);
            if q == NO_PAGE {
                break;
            }
            let Some(&h) = self.hashes.get(q as usize) else {
                break;
            };
            let home = self.home(h);
            // Distance from home to j versus from home to the hole.
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                if let Some(b) = self.buckets.get_mut(hole) {
                    *b = q;
                }
                hole = j;
            }
        }
        if let Some(b) = self.buckets.get_mut(hole) {
            *b = NO_PAGE;
        }
        self.entries -= 1;
    }

    /// Checks the table against the registration ids: every registered page sits in exactly one
    /// bucket reachable from its home, and nothing else does.
    pub fn check(&self) -> Result<(), &'static str> {
        if !self.enabled() {
            return Ok(());
        }
        let mask = self.buckets.len() - 1;
        let mut occupied = 0;
        for (i, &page) in self.buckets.iter().enumerate() {
            if page == NO_PAGE {
                continue;
            }
            occupied += 1;
            if self.reg(page) == 0 {
                return Err("prefix index holds an unregistered page");
            }
            // Every bucket from the page's home to i is occupied (linear probing invariant).
            let mut k = self.home(self.hashes[page as usize]);
            while k != i {
                if self.buckets[k] == NO_PAGE {
                    return Err("prefix index entry unreachable from its home");
                }
                k = (k + 1) & mask;
            }
        }
        let registered = self.regs.iter().filter(|&&r| r != 0).count();
        if occupied != registered || occupied != self.entries {
            return Err("prefix index count differs from registered pages");
        }
        for (page, _) in self.regs.iter().enumerate().filter(|(_, r)| **r != 0) {
            let page = page as PageId;
            let e = self.entry(page);
            let hit = e.and_then(|e| self.find_page(e.hash, page));
            if hit.is_none() {
                return Err("registered page missing from the prefix index");
            }
        }
        Ok(())
    }

    /// Whether `page` sits in the probe run of `hash`.
    fn find_page(&self, hash: u64, page: PageId) -> Option<()> {
        let mask = self.buckets.len() - 1;
        let mut i = self.home(hash);
        for _ in 0..self.buckets.len() {
            match self.buckets[i] {
                NO_PAGE => return None,
                q if q == page => return Some(()),
                _ => i = (i + 1) & mask,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    const PAGES: usize = 8;
    const P: usize = 2;

    struct Mem {
        hashes: [u64; PAGES],
        regs: [u64; PAGES],
        parents: [u64; PAGES],
        tokens: [u32; PAGES * P],
        buckets: [u16; 2 * PAGES],
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: if cfg!(miri) { 4 } else { 3000 },
            failure_persistence: None,
            ..ProptestConfig::default()
        })]
        /// Random inserts and removals with few distinct hashes (long probe runs, collisions,
        /// wrap-around at the table's end) against a list model.
        #[test]
        fn index_matches_a_model(ops in proptest::collection::vec((0u16..PAGES as u16, 12u64..20, any::<bool>()), 1..60)) {
            let mut m = Mem {
                hashes: [0; PAGES],
                regs: [0; PAGES],
                parents: [0; PAGES],
                tokens: [0; PAGES * P],
                buckets: [0; 2 * PAGES],
            };
            let mut ix = PrefixIndex::new(P, &mut m.hashes, &mut m.regs, &mut m.parents, &mut m.tokens, &mut m.buckets);
            let mut model: Vec<(PageId, u64, u64)> = Vec::new();
            for (page, hash, insert) in ops {
                let tokens = [page as u32, 7];
                let present = model.iter().any(|e| e.0 == page);
                if insert && !present {
                    let parent = hash % 3;
                    let reg = ix.insert(page, hash, parent, &tokens);
                    prop_assert_eq!(ix.reg(page), reg);
                    model.push((page, hash, parent));
                } else if !insert {
                    ix.remove(page);
                    model.retain(|e| e.0 != page);
                    prop_assert_eq!(ix.reg(page), 0);
                }
                prop_assert_eq!(ix.check(), Ok(()));
                prop_assert_eq!(ix.entries(), model.len());
                for p in 0..PAGES as u16 {
                    let tokens = [p as u32, 7];
                    match model.iter().find(|e| e.0 == p) {
                        Some(&(_, h, parent)) => {
                            prop_assert_eq!(ix.find(h, parent, &tokens), Some(p));
                            prop_assert_eq!(ix.find(h, parent + 1, &tokens), None);
                            prop_assert_eq!(ix.tokens(p), &tokens[..]);
                        }
                        None => {
                            for h in 12..20 {
                                prop_assert_eq!(ix.find(h, h % 3, &tokens), None);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn disabled_index_finds_nothing() {
        let mut ix = PrefixIndex::disabled();
        assert!(!ix.enabled());
        assert_eq!(ix.find(1, 0, &[]), None);
        assert_eq!(ix.entry(0), None);
        assert_eq!(ix.tokens(3), &[] as &[u32]);
        ix.remove(0);
        assert_eq!(ix.check(), Ok(()));
    }
}
