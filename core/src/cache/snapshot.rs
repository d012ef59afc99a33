//! Saving a sequence to flash and restoring it (see [`snapshot`](crate::snapshot)).

use embedded_storage::nor_flash::{NorFlash, NorFlashError, ReadNorFlash};

use super::KvCache;
use crate::alloc::{NO_PAGE, PageAllocator};
use crate::error::Error;
use crate::plan::PoolKind;
use crate::sequence::{SeqId, SeqMode};
use crate::snapshot::{HEADER_BYTES, Header, Reader, SnapshotError, Writer};

type Result<T> = core::result::Result<T, SnapshotError>;

impl<'a, A: PageAllocator<'a>> KvCache<'a, A> {
    /// Writes `seq` — its `tokens` (one id per position, which the cache does not keep) and its
    /// pages in every layer — as an image (see [`snapshot`](crate::snapshot)) into `flash` at
    /// `offset`: erases the sectors the image needs, programs it in `WRITE_SIZE` chunks (the last
    /// padded with 0xFF) and returns its header. The cache is not changed.
    ///
    /// # Errors
    ///
    /// [`Cache`](SnapshotError::Cache) with [`UnknownSequence`](Error::UnknownSequence),
    /// [`LengthMismatch`](Error::LengthMismatch) (`tokens` not one per position) or
    /// [`Config`](Error::Config) ([`Overflow`](crate::ConfigError::Overflow): image past 4 GiB);
    /// [`WindowedSequence`](SnapshotError::WindowedSequence),
    /// [`FlashBounds`](SnapshotError::FlashBounds) (offset not erase-aligned, image past the
    /// end, unsupported write size) — all before the first erase — and
    /// [`Flash`](SnapshotError::Flash) with the driver's error kind.
    pub fn snapshot<F: NorFlash>(
        &self,
        seq: SeqId,
        tokens: &[u32],
        fingerprint: u64,
        flash: &mut F,
        offset: u32,
    ) -> Result<Header> {
        let slot = self.seqs.slot(seq)?;
        let len = self.seqs.record(slot).len;
        if tokens.len() != len as usize {
            return Err(Error::LengthMismatch.into());
        }
        let p = self.config.page_tokens as usize;
        let pages = (len as usize).div_ceil(p);
        let table = &self.seqs.table(slot)[..pages];
        if table.contains(&NO_PAGE) {
            return Err(SnapshotError::WindowedSequence);
        }
        let header = Header::new(&self.config, len, fingerprint)?;
        let erase = F::ERASE_SIZE;
        let span = (header.image as usize)
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
        w.put(&header.encode())?;
        for t in tokens {
            w.put(&t.to_le_bytes())?;
        }
        let g = &self.plan.geometry;
        for (i, &page) in table.iter().enumerate() {
            let used = (len as usize - i * p).min(p);
            for layer in 0..g.layers {
                for pool in PoolKind::ALL {
                    let row = g.pool_row_bytes(pool);
                    if row == 0 {
                        continue;
                    }
                    let at =
                        self.plan.pool_offset(layer, pool) + page as usize * g.pool_stride(pool);
                    w.put(&self.data[at..at + used * row])?;
                    w.zeros((p - used) * row)?;
                }
            }
        }
        w.finish()?;
        Ok(header)
    }

    /// Restores an image from `flash` at `offset` into a new paged sequence and returns it with
    /// the image's header; its token ids go to `tokens[..n]`. Everything is verified before the
    /// pool is touched — magic, version, header consistency, the CRC-32 over the whole image,
    /// `fingerprint`, shape / formats / page size — then the pages are allocated all or nothing,
    /// filled from a second pass (CRC checked again), and, with a prefix index, the full chunks
    /// published as a committed prompt (so later prompts starting with these tokens reuse them).
    ///
    /// # Errors
    ///
    /// [`Truncated`](SnapshotError::Truncated), [`BadMagic`](SnapshotError::BadMagic),
    /// [`UnsupportedVersion`](SnapshotError::UnsupportedVersion),
    /// [`CorruptSnapshot`](SnapshotError::CorruptSnapshot),
    /// [`CrcMismatch`](SnapshotError::CrcMismatch),
    /// [`FingerprintMismatch`](SnapshotError::FingerprintMismatch),
    /// [`ConfigMismatch`](SnapshotError::ConfigMismatch),
    /// [`FlashBounds`](SnapshotError::FlashBounds), [`Flash`](SnapshotError::Flash), and
    /// [`Cache`](SnapshotError::Cache) with [`LengthMismatch`](Error::LengthMismatch) (`tokens`
    /// too short), [`TooManySequences`](Error::TooManySequences),
    /// [`SequenceFull`](Error::SequenceFull) or [`OutOfPages`](Error::OutOfPages). On every
    /// error the cache holds what it held before;
    /// only a flash that fails or changes during the second pass, after the allocation, can have
    /// cost cached (unreferenced, published) pages their place.
    pub fn restore<F: ReadNorFlash>(
        &mut self,
        flash: &mut F,
        offset: u32,
        fingerprint: u64,
        tokens: &mut [u32],
    ) -> Result<(SeqId, Header)> {
        // Pass 1: header and CRC.
        let mut r = Reader::new(flash, offset)?;
        let mut hb = [0u8; HEADER_BYTES];
        r.get(&mut hb, true)?;
        let header = Header::decode(&hb)?;
        r.skip(header.image as usize - HEADER_BYTES - 4)?;
        let expected = r.crc();
        let mut crc = [0u8; 4];
        r.get(&mut crc, false)?;
        if u32::from_le_bytes(crc) != expected {
            return Err(SnapshotError::CrcMismatch);
        }
        if header.fingerprint != fingerprint {
            return Err(SnapshotError::FingerprintMismatch);
        }
        if !header.matches(&self.config) {
            return Err(SnapshotError::ConfigMismatch);
        }
        let n = header.tokens as usize;
        let tokens = tokens.get_mut(..n).ok_or(Error::LengthMismatch)?;

        let seq = self.create_sequence(SeqMode::Paged)?;
        let filled = self
            .reserve(seq, header.tokens)
            .map_err(SnapshotError::from)
            .and_then(|_| self.fill_from(seq, flash, offset, tokens))
            .and_then(|()| {
                if self.config.prefix_index {
                    self.commit_prompt(seq, tokens).map(drop)?;
                }
                Ok(())
            });
        match filled {
            Ok(()) => Ok((seq, header)),
            Err(e) => {
                let _ = self.free_sequence(seq);
                Err(e)
            }
        }
    }

    /// Pass 2 of [`restore`](Self::restore): tokens and pages into `seq` (already reserved).
    fn fill_from<F: ReadNorFlash>(
        &mut self,
        seq: SeqId,
        flash: &mut F,
        offset: u32,
        tokens: &mut [u32],
    ) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        let mut r = Reader::new(flash, offset)?;
        r.skip(HEADER_BYTES)?;
        for t in tokens.iter_mut() {
            let mut b = [0u8; 4];
            r.get(&mut b, true)?;
            *t = u32::from_le_bytes(b);
        }
        let g = self.plan.geometry;
        let p = self.config.page_tokens as usize;
        let len = tokens.len();
        for i in 0..len.div_ceil(p) {
            let page = self.seqs.table(slot)[i];
            let used = (len - i * p).min(p);
            for layer in 0..g.layers {
                for pool in PoolKind::ALL {
                    let row = g.pool_row_bytes(pool);
                    if row == 0 {
                        continue;
                    }
                    let at =
                        self.plan.pool_offset(layer, pool) + page as usize * g.pool_stride(pool);
                    let slot_bytes = &mut self.data[at..at + g.pool_stride(pool)];
                    let (rows, rest) = slot_bytes.split_at_mut(used * row);
                    r.get(rows, true)?;
                    rest.fill(0);
                    r.skip((p - used) * row)?;
                }
            }
        }
        let expected = r.crc();
        let mut crc = [0u8; 4];
        r.get(&mut crc, false)?;
        if u32::from_le_bytes(crc) != expected {
            // The flash changed between the passes.
            return Err(SnapshotError::CrcMismatch);
        }
        Ok(())
    }
}
