//! Saving a sequence to flash and restoring it (see [`snapshot`](crate::snapshot)).

use core::ops::Range;

use embedded_storage::nor_flash::{NorFlash, ReadNorFlash};

use super::KvCache;
use crate::alloc::{NO_PAGE, PageAllocator};
use crate::error::Error;
use crate::plan::PoolKind;
use crate::sequence::{SeqId, SeqMode};
use crate::snapshot::{HEADER_BYTES, Header, Reader, SnapshotError, Writer, image_writer};

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
        let mut w = image_writer(flash, offset, header.image)?;
        w.put(&header.encode())?;
        for t in tokens {
            w.put(&t.to_le_bytes())?;
        }
        self.write_pages(&mut w, seq)?;
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
        let mut r = Reader::new(flash, offset)?;
        r.skip(HEADER_BYTES)?;
        for t in tokens.iter_mut() {
            let mut b = [0u8; 4];
            r.get(&mut b, true)?;
            *t = u32::from_le_bytes(b);
        }
        self.read_pages(&mut r, seq)?;
        let expected = r.crc();
        let mut crc = [0u8; 4];
        r.get(&mut crc, false)?;
        if u32::from_le_bytes(crc) != expected {
            // The flash changed between the passes.
            return Err(SnapshotError::CrcMismatch);
        }
        Ok(())
    }

    /// Writes the image payload of `seq`'s held pages (released ones skipped), in table order:
    /// per page, per layer, per pool with row bytes, `page_tokens` rows (rows past the length
    /// zero).
    pub(crate) fn write_pages<F: NorFlash>(&self, w: &mut Writer<'_, F>, seq: SeqId) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        let len = self.seqs.record(slot).len as usize;
        let p = self.config.page_tokens as usize;
        let g = &self.plan.geometry;
        let table = &self.seqs.table(slot)[..len.div_ceil(p)];
        for (i, &page) in table.iter().enumerate() {
            if page == NO_PAGE {
                continue;
            }
            let used = (len - i * p).min(p);
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
        Ok(())
    }

    /// Reads what [`write_pages`](Self::write_pages) wrote into `seq`'s held pages (already
    /// allocated for its length), zeroing each slot past the rows read.
    pub(crate) fn read_pages<F: ReadNorFlash>(
        &mut self,
        r: &mut Reader<'_, F>,
        seq: SeqId,
    ) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        let g = self.plan.geometry;
        let p = self.config.page_tokens as usize;
        let len = self.seqs.record(slot).len as usize;
        for i in 0..len.div_ceil(p) {
            let page = self.seqs.table(slot)[i];
            if page == NO_PAGE {
                continue;
            }
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
        Ok(())
    }

    /// The positions a window released from the paged sequence `seq`: its page table is held
    /// pages, then released ones (this range, page aligned; empty when none), then held pages
    /// to the end.
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence);
    /// [`WindowedSequence`](SnapshotError::WindowedSequence) for released pages in more than
    /// one run (a [`slide`](Self::slide) with another window than the configured one).
    pub(crate) fn released_positions(&self, seq: SeqId) -> Result<Range<u32>> {
        let slot = self.seqs.slot(seq)?;
        let len = self.seqs.record(slot).len as usize;
        let p = self.config.page_tokens as usize;
        let table = &self.seqs.table(slot)[..len.div_ceil(p)];
        let from = table.iter().position(|&pg| pg == NO_PAGE).unwrap_or(0);
        let to = table[from..]
            .iter()
            .position(|&pg| pg != NO_PAGE)
            .map_or(table.len(), |k| from + k);
        if table[to..].contains(&NO_PAGE) {
            return Err(SnapshotError::WindowedSequence);
        }
        // Table entries fit u16 and pages u16 tokens each: positions fit u32.
        Ok((from * p) as u32..(to * p) as u32)
    }

    /// Checks that [`open_restored`](Self::open_restored) of `len` positions with `released`
    /// released succeeds: a free slot, `len` within `max_seq_tokens` and the page table, pages
    /// for every position not released (cached pages count: they are evicted).
    pub(crate) fn check_restored(&self, len: u32, released: &Range<u32>) -> Result<()> {
        self.seqs.free_slot()?;
        if len > self.config.max_seq_tokens {
            return Err(Error::SequenceFull.into());
        }
        let need = self.pages_for(len);
        let p = self.config.page_tokens as u32;
        let gone = ((released.end - released.start) / p) as usize;
        if need > self.plan.table_len || need - gone.min(need) > self.pool.available() {
            return Err(Error::OutOfPages.into());
        }
        Ok(())
    }

    /// Opens a paged sequence of `len` positions whose pages of `released` (page aligned) are
    /// released and every other one newly allocated (contents left to the caller). All or
    /// nothing; [`check_restored`](Self::check_restored) says whether it succeeds.
    pub(crate) fn open_restored(&mut self, len: u32, released: &Range<u32>) -> Result<SeqId> {
        self.check_restored(len, released)?;
        let slot = self.seqs.free_slot()?;
        let id = self.seqs.open(slot, SeqMode::Paged, 0, 0);
        let p = self.config.page_tokens as usize;
        let gone = released.start as usize / p..released.end as usize / p;
        for i in 0..self.pages_for(len) {
            let page = if gone.contains(&i) {
                NO_PAGE
            } else {
                match self.alloc_page() {
                    Ok(page) => page,
                    Err(e) => {
                        // Unreachable after the check; undo anyway.
                        self.release_entries(slot, 0..i);
                        self.seqs.close(slot);
                        return Err(e.into());
                    }
                }
            };
            *self.seqs.entry_mut(slot, i) = page;
        }
        let held = self.pages_for(len) as u16;
        let rec = self.seqs.record_mut(slot);
        rec.len = len;
        rec.held = held;
        Ok(id)
    }
}
