//! Sliding windows with attention sinks: releasing pages no later query can see.

use super::KvCache;
use crate::alloc::{NO_PAGE, PageAllocator};
use crate::attention::Window;
use crate::error::{Error, Result};
use crate::sequence::SeqId;

impl<'a, A: PageAllocator<'a>> KvCache<'a, A> {
    /// Releases the pages of a paged sequence that no query at a position `≥ from` can see under
    /// `window`: those wholly inside `[sinks, from + 1 − window)`. Their page-table entries become
    /// [`NO_PAGE`] (positions keep their absolute values; reading or writing a released position
    /// is [`PositionOutOfRange`](Error::PositionOutOfRange)); shared pages lose this sequence's
    /// reference only, registered ones become cached. Call it after attention for every position
    /// below `from` is done (typically `from = len` after each decode step). Returns the pages
    /// released.
    ///
    /// Errors: [`UnknownSequence`](Error::UnknownSequence), [`NotPaged`](Error::NotPaged),
    /// [`ZeroSize`](Error::ZeroSize) for a window of 0,
    /// [`PositionOutOfRange`](Error::PositionOutOfRange) for `from` past the sequence's length.
    pub fn slide(&mut self, seq: SeqId, window: &Window, from: u32) -> Result<u16> {
        let slot = self.slot(seq)?;
        let rec = self.records[slot];
        if rec.contiguous() {
            return Err(Error::NotPaged);
        }
        if window.window == 0 {
            return Err(Error::ZeroSize);
        }
        if from > rec.len {
            return Err(Error::PositionOutOfRange);
        }
        let p = self.config.page_tokens as u64;
        // Keys below `visible` (and not sinks) are invisible to every query at ≥ from.
        let visible = (from as u64 + 1).saturating_sub(window.window as u64);
        let first = (window.sinks as u64).div_ceil(p) as usize;
        let end = (visible / p) as usize;
        let mut released = 0;
        for i in first..end.min(rec.held as usize) {
            let page = *self.table_entry(slot, i);
            if page != NO_PAGE {
                // Cannot fail: a page in a table holds a reference.
                let _ = self.pool.release(page);
                *self.table_entry(slot, i) = NO_PAGE;
                released += 1;
            }
        }
        Ok(released)
    }
}
