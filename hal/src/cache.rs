//! Data-cache maintenance for memory shared with DMA engines and NPUs.

use crate::HalError;

/// Data-cache maintenance on CPU address ranges, used around every device
/// access to memory the CPU also caches.
///
/// * [`clean`](Self::clean) (write back dirty lines) **before a device reads**
///   memory the CPU wrote;
/// * [`invalidate`](Self::invalidate) (discard lines) **after a device
///   wrote** memory, before the CPU reads it;
/// * [`clean_invalidate`](Self::clean_invalidate) for buffers going both ways.
///
/// # Contract
///
/// * Ranges are `[addr, addr + len)` in CPU addresses. `addr` and `len` must
///   both be multiples of [`line_size`](Self::line_size) — check with
///   [`line_aligned`], or round with [`expand_to_lines`] after reading its
///   hazard note. `len == 0` is a valid no-op, but `addr` must still be
///   aligned. `addr + len` must not overflow `usize`.
/// * A method returns [`HalError::Misaligned`] or [`HalError::Overflow`] for a
///   range breaking these rules and then performs **no** maintenance at all.
/// * [`line_size`](Self::line_size) is a non-zero power of two and never
///   changes.
/// * On success the maintenance has completed (including any barrier, e.g. a
///   DSB on Cortex-M7) so the caller may start or read the DMA immediately.
///
/// # Why the methods return `Result`
///
/// On a real write-back cache a misaligned range cannot be handled safely:
/// rounding an *invalidate* outward discards unrelated dirty data sharing the
/// edge lines, and rounding inward leaves stale bytes. Silently rounding (as
/// CMSIS `SCB_InvalidateDCache_by_Addr` does) hides the bug until it corrupts
/// data on hardware. Returning an error costs one mask-and-compare per call,
/// negligible next to the per-line loop, and — because even [`NoCache`]
/// validates — host and QEMU tests catch misaligned maintenance that would
/// only misbehave on a real Cortex-M7.
pub trait CacheMaintenance {
    /// The data-cache line size in bytes: a non-zero power of two.
    fn line_size(&self) -> usize;

    /// Writes dirty lines in `[addr, addr + len)` back to memory, so a device
    /// reading the range sees the CPU's writes.
    ///
    /// # Errors
    ///
    /// [`HalError::Misaligned`] / [`HalError::Overflow`] per the
    /// [contract](CacheMaintenance); nothing is done then.
    fn clean(&mut self, addr: usize, len: usize) -> Result<(), HalError>;

    /// Discards cached lines in `[addr, addr + len)` without writing them
    /// back, so the CPU's next reads fetch what a device wrote.
    ///
    /// # Errors
    ///
    /// [`HalError::Misaligned`] / [`HalError::Overflow`] per the
    /// [contract](CacheMaintenance); nothing is done then.
    fn invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError>;

    /// Writes back then discards lines in `[addr, addr + len)`.
    ///
    /// # Errors
    ///
    /// [`HalError::Misaligned`] / [`HalError::Overflow`] per the
    /// [contract](CacheMaintenance); nothing is done then.
    fn clean_invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError>;

    /// [`clean`](Self::clean) of the memory `bytes` occupies. The device views call the slice
    /// forms: holding the slice proves the caller owns the range, and a host simulation (see
    /// `SimCache`, feature `sim`) needs the bytes themselves.
    ///
    /// # Errors
    ///
    /// As [`clean`](Self::clean).
    fn clean_slice(&mut self, bytes: &[u8]) -> Result<(), HalError> {
        self.clean(bytes.as_ptr() as usize, bytes.len())
    }

    /// [`invalidate`](Self::invalidate) of the memory `bytes` occupies: afterwards `bytes` holds
    /// what a device wrote. Exclusive access to the slice is what makes a true invalidate sound:
    /// no one else's writes can be discarded.
    ///
    /// # Errors
    ///
    /// As [`invalidate`](Self::invalidate).
    fn invalidate_slice(&mut self, bytes: &mut [u8]) -> Result<(), HalError> {
        self.invalidate(bytes.as_ptr() as usize, bytes.len())
    }

    /// [`clean_invalidate`](Self::clean_invalidate) of the memory `bytes` occupies.
    ///
    /// # Errors
    ///
    /// As [`clean_invalidate`](Self::clean_invalidate).
    fn clean_invalidate_slice(&mut self, bytes: &mut [u8]) -> Result<(), HalError> {
        self.clean_invalidate(bytes.as_ptr() as usize, bytes.len())
    }
}

