//! LIFO free list: O(1) alloc and free through an intrusive `u16` link per page.

use super::{NO_PAGE, PageAllocator, PageId};
use crate::error::ConfigError;

/// LIFO free-list allocator: O(1) alloc and free, the most recently freed page is reused first
/// (warm in cache). Hands out single pages only (runs of one).
pub struct FreeList<'a> {
    next: &'a mut [u16],
    head: PageId,
    free: u16,
}

impl<'a> PageAllocator<'a> for FreeList<'a> {
    const META_BITS_PER_PAGE: usize = 16;
    const CONTIGUOUS: bool = false;

    fn new(meta: &'a mut [u8], num_pages: u16) -> Result<Self, ConfigError> {
        let n = num_pages as usize;
        let words: &mut [u16] =
            bytemuck::try_cast_slice_mut(meta).map_err(|_| ConfigError::MisalignedArena)?;
        let next = words.get_mut(..n).ok_or(ConfigError::ArenaTooSmall)?;
        // Pages come out in ascending order at first: 0, 1, 2, …
        for (i, link) in next.iter_mut().enumerate() {
            *link = if i + 1 < n { (i + 1) as u16 } else { NO_PAGE };
        }
        Ok(FreeList {
            next,
            head: if n > 0 { 0 } else { NO_PAGE },
            free: num_pages,
        })
    }

    #[inline]
    fn free_pages(&self) -> usize {
        self.free as usize
    }

    #[inline]
    fn alloc(&mut self) -> Option<PageId> {
        let page = self.head;
        let next = *self.next.get(page as usize)?;
        self.head = next;
        self.free = self.free.saturating_sub(1);
        Some(page)
    }

    #[inline]
    fn free(&mut self, page: PageId) {
        if let Some(link) = self.next.get_mut(page as usize) {
            *link = self.head;
            self.head = page;
            self.free = self.free.saturating_add(1);
        }
    }

    fn alloc_run(&mut self, n: usize) -> Option<PageId> {
        if n == 1 { self.alloc() } else { None }
    }

    fn extend_run(&mut self, _start: PageId, n: usize) -> bool {
        n == 0
    }

    fn for_each_free(&self, mut f: impl FnMut(PageId)) {
        let mut page = self.head;
        // Bounded walk: a corrupted cycle cannot hang the check.
        for _ in 0..=self.next.len() {
            match self.next.get(page as usize) {
                Some(&next) => {
                    f(page);
                    page = next;
                }
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_list(n: u16, test: impl FnOnce(&mut FreeList<'_>)) {
        let mut mem = [0u64; 16];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut mem);
        let mut fl = FreeList::new(bytes, n).unwrap();
        test(&mut fl);
    }

    #[test]
    fn lifo_order() {
        with_list(4, |fl| {
            assert_eq!(fl.free_pages(), 4);
            assert_eq!((fl.alloc(), fl.alloc()), (Some(0), Some(1)));
            fl.free(0);
            assert_eq!(fl.alloc(), Some(0), "last freed is reused first");
            assert_eq!(
                (fl.alloc(), fl.alloc(), fl.alloc()),
                (Some(2), Some(3), None)
            );
            assert_eq!(fl.free_pages(), 0);
            fl.free(3);
            fl.free(1);
            let mut seen = [false; 4];
            fl.for_each_free(|p| seen[p as usize] = true);
            assert_eq!(seen, [false, true, false, true]);
        });
    }

    #[test]
    fn runs_of_one_only() {
        with_list(4, |fl| {
            assert_eq!(fl.alloc_run(2), None);
            assert_eq!(fl.alloc_run(1), Some(0));
            assert!(!fl.extend_run(1, 1));
        });
    }

    #[test]
    fn bad_metadata() {
        let mut mem = [0u64; 1];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut mem);
        assert_eq!(
            FreeList::new(bytes, 5).err(),
            Some(ConfigError::ArenaTooSmall)
        );
        assert_eq!(
            FreeList::new(&mut bytes[1..7], 1).err(),
            Some(ConfigError::MisalignedArena)
        );
        // Out-of-range free is ignored rather than corrupting memory.
        let mut fl = FreeList::new(bytes, 4).unwrap();
        fl.free(9);
        assert_eq!(fl.free_pages(), 4);
    }
}
