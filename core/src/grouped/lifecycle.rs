//! Sequence lifecycle across groups: create, free, reserve, fork, truncate — each checked in
//! every group before any changes.

use super::GroupedCache;
use crate::alloc::PageAllocator;
use crate::error::{Error, Result};
use crate::sequence::{SeqId, SeqMode};

impl<'a, A: PageAllocator<'a>> GroupedCache<'a, A> {
    /// Creates an empty sequence in every group (one handle for all of them).
    ///
    /// # Errors
    ///
    /// [`TooManySequences`](Error::TooManySequences);
    /// [`ContiguousUnsupported`](Error::ContiguousUnsupported) for a contiguous sequence over an
    /// allocator without runs, or over several groups.
    pub fn create_sequence(&mut self, mode: SeqMode) -> Result<SeqId> {
        if mode == SeqMode::Contiguous && self.several() {
            return Err(Error::ContiguousUnsupported);
        }
        // Every group has the same free slots: the first succeeds iff all do, in the same slot
        // with the same generation and epoch, so with the same handle.
        let mut id = Err(Error::TooManySequences);
        for c in self.groups_mut() {
            let got = c.create_sequence(mode)?;
            id = Ok(got);
        }
        id
    }

    /// Frees a sequence in every group, releasing its pages (registered pages become cached).
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence).
    pub fn free_sequence(&mut self, seq: SeqId) -> Result<()> {
        for c in self.groups() {
            c.seq_len(seq)?;
        }
        for c in self.groups_mut() {
            c.free_sequence(seq)?;
        }
        Ok(())
    }

    /// Reserves `n` more positions at the end of a sequence in every group (see
    /// [`KvCache::reserve`](crate::KvCache::reserve): a windowed group first releases the pages
    /// leaving its window), and returns the first new position. All or nothing across groups:
    /// every group is checked before any changes.
    ///
    /// # Errors
    ///
    /// As [`KvCache::reserve`](crate::KvCache::reserve), from the first group that refuses:
    /// [`UnknownSequence`](Error::UnknownSequence), [`SequenceFull`](Error::SequenceFull),
    /// [`OutOfPages`](Error::OutOfPages), [`NoContiguousRun`](Error::NoContiguousRun).
    pub fn reserve(&mut self, seq: SeqId, n: u32) -> Result<u32> {
        if !self.several() {
            return self.first_mut()?.reserve(seq, n);
        }
        for c in self.groups() {
            c.check_reserve(seq, n)?;
        }
        let len = self.seq_len(seq)?;
        for c in self.groups_mut() {
            // Cannot fail: every group was checked above (`check_reserve` runs exactly
            // `reserve`'s checks).
            c.reserve(seq, n)?;
        }
        Ok(len)
    }

    /// Forks a sequence in every group (see [`KvCache::fork`](crate::KvCache::fork)): one
    /// handle names the child in all of them. All or nothing across groups.
    ///
    /// # Errors
    ///
    /// As [`KvCache::fork`](crate::KvCache::fork), from the first group that refuses.
    pub fn fork(&mut self, seq: SeqId) -> Result<SeqId> {
        if !self.several() {
            return self.first_mut()?.fork(seq);
        }
        for c in self.groups() {
            c.check_fork(seq)?;
        }
        let mut child = Err(Error::UnknownSequence);
        for c in self.groups_mut() {
            // Cannot fail: every group was checked above; each gives the same handle.
            child = Ok(c.fork(seq)?);
        }
        child
    }

    /// Shortens a sequence to `len` positions in every group (see
    /// [`KvCache::truncate`](crate::KvCache::truncate)). All or nothing across groups: a
    /// windowed group that released positions a query at `len` would see refuses, and then no
    /// group changes.
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence),
    /// [`TruncateBeyondLength`](Error::TruncateBeyondLength),
    /// [`TruncateBeyondWindow`](Error::TruncateBeyondWindow),
    /// [`PositionOutOfRange`](Error::PositionOutOfRange).
    pub fn truncate(&mut self, seq: SeqId, len: u32) -> Result<()> {
        for c in self.groups() {
            c.check_truncate(seq, len)?;
        }
        for c in self.groups_mut() {
            // Cannot fail: checked above.
            c.truncate(seq, len)?;
        }
        Ok(())
    }

    /// Group 0's cache, to change.
    pub(super) fn first_mut(&mut self) -> Result<&mut crate::KvCache<'a, A>> {
        self.groups_mut()
            .next()
            .ok_or(Error::Config(crate::ConfigError::EmptyGroup))
    }
}
