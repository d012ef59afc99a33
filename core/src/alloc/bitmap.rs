//! Bitmap first-fit allocator: one bit per page, hands out contiguous runs.

use super::{PageAllocator, PageId};
use crate::error::ConfigError;

/// First-fit bitmap allocator: one bit per page (set = free), lowest free page first, and
/// contiguous runs of `n` pages for devices that need one linear tensor. Single-page alloc is
/// O(words) in the worst case and O(1) amortized with its lowest-free-word hint.
pub struct Bitmap<'a> {
    words: &'a mut [u32],
    pages: usize,
    free: usize,
    /// No word below this index has a free bit.
    hint: usize,
}

impl<'a> Bitmap<'a> {
    #[inline]
    fn bit(&self, page: usize) -> bool {
        self.words
            .get(page / 32)
            .is_some_and(|w| w >> (page % 32) & 1 == 1)
    }

    /// First page ≥ `from` whose bit equals `free`, or `self.pages`.
    fn next_with(&self, from: usize, free: bool) -> usize {
        let mut i = from / 32;
        let mut mask = !0u32 << (from % 32);
        while let Some(&w) = self.words.get(i) {
            let w = if free { w } else { !w };
            let hits = w & mask;
            if hits != 0 {
                return (i * 32 + hits.trailing_zeros() as usize).min(self.pages);
            }
            i += 1;
            mask = !0;
        }
        self.pages
    }

    fn set_range(&mut self, start: usize, n: usize, free: bool) {
        for page in start..start + n {
            if let Some(w) = self.words.get_mut(page / 32) {
                let m = 1u32 << (page % 32);
                if free { *w |= m } else { *w &= !m }
            }
        }
    }

    fn range_free(&self, start: usize, n: usize) -> bool {
        match start.checked_add(n) {
            Some(end) if end <= self.pages => self.next_with(start, false) >= end,
            _ => false,
        }
    }
}

impl<'a> PageAllocator<'a> for Bitmap<'a> {
    const META_BITS_PER_PAGE: usize = 1;
    const CONTIGUOUS: bool = true;

    fn new(meta: &'a mut [u8], num_pages: u16) -> Result<Self, ConfigError> {
        let pages = num_pages as usize;
        let words: &mut [u32] =
            bytemuck::try_cast_slice_mut(meta).map_err(|_| ConfigError::MisalignedArena)?;
        let words = words
            .get_mut(..pages.div_ceil(32))
            .ok_or(ConfigError::ArenaTooSmall)?;
        let mut bm = Bitmap {
            words,
            pages,
            free: pages,
            hint: 0,
        };
        bm.words.fill(0);
        bm.set_range(0, pages, true);
        Ok(bm)
    }

    #[inline]
    fn free_pages(&self) -> usize {
        self.free
    }

    #[inline]
    fn alloc(&mut self) -> Option<PageId> {
        while let Some(w) = self.words.get_mut(self.hint) {
            if *w != 0 {
                let bit = w.trailing_zeros();
                *w &= !(1 << bit);
                self.free -= 1;
                return Some((self.hint * 32 + bit as usize) as PageId);
            }
            self.hint += 1;
        }
        None
    }

    #[inline]
    fn free(&mut self, page: PageId) {
        let p = page as usize;
        if p < self.pages && !self.bit(p) {
            self.set_range(p, 1, true);
            self.free += 1;
            self.hint = self.hint.min(p / 32);
        }
    }

    fn alloc_run(&mut self, n: usize) -> Option<PageId> {
        if n == 0 || n > self.free {
            return None;
        }
        let mut start = self.next_with(self.hint * 32, true);
        while start + n <= self.pages {
            let end = self.next_with(start, false);
            if end - start >= n {
                self.set_range(start, n, false);
                self.free -= n;
                return Some(start as PageId);
            }
            start = self.next_with(end, true);
        }
        None
    }

    fn extend_run(&mut self, start: PageId, n: usize) -> bool {
        if !self.range_free(start as usize, n) {
            return false;
        }
        self.set_range(start as usize, n, false);
        self.free -= n;
        true
    }

    fn free_run(&mut self, start: PageId, n: usize) {
        for page in start as usize..(start as usize).saturating_add(n).min(self.pages) {
            self.free(page as PageId);
        }
    }

    fn for_each_free(&self, mut f: impl FnMut(PageId)) {
        let mut p = self.next_with(0, true);
        while p < self.pages {
            f(p as PageId);
            p = self.next_with(p + 1, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_bitmap(n: u16, test: impl FnOnce(&mut Bitmap<'_>)) {
        let mut mem = [0u64; 8];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut mem);
        let mut bm = Bitmap::new(bytes, n).unwrap();
        test(&mut bm);
    }

    fn free_set(bm: &Bitmap<'_>) -> Vec<PageId> {
        let mut v = Vec::new();
        bm.for_each_free(|p| v.push(p));
        v
    }

    #[test]
    fn first_fit_single_pages() {
        with_bitmap(70, |bm| {
            for want in 0..70 {
                assert_eq!(bm.alloc(), Some(want));
            }
            assert_eq!(bm.alloc(), None);
            bm.free(40);
            bm.free(3);
            assert_eq!(bm.free_pages(), 2);
            assert_eq!(bm.alloc(), Some(3), "lowest free page first");
            assert_eq!(bm.alloc(), Some(40));
            bm.free(40);
            bm.free(40); // double free is ignored
            assert_eq!(bm.free_pages(), 1);
        });
    }

    #[test]
    fn contiguous_runs_skip_holes() {
        with_bitmap(100, |bm| {
            assert_eq!(bm.alloc_run(30), Some(0));
            assert_eq!(bm.alloc_run(40), Some(30));
            bm.free_run(10, 5); // hole of 5 at 10..15
            assert_eq!(
                bm.alloc_run(6),
                Some(70),
                "hole too small, first fit after it"
            );
            assert_eq!(bm.alloc_run(5), Some(10));
            assert_eq!(bm.alloc_run(25), None, "only 24 left");
            assert_eq!(bm.alloc_run(24), Some(76));
            assert_eq!(bm.free_pages(), 0);
            assert_eq!(bm.alloc_run(0), None);
        });
    }

    #[test]
    fn extend_in_place() {
        with_bitmap(64, |bm| {
            assert_eq!(bm.alloc_run(4), Some(0));
            assert!(bm.extend_run(4, 4));
            assert_eq!(bm.alloc(), Some(8));
            assert!(!bm.extend_run(8, 2), "page 8 is taken");
            assert!(!bm.extend_run(60, 5), "past the end");
            assert!(!bm.extend_run(u16::MAX, 5));
            assert!(bm.extend_run(9, 55));
            assert_eq!(bm.free_pages(), 0);
            assert!(free_set(bm).is_empty());
        });
    }

    #[test]
    fn words_past_the_end_are_never_free() {
        with_bitmap(33, |bm| {
            assert_eq!(bm.alloc_run(33), Some(0));
            assert_eq!(bm.alloc(), None);
            bm.free(33);
            bm.free(63);
            assert_eq!(bm.free_pages(), 0);
        });
    }

    #[test]
    fn bad_metadata() {
        let mut mem = [0u64; 1];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut mem);
        assert_eq!(
            Bitmap::new(bytes, 65).err(),
            Some(ConfigError::ArenaTooSmall)
        );
        assert_eq!(
            Bitmap::new(&mut bytes[1..5], 1).err(),
            Some(ConfigError::MisalignedArena)
        );
    }
}
