//! The device side of the simulation: regions of device memory with their CPU and device
//! addresses.

use core::cell::{Cell, RefCell};
use std::vec::Vec;

use crate::{AddressMap, DevAddr, HalError, line_aligned};

/// Counters of a simulation run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Lines written back by cleans.
    pub lines_cleaned: u64,
    /// Lines refreshed from device memory by invalidates.
    pub lines_invalidated: u64,
    /// Dirty lines an invalidate found (the CPU wrote them after the last maintenance): their
    /// write-back overwrote what the device wrote.
    pub dirty_evictions: u64,
    /// Bytes the device read.
    pub device_bytes_read: u64,
    /// Bytes the device wrote.
    pub device_bytes_written: u64,
}

/// One registered range.
pub(super) struct Region {
    /// CPU address of the first byte.
    pub cpu: usize,
    /// Device address of the first byte.
    pub dev: u64,
    /// Device memory.
    pub mem: Vec<u8>,
    /// The CPU's bytes as of each line's last maintenance (clean or invalidate): a line whose
    /// CPU bytes differ from these was written by the CPU since, i.e. is dirty.
    pub synced: Vec<u8>,
}

/// Device memory of a host simulation of a device behind a write-back data cache, plus its
/// address map, so tests prove cache maintenance complete: a missing clean or invalidate gives
/// wrong data, as on a Cortex-M7.
///
/// * Regions registered with [`add_region`](Self::add_region) have a CPU range and a device
///   address; device memory starts as a fill byte.
/// * The CPU's view is the ordinary Rust memory itself: CPU writes stay there ("in the cache")
///   until [`SimCache`](crate::SimCache) cleans them into device memory, and device writes reach
///   the CPU only when it invalidates the lines.
/// * Lines the CPU wrote after their last maintenance are dirty: at invalidation they count as
///   evicted after the device's write (the worst case on hardware), so the device's data is lost.
///   An output buffer the CPU touched must be cleaned before the device writes it.
/// * [`device_read`](Self::device_read) / [`device_write`](Self::device_write) are the device's
///   only access, as [`SoftwareNpu`](crate::SoftwareNpu) uses them.
pub struct SimMemory {
    line: usize,
    pub(super) regions: RefCell<Vec<Region>>,
    pub(super) stats: Cell<SimStats>,
}

impl SimMemory {
    /// Device memory with cache lines of `line` bytes and no regions yet.
    ///
    /// # Errors
    ///
    /// [`HalError::InvalidLineSize`] unless `line` is a power of two.
    pub fn new(line: usize) -> Result<Self, HalError> {
        if !line.is_power_of_two() {
            return Err(HalError::InvalidLineSize);
        }
        Ok(SimMemory {
            line,
            regions: RefCell::new(Vec::new()),
            stats: Cell::new(SimStats::default()),
        })
    }

    /// The simulated line size.
    pub fn line_size(&self) -> usize {
        self.line
    }

    /// Registers the memory of `cpu` (whole lines) at device address `dev`. Device memory
    /// starts as `fill` bytes, so data the CPU never cleaned is visibly wrong; the CPU's current
    /// bytes count as clean.
    ///
    /// # Errors
    ///
    /// [`HalError::EmptyWindow`] (empty slice), [`HalError::Misaligned`] (not whole lines),
    /// [`HalError::Overlap`] (CPU or device range shared with a region), [`HalError::Overflow`].
    pub fn add_region(&self, cpu: &[u8], dev: DevAddr, fill: u8) -> Result<(), HalError> {
        let (addr, len) = (cpu.as_ptr() as usize, cpu.len());
        if len == 0 {
            return Err(HalError::EmptyWindow);
        }
        line_aligned(addr, len, self.line)?;
        let dev_end = dev.0.checked_add(len as u64).ok_or(HalError::Overflow)?;
        let mut regions = self.regions.borrow_mut();
        let overlaps = regions.iter().any(|r| {
            let n = r.mem.len();
            (addr < r.cpu + n && r.cpu < addr + len)
                || (dev.0 < r.dev + n as u64 && r.dev < dev_end)
        });
        if overlaps {
            return Err(HalError::Overlap);
        }
        regions.push(Region {
            cpu: addr,
            dev: dev.0,
            mem: std::vec![fill; len],
            synced: cpu.to_vec(),
        });
        Ok(())
    }

    /// Counters so far.
    pub fn stats(&self) -> SimStats {
        self.stats.get()
    }

    pub(super) fn count(&self, f: impl FnOnce(&mut SimStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// Index and byte offset of the region holding CPU range `[cpu, cpu + len)` wholly.
    pub(super) fn find_cpu(&self, cpu: usize, len: usize) -> Result<(usize, usize), HalError> {
        let end = cpu.checked_add(len).ok_or(HalError::Overflow)?;
        self.regions
            .borrow()
            .iter()
            .position(|r| r.cpu <= cpu && end <= r.cpu + r.mem.len())
            .map(|i| (i, cpu - self.regions.borrow()[i].cpu))
            .ok_or(HalError::Unmapped)
    }

    /// Index and byte offset of the region holding device range `[dev, dev + len)` wholly.
    fn find_dev(&self, dev: DevAddr, len: usize) -> Result<(usize, usize), HalError> {
        let end = dev.0.checked_add(len as u64).ok_or(HalError::Overflow)?;
        let regions = self.regions.borrow();
        let i = regions
            .iter()
            .position(|r| r.dev <= dev.0 && end <= r.dev + r.mem.len() as u64)
            .ok_or(HalError::Unmapped)?;
        Ok((i, (dev.0 - regions[i].dev) as usize))
    }

    /// The device reads `out.len()` bytes at `dev` (device memory only, never the CPU's view).
    ///
    /// # Errors
    ///
    /// [`HalError::Unmapped`] / [`HalError::Overflow`] for a range outside every region.
    pub fn device_read(&self, dev: DevAddr, out: &mut [u8]) -> Result<(), HalError> {
        let (i, off) = self.find_dev(dev, out.len())?;
        out.copy_from_slice(&self.regions.borrow()[i].mem[off..off + out.len()]);
        self.count(|s| s.device_bytes_read += out.len() as u64);
        Ok(())
    }

    /// The device writes `data` at `dev` (device memory only).
    ///
    /// # Errors
    ///
    /// [`HalError::Unmapped`] / [`HalError::Overflow`] for a range outside every region.
    pub fn device_write(&self, dev: DevAddr, data: &[u8]) -> Result<(), HalError> {
        let (i, off) = self.find_dev(dev, data.len())?;
        self.regions.borrow_mut()[i].mem[off..off + data.len()].copy_from_slice(data);
        self.count(|s| s.device_bytes_written += data.len() as u64);
        Ok(())
    }
}

impl AddressMap for SimMemory {
    fn to_device(&self, cpu: usize, len: usize) -> Result<DevAddr, HalError> {
        // An empty range maps like its address (the trait's rule).
        let (i, off) = self.find_cpu(cpu, len.max(1))?;
        Ok(DevAddr(self.regions.borrow()[i].dev + off as u64))
    }
}
