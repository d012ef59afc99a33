//! Sequential image I/O over flash: a writer that programs whole `WRITE_SIZE` chunks and a reader
//! that fetches aligned blocks, both feeding the CRC.

use crc::{CRC_32_ISO_HDLC, Crc, Digest, Table};
use embedded_storage::nor_flash::{NorFlash, NorFlashError, ReadNorFlash};

use super::SnapshotError;

type Result<T> = core::result::Result<T, SnapshotError>;

/// The CRC's lookup table: slice-by-16 (16 KiB) with `std`, where it is several times faster; one
/// 1 KiB table on boards, where flash is scarce. Same checksum either way.
#[cfg(feature = "std")]
type CrcTable = Table<16>;
#[cfg(not(feature = "std"))]
type CrcTable = Table<1>;

/// The image checksum: CRC-32 (ISO-HDLC, as zlib and Ethernet).
pub(crate) const CRC: Crc<u32, CrcTable> = Crc::<u32, CrcTable>::new(&CRC_32_ISO_HDLC);

/// Largest `WRITE_SIZE` / `READ_SIZE` supported (the stack buffer).
const BLOCK: usize = 256;

/// Streams bytes into erased flash from `offset`, `F::WRITE_SIZE` bytes per program operation.
pub(crate) struct Writer<'f, F: NorFlash> {
    flash: &'f mut F,
    at: u32,
    buf: [u8; BLOCK],
    fill: usize,
    crc: Digest<'static, u32, CrcTable>,
}

impl<'f, F: NorFlash> Writer<'f, F> {
    /// A writer at `offset` (whose range the caller erased).
    pub fn new(flash: &'f mut F, offset: u32) -> Result<Self> {
        if !F::WRITE_SIZE.is_power_of_two() || F::WRITE_SIZE > BLOCK {
            return Err(SnapshotError::FlashBounds);
        }
        Ok(Writer {
            flash,
            at: offset,
            buf: [0xFF; BLOCK],
            fill: 0,
            crc: CRC.digest(),
        })
    }

    /// The flash (to erase before the first write).
    pub fn flash_mut(&mut self) -> &mut F {
        self.flash
    }

