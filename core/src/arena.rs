//! Caller-supplied memory: arenas as `&mut [MaybeUninit<u8>]`, an aligned static buffer type, and
//! (feature `alloc`) a heap-backed arena.
//!
//! This is one of the two modules allowed to use `unsafe`: turning uninitialized bytes into
//! initialized ones after zeroing them, and the heap arena's allocation.
#![allow(unsafe_code)]

use core::mem::MaybeUninit;

/// Zeroes `buf` and returns it as initialized bytes.
pub(crate) fn zeroed(buf: &mut [MaybeUninit<u8>]) -> &mut [u8] {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes (a live `&mut` slice), and zero is a
    // valid `u8`. One memset instead of a byte loop: arenas are megabytes.
    unsafe { core::ptr::write_bytes(buf.as_mut_ptr(), 0, buf.len()) };
    // SAFETY: every element was just initialized; `MaybeUninit<u8>` has the layout of `u8`, and
    // the returned slice borrows `buf` mutably for the same lifetime, so no alias exists.
    unsafe { &mut *(buf as *mut [MaybeUninit<u8>] as *mut [u8]) }
}

/// A statically sized, 64-byte-aligned, uninitialized byte buffer for an arena.
///
/// Works in a `static` (through `StaticCell`, a `static mut` taken once, or a linker section such
/// as `#[unsafe(link_section = ".axisram")]`) and on the stack:
///
/// ```
/// use edgekv::ArenaBuf;
/// let mut data = ArenaBuf::<4096>::new();
/// assert_eq!(data.as_uninit_mut().as_ptr() as usize % 64, 0);
/// ```
#[repr(C, align(64))]
pub struct ArenaBuf<const N: usize>([MaybeUninit<u8>; N]);

impl<const N: usize> ArenaBuf<N> {
    /// An uninitialized buffer (costs nothing; `const` so it can initialize a `static`).
    pub const fn new() -> Self {
        ArenaBuf([MaybeUninit::uninit(); N])
    }

    /// The buffer as the arena slice cache constructors take.
    pub fn as_uninit_mut(&mut self) -> &mut [MaybeUninit<u8>] {
        &mut self.0
    }

    /// The arena slice of a buffer that was never initialized, without building the buffer on the
    /// stack first — for `StaticCell::uninit()` and other `&mut MaybeUninit` storage of megabyte
    /// arenas on boards with small stacks.
    pub fn from_uninit(cell: &mut MaybeUninit<Self>) -> &mut [MaybeUninit<u8>] {
        // SAFETY: `ArenaBuf<N>` is `repr(C)` around `[MaybeUninit<u8>; N]`, for which every bit
        // pattern, including uninitialized bytes, is a valid value; so the cell is initialized.
        let buf = unsafe { cell.assume_init_mut() };
        &mut buf.0
    }
}

impl<const N: usize> Default for ArenaBuf<N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "alloc")]
pub use heap::{HeapArena, HeapArenas};

#[cfg(feature = "alloc")]
mod heap {
    extern crate alloc;
    use crate::error::{ConfigError, Result};
    use alloc::alloc::{Layout, alloc, dealloc};
    use core::mem::MaybeUninit;
    use core::ptr::NonNull;

    /// A heap-allocated arena with a chosen alignment (feature `alloc`).
    ///
    /// ```
    /// let mut arena = edgekv::HeapArena::new(1 << 16, 64).unwrap();
    /// assert_eq!(arena.as_uninit_mut().len(), 1 << 16);
    /// ```
    pub struct HeapArena {
        ptr: NonNull<MaybeUninit<u8>>,
        layout: Layout,
    }

    impl HeapArena {
        /// Allocates `len` bytes aligned to `align` (a power of two).
        ///
        /// # Errors
        ///
        /// [`ZeroSize`](ConfigError::ZeroSize) for zero length,
        /// [`InvalidAlignment`](ConfigError::InvalidAlignment) for a bad alignment,
        /// [`ArenaTooSmall`](ConfigError::ArenaTooSmall) when the allocation fails.
        pub fn new(len: usize, align: usize) -> Result<Self, ConfigError> {
            if len == 0 {
                return Err(ConfigError::ZeroSize);
            }
            let layout =
                Layout::from_size_align(len, align).map_err(|_| ConfigError::InvalidAlignment)?;
            // SAFETY: `layout` has a non-zero size.
            let raw = unsafe { alloc(layout) };
            let ptr =
                NonNull::new(raw.cast::<MaybeUninit<u8>>()).ok_or(ConfigError::ArenaTooSmall)?;
            Ok(HeapArena { ptr, layout })
        }

