//! Translation of CPU address ranges to device addresses.

use crate::{DevAddr, HalError};

/// Translates CPU address ranges into the addresses a DMA engine or NPU must
/// be programmed with.
///
/// # Contract
///
/// `to_device(cpu, len)` returns the device address of `cpu` if the whole
/// range `[cpu, cpu + len)` is mapped **and** contiguous on the device side,
/// so that the device can access it as one linear block starting at the
/// returned address. Implementations never panic; they report:
///
/// * [`HalError::Overflow`] if `cpu + len` does not fit in `usize`. As with
///   Rust slices, the one-past-the-end address of a range must be
///   representable, so no range can include the byte at `usize::MAX`.
/// * [`HalError::Unmapped`] if any byte of the range has no device address,
///   or if the range crosses a point where device addresses jump.
///
/// **Zero-length ranges** are translated like the address `cpu` itself: they
/// succeed iff `cpu` is a mapped byte. In particular an empty range at a
/// window's one-past-the-end address is [`HalError::Unmapped`]. This gives an
/// empty range one unambiguous device address even where two windows meet.
///
/// A successful result also guarantees `result + len` fits in `u64`.
pub trait AddressMap {
    /// The device address of the CPU range `[cpu, cpu + len)`.
    ///
    /// # Errors
    ///
    /// [`HalError::Overflow`] or [`HalError::Unmapped`], as described in the
    /// [trait documentation](AddressMap).
    fn to_device(&self, cpu: usize, len: usize) -> Result<DevAddr, HalError>;
}

impl<M: AddressMap + ?Sized> AddressMap for &M {
    fn to_device(&self, cpu: usize, len: usize) -> Result<DevAddr, HalError> {
        (**self).to_device(cpu, len)
    }
}

/// The whole CPU address space seen at the same addresses by the device:
/// device address == CPU address.
///
/// This is the common case for DMA on Cortex-M system SRAM and for Linux SoCs
/// with an IOMMU-less, 1:1 DMA mapping.
///
/// ```
/// use edgekv_hal::{AddressMap, DevAddr, IdentityMap};
///
/// assert_eq!(IdentityMap.to_device(0x2400_0000, 256), Ok(DevAddr(0x2400_0000)));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IdentityMap;

impl AddressMap for IdentityMap {
    fn to_device(&self, cpu: usize, len: usize) -> Result<DevAddr, HalError> {
        cpu.checked_add(len).ok_or(HalError::Overflow)?;
        // Lossless: usize is at most 64 bits (asserted in `addr.rs`).
        Ok(DevAddr(cpu as u64))
    }
}

/// One window of an address map: `len` bytes at CPU address `cpu_base`
/// appear to the device at `dev_base`.
///
/// This is plain, unvalidated data so that tables can be written as
/// `static` arrays; [`OffsetMap::from_entry`] and [`TableMap::new`] validate
/// entries (see [`MapEntry::validate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct MapEntry {
    /// First CPU address of the window.
    pub cpu_base: usize,
    /// Length of the window in bytes.
    pub len: usize,
    /// Device address corresponding to `cpu_base`.
    pub dev_base: DevAddr,
}

impl MapEntry {
    /// An entry mapping `[cpu_base, cpu_base + len)` to `dev_base`.
    #[must_use]
    pub const fn new(cpu_base: usize, len: usize, dev_base: DevAddr) -> Self {
        MapEntry {
            cpu_base,
            len,
            dev_base,
        }
    }

    /// Checks that the window is usable: `len` is non-zero and both
    /// one-past-the-end addresses, `cpu_base + len` and `dev_base + len`, are
    /// representable.
    ///
    /// # Errors
    ///
    /// [`HalError::EmptyWindow`] if `len == 0`; [`HalError::Overflow`] if an
    /// end address is not representable.
    pub const fn validate(&self) -> Result<(), HalError> {
        if self.len == 0 {
            return Err(HalError::EmptyWindow);
        }
        if self.cpu_base.checked_add(self.len).is_none()
            || self.dev_base.checked_add(self.len as u64).is_none()
        {
            return Err(HalError::Overflow);
        }
        Ok(())
    }

