//! Device-side addresses.

use core::fmt;

// Every supported target has a pointer width of at most 64 bits, so a CPU
// address (`usize`) always converts losslessly to a device address (`u64`).
const _: () = assert!(usize::BITS <= u64::BITS);

/// An address as seen by a bus master other than the CPU: a DMA engine or an
/// NPU.
///
/// Device addresses are 64-bit even on 32-bit MCUs because some NPUs and SoC
/// interconnects use wider addresses than the CPU. A `DevAddr` is a plain
/// number: it cannot be dereferenced by the CPU, which is the point of keeping
/// it a distinct type from `usize` and raw pointers.
///
/// ```
/// use edgekv_hal::DevAddr;
///
/// let base = DevAddr(0x3000_0000);
/// assert_eq!(base.checked_add(0x40), Some(DevAddr(0x3000_0040)));
/// assert!(base.is_aligned(32));
/// assert_eq!(DevAddr(u64::MAX).checked_add(1), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DevAddr(pub u64);

impl DevAddr {
    /// The device address at `offset` bytes past `self`, or `None` if it
    /// would exceed `u64::MAX`.
    #[must_use]
    pub const fn checked_add(self, offset: u64) -> Option<DevAddr> {
        match self.0.checked_add(offset) {
            Some(a) => Some(DevAddr(a)),
            None => None,
        }
    }

    /// Whether the address is a multiple of `align`.
    ///
    /// `align` must be a power of two (hardware alignments always are);
    /// for `0` or any other non-power-of-two this returns `false`, so an
    /// invalid alignment is never silently treated as satisfied.
    #[must_use]
    pub const fn is_aligned(self, align: u64) -> bool {
        align.is_power_of_two() && self.0 & (align - 1) == 0
    }
}

impl From<u64> for DevAddr {
    fn from(addr: u64) -> Self {
        DevAddr(addr)
    }
}

impl From<DevAddr> for u64 {
    fn from(addr: DevAddr) -> Self {
        addr.0
    }
}

impl fmt::Display for DevAddr {
    /// Formats as `0x` followed by at least 8 hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_add_normal_and_overflow() {
        assert_eq!(DevAddr(0x1000).checked_add(0x20), Some(DevAddr(0x1020)));
        assert_eq!(DevAddr(5).checked_add(0), Some(DevAddr(5)));
        assert_eq!(
            DevAddr(u64::MAX - 1).checked_add(1),
            Some(DevAddr(u64::MAX))
        );
        assert_eq!(DevAddr(u64::MAX).checked_add(1), None);
        assert_eq!(DevAddr(1).checked_add(u64::MAX), None);
    }

    #[test]
    fn is_aligned_power_of_two() {
        assert!(DevAddr(0).is_aligned(1));
        assert!(DevAddr(0).is_aligned(1 << 63));
        assert!(DevAddr(0x3000_0040).is_aligned(64));
        assert!(!DevAddr(0x3000_0040).is_aligned(128));
        assert!(DevAddr(u64::MAX).is_aligned(1));
        assert!(!DevAddr(u64::MAX).is_aligned(2));
    }

    #[test]
    fn is_aligned_rejects_invalid_alignment() {
        assert!(!DevAddr(0).is_aligned(0));
        assert!(!DevAddr(48).is_aligned(24));
        assert!(!DevAddr(96).is_aligned(3));
        assert!(!DevAddr(0).is_aligned(u64::MAX));
    }

    #[test]
    fn conversions_ordering_display() {
        assert_eq!(DevAddr::from(7u64), DevAddr(7));
        assert_eq!(u64::from(DevAddr(7)), 7);
        assert!(DevAddr(1) < DevAddr(2));
        assert_eq!(DevAddr(0x3000_0000).to_string(), "0x30000000");
        assert_eq!(DevAddr(0x10).to_string(), "0x00000010");
        assert_eq!(DevAddr::default(), DevAddr(0));
    }
}
