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
        // Erased means all ones: one AND over the range (branch-free, it vectorizes).
        if target.iter().fold(0xFF, |all, &b| all & b) != 0xFF {
            return Err(NorFlashErrorKind::Other);
        }
        target.copy_from_slice(bytes);
        self.writes += 1;
        Ok(())
    }
}

/// A NOR flash in RAM that loses power, for testing what survives a cut: its `cut`-th erase or
/// program operation (counted from 0, both kinds together) is torn as NOR flash tears — an erase
/// sets the bits of a prefix of its sectors and some bits of the next sector, a program clears the
/// bits of a prefix of its bytes and some of the next byte's — and every erase or program after
/// it fails. A read can be made to fail too ([`fail_read`](Self::fail_read)), as a driver I/O
/// error. Programs AND into the cells as the hardware does (no check that they were erased). How
/// an operation tears comes from a seed, so a failing case repeats.
#[derive(Debug)]
pub struct PowerCutFlash<'a, const WRITE: usize, const ERASE: usize> {
    mem: &'a mut [u8],
    /// Erase and program operations so far (the cut one included).
    pub ops: u32,
    /// Reads so far.
    pub reads: u32,
    cut: Option<u32>,
    fail_read: Option<u32>,
    rng: u64,
}

impl<'a, const WRITE: usize, const ERASE: usize> PowerCutFlash<'a, WRITE, ERASE> {
    /// A flash over `mem` that does not fail.
    pub fn new(mem: &'a mut [u8]) -> Self {
        PowerCutFlash {
            mem,
            ops: 0,
            reads: 0,
            cut: None,
            fail_read: None,
            rng: 1,
        }
    }

    /// Cuts the power at erase-or-program operation `op` (counted from the current count), tearing
    /// it as `seed` says; `None`: never.
    pub fn cut_at(&mut self, op: Option<u32>, seed: u64) {
        self.cut = op.map(|k| self.ops.saturating_add(k));
        self.rng = seed | 1;
    }

    /// Fails read `read` (counted from the current count) with an I/O error; `None`: never.
    pub fn fail_read(&mut self, read: Option<u32>) {
        self.fail_read = read.map(|k| self.reads.saturating_add(k));
    }

    /// The flash contents.
    pub fn bytes(&self) -> &[u8] {
        self.mem
    }

    fn next(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Whether this operation runs whole (`Ok(true)`) or is torn now (`Ok(false)`); after the cut
    /// an error.
    fn op(&mut self) -> Result<bool, NorFlashErrorKind> {
        let i = self.ops;
        self.ops = self.ops.saturating_add(1);
        match self.cut {
            Some(c) if i > c => Err(NorFlashErrorKind::Other),
            Some(c) if i == c => Ok(false),
            _ => Ok(true),
        }
    }
}

impl<const WRITE: usize, const ERASE: usize> ErrorType for PowerCutFlash<'_, WRITE, ERASE> {
    type Error = NorFlashErrorKind;
}

impl<const WRITE: usize, const ERASE: usize> ReadNorFlash for PowerCutFlash<'_, WRITE, ERASE> {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        check_read(self, offset, bytes.len())?;
        let i = self.reads;
        self.reads = self.reads.saturating_add(1);
        if self.fail_read == Some(i) {
            return Err(NorFlashErrorKind::Other);
        }
        let at = offset as usize;
        bytes.copy_from_slice(&self.mem[at..at + bytes.len()]);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.mem.len()
    }
}

impl<const WRITE: usize, const ERASE: usize> NorFlash for PowerCutFlash<'_, WRITE, ERASE> {
    const WRITE_SIZE: usize = WRITE;
    const ERASE_SIZE: usize = ERASE;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        check_erase(self, from, to)?;
        let (from, to) = (from as usize, to as usize);
        if self.op()? {
            self.mem[from..to].fill(0xFF);
            return Ok(());
        }
        let sectors = (to - from) / ERASE;
        if sectors > 0 {
            let done = self.next() as usize % sectors;
            let at = from + done * ERASE;
            self.mem[from..at].fill(0xFF);
            for i in at..at + ERASE {
                let set = self.next() as u8;
                self.mem[i] |= set;
            }
        }
        Err(NorFlashErrorKind::Other)
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        check_write(self, offset, bytes.len())?;
        let at = offset as usize;
        if self.op()? {
            for (m, b) in self.mem[at..at + bytes.len()].iter_mut().zip(bytes) {
                *m &= b;
            }
            return Ok(());
        }
        if !bytes.is_empty() {
            let done = self.next() as usize % bytes.len();
            for (m, b) in self.mem[at..at + done].iter_mut().zip(bytes) {
                *m &= b;
            }
            let keep = self.next() as u8;
            self.mem[at + done] &= bytes[done] | keep;
        }
        Err(NorFlashErrorKind::Other)
    }
}