        /// The arena as the slice cache constructors take.
        pub fn as_uninit_mut(&mut self) -> &mut [MaybeUninit<u8>] {
            // SAFETY: `ptr` points to `layout.size()` bytes we own for `self`'s lifetime; the
            // mutable borrow of `self` makes the slice unique. `MaybeUninit` needs no init.
            unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
        }
    }

    impl Drop for HeapArena {
        fn drop(&mut self) {
            // SAFETY: allocated in `new` with exactly this layout and not freed before.
            unsafe { dealloc(self.ptr.as_ptr().cast::<u8>(), self.layout) }
        }
    }

    // SAFETY: HeapArena owns its allocation exclusively, like a Box<[MaybeUninit<u8>]>.
    unsafe impl Send for HeapArena {}

    /// A cache's two arenas on the heap, sized and aligned for a plan (feature `alloc`): what
    /// hosts, tests, benches and boards with a global allocator use instead of static buffers.
    ///
    /// ```
    /// use edgekv::{CacheConfig, FreeList, HeapArenas, KvCache, Shape};
    ///
    /// let cfg = CacheConfig::new(Shape { layers: 2, kv_heads: 1, head_dim: 8 });
    /// let mut arenas = HeapArenas::for_pages::<FreeList<'_>>(&cfg, 12)?;
    /// let cache: KvCache<'_> = arenas.cache(cfg)?;
    /// assert_eq!(cache.arena_plan().num_pages, 12);
    /// # Ok::<(), edgekv::Error>(())
    /// ```
    pub struct HeapArenas {
        /// The data arena (pages), aligned to the configuration's `align`.
        pub data: HeapArena,
        /// The metadata arena, aligned to [`META_ALIGN`](crate::META_ALIGN).
        pub meta: HeapArena,
    }

    impl HeapArenas {
        /// Arenas for exactly `pages` pages of `config` with allocator `A`.
        ///
        /// # Errors
        ///
        /// As [`KvCache::plan_pages`](crate::KvCache::plan_pages), and [`HeapArena::new`]'s.
        pub fn for_pages<'a, A: crate::PageAllocator<'a>>(
            config: &crate::CacheConfig,
            pages: usize,
        ) -> Result<Self, ConfigError> {
            let plan = crate::KvCache::<'a, A>::plan_pages(config, pages)?;
            Self::for_plan(config, &plan)
        }

        /// Arenas for `plan`, a plan of `config`.
        ///
        /// # Errors
        ///
        /// As [`HeapArena::new`].
        pub fn for_plan(
            config: &crate::CacheConfig,
            plan: &crate::Plan,
        ) -> Result<Self, ConfigError> {
            Ok(HeapArenas {
                data: HeapArena::new(plan.data_bytes, config.align)?,
                meta: HeapArena::new(plan.meta.total, crate::META_ALIGN)?,
            })
        }

        /// A cache over these arenas (as many pages as the data arena holds).
        ///
        /// # Errors
        ///
        /// As [`KvCache::new`](crate::KvCache::new).
        pub fn cache<'a, A: crate::PageAllocator<'a>>(
            &'a mut self,
            config: crate::CacheConfig,
        ) -> Result<crate::KvCache<'a, A>, ConfigError> {
            crate::KvCache::new(config, self.data.as_uninit_mut(), self.meta.as_uninit_mut())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_initializes_everything() {
        let mut buf = ArenaBuf::<256>::new();
        let bytes = zeroed(buf.as_uninit_mut());
        assert_eq!(bytes.len(), 256);
        assert!(bytes.iter().all(|&b| b == 0));
        bytes[255] = 7;
        assert_eq!(bytes[255], 7);
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn heap_arena() {
        let mut a = HeapArena::new(1000, 128).unwrap();
        assert_eq!(a.as_uninit_mut().as_ptr() as usize % 128, 0);
        assert!(zeroed(a.as_uninit_mut()).iter().all(|&b| b == 0));
        assert_eq!(
            HeapArena::new(0, 64).err(),
            Some(crate::ConfigError::ZeroSize)
        );
        assert_eq!(
            HeapArena::new(10, 3).err(),
            Some(crate::ConfigError::InvalidAlignment)
        );
    }
}
