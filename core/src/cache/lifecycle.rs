//! Sequence lifecycle: create, free, reserve, fork, truncate.

use super::KvCache;
use crate::alloc::{NO_PAGE, PageAllocator, PageId};
use crate::error::{Error, Result};
use crate::sequence::{SeqId, SeqMode, SeqRecord};

impl<'a, A: PageAllocator<'a>> KvCache<'a, A> {
    /// Creates an empty sequence.
    ///
    /// # Errors
    ///
    /// [`TooManySequences`](Error::TooManySequences);
    /// [`ContiguousUnsupported`](Error::ContiguousUnsupported) for a contiguous sequence over an
    /// allocator without runs.
    pub fn create_sequence(&mut self, mode: SeqMode) -> Result<SeqId> {
        if mode == SeqMode::Contiguous && !A::CONTIGUOUS {
            return Err(Error::ContiguousUnsupported);
        }
        let slot = self.seqs.free_slot()?;
        Ok(self.seqs.open(slot, mode, 0, 0))
    }

    /// Frees a sequence, releasing its pages (registered pages become cached).
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence).
    pub fn free_sequence(&mut self, seq: SeqId) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        self.release_tail(slot, 0);
        self.seqs.close(slot);
        Ok(())
    }

    /// Releases page-table entries `[keep, held)`, last first, and sets `held = keep`.
    pub(super) fn release_tail(&mut self, slot: usize, keep: usize) {
        let held = self.seqs.record(slot).held as usize;
        self.release_entries(slot, keep..held);
        self.seqs.record_mut(slot).held = keep.min(held) as u16;
    }

    /// Reserves `n` more positions at the end of a sequence, allocating pages for every layer as
    /// needed, and returns the first new position. All or nothing.
    ///
    /// A successful reserve also secures the pages the writes into the new positions
    /// `[first, first + n)` need: when the sequence's partial tail page is shared (a fork
    /// truncated into a shared page, an attached prefix) or published for prefix reuse, it is
    /// copied now (copy-on-write ahead of time), so [`write`](Self::write) /
    /// [`write_kv`](Self::write_kv) of those positions cannot fail with
    /// [`OutOfPages`](Error::OutOfPages) — until something shares the sequence's pages again
    /// ([`fork`](Self::fork) of it, [`commit_prompt`](Self::commit_prompt) publishing the
    /// reserved pages). Rewriting positions before `first` may still need a copy.
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence); [`SequenceFull`](Error::SequenceFull) past
    /// `max_seq_tokens` (however far past, even beyond `u32::MAX`);
    /// [`OutOfPages`](Error::OutOfPages) when the new pages plus the tail-page copy do not fit;
    /// and for contiguous sequences [`NoContiguousRun`](Error::NoContiguousRun).
    pub fn reserve(&mut self, seq: SeqId, n: u32) -> Result<u32> {
        let slot = self.seqs.slot(seq)?;
        let rec = *self.seqs.record(slot);
        let step = self.reserve_step(slot, n)?;
        let held = rec.held as usize;
        if Self::contiguous(&rec) {
            // Contiguous sequences never share pages: nothing to copy.
            if step.need > held {
                self.grow_contiguous(slot, step.need)?;
            }
        } else {
            self.apply_window_release(slot, step.release);
            if step.copy {
                // Cannot fail: availability checked in `reserve_step`.
                self.make_writable(slot, rec.len, 1)?;
            }
            if step.need > held {
                // Cannot fail either (a copy frees at least as much as it takes).
                self.alloc_into_table(slot, held, step.need)?;
            }
        }
        self.seqs.record_mut(slot).len = step.new_len;
        Ok(rec.len)
    }

    /// Checks a [`reserve`](Self::reserve) of `n` positions without changing anything: `Ok`
    /// means it succeeds, for a paged sequence (a contiguous one may still fail to find a run).
    pub(crate) fn check_reserve(&self, seq: SeqId, n: u32) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        self.reserve_step(slot, n).map(|_| ())
    }

    /// What reserving `n` more positions of `slot` takes, with every check of
    /// [`reserve`](Self::reserve) but a contiguous run's.
    fn reserve_step(&self, slot: usize, n: u32) -> Result<ReserveStep> {
        let rec = *self.seqs.record(slot);
        // Past `max_seq_tokens` is `SequenceFull`, however far past (even past `u32::MAX`).
        let new_len = rec
            .len
            .checked_add(n)
            .filter(|&l| l <= self.config.max_seq_tokens)
            .ok_or(Error::SequenceFull)?;
        let need = self.pages_for(new_len);
        if need > self.plan.table_len {
            return Err(Error::OutOfPages);
        }
        if Self::contiguous(&rec) {
            return Ok(ReserveStep {
                new_len,
                need,
                copy: false,
                release: None,
            });
        }
        // The tail page the first new positions land in, if it is shared or published.
        let copy = n > 0 && self.needs_copy(slot, rec.len as usize / self.page_len());
        let new = need.saturating_sub(rec.held as usize);
        // A configured window releases the pages leaving it first, so they can be reused.
        let release = if n > 0 {
            self.window_release(slot)
        } else {
            None
        };
        let frees = release.map_or(0, |r| r.2);
        if new + usize::from(copy) > self.pool.available() + frees {
            return Err(Error::OutOfPages);
        }
        Ok(ReserveStep {
            new_len,
            need,
            copy,
            release,
        })
    }

    /// Allocates pages for table entries `[from, to)` of a paged sequence and sets `held = to`.
    fn alloc_into_table(&mut self, slot: usize, from: usize, to: usize) -> Result<()> {
        if to - from > self.pool.available() {
            return Err(Error::OutOfPages);
        }
        for i in from..to {
            match self.alloc_page() {
                Ok(page) => *self.seqs.entry_mut(slot, i) = page,
                Err(e) => {
                    // Unreachable after the availability check; undo anyway.
                    self.release_entries(slot, from..i);
                    return Err(e);
                }
            }
        }
        self.seqs.record_mut(slot).held = to as u16;
        Ok(())
    }

    /// Forks a sequence: the child sees the same positions and data. A paged child shares the
    /// parent's full pages (refcount + 1) and gets a copy of the partial tail page, so later
    /// writes never affect the other sequence. A contiguous child gets its own run (a copy).
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence),
    /// [`TooManySequences`](Error::TooManySequences), [`OutOfPages`](Error::OutOfPages),
    /// [`NoContiguousRun`](Error::NoContiguousRun).
    pub fn fork(&mut self, seq: SeqId) -> Result<SeqId> {
        let parent = self.seqs.slot(seq)?;
        let rec = *self.seqs.record(parent);
        let child = self.seqs.free_slot()?;
        let held = rec.held as usize;
        if Self::contiguous(&rec) {
            if held > 0 {
                let src = *self.seqs.entry_mut(parent, 0);
                let dst = self.pool.alloc_run(held)?;
                let used = self.pages_for(rec.len);
                self.copy_pages(src, dst, used);
                for i in 0..held {
                    *self.seqs.entry_mut(child, i) = dst + i as PageId;
                }
            }
            let id = self
                .seqs
                .open(child, SeqMode::Contiguous, rec.len, rec.held);
            self.seqs.record_mut(child).prompt = rec.prompt;
            return Ok(id);
        }
        self.fork_pages_check(&rec)?;
        let full = rec.len as usize / self.config.page_tokens as usize;
        for i in 0..full {
            let page = *self.seqs.entry_mut(parent, i);
            if page != NO_PAGE {
                if let Err(e) = self.pool.retain(page) {
                    // Unreachable: a page has at most one reference per live sequence.
                    self.release_entries(parent, 0..i);
                    return Err(e);
                }
            }
            *self.seqs.entry_mut(child, i) = page;
        }
        if held > full {
            // Copy-on-write of the partial tail: the child gets its own page now.
            match self.alloc_page() {
                Ok(copy) => {
                    let src = *self.seqs.entry_mut(parent, full);
                    self.copy_pages(src, copy, 1);
                    *self.seqs.entry_mut(child, full) = copy;
                }
                Err(e) => {
                    self.release_entries(parent, 0..full);
                    return Err(e);
                }
            }
        }
        let id = self.seqs.open(child, SeqMode::Paged, rec.len, rec.held);
        self.seqs.record_mut(child).prompt = rec.prompt;
        Ok(id)
    }

    /// Checks a [`fork`](Self::fork) of `seq` without changing anything: `Ok` means it
    /// succeeds, for a paged sequence (a contiguous one may still fail to find a run).
    pub(crate) fn check_fork(&self, seq: SeqId) -> Result<()> {
        let rec = *self.seqs.record(self.seqs.slot(seq)?);
        self.seqs.free_slot()?;
        if Self::contiguous(&rec) {
            return Ok(());
        }
        self.fork_pages_check(&rec)
    }

    /// A paged fork of `rec` needs one page for the copy of a partial tail page.
    fn fork_pages_check(&self, rec: &SeqRecord) -> Result<()> {
        let full = rec.len as usize / self.config.page_tokens as usize;
        if rec.held as usize > full && self.pool.available() == 0 {
            return Err(Error::OutOfPages);
        }
        Ok(())
    }

    /// Drops one reference to the page of each table entry in `entries` of `slot`, last first,
    /// skipping entries released by `slide` (the held count is the caller's business).
    pub(super) fn release_entries(&mut self, slot: usize, entries: core::ops::Range<usize>) {
        for i in entries.rev() {
            let page = *self.seqs.entry_mut(slot, i);
            if page != NO_PAGE {
                // Cannot fail: a page in a table holds a reference (see `check_invariants`).
                let _ = self.pool.release(page);
            }
        }
    }

    /// Shortens a sequence to `len` positions. A paged sequence releases the pages past `len`; a
    /// contiguous one keeps its run as capacity (like `Vec::truncate`).
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence),
    /// [`TruncateBeyondLength`](Error::TruncateBeyondLength).
    pub fn truncate(&mut self, seq: SeqId, len: u32) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        let rec = *self.seqs.record(slot);
        self.truncate_step(slot, len)?;
        if !Self::contiguous(&rec) {
            let keep = self.pages_for(len);
            self.release_tail(slot, keep);
        }
        let r = self.seqs.record_mut(slot);
        r.len = len;
        r.prompt = r.prompt.min(len);
        Ok(())
    }

    /// Checks a [`truncate`](Self::truncate) of `seq` to `len` without changing anything: `Ok`
    /// means it succeeds.
    pub(crate) fn check_truncate(&self, seq: SeqId, len: u32) -> Result<()> {
        self.truncate_step(self.seqs.slot(seq)?, len)
    }

    /// The checks of [`truncate`](Self::truncate), in its order.
    fn truncate_step(&self, slot: usize, len: u32) -> Result<()> {
        if len > self.seqs.record(slot).len {
            return Err(Error::TruncateBeyondLength);
        }
        if !self.window_keeps(slot, len) {
            // Back past the positions the configured window and rollback kept.
            return Err(Error::TruncateBeyondWindow);
        }
        let last = self.pages_for(len).checked_sub(1);
        if last.is_some_and(|i| self.seqs.table(slot).get(i) == Some(&NO_PAGE)) {
            // The new last page was released by `slide`: appending could not continue there.
            return Err(Error::PositionOutOfRange);
        }
        Ok(())
    }
}

/// What a [`KvCache::reserve`] takes: the new length and page count, whether the tail page is
/// copied first, and the window's release.
struct ReserveStep {
    new_len: u32,
    need: usize,
    copy: bool,
    release: Option<(crate::attention::Window, u32, usize)>,
}
