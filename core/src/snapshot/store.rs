//! [`SnapshotStore`]: images kept in a flash region of two or more slots, so that losing power
//! while a new image is written never loses the last committed one.

use embedded_storage::nor_flash::{NorFlash, NorFlashError, ReadNorFlash};

use super::stream::{CRC, Reader};
use super::{HEADER_BYTES, Header, SnapshotError};
use crate::KvCache;
use crate::alloc::PageAllocator;
use crate::sequence::SeqId;

type Result<T> = core::result::Result<T, SnapshotError>;

/// Magic bytes of a commit record.
pub const RECORD_MAGIC: [u8; 4] = *b"EKVC";
/// Bytes of a commit record (before rounding up to the flash's write size).
pub const RECORD_BYTES: usize = 40;
const RECORD_VERSION: u16 = 1;
/// Largest `WRITE_SIZE` the record buffer takes.
const RECORD_MAX: usize = 256;

/// A committed image: where it is and what its record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Commit {
    /// Slot index.
    pub slot: u32,
    /// Commit sequence number (higher is newer).
    pub sequence: u64,
    /// Fingerprint the image was written with.
    pub fingerprint: u64,
    /// Image bytes.
    pub image: u32,
    /// The image's CRC-32.
    pub image_crc: u32,
}

impl Commit {
    fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[0..4].copy_from_slice(&RECORD_MAGIC);
        b[4..6].copy_from_slice(&RECORD_VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.sequence.to_le_bytes());
        b[16..24].copy_from_slice(&self.fingerprint.to_le_bytes());
        b[24..28].copy_from_slice(&self.image.to_le_bytes());
        b[28..32].copy_from_slice(&self.image_crc.to_le_bytes());
        let crc = CRC.checksum(&b[..36]);
        b[36..40].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The record in `b` for `slot`, if it is intact.
    fn decode(b: &[u8; RECORD_BYTES], slot: u32) -> Option<Commit> {
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let u64_at = |at: usize| u64::from(u32_at(at)) | (u64::from(u32_at(at + 4)) << 32);
        let intact = b[0..4] == RECORD_MAGIC
            && b[4..6] == RECORD_VERSION.to_le_bytes()
            && b[6..8] == [0, 0]
            && b[32..36] == [0; 4]
            && CRC.checksum(&b[..36]) == u32_at(36);
        intact.then(|| Commit {
            slot,
            sequence: u64_at(8),
            fingerprint: u64_at(16),
            image: u32_at(24),
            image_crc: u32_at(28),
        })
    }
}

/// A power-loss-safe home for snapshot images: `slots` (2 to [`MAX_SLOTS`]) slots of
/// `slot_bytes` from `offset` in a NOR flash.
///
/// # Protocol
///
/// The region is `slots` slots of `slot_bytes` (whole erase sectors) each. A slot holds an image
/// at its start and a 40-byte *commit record* in its last `WRITE_SIZE`-rounded bytes:
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | magic `b"EKVC"` |
/// | 4..6 | record version (1) |
/// | 6..8 | zero |
/// | 8..16 | commit sequence number (u64, one more than the newest before it) |
/// | 16..24 | fingerprint of the image |
/// | 24..28 | image bytes |
/// | 28..32 | the image's own CRC-32 (its last four bytes) |
/// | 32..36 | zero |
/// | 36..40 | CRC-32 (ISO-HDLC) of bytes 0..36 |
///
/// [`save`](Self::save) picks the slot after the one holding the newest committed
/// image (so writes rotate over the slots), erases the sector that holds its record first, writes
/// the image, reads it back whole to check its CRC, and programs the record last. Until that last
/// program completes the slot has no valid record and [`restore`](Self::restore) takes
/// the previous image; a torn program (some bits of the record cleared) fails the record's CRC.
/// [`restore`](Self::restore) tries the committed images newest first and falls back
/// to an older one when an image is damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotStore {
    offset: u32,
    slot_bytes: u32,
    slots: u32,
}

impl SnapshotStore {
    /// A store over `slots` slots of `slot_bytes` starting at `offset`. The flash's geometry is
    /// checked by each call (erase-aligned offset and slot size, the region inside the flash).
    ///
    /// # Errors
    ///
    /// [`FlashBounds`](SnapshotError::FlashBounds) for fewer than two or more than [`MAX_SLOTS`]
    /// slots, empty slots or a region past 4 GiB.
    pub const fn new(offset: u32, slot_bytes: u32, slots: u32) -> Result<Self> {
        let fits = match slot_bytes.checked_mul(slots) {
            Some(total) => offset.checked_add(total).is_some(),
            None => false,
        };
        if slots < 2 || slots > MAX_SLOTS as u32 || slot_bytes == 0 || !fits {
            return Err(SnapshotError::FlashBounds);
        }
        Ok(SnapshotStore {
            offset,
            slot_bytes,
            slots,
        })
    }

    /// Flash offset of slot `slot`.
    pub const fn slot_offset(&self, slot: u32) -> u32 {
        self.offset + slot * self.slot_bytes
    }

