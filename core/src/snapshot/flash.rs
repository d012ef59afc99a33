//! Flash devices for images: a byte slice to read from, and a NOR flash in RAM.

use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashErrorKind, ReadNorFlash, check_erase, check_read, check_write,
};

/// An image in memory (memory-mapped flash, `include_bytes!`, a file read on a host) as a
/// read-only flash.
#[derive(Debug, Clone, Copy)]
pub struct SliceFlash<'a>(pub &'a [u8]);

impl ErrorType for SliceFlash<'_> {
    type Error = NorFlashErrorKind;
}

impl ReadNorFlash for SliceFlash<'_> {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        check_read(self, offset, bytes.len())?;
        let at = offset as usize;
        bytes.copy_from_slice(&self.0[at..at + bytes.len()]);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.0.len()
    }
}

/// NOR flash over a RAM buffer with real NOR rules, for hosts and tests: erase sets whole
/// `ERASE`-byte sectors to 0xFF; programs are `WRITE`-byte aligned and may only land on erased
/// bytes (a program over unerased bytes is an error, where hardware would silently AND).
#[derive(Debug)]
pub struct RamFlash<'a, const WRITE: usize, const ERASE: usize> {
    mem: &'a mut [u8],
    /// Program operations so far.
    pub writes: u32,
    /// Erase operations so far.
    pub erases: u32,
}

impl<'a, const WRITE: usize, const ERASE: usize> RamFlash<'a, WRITE, ERASE> {
    /// A flash over `mem` (its contents are what the flash holds).
    pub fn new(mem: &'a mut [u8]) -> Self {
        RamFlash {
            mem,
            writes: 0,
            erases: 0,
        }
    }

    /// The flash contents.
    pub fn bytes(&self) -> &[u8] {
        self.mem
    }
}

impl<const WRITE: usize, const ERASE: usize> ErrorType for RamFlash<'_, WRITE, ERASE> {
    type Error = NorFlashErrorKind;
}

impl<const WRITE: usize, const ERASE: usize> ReadNorFlash for RamFlash<'_, WRITE, ERASE> {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        check_read(self, offset, bytes.len())?;
        let at = offset as usize;
        bytes.copy_from_slice(&self.mem[at..at + bytes.len()]);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.mem.len()
    }
}

impl<const WRITE: usize, const ERASE: usize> NorFlash for RamFlash<'_, WRITE, ERASE> {
    const WRITE_SIZE: usize = WRITE;
    const ERASE_SIZE: usize = ERASE;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        check_erase(self, from, to)?;
        self.mem[from as usize..to as usize].fill(0xFF);
        self.erases += 1;
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        check_write(self, offset, bytes.len())?;
        let target = &mut self.mem[offset as usize..offset as usize + bytes.len()];
        if target.iter().any(|&b| b != 0xFF) {
            return Err(NorFlashErrorKind::Other);
        }
        target.copy_from_slice(bytes);
        self.writes += 1;
        Ok(())
    }
}