    /// One past the last CPU address, or `None` on overflow.
    const fn cpu_end(&self) -> Option<usize> {
        self.cpu_base.checked_add(self.len)
    }

    /// Whether the CPU byte `addr` lies in this window.
    const fn contains(&self, addr: usize) -> bool {
        match self.cpu_end() {
            Some(end) => self.cpu_base <= addr && addr < end,
            None => false,
        }
    }

    /// Device address of the CPU byte `addr`, which must be in the window.
    fn translate(&self, addr: usize) -> Result<DevAddr, HalError> {
        let offset = addr.checked_sub(self.cpu_base).ok_or(HalError::Unmapped)?;
        self.dev_base
            .checked_add(offset as u64)
            .ok_or(HalError::Overflow)
    }

    /// Whether `next` continues this window on both the CPU and device side.
    fn continued_by(&self, next: &MapEntry) -> bool {
        self.cpu_end() == Some(next.cpu_base)
            && self.dev_base.checked_add(self.len as u64) == Some(next.dev_base)
    }

    /// Whether the CPU windows of `self` and `other` share a byte.
    const fn overlaps(&self, other: &MapEntry) -> bool {
        match (self.cpu_end(), other.cpu_end()) {
            (Some(a_end), Some(b_end)) => self.cpu_base < b_end && other.cpu_base < a_end,
            // Unreachable for validated entries; treat as overlapping to stay safe.
            _ => true,
        }
    }
}

/// A single aliased window: `len` bytes that the CPU sees at `cpu_base` and
/// the device sees at `dev_base`. Everything outside the window is
/// [`HalError::Unmapped`].
///
/// Typical use: a TCM or NPU-local SRAM reachable by the CPU and the NPU at
/// different addresses.
///
/// ```
/// use edgekv_hal::{AddressMap, DevAddr, HalError, OffsetMap};
///
/// // 64 KiB TCM: CPU sees it at 0x2000_0000, the NPU at 0x3000_0000.
/// let tcm = OffsetMap::new(0x2000_0000, 0x1_0000, DevAddr(0x3000_0000))?;
///
/// assert_eq!(tcm.to_device(0x2000_0100, 64), Ok(DevAddr(0x3000_0100)));
/// // The last 16 bytes of the window are fine...
/// assert_eq!(tcm.to_device(0x2000_fff0, 16), Ok(DevAddr(0x3000_fff0)));
/// // ...one more byte runs off the end.
/// assert_eq!(tcm.to_device(0x2000_fff0, 17), Err(HalError::Unmapped));
/// assert_eq!(tcm.to_device(0x1fff_ffff, 1), Err(HalError::Unmapped));
/// # Ok::<(), HalError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct OffsetMap {
    entry: MapEntry,
}

impl OffsetMap {
    /// A window of `len` bytes at CPU address `cpu_base` and device address
    /// `dev_base`.
    ///
    /// # Errors
    ///
    /// [`HalError::EmptyWindow`] if `len == 0`; [`HalError::Overflow`] if
    /// `cpu_base + len` or `dev_base + len` is not representable.
    pub const fn new(cpu_base: usize, len: usize, dev_base: DevAddr) -> Result<Self, HalError> {
        Self::from_entry(MapEntry::new(cpu_base, len, dev_base))
    }

    /// An `OffsetMap` for the window described by `entry`.
    ///
    /// # Errors
    ///
    /// As for [`OffsetMap::new`] (see [`MapEntry::validate`]).
    pub const fn from_entry(entry: MapEntry) -> Result<Self, HalError> {
        match entry.validate() {
            Ok(()) => Ok(OffsetMap { entry }),
            Err(e) => Err(e),
        }
    }

    /// The window this map describes.
    #[must_use]
    pub const fn entry(&self) -> MapEntry {
        self.entry
    }
}

impl AddressMap for OffsetMap {
    fn to_device(&self, cpu: usize, len: usize) -> Result<DevAddr, HalError> {
        let end = cpu.checked_add(len).ok_or(HalError::Overflow)?;
        let win_end = self.entry.cpu_end().ok_or(HalError::Overflow)?;
        if !self.entry.contains(cpu) || end > win_end {
            return Err(HalError::Unmapped);
        }
        self.entry.translate(cpu)
    }
}