impl<C: CacheMaintenance + ?Sized> CacheMaintenance for &mut C {
    fn line_size(&self) -> usize {
        (**self).line_size()
    }
    fn clean(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        (**self).clean(addr, len)
    }
    fn invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        (**self).invalidate(addr, len)
    }
    fn clean_invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        (**self).clean_invalidate(addr, len)
    }
    fn clean_slice(&mut self, bytes: &[u8]) -> Result<(), HalError> {
        (**self).clean_slice(bytes)
    }
    fn invalidate_slice(&mut self, bytes: &mut [u8]) -> Result<(), HalError> {
        (**self).invalidate_slice(bytes)
    }
    fn clean_invalidate_slice(&mut self, bytes: &mut [u8]) -> Result<(), HalError> {
        (**self).clean_invalidate_slice(bytes)
    }
}

/// Checks that `[addr, addr + len)` is made of whole cache lines of `line`
/// bytes and returns it unchanged.
///
/// # Errors
///
/// Checked in this order: [`HalError::InvalidLineSize`] if `line` is zero or
/// not a power of two; [`HalError::Misaligned`] if `addr` or `len` is not a
/// multiple of `line` (also for `len == 0`); [`HalError::Overflow`] if
/// `addr + len` does not fit in `usize`.
///
/// ```
/// use edgekv_hal::{line_aligned, HalError};
///
/// assert_eq!(line_aligned(0x2000_0040, 64, 32), Ok((0x2000_0040, 64)));
/// assert_eq!(line_aligned(0x2000_0044, 64, 32), Err(HalError::Misaligned));
/// assert_eq!(line_aligned(0x2000_0040, 60, 32), Err(HalError::Misaligned));
/// assert_eq!(line_aligned(0x2000_0040, 64, 48), Err(HalError::InvalidLineSize));
/// ```
pub const fn line_aligned(
    addr: usize,
    len: usize,
    line: usize,
) -> Result<(usize, usize), HalError> {
    if !line.is_power_of_two() {
        return Err(HalError::InvalidLineSize);
    }
    let mask = line - 1;
    if addr & mask != 0 || len & mask != 0 {
        return Err(HalError::Misaligned);
    }
    if addr.checked_add(len).is_none() {
        return Err(HalError::Overflow);
    }
    Ok((addr, len))
}

/// The smallest range of whole `line`-byte cache lines covering
/// `[addr, addr + len)`, as `(start, len)`.
///
/// A zero-length range expands to the zero-length range at `addr` rounded
/// down to a line boundary.
///
/// # Hazard
///
/// The expanded range can include bytes *outside* `[addr, addr + len)` that
/// share its first and last cache lines. **Cleaning** the expanded range is
/// harmless (it only writes back data early). **Invalidating** it discards
/// any dirty CPU writes to those neighbouring bytes — silent corruption of
/// unrelated data. Only invalidate an expanded range when the caller owns the
/// whole edge lines. This is why edgekv lays out its arenas with strides that
/// are multiples of the line size, so page ranges are aligned to begin with.
///
/// # Errors
///
/// [`HalError::InvalidLineSize`] if `line` is zero or not a power of two;
/// [`HalError::Overflow`] if `addr + len`, or that end rounded up to a line
/// boundary, does not fit in `usize`.
///
/// ```
/// use edgekv_hal::{expand_to_lines, line_aligned};
///
/// // A 10-byte object straddling two 32-byte lines needs both lines.
/// let (start, len) = expand_to_lines(0x2000_001c, 10, 32)?;
/// assert_eq!((start, len), (0x2000_0000, 64));
/// assert!(line_aligned(start, len, 32).is_ok());
/// # Ok::<(), edgekv_hal::HalError>(())
/// ```
pub const fn expand_to_lines(
    addr: usize,
    len: usize,
    line: usize,
) -> Result<(usize, usize), HalError> {
    if !line.is_power_of_two() {
        return Err(HalError::InvalidLineSize);
    }
    let mask = line - 1;
    let start = addr & !mask;
    let Some(end) = addr.checked_add(len) else {
        return Err(HalError::Overflow);
    };
    if len == 0 {
        return Ok((start, 0));
    }
    let Some(end_up) = end.checked_add(mask) else {
        return Err(HalError::Overflow);
    };
    let end_up = end_up & !mask;
    // Cannot underflow: start <= addr <= end <= end_up.
    Ok((start, end_up - start))
}

/// Cache maintenance for memory that is not cached: Cortex-M cores without a
/// D-cache (M0/M0+/M3/M4, most M33/M55 configurations with caches off), QEMU
/// (which treats maintenance as a no-op), and coherent Linux DMA.
///
/// Every operation does nothing, but **still validates** the range against a
/// configurable line size (default [`NoCache::DEFAULT_LINE_SIZE`], 32 bytes,
/// the Cortex-M7 and Cortex-M55 D-cache line), so code tested against
/// `NoCache` is known to issue maintenance that a real cache would accept.
///
/// ```
/// use edgekv_hal::{CacheMaintenance, HalError, NoCache};
///
/// let mut cache = NoCache::new();
/// assert_eq!(cache.clean(0x2000_0000, 64), Ok(()));
/// assert_eq!(cache.invalidate(0x2000_0010, 64), Err(HalError::Misaligned));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NoCache {
    line_size: usize,
}