    /// Bytes the record takes at the end of a slot: [`RECORD_BYTES`] rounded up to `WRITE_SIZE`.
    const fn record_span(write: usize) -> usize {
        let w = if write == 0 { 1 } else { write };
        RECORD_BYTES.div_ceil(w) * w
    }

    /// The largest image a slot holds on flash `F`.
    pub const fn capacity<F: NorFlash>(&self) -> usize {
        let span = Self::record_span(F::WRITE_SIZE);
        let w = if F::WRITE_SIZE == 0 { 1 } else { F::WRITE_SIZE };
        (self.slot_bytes as usize).saturating_sub(span) / w * w
    }

    /// Checks the region against the flash's geometry.
    fn check<F: NorFlash>(&self, flash: &F) -> Result<()> {
        let erase = F::ERASE_SIZE;
        let end = self.offset as usize + (self.slot_bytes * self.slots) as usize;
        let ok = erase != 0
            && F::WRITE_SIZE.is_power_of_two()
            && F::WRITE_SIZE <= RECORD_MAX
            && self.offset as usize % erase == 0
            && self.slot_bytes as usize % erase == 0
            && end <= flash.capacity()
            && self.capacity::<F>() > HEADER_BYTES;
        if ok {
            Ok(())
        } else {
            Err(SnapshotError::FlashBounds)
        }
    }

    /// The record of `slot`, if intact.
    fn record<F: NorFlash>(&self, flash: &mut F, slot: u32) -> Result<Option<Commit>> {
        let at = self.slot_offset(slot) + self.slot_bytes - Self::record_span(F::WRITE_SIZE) as u32;
        let mut b = [0u8; RECORD_BYTES];
        Reader::new(flash, at)?.get(&mut b, false)?;
        Ok(Commit::decode(&b, slot))
    }

    /// Every intact commit record, newest first, and how many there were.
    fn commits<F: NorFlash>(&self, flash: &mut F) -> Result<([Option<Commit>; MAX_SLOTS], usize)> {
        let mut found = [None; MAX_SLOTS];
        let mut n = 0;
        for slot in 0..self.slots {
            if let Some(c) = self.record(flash, slot)? {
                found[n] = Some(c);
                n += 1;
            }
        }
        found[..n].sort_unstable_by_key(|c| core::cmp::Reverse(c.map(|c| c.sequence)));
        Ok((found, n))
    }

    /// The newest intact commit record, if any (its image is not read).
    ///
    /// # Errors
    ///
    /// [`FlashBounds`](SnapshotError::FlashBounds) for a region the flash's geometry does not
    /// allow; [`Flash`](SnapshotError::Flash) for a driver error.
    pub fn latest<F: NorFlash>(&self, flash: &mut F) -> Result<Option<Commit>> {
        self.check(flash)?;
        let (found, _) = self.commits(flash)?;
        Ok(found[0])
    }

    /// Writes `seq` (with its `tokens`, as [`KvCache::snapshot`]) into the slot after the newest
    /// committed image and commits it; returns the image's header and its commit. The cache is
    /// not changed. A power cut at any point leaves the previous committed image restorable.
    ///
    /// # Errors
    ///
    /// [`FlashBounds`](SnapshotError::FlashBounds) for a region the flash's geometry does not
    /// allow or an image larger than [`capacity`](Self::capacity); [`KvCache::snapshot`]'s
    /// errors; [`CrcMismatch`](SnapshotError::CrcMismatch) when the image does not read back
    /// intact (not committed); [`Flash`](SnapshotError::Flash) for a driver error. On every error
    /// the committed images are as before.
    pub fn save<'a, A: PageAllocator<'a>, F: NorFlash>(
        &self,
        cache: &KvCache<'a, A>,
        seq: SeqId,
        tokens: &[u32],
        fingerprint: u64,
        flash: &mut F,
    ) -> Result<(Header, Commit)> {
        self.check(flash)?;
        let header = Header::new(cache.config(), cache.seq_len(seq)?, fingerprint)?;
        let commit = self.save_with(flash, header.image, fingerprint, |flash, start| {
            cache
                .snapshot(seq, tokens, fingerprint, flash, start)
                .map(drop)
        })?;
        Ok((header, commit))
    }

    /// [`save`](Self::save) of an image of `image` bytes with `fingerprint` that `write` writes
    /// at the flash offset it is given (erasing what it needs there): the slot after the newest
    /// committed image, its record's sector erased first, the image checked when read back,
    /// the record programmed last. The region's geometry is checked first.
    pub(crate) fn save_with<F: NorFlash>(
        &self,
        flash: &mut F,
        image: u32,
        fingerprint: u64,
        write: impl FnOnce(&mut F, u32) -> Result<()>,
    ) -> Result<Commit> {
        self.check(flash)?;
        if image as usize > self.capacity::<F>() {
            return Err(SnapshotError::FlashBounds);
        }
        let newest = self.commits(flash)?.0[0];
        let (slot, sequence) = match newest {
            Some(c) => (
                (c.slot + 1) % self.slots,
                c.sequence
                    .checked_add(1)
                    .ok_or(SnapshotError::CorruptSnapshot)?,
            ),
            None => (0, 1),
        };
        let start = self.slot_offset(slot);
        let end = start + self.slot_bytes;
        // The record's sector first: from here on the slot has no valid record.
        flash
            .erase(end - F::ERASE_SIZE as u32, end)
            .map_err(|e| SnapshotError::Flash(e.kind()))?;
        write(flash, start)?;
        let image_crc = image_crc(flash, start, image)?;
        let commit = Commit {
            slot,
            sequence,
            fingerprint,
            image,
            image_crc,
        };
        let span = Self::record_span(F::WRITE_SIZE);
        let mut buf = [0xFFu8; RECORD_MAX];
        buf[..RECORD_BYTES].copy_from_slice(&commit.encode());
        flash
            .write(end - span as u32, &buf[..span])
            .map_err(|e| SnapshotError::Flash(e.kind()))?;
        Ok(commit)
    }

