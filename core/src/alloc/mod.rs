//! Page allocators: the pluggable trait and its two implementations.
//!
//! An allocator only tracks which pages are *free* (never used, or released and unregistered).
//! Reference counts and the cached (evictable) state live in the [`PagePool`](crate::PagePool)
//! above it, so every allocator gets the same sharing and eviction semantics.

mod bitmap;
mod free_list;

pub use bitmap::Bitmap;
pub use free_list::FreeList;

use crate::error::ConfigError;

/// A page id: an index into every pool of the data arena (same id for all layers, K and V).
pub type PageId = u16;

/// The "no page" sentinel (`u16::MAX`), never a valid id.
pub const NO_PAGE: PageId = PageId::MAX;

/// A page allocator keeping its state in a section of the metadata arena.
///
/// Implementations may assume the pool calls [`free`](Self::free) and [`free_run`](Self::free_run)
/// only for allocated pages and [`extend_run`](Self::extend_run) only right after a run it owns;
/// they must still never panic or touch memory out of bounds if that contract is broken.
pub trait PageAllocator<'a>: Sized {
    /// Metadata bits per page (the planner reserves `ceil(pages * bits / 32)` `u32` words).
    const META_BITS_PER_PAGE: usize;
    /// Whether [`alloc_run`](Self::alloc_run) can hand out runs longer than one page.
    const CONTIGUOUS: bool;

    /// Builds the allocator over its metadata section (zeroed, aligned to 8) with all
    /// `num_pages` pages free.
    ///
    /// # Errors
    ///
    /// [`ArenaTooSmall`](ConfigError::ArenaTooSmall) when `meta` is shorter than
    /// [`META_BITS_PER_PAGE`](Self::META_BITS_PER_PAGE) bits per page need,
    /// [`MisalignedArena`](ConfigError::MisalignedArena) when it is misaligned for its words.
    fn new(meta: &'a mut [u8], num_pages: u16) -> Result<Self, ConfigError>;
    /// Pages currently free.
    fn free_pages(&self) -> usize;
    /// Takes one free page.
    fn alloc(&mut self) -> Option<PageId>;
    /// Returns one page.
    fn free(&mut self, page: PageId);
    /// Takes `n ≥ 1` consecutive free pages and returns the first.
    fn alloc_run(&mut self, n: usize) -> Option<PageId>;
    /// Takes the pages `[start, start + n)` if they are all free; `false` changes nothing.
    fn extend_run(&mut self, start: PageId, n: usize) -> bool;
    /// Returns the pages `[start, start + n)`.
    fn free_run(&mut self, start: PageId, n: usize) {
        for i in 0..n {
            self.free(start.wrapping_add(i as u16));
        }
    }
    /// Calls `f` once for every free page (for invariant checks; may be O(pages)).
    fn for_each_free(&self, f: impl FnMut(PageId));
}
