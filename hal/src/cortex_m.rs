//! Cortex-M7 / Cortex-M55 L1 data-cache maintenance through the `cortex-m` crate's SCB
//! by-address operations (feature `cortex-m`; ARMv7E-M and ARMv8-M Mainline targets).

use cortex_m::peripheral::{CPUID, SCB};

use crate::{CacheMaintenance, HalError, line_aligned};

/// The core's L1 data cache. Every operation ends with DSB and ISB (done by `cortex-m`), so a
/// device may be started, or its output read, right after a call returns.
///
/// The address forms are safe operations: [`invalidate`](CacheMaintenance::invalidate) on a bare
/// address range is carried out as clean + invalidate, because discarding lines of memory the
/// caller does not own could drop other code's writes. The slice form
/// [`invalidate_slice`](CacheMaintenance::invalidate_slice) performs a true invalidate: the
/// exclusive, line-aligned slice guarantees nobody else's data shares those lines. The device
/// views always use the slice forms.
pub struct CortexMDCache {
    scb: SCB,
    line: usize,
}

impl CortexMDCache {
    /// Takes the SCB (the D-cache enabled, e.g. with `SCB::enable_dcache`) and reads the line
    /// size from the cache type register (CTR.DminLine: 32 bytes on Cortex-M7 and M55).
    pub fn new(scb: SCB) -> Self {
        let line = 4 << CPUID::cache_dminline();
        CortexMDCache { scb, line }
    }

    /// Gives the SCB back.
    pub fn free(self) -> SCB {
        self.scb
    }
}

impl CacheMaintenance for CortexMDCache {
    fn line_size(&self) -> usize {
        self.line
    }

    fn clean(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        let (addr, len) = line_aligned(addr, len, self.line)?;
        self.scb.clean_dcache_by_address(addr, len);
        Ok(())
    }

    fn invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        self.clean_invalidate(addr, len)
    }

    fn clean_invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        let (addr, len) = line_aligned(addr, len, self.line)?;
        self.scb.clean_invalidate_dcache_by_address(addr, len);
        Ok(())
    }

    #[allow(unsafe_code)]
    fn invalidate_slice(&mut self, bytes: &mut [u8]) -> Result<(), HalError> {
        line_aligned(bytes.as_ptr() as usize, bytes.len(), self.line)?;
        // SAFETY: `bytes` is borrowed exclusively and covers whole cache lines, so the lines
        // invalidated hold no byte outside it: no one else's writes can be discarded. Any bit
        // pattern is a valid `u8`, so whatever memory holds is a valid value afterwards.
        unsafe { self.scb.invalidate_dcache_by_slice(bytes) };
        Ok(())
    }
}
