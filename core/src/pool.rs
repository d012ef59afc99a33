//! The page pool: reference counts, the cached (evictable) LRU list and an allocator. Which
//! pages are registered for reuse is the cache's business (its prefix index); the pool only
//! keeps a flag per page, and reports the pages it evicts.

use crate::alloc::{NO_PAGE, PageAllocator, PageId};
use crate::error::{ConfigError, Error, Result};

/// Page flag: the page is registered for reuse (kept as cached when unreferenced).
const REGISTERED: u8 = 1;

/// The state of one page. Every page is in exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PageState {
    /// In the allocator, holding nothing anyone can reuse.
    Free,
    /// Referenced by `n ≥ 1` page-table slots.
    Used(u16),
    /// Unreferenced but registered for reuse; evicted (least recently released first) when the
    /// allocator runs dry.
    Cached,
}

/// Reference counts and page states over an allocator `A`.
///
/// Allocation takes never-cached free pages first, then evicts the least recently used cached
/// page. Releasing the last reference frees a page, or caches it if it is registered.
pub struct PagePool<'a, A> {
    refcounts: &'a mut [u16],
    prev: &'a mut [u16],
    next: &'a mut [u16],
    flags: &'a mut [u8],
    /// Least recently cached page (evicted first).
    lru_head: PageId,
    /// Most recently cached page.
    lru_tail: PageId,
    cached: u16,
    /// Pages with the registered flag.
    registered: u16,
    evictions: u64,
    alloc: A,
}

