//! [`SeqSet`]: the sequence records and their page tables, in the metadata arena.

use super::{CONTIGUOUS, LIVE, SeqId, SeqMode, SeqRecord};
use crate::alloc::PageId;
use crate::error::{Error, Result};

/// Every sequence slot of one cache: its record (length, prompt, pages held, generation, mode)
/// and its page table (`table_len` entries). The only code that indexes records and tables;
/// handles ([`SeqId`]) are resolved here.
pub(crate) struct SeqSet<'a> {
    records: &'a mut [SeqRecord],
    tables: &'a mut [PageId],
    table_len: usize,
    live: u16,
    /// The cache instance's epoch, part of every handle it gives out (see [`SeqId`]).
    epoch: u32,
}

// `small-code` builds keep the accessors below out of line: inlined, every call site carries its
// own bounds checks and panic path.
impl<'a> SeqSet<'a> {
    /// Slots over zeroed `records` (all free) and `tables` (`records.len() × table_len`).
    pub(crate) fn new(
        records: &'a mut [SeqRecord],
        tables: &'a mut [PageId],
        table_len: usize,
        epoch: u32,
    ) -> Self {
        SeqSet {
            records,
            tables,
            table_len,
            live: 0,
            epoch,
        }
    }

    /// Live sequences.
    #[inline]
    pub(crate) fn live(&self) -> u16 {
        self.live
    }

    /// Resolves a handle to its live slot.
    #[cfg_attr(not(feature = "small-code"), inline)]
    #[cfg_attr(feature = "small-code", inline(never))]
    pub(crate) fn slot(&self, seq: SeqId) -> Result<usize> {
        let slot = seq.slot as usize;
        match self.records.get(slot) {
            Some(r) if r.live() && r.generation == seq.generation && seq.epoch == self.epoch => {
                Ok(slot)
            }
            _ => Err(Error::UnknownSequence),
        }
    }

    /// The record of `slot` (`< max_seqs`).
    #[cfg_attr(not(feature = "small-code"), inline)]
    #[cfg_attr(feature = "small-code", inline(never))]
    pub(crate) fn record(&self, slot: usize) -> &SeqRecord {
        &self.records[slot]
    }

    /// The record of `slot`, to update.
    #[cfg_attr(not(feature = "small-code"), inline)]
    #[cfg_attr(feature = "small-code", inline(never))]
    pub(crate) fn record_mut(&mut self, slot: usize) -> &mut SeqRecord {
        &mut self.records[slot]
    }

    /// Every record, by slot.
    pub(crate) fn records(&self) -> &[SeqRecord] {
        self.records
    }

    /// The held entries of `slot`'s page table.
    #[cfg_attr(not(feature = "small-code"), inline)]
    #[cfg_attr(feature = "small-code", inline(never))]
    pub(crate) fn table(&self, slot: usize) -> &[PageId] {
        let base = slot * self.table_len;
        &self.tables[base..base + self.records[slot].held as usize]
    }

    /// Entry `index` (`< table_len`, held or not) of `slot`'s page table.
    #[cfg_attr(not(feature = "small-code"), inline)]
    #[cfg_attr(feature = "small-code", inline(never))]
    pub(crate) fn entry_mut(&mut self, slot: usize, index: usize) -> &mut PageId {
        &mut self.tables[slot * self.table_len + index]
    }

    /// The first `n` entries (`≤ table_len`, held or not) of `slot`'s page table.
    pub(crate) fn entries_mut(&mut self, slot: usize, n: usize) -> &mut [PageId] {
        let base = slot * self.table_len;
        &mut self.tables[base..base + n]
    }

    /// The first free slot.
    pub(crate) fn free_slot(&self) -> Result<usize> {
        self.records
            .iter()
            .position(|r| !r.live())
            .ok_or(Error::TooManySequences)
    }

    /// Marks the free `slot` live with a new generation, `len` positions and `held` pages, and
    /// returns its handle.
    pub(crate) fn open(&mut self, slot: usize, mode: SeqMode, len: u32, held: u16) -> SeqId {
        let r = &mut self.records[slot];
        let generation = r.generation.wrapping_add(1);
        let flags = LIVE
            | if mode == SeqMode::Contiguous {
                CONTIGUOUS
            } else {
                0
            };
        *r = SeqRecord {
            len,
            prompt: 0,
            held,
            generation,
            flags,
            _reserved: 0,
        };
        self.live += 1;
        SeqId {
            slot: slot as u16,
            generation,
            epoch: self.epoch,
        }
    }

    /// Marks the live `slot` free (its pages were released).
    pub(crate) fn close(&mut self, slot: usize) {
        let r = &mut self.records[slot];
        r.flags = 0;
        r.len = 0;
        r.prompt = 0;
        self.live -= 1;
    }
}
