//! The CPU side of the simulation: cache maintenance that moves bytes between the CPU's view and
//! device memory.

use super::SimMemory;
use crate::{CacheMaintenance, HalError, line_aligned};

/// The simulated write-back data cache in front of a [`SimMemory`] (see there). Only the
/// slice forms work: the address forms check alignment, then return
/// [`HalError::Unsupported`], since safe code cannot reach memory through an address.
pub struct SimCache<'m> {
    mem: &'m SimMemory,
}

impl SimMemory {
    /// The CPU's data cache in front of this memory.
    pub fn cache(&self) -> SimCache<'_> {
        SimCache { mem: self }
    }
}

impl SimCache<'_> {
    /// Validates a range: whole lines inside one region.
    fn locate(&self, bytes: &[u8]) -> Result<(usize, usize), HalError> {
        line_aligned(bytes.as_ptr() as usize, bytes.len(), self.mem.line_size())?;
        self.mem.find_cpu(bytes.as_ptr() as usize, bytes.len())
    }

    fn lines(&self, bytes: &[u8]) -> u64 {
        (bytes.len() / self.mem.line_size()) as u64
    }

    /// Write-back: device memory and the sync point take the CPU's bytes.
    fn write_back(&self, bytes: &[u8]) -> Result<(), HalError> {
        let (i, off) = self.locate(bytes)?;
        let r = &mut self.mem.regions.borrow_mut()[i];
        r.mem[off..off + bytes.len()].copy_from_slice(bytes);
        r.synced[off..off + bytes.len()].copy_from_slice(bytes);
        self.mem.count(|s| s.lines_cleaned += self.lines(bytes));
        Ok(())
    }
}

impl CacheMaintenance for SimCache<'_> {
    fn line_size(&self) -> usize {
        self.mem.line_size()
    }

    fn clean(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        line_aligned(addr, len, self.mem.line_size())?;
        Err(HalError::Unsupported)
    }

    fn invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        line_aligned(addr, len, self.mem.line_size())?;
        Err(HalError::Unsupported)
    }

    fn clean_invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        line_aligned(addr, len, self.mem.line_size())?;
        Err(HalError::Unsupported)
    }

    fn clean_slice(&mut self, bytes: &[u8]) -> Result<(), HalError> {
        self.write_back(bytes)
    }

    fn invalidate_slice(&mut self, bytes: &mut [u8]) -> Result<(), HalError> {
        let (i, off) = self.locate(bytes)?;
        let line = self.mem.line_size();
        let mut regions = self.mem.regions.borrow_mut();
        let r = &mut regions[i];
        let mut dirty = 0;
        for (k, cpu_line) in bytes.chunks_exact_mut(line).enumerate() {
            let at = off + k * line;
            let mem_line = &mut r.mem[at..at + line];
            if *cpu_line != r.synced[at..at + line] {
                // Dirty: evicted after the device wrote, so the device's bytes are gone.
                mem_line.copy_from_slice(cpu_line);
                dirty += 1;
            }
            cpu_line.copy_from_slice(mem_line);
            r.synced[at..at + line].copy_from_slice(mem_line);
        }
        self.mem.count(|s| {
            s.lines_invalidated += self.lines(bytes);
            s.dirty_evictions += dirty;
        });
        Ok(())
    }

    fn clean_invalidate_slice(&mut self, bytes: &mut [u8]) -> Result<(), HalError> {
        // After a write-back the CPU's lines equal device memory: refetching changes nothing.
        self.write_back(bytes)?;
        self.mem.count(|s| s.lines_invalidated += self.lines(bytes));
        Ok(())
    }
}