/// Several windows described by a caller-supplied table, e.g. the Cortex-M55
/// ITCM/DTCM local addresses and their global aliases.
///
/// # Rules
///
/// * Entries are validated at construction: each must pass
///   [`MapEntry::validate`], and no two may share a CPU address
///   ([`HalError::Overlap`]). Entries need not be sorted. Several CPU windows
///   *may* alias the same device addresses; that is not ambiguous for
///   CPU → device translation.
/// * A range may span several entries only if they chain contiguously on
///   **both** sides: each entry's CPU end is the next entry's `cpu_base`
///   *and* its device end is the next entry's `dev_base`. The device then
///   sees one linear block, exactly as if the table had one merged entry.
///   Entries that are adjacent in CPU space but not in device space make a
///   straddling range [`HalError::Unmapped`]; the caller must split it.
/// * An empty table is valid and maps nothing.
///
/// Lookups scan the table linearly (and once more per entry crossed); tables
/// are expected to hold a handful of entries.
///
/// ```
/// use edgekv_hal::{AddressMap, DevAddr, HalError, MapEntry, TableMap};
///
/// static WINDOWS: [MapEntry; 2] = [
///     // ITCM and DTCM, seen by the NPU through global aliases.
///     MapEntry::new(0x0000_0000, 0x8_0000, DevAddr(0x1000_0000)),
///     MapEntry::new(0x2000_0000, 0x8_0000, DevAddr(0x3000_0000)),
/// ];
/// let map = TableMap::new(&WINDOWS)?;
/// assert_eq!(map.to_device(0x2000_0040, 64), Ok(DevAddr(0x3000_0040)));
/// assert_eq!(map.to_device(0x1000_0000, 64), Err(HalError::Unmapped));
/// # Ok::<(), HalError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TableMap<'a> {
    entries: &'a [MapEntry],
}

impl<'a> TableMap<'a> {
    /// A map over `entries`, validated as described on [`TableMap`].
    ///
    /// This is a `const fn`, so a table can be checked at compile time.
    ///
    /// # Errors
    ///
    /// The first problem found: [`HalError::EmptyWindow`] or
    /// [`HalError::Overflow`] for a bad entry, [`HalError::Overlap`] for two
    /// entries sharing a CPU address.
    pub const fn new(entries: &'a [MapEntry]) -> Result<Self, HalError> {
        let mut rest = entries;
        while let [first, tail @ ..] = rest {
            if let Err(e) = first.validate() {
                return Err(e);
            }
            rest = tail;
        }
        let mut rest = entries;
        while let [first, tail @ ..] = rest {
            let mut others = tail;
            while let [other, more @ ..] = others {
                if first.overlaps(other) {
                    return Err(HalError::Overlap);
                }
                others = more;
            }
            rest = tail;
        }
        Ok(TableMap { entries })
    }

    /// The validated entries, in the order given.
    #[must_use]
    pub const fn entries(&self) -> &'a [MapEntry] {
        self.entries
    }
}

impl AddressMap for TableMap<'_> {
    fn to_device(&self, cpu: usize, len: usize) -> Result<DevAddr, HalError> {
        let end = cpu.checked_add(len).ok_or(HalError::Overflow)?;
        let first = self
            .entries
            .iter()
            .find(|e| e.contains(cpu))
            .ok_or(HalError::Unmapped)?;
        let dev = first.translate(cpu)?;
        // Follow the chain of entries continuing `first` on both sides. Each
        // step moves to an entry with a strictly higher, distinct CPU base
        // (entries are non-empty and disjoint), so this visits every entry at
        // most once.
        let mut current = first;
        while current.cpu_end().ok_or(HalError::Overflow)? < end {
            current = self
                .entries
                .iter()
                .find(|e| current.continued_by(e))
                .ok_or(HalError::Unmapped)?;
        }
        Ok(dev)
    }
}

#[cfg(test)]
mod tests;