    /// Appends bytes (checksummed).
    pub fn put(&mut self, mut bytes: &[u8]) -> Result<()> {
        self.crc.update(bytes);
        while !bytes.is_empty() {
            let n = (F::WRITE_SIZE - self.fill).min(bytes.len());
            self.buf[self.fill..self.fill + n].copy_from_slice(&bytes[..n]);
            self.fill += n;
            bytes = &bytes[n..];
            if self.fill == F::WRITE_SIZE {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Appends `n` zero bytes (checksummed).
    pub fn zeros(&mut self, mut n: usize) -> Result<()> {
        const Z: [u8; 64] = [0; 64];
        while n > 0 {
            let k = n.min(Z.len());
            self.put(&Z[..k])?;
            n -= k;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.flash
            .write(self.at, &self.buf[..F::WRITE_SIZE])
            .map_err(|e| SnapshotError::Flash(e.kind()))?;
        self.at += F::WRITE_SIZE as u32;
        // Only the chunk is ever programmed: erased bytes pad a short last one.
        self.buf[..F::WRITE_SIZE].fill(0xFF);
        self.fill = 0;
        Ok(())
    }

    /// Appends the CRC of everything so far, pads the last chunk with erased bytes (0xFF) and
    /// programs it.
    pub fn finish(mut self) -> Result<()> {
        let crc = core::mem::replace(&mut self.crc, CRC.digest()).finalize();
        self.put(&crc.to_le_bytes())?;
        if self.fill > 0 {
            self.flush()?;
        }
        Ok(())
    }
}

/// A writer for an `image`-byte image at `offset` of `flash`, after checking that it fits and
/// erasing the sectors it spans (whole `WRITE_SIZE` chunks, rounded up to erase sectors).
///
/// # Errors
///
/// [`FlashBounds`](SnapshotError::FlashBounds) (offset not erase-aligned, image past the end,
/// unsupported write size), before the erase; [`Flash`](SnapshotError::Flash) from the erase.
pub(crate) fn image_writer<F: NorFlash>(
    flash: &mut F,
    offset: u32,
    image: u32,
) -> Result<Writer<'_, F>> {
    let erase = F::ERASE_SIZE;
    let span = (image as usize)
        .div_ceil(F::WRITE_SIZE.max(1))
        .checked_mul(F::WRITE_SIZE)
        .map(|b| b.div_ceil(erase.max(1)) * erase)
        .ok_or(SnapshotError::FlashBounds)?;
    let end = (offset as usize)
        .checked_add(span)
        .filter(|&e| e <= flash.capacity() && u32::try_from(e).is_ok())
        .ok_or(SnapshotError::FlashBounds)?;
    if erase == 0 || offset as usize % erase != 0 {
        return Err(SnapshotError::FlashBounds);
    }
    let mut w = Writer::new(flash, offset)?;
    w.flash_mut()
        .erase(offset, end as u32)
        .map_err(|e| SnapshotError::Flash(e.kind()))?;
    Ok(w)
}

/// Reads flash sequentially from an offset in aligned blocks, checksumming what it hands out.
pub(crate) struct Reader<'f, F: ReadNorFlash> {
    flash: &'f mut F,
    /// Flash offset of `buf[0]`.
    base: u32,
    /// Next byte to hand out, relative to `base`.
    pos: usize,
    /// Valid bytes in `buf`.
    len: usize,
    buf: [u8; BLOCK],
    crc: Digest<'static, u32, CrcTable>,
}

impl<'f, F: ReadNorFlash> Reader<'f, F> {
    /// A reader at `offset`.
    pub fn new(flash: &'f mut F, offset: u32) -> Result<Self> {
        if !F::READ_SIZE.is_power_of_two() || F::READ_SIZE > BLOCK {
            return Err(SnapshotError::FlashBounds);
        }
        let base = offset & !(F::READ_SIZE as u32 - 1);
        Ok(Reader {
            flash,
            base,
            pos: (offset - base) as usize,
            len: 0,
            buf: [0; BLOCK],
            crc: CRC.digest(),
        })
    }

    /// Fills `out` with the next bytes. `checksum` feeds them to the CRC.
    pub fn get(&mut self, mut out: &mut [u8], checksum: bool) -> Result<()> {
        while !out.is_empty() {
            if self.pos >= self.len {
                self.refill()?;
            }
            let n = (self.len - self.pos).min(out.len());
            let (head, rest) = out.split_at_mut(n);
            head.copy_from_slice(&self.buf[self.pos..self.pos + n]);
            if checksum {
                self.crc.update(head);
            }
            self.pos += n;
            out = rest;
        }
        Ok(())
    }

    /// Skips `n` bytes, checksummed.
    pub fn skip(&mut self, mut n: usize) -> Result<()> {
        let mut tmp = [0u8; 64];
        while n > 0 {
            let k = n.min(tmp.len());
            self.get(&mut tmp[..k], true)?;
            n -= k;
        }
        Ok(())
    }

    /// The CRC of the bytes read so far.
    pub fn crc(&self) -> u32 {
        self.crc.clone().finalize()
    }

    fn refill(&mut self) -> Result<()> {
        let next = self
            .base
            .checked_add(self.len as u32)
            .ok_or(SnapshotError::Truncated)?;
        let cap = self.flash.capacity();
        let left = cap
            .checked_sub(next as usize)
            .ok_or(SnapshotError::Truncated)?;
        let n = left.min(BLOCK) & !(F::READ_SIZE - 1);
        if n == 0 {
            return Err(SnapshotError::Truncated);
        }
        self.flash
            .read(next, &mut self.buf[..n])
            .map_err(|e| SnapshotError::Flash(e.kind()))?;
        self.pos -= self.len;
        self.base = next;
        self.len = n;
        Ok(())
    }
}