impl NoCache {
    /// The line size used by [`NoCache::new`]: 32 bytes.
    pub const DEFAULT_LINE_SIZE: usize = 32;

    /// A `NoCache` checking alignment to [`NoCache::DEFAULT_LINE_SIZE`].
    #[must_use]
    pub const fn new() -> Self {
        NoCache {
            line_size: Self::DEFAULT_LINE_SIZE,
        }
    }

    /// A `NoCache` checking alignment to `line_size` bytes (e.g. 64 to mirror
    /// a Cortex-A host).
    ///
    /// # Errors
    ///
    /// [`HalError::InvalidLineSize`] if `line_size` is zero or not a power of
    /// two.
    pub const fn with_line_size(line_size: usize) -> Result<Self, HalError> {
        if line_size.is_power_of_two() {
            Ok(NoCache { line_size })
        } else {
            Err(HalError::InvalidLineSize)
        }
    }

    fn check(self, addr: usize, len: usize) -> Result<(), HalError> {
        line_aligned(addr, len, self.line_size).map(|_| ())
    }
}

impl Default for NoCache {
    fn default() -> Self {
        Self::new()
    }
}

impl CacheMaintenance for NoCache {
    fn line_size(&self) -> usize {
        self.line_size
    }
    fn clean(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        self.check(addr, len)
    }
    fn invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        self.check(addr, len)
    }
    fn clean_invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        self.check(addr, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BAD_LINES: [usize; 6] = [0, 3, 24, 48, 100, usize::MAX];

    // ---- line_aligned ----

    #[test]
    fn aligned_ok() {
        assert_eq!(line_aligned(0, 0, 32), Ok((0, 0)));
        assert_eq!(line_aligned(0x40, 0, 32), Ok((0x40, 0)));
        assert_eq!(line_aligned(0x2000_0000, 4096, 32), Ok((0x2000_0000, 4096)));
        assert_eq!(line_aligned(7, 3, 1), Ok((7, 3)));
        let top = usize::MAX - 63; // highest 64-aligned address
        assert_eq!(line_aligned(top, 0, 64), Ok((top, 0)));
        assert_eq!(line_aligned(top - 64, 64, 64), Ok((top - 64, 64)));
        assert_eq!(
            line_aligned(0, 1 << (usize::BITS - 1), 32),
            Ok((0, 1 << (usize::BITS - 1)))
        );
    }

    #[test]
    fn aligned_misaligned() {
        assert_eq!(line_aligned(0x44, 64, 32), Err(HalError::Misaligned));
        assert_eq!(line_aligned(0x40, 60, 32), Err(HalError::Misaligned));
        assert_eq!(line_aligned(0x40, 1, 32), Err(HalError::Misaligned));
        assert_eq!(line_aligned(0x41, 0, 32), Err(HalError::Misaligned));
        assert_eq!(line_aligned(usize::MAX, 0, 2), Err(HalError::Misaligned));
    }

    #[test]
    fn aligned_overflow() {
        let top = usize::MAX - 31;
        assert_eq!(line_aligned(top, 32, 32), Err(HalError::Overflow));
        assert_eq!(line_aligned(32, top, 32), Err(HalError::Overflow));
        assert_eq!(line_aligned(usize::MAX, 1, 1), Err(HalError::Overflow));
    }

    #[test]
    fn aligned_invalid_line_size() {
        for line in BAD_LINES {
            assert_eq!(
                line_aligned(0, 0, line),
                Err(HalError::InvalidLineSize),
                "{line}"
            );
            assert_eq!(
                line_aligned(0x40, 64, line),
                Err(HalError::InvalidLineSize),
                "{line}"
            );
        }
    }

    // ---- expand_to_lines ----

    #[test]
    fn expand_already_aligned_is_identity() {
        assert_eq!(expand_to_lines(0x40, 64, 32), Ok((0x40, 64)));
        assert_eq!(expand_to_lines(0, 0, 32), Ok((0, 0)));
    }

    #[test]
    fn expand_rounds_outward() {
        assert_eq!(expand_to_lines(0x41, 1, 32), Ok((0x40, 32)));
        assert_eq!(expand_to_lines(0x5f, 2, 32), Ok((0x40, 64)));
        assert_eq!(expand_to_lines(0x1c, 10, 32), Ok((0, 64)));
        assert_eq!(expand_to_lines(0x40, 33, 32), Ok((0x40, 64)));
        assert_eq!(expand_to_lines(5, 3, 1), Ok((5, 3)));
    }

    #[test]
    fn expand_zero_length() {
        assert_eq!(expand_to_lines(0x41, 0, 32), Ok((0x40, 0)));
        assert_eq!(expand_to_lines(usize::MAX, 0, 32), Ok((usize::MAX - 31, 0)));
    }

    #[test]
    fn expand_result_is_aligned_and_covers() {
        for addr in 0..200usize {
            for len in 0..100usize {
                let (s, l) = expand_to_lines(addr, len, 32).unwrap();
                assert!(line_aligned(s, l, 32).is_ok());
                assert!(s <= addr);
                if len > 0 {
                    assert!(s + l >= addr + len);
                    assert!(s + l - (addr + len) < 32 && addr - s < 32);
                }
            }
        }
    }

    #[test]
    fn expand_overflow() {
        // The range end itself overflows.
        assert_eq!(expand_to_lines(usize::MAX, 1, 32), Err(HalError::Overflow));
        assert_eq!(expand_to_lines(1, usize::MAX, 32), Err(HalError::Overflow));
        // The end fits, but rounding it up to a line does not.
        assert_eq!(
            expand_to_lines(usize::MAX - 5, 3, 32),
            Err(HalError::Overflow)
        );
        // Ending exactly on the last representable line boundary is fine.
        let top = usize::MAX - 31;
        assert_eq!(expand_to_lines(top - 40, 40, 32), Ok((top - 64, 64)));
    }

    #[test]
    fn expand_invalid_line_size() {
        for line in BAD_LINES {
            assert_eq!(
                expand_to_lines(0x41, 1, line),
                Err(HalError::InvalidLineSize),
                "{line}"
            );
        }
    }

    // ---- NoCache ----

    #[test]
    fn nocache_default_line_size() {
        assert_eq!(NoCache::new().line_size(), 32);
        assert_eq!(NoCache::default(), NoCache::new());
    }

    #[test]
    fn nocache_with_line_size() {
        assert_eq!(NoCache::with_line_size(64).map(|c| c.line_size()), Ok(64));
        assert_eq!(NoCache::with_line_size(1).map(|c| c.line_size()), Ok(1));
        for line in BAD_LINES {
            assert_eq!(
                NoCache::with_line_size(line),
                Err(HalError::InvalidLineSize),
                "{line}"
            );
        }
    }

    fn all_ops(
        c: &mut impl CacheMaintenance,
        addr: usize,
        len: usize,
    ) -> [Result<(), HalError>; 3] {
        [
            c.clean(addr, len),
            c.invalidate(addr, len),
            c.clean_invalidate(addr, len),
        ]
    }

    #[test]
    fn nocache_accepts_aligned() {
        let mut c = NoCache::new();
        assert_eq!(all_ops(&mut c, 0x2000_0000, 4096), [Ok(()); 3]);
        assert_eq!(all_ops(&mut c, 0x2000_0020, 0), [Ok(()); 3]);
    }

    #[test]
    fn nocache_rejects_misaligned() {
        let mut c = NoCache::new();
        assert_eq!(
            all_ops(&mut c, 0x2000_0010, 32),
            [Err(HalError::Misaligned); 3]
        );
        assert_eq!(
            all_ops(&mut c, 0x2000_0000, 16),
            [Err(HalError::Misaligned); 3]
        );
        assert_eq!(
            all_ops(&mut c, 0x2000_0001, 0),
            [Err(HalError::Misaligned); 3]
        );
        // Aligned for 32 but not for 64.
        let mut c64 = NoCache::with_line_size(64).unwrap();
        assert_eq!(all_ops(&mut c64, 0x20, 64), [Err(HalError::Misaligned); 3]);
        assert_eq!(all_ops(&mut c64, 0x40, 32), [Err(HalError::Misaligned); 3]);
    }

    #[test]
    fn nocache_rejects_overflow() {
        let mut c = NoCache::new();
        assert_eq!(
            all_ops(&mut c, usize::MAX - 31, 32),
            [Err(HalError::Overflow); 3]
        );
    }

    #[test]
    fn through_mut_reference_and_dyn() {
        fn by_value<C: CacheMaintenance>(
            mut c: C,
            addr: usize,
        ) -> (usize, [Result<(), HalError>; 3]) {
            (c.line_size(), all_ops(&mut c, addr, 32))
        }
        let mut c = NoCache::new();
        let d: &mut dyn CacheMaintenance = &mut c;
        // `&mut dyn CacheMaintenance` is itself a `CacheMaintenance` via the blanket impl.
        assert_eq!(by_value(&mut *d, 0x40), (32, [Ok(()); 3]));
        assert_eq!(by_value(d, 0x44), (32, [Err(HalError::Misaligned); 3]));
    }
}