    /// Restores the newest committed image that is intact into a new sequence of `cache`, as
    /// [`KvCache::restore`]; an image that fails its checks (damaged since it was committed) is
    /// skipped for the next newest.
    ///
    /// # Errors
    ///
    /// [`NoImage`](SnapshotError::NoImage) when no committed image is intact;
    /// [`FlashBounds`](SnapshotError::FlashBounds) for a region the flash's geometry does not
    /// allow; [`Flash`](SnapshotError::Flash) as soon as the driver fails a read (no fallback:
    /// the image may be fine); [`KvCache::restore`]'s errors other than damage (another
    /// fingerprint or configuration, no room in the cache) for the newest intact image. The cache
    /// is unchanged on error (as [`KvCache::restore`] says).
    pub fn restore<'a, A: PageAllocator<'a>, F: NorFlash>(
        &self,
        cache: &mut KvCache<'a, A>,
        fingerprint: u64,
        flash: &mut F,
        tokens: &mut [u32],
    ) -> Result<(SeqId, Header, Commit)> {
        let ((seq, header), commit) = self.restore_with(flash, |flash, start| {
            cache.restore(flash, start, fingerprint, tokens)
        })?;
        Ok((seq, header, commit))
    }

    /// [`restore`](Self::restore) with `restore` reading the image at the flash offset it is
    /// given: the committed images newest first, an image damaged since it was committed
    /// skipped, any other error returned. The region's geometry is checked first.
    pub(crate) fn restore_with<F: NorFlash, T>(
        &self,
        flash: &mut F,
        mut restore: impl FnMut(&mut F, u32) -> Result<T>,
    ) -> Result<(T, Commit)> {
        self.check(flash)?;
        let (found, n) = self.commits(flash)?;
        for commit in found[..n].iter().flatten() {
            let start = self.slot_offset(commit.slot);
            if commit.image as usize > self.capacity::<F>() {
                continue;
            }
            // The record must name this image; `restore` checks the CRC over its bytes.
            match stored_crc(flash, start, commit.image) {
                Ok(crc) if crc == commit.image_crc => {}
                Err(e) if !damaged(e) => return Err(e),
                _ => continue,
            }
            match restore(flash, start) {
                Ok(got) => return Ok((got, *commit)),
                Err(e) if damaged(e) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(SnapshotError::NoImage)
    }
}

/// Whether `e` says an image is damaged (rather than the driver failing, or the image being
/// another model's or not fitting the cache).
const fn damaged(e: SnapshotError) -> bool {
    matches!(
        e,
        SnapshotError::BadMagic
            | SnapshotError::UnsupportedVersion
            | SnapshotError::CorruptSnapshot
            | SnapshotError::Truncated
            | SnapshotError::CrcMismatch
            | SnapshotError::CorruptGroupEntry
    )
}

/// Most slots a store uses (records are gathered on the stack).
pub const MAX_SLOTS: usize = 8;

/// The CRC-32 stored in the last four bytes of the `image`-byte image at `start` (not checked).
fn stored_crc<F: ReadNorFlash>(flash: &mut F, start: u32, image: u32) -> Result<u32> {
    let at = image
        .checked_sub(4)
        .and_then(|b| start.checked_add(b))
        .ok_or(SnapshotError::CorruptSnapshot)?;
    let mut crc = [0u8; 4];
    Reader::new(flash, at)?.get(&mut crc, false)?;
    Ok(u32::from_le_bytes(crc))
}

/// The CRC-32 stored in the last four bytes of the `image`-byte image at `start`, after
/// checking that it matches the bytes before it.
fn image_crc<F: ReadNorFlash>(flash: &mut F, start: u32, image: u32) -> Result<u32> {
    let body = (image as usize)
        .checked_sub(4)
        .filter(|&b| b >= HEADER_BYTES)
        .ok_or(SnapshotError::CorruptSnapshot)?;
    let mut r = Reader::new(flash, start)?;
    r.skip(body)?;
    let expected = r.crc();
    let mut crc = [0u8; 4];
    r.get(&mut crc, false)?;
    let crc = u32::from_le_bytes(crc);
    if crc == expected {
        Ok(crc)
    } else {
        Err(SnapshotError::CrcMismatch)
    }
}
