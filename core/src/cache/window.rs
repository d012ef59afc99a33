//! Sliding windows with attention sinks: releasing pages no later query can see.

use super::KvCache;
use crate::alloc::{NO_PAGE, PageAllocator, PageId};
use crate::attention::{AttentionParams, Window};
use crate::error::{ConfigError, Error, Result};
use crate::pool::PageState;
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
        Ok(self.release_invisible(slot, window, from))
    }

    /// The table entries of `slot` that no query at a position `≥ from` sees under `window`:
    /// those wholly inside `[sinks, from + 1 − window)` (released ones included).
    fn invisible(&self, slot: usize, window: &Window, from: u32) -> core::ops::Range<usize> {
        let p = self.config.page_tokens as u64;
        // Keys below `visible` (and not sinks) are invisible to every query at ≥ from.
        let visible = (from as u64 + 1).saturating_sub(window.window as u64);
        let first = (window.sinks as u64).div_ceil(p) as usize;
        let end = ((visible / p) as usize).min(self.seqs.record(slot).held as usize);
        first..end.max(first)
    }

    /// Releases [`invisible`](Self::invisible) pages and returns how many were held.
    fn release_invisible(&mut self, slot: usize, window: &Window, from: u32) -> u16 {
        let mut released = 0;
        for i in self.invisible(slot, window, from) {
            let page = *self.seqs.entry_mut(slot, i);
            if page != NO_PAGE {
                // Cannot fail: a page in a table holds a reference.
                let _ = self.pool.release(page);
                *self.seqs.entry_mut(slot, i) = NO_PAGE;
                released += 1;
            }
        }
        released
    }

    /// The configured window of `layer`'s group, as attention takes it.
    pub(super) fn layer_window(&self, _layer: u16) -> Option<Window> {
        self.config.window.map(|w| Window {
            sinks: w.sinks,
            window: w.window,
        })
    }

    /// `params` with the window of `layer`'s group when they give none.
    pub(super) fn layer_params(&self, layer: u16, params: &AttentionParams) -> AttentionParams {
        let mut p = *params;
        if p.window.is_none() {
            p.window = self.layer_window(layer);
        }
        p
    }

    /// The configured window's release point for a paged sequence of `slot` about to grow: the
    /// position from which on queries still come (`len − rollback`), and the pages a release
    /// there returns to the pool (those referenced by this sequence only). `None` without a
    /// configured window or for a contiguous sequence.
    pub(super) fn window_release(&self, slot: usize) -> Option<(Window, u32, usize)> {
        let cw = self.config.window?;
        let rec = self.seqs.record(slot);
        if Self::contiguous(rec) {
            return None;
        }
        let window = Window {
            sinks: cw.sinks,
            window: cw.window,
        };
        let from = rec.len.saturating_sub(cw.rollback);
        let table = self.seqs.table(slot);
        let frees = self
            .invisible(slot, &window, from)
            .filter(|&i| {
                table.get(i).is_some_and(|&pg| {
                    pg != NO_PAGE && self.pool.state(pg) == Some(PageState::Used(1))
                })
            })
            .count();
        Some((window, from, frees))
    }

    /// Releases what [`window_release`](Self::window_release) found.
    pub(super) fn apply_window_release(
        &mut self,
        slot: usize,
        release: Option<(Window, u32, usize)>,
    ) {
        if let Some((window, from, _)) = release {
            self.release_invisible(slot, &window, from);
        }
    }

    /// Whether truncating `slot` to `len` positions keeps every key a query at `len` sees under
    /// the configured window (sinks' pages are never released).
    pub(super) fn window_keeps(&self, slot: usize, len: u32) -> bool {
        let Some(w) = self.config.window else {
            return true;
        };
        if len == 0 {
            return true;
        }
        let shift = self.config.page_tokens.trailing_zeros();
        let lo = (len + 1).saturating_sub(w.window).min(len - 1);
        let table = self.seqs.table(slot);
        ((lo >> shift) as usize..=((len - 1) >> shift) as usize)
            .all(|i| table.get(i).is_some_and(|&pg| pg != NO_PAGE))
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
