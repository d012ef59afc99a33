//! Sliding windows with attention sinks: releasing pages no later query can see.

use super::KvCache;
use crate::alloc::{NO_PAGE, PageAllocator, PageId};
use crate::attention::Window;
use crate::error::{ConfigError, Error, Result};
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
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence), [`NotPaged`](Error::NotPaged),
    /// [`Config`](Error::Config)([`ZeroSize`](crate::ConfigError::ZeroSize)) for a window of 0,
    /// [`PositionOutOfRange`](Error::PositionOutOfRange) for `from` past the sequence's length.
    pub fn slide(&mut self, seq: SeqId, window: &Window, from: u32) -> Result<u16> {
        let slot = self.seqs.slot(seq)?;
        let rec = *self.seqs.record(slot);
        if Self::contiguous(&rec) {
            return Err(Error::NotPaged);
        }
        if window.window == 0 {
            return Err(ConfigError::ZeroSize.into());
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
            let page = *self.seqs.entry_mut(slot, i);
            if page != NO_PAGE {
                // Cannot fail: a page in a table holds a reference.
                let _ = self.pool.release(page);
                *self.seqs.entry_mut(slot, i) = NO_PAGE;
                released += 1;
            }
        }
        Ok(released)
    }

    /// Checks that every page holding a key some query in `[start, end)` attends to (under
    /// `window`, if any) is present in `table` and a valid page id: the attention loop then
    /// cannot fail half-way, with part of `out` written.
    pub(super) fn check_key_pages(
        &self,
        table: &[PageId],
        start: u32,
        end: u32,
        window: Option<Window>,
    ) -> Result<()> {
        let shift = self.config.page_tokens.trailing_zeros();
        let num_pages = self.plan.num_pages;
        // Keys `[first, last]` (inclusive) must all be in pages that are held.
        let held = |first: u32, last: u32| -> Result<()> {
            let pages = (first >> shift) as usize..=(last >> shift) as usize;
            match table.get(pages) {
                Some(t) if t.iter().all(|&pg| pg != NO_PAGE) => {
                    if t.iter().all(|&pg| pg < num_pages) {
                        Ok(())
                    } else {
                        Err(Error::InvalidPage)
                    }
                }
                _ => Err(Error::PositionOutOfRange),
            }
        };
        match window {
            // Full causal: the last query sees every key the others see.
            None if end > start => held(0, end - 1),
            None => Ok(()),
            Some(w) => {
                for t in start..end {
                    // Sinks `[0, min(sinks, t + 1))`, then the window `[t + 1 - window, t]`.
                    let sinks = w.sinks.min(t + 1);
                    if sinks > 0 {
                        held(0, sinks - 1)?;
                    }
                    held((t + 1).saturating_sub(w.window).max(sinks).min(t), t)?;
                }
                Ok(())
            }
        }
    }
}
