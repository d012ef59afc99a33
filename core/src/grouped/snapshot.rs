//! Snapshots of grouped sequences: every group's pages (a windowed group's held ones only, with
//! the positions it released) in one image, restored in every group or none (see
//! [`snapshot`](crate::snapshot) for the layout).

use core::ops::Range;

use embedded_storage::nor_flash::{NorFlash, ReadNorFlash};

use super::GroupedCache;
use crate::alloc::PageAllocator;
use crate::config::MAX_GROUPS;
use crate::error::Error;
use crate::sequence::SeqId;
use crate::snapshot::{
    Commit, GroupedHeader, HEADER_BYTES, MAX_HEADER_BYTES, Reader, SnapshotError, SnapshotStore,
    image_writer,
};

type Result<T> = core::result::Result<T, SnapshotError>;

impl<'a, A: PageAllocator<'a>> GroupedCache<'a, A> {
    /// The header of an image of `seq` (of `tokens` token ids) with `fingerprint`: one group
    /// holding every position gives the version 1 or 2 header [`KvCache::snapshot`] writes,
    /// anything else a version-3 header of every group and the positions it released.
    ///
    /// # Errors
    ///
    /// As [`snapshot`](Self::snapshot), before any flash access.
    ///
    /// [`KvCache::snapshot`]: crate::KvCache::snapshot
    pub fn snapshot_header(
        &self,
        seq: SeqId,
        tokens: &[u32],
        fingerprint: u64,
    ) -> Result<GroupedHeader> {
        let mut released: [Range<u32>; MAX_GROUPS] = core::array::from_fn(|_| 0..0);
        for (g, c) in self.groups().enumerate() {
            released[g] = c.released_positions(seq)?;
        }
        let len = self.seq_len(seq)?;
        if tokens.len() != len as usize {
            return Err(Error::LengthMismatch.into());
        }
        if !self.several() && released[0].is_empty() {
            let header = crate::snapshot::Header::new(self.first()?.config(), len, fingerprint)?;
            return Ok(GroupedHeader::from_single(&header));
        }
        let count = self.group_count();
        GroupedHeader::new(&self.config, len, fingerprint, &released[..count]).map_err(|e| {
            match e {
                // Released positions no configured window releases.
                SnapshotError::CorruptGroupEntry => SnapshotError::WindowedSequence,
                e => e,
            }
        })
    }

    /// Writes `seq` — its `tokens` (one id per position, which the cache does not keep) and
    /// every group's pages — as an image (see [`snapshot`](crate::snapshot)) into `flash` at
    /// `offset`, and returns its header. A cache of one group whose sequence holds every
    /// position writes the image [`KvCache::snapshot`] writes, byte for byte; otherwise the
    /// image is a grouped one (version 3): per group its layers, window and formats, the
    /// positions its window released and the pages it still holds. The cache is not changed.
    ///
    /// # Errors
    ///
    /// [`Cache`](SnapshotError::Cache) with [`UnknownSequence`](Error::UnknownSequence),
    /// [`LengthMismatch`](Error::LengthMismatch) or [`Config`](Error::Config)
    /// ([`Overflow`](crate::ConfigError::Overflow): image past 4 GiB);
    /// [`WindowedSequence`](SnapshotError::WindowedSequence) for released pages no configured
    /// window releases; [`FlashBounds`](SnapshotError::FlashBounds) — all before the first
    /// erase — and [`Flash`](SnapshotError::Flash) with the driver's error kind.
    ///
    /// [`KvCache::snapshot`]: crate::KvCache::snapshot
    pub fn snapshot<F: NorFlash>(
        &self,
        seq: SeqId,
        tokens: &[u32],
        fingerprint: u64,
        flash: &mut F,
        offset: u32,
    ) -> Result<GroupedHeader> {
        let header = self.snapshot_header(seq, tokens, fingerprint)?;
        if header.single().is_some() {
            self.first()?
                .snapshot(seq, tokens, fingerprint, flash, offset)?;
            return Ok(header);
        }
        let mut w = image_writer(flash, offset, header.image)?;
        let mut bytes = [0u8; MAX_HEADER_BYTES];
        w.put(header.encode(&mut bytes))?;
        for t in tokens {
            w.put(&t.to_le_bytes())?;
        }
        for c in self.groups() {
            c.write_pages(&mut w, seq)?;
        }
        w.finish()?;
        Ok(header)
    }

    /// Restores an image from `flash` at `offset` into a new sequence of every group and
    /// returns it with the image's header; its token ids go to `tokens[..n]`.
    ///
    /// A version 1 or 2 image goes to a cache of one group as [`KvCache::restore`] takes it
    /// (another number of groups is
    /// [`GroupCountMismatch`](SnapshotError::GroupCountMismatch)). A grouped image is verified
    /// whole first — header and group entries, the CRC-32 over the image, `fingerprint`, shape
    /// and page size, then each group's layers, formats and window — then every group is
    /// checked for a sequence slot and pages for the positions the image holds; only then is
    /// the sequence opened in every group (the positions a windowed group had released stay
    /// released), filled from a second pass (CRC checked again) and, with a prefix index, its
    /// tokens committed as its prompt in every group ([`commit_prompt`](Self::commit_prompt)).
    /// A restored sequence continues as the saved one would have: writes, attention and
    /// releases give the same bits.
    ///
    /// # Errors
    ///
    /// [`KvCache::restore`]'s, and for grouped images
    /// [`CorruptGroupEntry`](SnapshotError::CorruptGroupEntry),
    /// [`GroupCountMismatch`](SnapshotError::GroupCountMismatch),
    /// [`GroupLayersMismatch`](SnapshotError::GroupLayersMismatch),
    /// [`GroupFormatMismatch`](SnapshotError::GroupFormatMismatch),
    /// [`GroupWindowMismatch`](SnapshotError::GroupWindowMismatch). On every error every group
    /// holds what it held before; only a flash that fails or changes during the second pass,
    /// after the allocation, can have cost cached (unreferenced, published) pages their place.
    ///
    /// [`KvCache::restore`]: crate::KvCache::restore
    pub fn restore<F: ReadNorFlash>(
        &mut self,
        flash: &mut F,
        offset: u32,
        fingerprint: u64,
        tokens: &mut [u32],
    ) -> Result<(SeqId, GroupedHeader)> {
        // Pass 1: header, group entries and CRC.
        let mut r = Reader::new(flash, offset)?;
        let mut bytes = [0u8; MAX_HEADER_BYTES];
        let (first, _) = bytes.split_at_mut(HEADER_BYTES);
        r.get(first, true)?;
        let first: &[u8; HEADER_BYTES] = (&*first)
            .try_into()
            .map_err(|_| SnapshotError::CorruptSnapshot)?;
        let len = GroupedHeader::header_len(first)?;
        if len == HEADER_BYTES && !self.several() {
            // Versions 1 and 2: exactly as a `KvCache`.
            let (seq, header) = self
                .first_mut()?
                .restore(flash, offset, fingerprint, tokens)?;
            return Ok((seq, GroupedHeader::from_single(&header)));
        }
        r.get(&mut bytes[HEADER_BYTES..len], true)?;
        let header = GroupedHeader::decode(&bytes[..len])?;
        let body = (header.image as usize)
            .checked_sub(len + 4)
            .ok_or(SnapshotError::CorruptSnapshot)?;
        r.skip(body)?;
        let expected = r.crc();
        let mut crc = [0u8; 4];
        r.get(&mut crc, false)?;
        if u32::from_le_bytes(crc) != expected {
            return Err(SnapshotError::CrcMismatch);
        }
        if header.fingerprint != fingerprint {
            return Err(SnapshotError::FingerprintMismatch);
        }
        header.check_matches(&self.config)?;
        let n = header.tokens as usize;
        let tokens = tokens.get_mut(..n).ok_or(Error::LengthMismatch)?;

        // Every group can take the sequence before any opens it.
        let released = |g: usize| {
            header
                .group(g)
                .map_or(0..0, |e| e.released_from..e.first_held)
        };
        for (g, c) in self.groups().enumerate() {
            c.check_restored(header.tokens, &released(g))?;
        }
        let mut seq = Err(SnapshotError::Cache(Error::TooManySequences));
        for (g, c) in self.groups_mut().enumerate() {
            // Cannot fail: checked above; every group opens the same slot, so the same handle.
            seq = Ok(c.open_restored(header.tokens, &released(g))?);
        }
        let seq = seq?;
        let filled = self
            .fill_from(seq, flash, offset, len, tokens)
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

    /// Pass 2 of [`restore`](Self::restore): tokens and every group's pages into `seq`
    /// (opened with the image's released positions), from a header of `header_len` bytes.
    fn fill_from<F: ReadNorFlash>(
        &mut self,
        seq: SeqId,
        flash: &mut F,
        offset: u32,
        header_len: usize,
        tokens: &mut [u32],
    ) -> Result<()> {
        let mut r = Reader::new(flash, offset)?;
        r.skip(header_len)?;
        for t in tokens.iter_mut() {
            let mut b = [0u8; 4];
            r.get(&mut b, true)?;
            *t = u32::from_le_bytes(b);
        }
        for c in self.groups_mut() {
            c.read_pages(&mut r, seq)?;
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

impl SnapshotStore {
    /// [`save`](Self::save) for a [`GroupedCache`]: writes `seq` as
    /// [`GroupedCache::snapshot`] does into the slot after the newest committed image and
    /// commits it; returns the image's header and its commit. A power cut at any point leaves
    /// the previous committed image restorable.
    ///
    /// # Errors
    ///
    /// As [`save`](Self::save), with [`GroupedCache::snapshot`]'s errors.
    pub fn save_grouped<'a, A: PageAllocator<'a>, F: NorFlash>(
        &self,
        cache: &GroupedCache<'a, A>,
        seq: SeqId,
        tokens: &[u32],
        fingerprint: u64,
        flash: &mut F,
    ) -> Result<(GroupedHeader, Commit)> {
        let header = cache.snapshot_header(seq, tokens, fingerprint)?;
        let commit = self.save_with(flash, header.image, fingerprint, |flash, start| {
            cache
                .snapshot(seq, tokens, fingerprint, flash, start)
                .map(drop)
        })?;
        Ok((header, commit))
    }

    /// [`restore`](Self::restore) for a [`GroupedCache`]: the newest committed image that is
    /// intact, restored as [`GroupedCache::restore`] does (into every group or none); a damaged
    /// image is skipped for the next newest.
    ///
    /// # Errors
    ///
    /// As [`restore`](Self::restore), with [`GroupedCache::restore`]'s errors. Every group is
    /// unchanged on error.
    pub fn restore_grouped<'a, A: PageAllocator<'a>, F: NorFlash>(
        &self,
        cache: &mut GroupedCache<'a, A>,
        fingerprint: u64,
        flash: &mut F,
        tokens: &mut [u32],
    ) -> Result<(SeqId, GroupedHeader, Commit)> {
        let ((seq, header), commit) = self.restore_with(flash, |flash, start| {
            cache.restore(flash, start, fingerprint, tokens)
        })?;
        Ok((seq, header, commit))
    }
}
