//! Cortex-M7 D-cache maintenance behind edgekv-hal's [`CacheMaintenance`] trait.
//!
//! Board-local until edgekv-hal ships its Cortex-M7/M55 implementation (the design names one);
//! then this file goes away and the firmware uses that.

use cortex_m::peripheral::{CPUID, SCB};
use edgekv_hal::{CacheMaintenance, HalError, line_aligned};

/// The Cortex-M7 L1 data cache, driven through the SCB's by-address maintenance registers
/// (each operation ends with DSB + ISB, so a device may be started right after it returns).
pub struct Cm7DCache {
    scb: SCB,
    line: usize,
}

impl Cm7DCache {
    /// Takes the SCB (after the caches were enabled) and reads the line size from CTR.
    pub fn new(scb: SCB) -> Self {
        // CTR.DminLine is log2 of the line size in words: 32 bytes on every Cortex-M7.
        let line = 4 << CPUID::cache_dminline();
        Cm7DCache { scb, line }
    }
}

impl CacheMaintenance for Cm7DCache {
    fn line_size(&self) -> usize {
        self.line
    }

    fn clean(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        let (addr, len) = line_aligned(addr, len, self.line)?;
        self.scb.clean_dcache_by_address(addr, len);
        Ok(())
    }

    /// Implemented as clean + invalidate, which needs no `unsafe`: it equals a plain invalidate
    /// whenever the range was cleaned before the device started writing and the CPU did not
    /// write it meanwhile — the protocol the trait documents. A true invalidate
    /// (`SCB::invalidate_dcache_by_address`) is `unsafe` because it can drop CPU writes; where
    /// that belongs is for edgekv-hal's Cortex-M7 implementation to settle.
    fn invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        self.clean_invalidate(addr, len)
    }

    fn clean_invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        let (addr, len) = line_aligned(addr, len, self.line)?;
        self.scb.clean_invalidate_dcache_by_address(addr, len);
        Ok(())
    }
}