impl<'a, A: PageAllocator<'a>> PagePool<'a, A> {
    /// Builds a pool of `num_pages` free pages over metadata sections (zeroed): `refcounts`,
    /// `links` (two `u16` per page), `flags` and the allocator's section. Pages registered for
    /// reuse are the cache's (a pool alone never caches). [`KvCache`](crate::KvCache) builds its
    /// own pool.
    ///
    /// # Errors
    ///
    /// [`ArenaTooSmall`](ConfigError::ArenaTooSmall) for a section shorter than `num_pages` need,
    /// and the allocator's [`PageAllocator::new`] errors.
    pub fn new(
        num_pages: u16,
        refcounts: &'a mut [u16],
        links: &'a mut [u16],
        flags: &'a mut [u8],
        alloc_meta: &'a mut [u8],
    ) -> Result<Self, ConfigError> {
        let n = num_pages as usize;
        let refcounts = refcounts.get_mut(..n).ok_or(ConfigError::ArenaTooSmall)?;
        let links = links.get_mut(..2 * n).ok_or(ConfigError::ArenaTooSmall)?;
        let flags = flags.get_mut(..n).ok_or(ConfigError::ArenaTooSmall)?;
        let alloc = A::new(alloc_meta, num_pages)?;
        refcounts.fill(0);
        links.fill(NO_PAGE);
        flags.fill(0);
        let (prev, next) = links.split_at_mut(n);
        Ok(PagePool {
            refcounts,
            prev,
            next,
            flags,
            lru_head: NO_PAGE,
            lru_tail: NO_PAGE,
            cached: 0,
            registered: 0,
            evictions: 0,
            alloc,
        })
    }

    /// Pages in the pool.
    pub fn num_pages(&self) -> usize {
        self.refcounts.len()
    }

    /// Pages in the allocator.
    pub fn free_pages(&self) -> usize {
        self.alloc.free_pages()
    }

    /// Cached (evictable) pages.
    pub fn cached_pages(&self) -> usize {
        self.cached as usize
    }

    /// Pages an allocation can obtain: free plus cached.
    #[inline]
    pub fn available(&self) -> usize {
        self.alloc.free_pages() + self.cached as usize
    }

    /// The state of `page`, or `None` if out of range.
    pub fn state(&self, page: PageId) -> Option<PageState> {
        let rc = *self.refcounts.get(page as usize)?;
        Some(if rc > 0 {
            PageState::Used(rc)
        } else if self.is_registered(page) {
            PageState::Cached
        } else {
            PageState::Free
        })
    }

    /// Whether `page` is registered for reuse.
    pub fn is_registered(&self, page: PageId) -> bool {
        self.flags
            .get(page as usize)
            .is_some_and(|f| f & REGISTERED != 0)
    }

    /// Whether `page` is used and not registered yet (see [`set_registered`](Self::set_registered)).
    pub(crate) fn registrable(&self, page: PageId) -> bool {
        matches!(self.state(page), Some(PageState::Used(_))) && !self.is_registered(page)
    }

    /// Flags a [`registrable`](Self::registrable) page as registered for reuse: its last release
    /// will cache it instead of freeing it. Other pages are left as they are.
    pub(crate) fn set_registered(&mut self, page: PageId) {
        if self.registrable(page) {
            self.flags[page as usize] |= REGISTERED;
            self.registered += 1;
        }
    }

    /// Cached pages evicted (reallocated) since the pool was built.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Pages registered for reuse (used or cached).
    pub fn registered_pages(&self) -> usize {
        self.registered as usize
    }

    /// Allocates one page with refcount 1: a free page, else the least recently cached one
    /// (which loses its registration).
    ///
    /// # Errors
    ///
    /// [`OutOfPages`](Error::OutOfPages).
    #[inline]
    pub fn alloc(&mut self) -> Result<PageId> {
        self.alloc_evicting(|_| {})
    }

    /// [`alloc`](Self::alloc), calling `evicted` with the cached page it takes, if it takes one
    /// (so that the cache drops the page from its prefix index).
    #[inline]
    pub(crate) fn alloc_evicting(&mut self, evicted: impl FnOnce(PageId)) -> Result<PageId> {
        let page = match self.alloc.alloc() {
            Some(p) => p,
            None => {
                let victim = self.lru_head;
                if victim == NO_PAGE {
                    return Err(Error::OutOfPages);
                }
                self.lru_unlink(victim);
                if let Some(f) = self.flags.get_mut(victim as usize) {
                    *f &= !REGISTERED;
                }
                self.registered = self.registered.saturating_sub(1);
                evicted(victim);
                self.evictions += 1;
                victim
            }
        };
        if let Some(rc) = self.refcounts.get_mut(page as usize) {
            *rc = 1;
        }
        Ok(page)
    }

    /// Allocates `n` consecutive free pages (cached pages are not evicted for runs), each with
    /// refcount 1, and returns the first.
    ///
    /// # Errors
    ///
    /// [`ContiguousUnsupported`](Error::ContiguousUnsupported) (the allocator gives single pages),
    /// [`OutOfPages`](Error::OutOfPages), [`NoContiguousRun`](Error::NoContiguousRun).
    pub fn alloc_run(&mut self, n: usize) -> Result<PageId> {
        if n > 1 && !A::CONTIGUOUS {
            return Err(Error::ContiguousUnsupported);
        }
        if n > self.alloc.free_pages() {
            return Err(Error::OutOfPages);
        }
        let start = self.alloc.alloc_run(n).ok_or(Error::NoContiguousRun)?;
        self.set_refcounts(start, n, 1);
        Ok(start)
    }

    /// Takes the free pages `[start, start + n)` with refcount 1, or changes nothing and returns
    /// `false`.
    pub fn extend_run(&mut self, start: PageId, n: usize) -> bool {
        if !self.alloc.extend_run(start, n) {
            return false;
        }
        self.set_refcounts(start, n, 1);
        true
    }

    fn set_refcounts(&mut self, start: PageId, n: usize, rc: u16) {
        let s = start as usize;
        if let Some(r) = self.refcounts.get_mut(s..s.saturating_add(n)) {
            r.fill(rc);
        }
    }

    /// Adds a reference to a used or cached page (a cached page is revived).
    ///
    /// # Errors
    ///
    /// [`InvalidPage`](Error::InvalidPage) for a free or out-of-range page;
    /// [`Error::Config`] ([`Overflow`](ConfigError::Overflow)) past `u16::MAX` references.
    pub fn retain(&mut self, page: PageId) -> Result<()> {
        match self.state(page) {
            Some(PageState::Used(rc)) => {
                self.refcounts[page as usize] = rc
                    .checked_add(1)
                    .ok_or(Error::Config(ConfigError::Overflow))?;
            }
            Some(PageState::Cached) => {
                self.lru_unlink(page);
                self.refcounts[page as usize] = 1;
            }
            _ => return Err(Error::InvalidPage),
        }
        Ok(())
    }

    /// Drops a reference; the last one frees the page, or caches it if registered.
    ///
    /// # Errors
    ///
    /// [`InvalidPage`](Error::InvalidPage) for a free or out-of-range page.
    // Out of line in `small-code` builds (four callers in the cache).
    #[cfg_attr(not(feature = "small-code"), inline)]
    #[cfg_attr(feature = "small-code", inline(never))]
    pub fn release(&mut self, page: PageId) -> Result<()> {
        let rc = self
            .refcounts
            .get_mut(page as usize)
            .ok_or(Error::InvalidPage)?;
        match *rc {
            0 => Err(Error::InvalidPage),
            1 => {
                *rc = 0;
                if self.is_registered(page) {
                    self.lru_push_tail(page);
                } else {
                    self.alloc.free(page);
                }
                Ok(())
            }
            n => {
                *rc = n - 1;
                Ok(())
            }
        }
    }

    /// Calls `f` for every page the allocator holds as free.
    pub fn for_each_free(&self, f: impl FnMut(PageId)) {
        self.alloc.for_each_free(f)
    }

    /// Calls `f` for every cached page, least recently cached first (bounded walk).
    pub fn for_each_cached(&self, mut f: impl FnMut(PageId)) {
        let mut page = self.lru_head;
        for _ in 0..self.next.len() {
            if page == NO_PAGE {
                return;
            }
            f(page);
            page = self.next.get(page as usize).copied().unwrap_or(NO_PAGE);
        }
    }

    fn lru_unlink(&mut self, page: PageId) {
        let p = page as usize;
        let (prev, next) = match (self.prev.get(p), self.next.get(p)) {
            (Some(&a), Some(&b)) => (a, b),
            _ => return,
        };
        match self.next.get_mut(prev as usize) {
            Some(n) => *n = next,
            None => self.lru_head = next,
        }
        match self.prev.get_mut(next as usize) {
            Some(pv) => *pv = prev,
            None => self.lru_tail = prev,
        }
        self.prev[p] = NO_PAGE;
        self.next[p] = NO_PAGE;
        self.cached = self.cached.saturating_sub(1);
    }

    fn lru_push_tail(&mut self, page: PageId) {
        let p = page as usize;
        if p >= self.next.len() {
            return;
        }
        self.prev[p] = self.lru_tail;
        self.next[p] = NO_PAGE;
        match self.next.get_mut(self.lru_tail as usize) {
            Some(n) => *n = page,
            None => self.lru_head = page,
        }
        self.lru_tail = page;
        self.cached = self.cached.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{Bitmap, FreeList};

    struct Mem {
        rc: [u16; 8],
        links: [u16; 16],
        flags: [u8; 8],
        alloc: [u64; 4],
    }

    fn mem() -> Mem {
        Mem {
            rc: [0; 8],
            links: [0; 16],
            flags: [0; 8],
            alloc: [0; 4],
        }
    }

    /// A pool of `n ≤ 8` pages.
    fn pool<'a, A: PageAllocator<'a>>(m: &'a mut Mem, n: u16) -> PagePool<'a, A> {
        PagePool::new(
            n,
            &mut m.rc,
            &mut m.links,
            &mut m.flags,
            bytemuck::cast_slice_mut(&mut m.alloc),
        )
        .unwrap()
    }

    #[test]
    fn states_follow_refcounts() {
        let mut m = mem();
        let mut p: PagePool<'_, FreeList<'_>> = pool(&mut m, 4);
        let a = p.alloc().unwrap();
        assert_eq!(p.state(a), Some(PageState::Used(1)));
        p.retain(a).unwrap();
        assert_eq!(p.state(a), Some(PageState::Used(2)));
        p.release(a).unwrap();
        p.release(a).unwrap();
        assert_eq!(p.state(a), Some(PageState::Free));
        assert_eq!(p.release(a), Err(Error::InvalidPage));
        assert_eq!(p.retain(a), Err(Error::InvalidPage));
        assert_eq!(p.state(9), None);
        assert_eq!(p.release(9), Err(Error::InvalidPage));
    }

    #[test]
    fn registered_pages_are_cached_then_evicted_lru_first() {
        let mut m = mem();
        let mut p: PagePool<'_, Bitmap<'_>> = pool(&mut m, 4);
        let pages: Vec<_> = (0..4).map(|_| p.alloc().unwrap()).collect();
        assert_eq!(p.alloc(), Err(Error::OutOfPages));
        for &pg in &pages[..3] {
            p.set_registered(pg);
        }
        assert!(!p.registrable(pages[0]) && p.registrable(pages[3]) && !p.registrable(7));
        assert_eq!(p.registered_pages(), 3);
        // Release order 2, 0, 1: LRU order is the same.
        for i in [2, 0, 1] {
            p.release(pages[i]).unwrap();
        }
        p.release(pages[3]).unwrap(); // unregistered: plainly free
        assert_eq!(p.state(pages[2]), Some(PageState::Cached));
        assert_eq!((p.free_pages(), p.cached_pages(), p.available()), (1, 3, 4));
        // Never-cached free page first.
        assert_eq!(p.alloc(), Ok(pages[3]));
        // A hit revives a cached page, taking it out of the LRU.
        p.retain(pages[0]).unwrap();
        assert_eq!(p.state(pages[0]), Some(PageState::Used(1)));
        // Then eviction in LRU order: 2 then 1; each evicted page loses its registration and is
        // reported.
        let mut evicted = Vec::new();
        assert_eq!(p.alloc_evicting(|v| evicted.push(v)), Ok(pages[2]));
        assert!(!p.is_registered(pages[2]));
        assert_eq!(p.alloc_evicting(|v| evicted.push(v)), Ok(pages[1]));
        assert_eq!(evicted, [pages[2], pages[1]]);
        assert_eq!(p.alloc(), Err(Error::OutOfPages));
        let mut cached = Vec::new();
        p.for_each_cached(|pg| cached.push(pg));
        assert!(cached.is_empty());
        assert_eq!(p.registered_pages(), 1, "only the revived page is left");
    }

    #[test]
    fn runs_need_a_contiguous_allocator() {
        let mut m = mem();
        let mut p: PagePool<'_, FreeList<'_>> = pool(&mut m, 4);
        assert_eq!(p.alloc_run(2), Err(Error::ContiguousUnsupported));
        let mut m2 = mem();
        let mut b: PagePool<'_, Bitmap<'_>> = pool(&mut m2, 8);
        assert_eq!(b.alloc_run(3), Ok(0));
        assert!(b.extend_run(3, 2));
        assert_eq!(b.state(4), Some(PageState::Used(1)));
        assert_eq!(b.alloc_run(4), Err(Error::OutOfPages));
        b.release(1).unwrap();
        assert_eq!(
            b.alloc_run(4),
            Err(Error::NoContiguousRun),
            "4 free pages, no run of 4"
        );
        assert_eq!(b.alloc_run(3), Ok(5));
    }
}
