//! Geometric growth of contiguous sequences.

use super::KvCache;
use crate::alloc::{PageAllocator, PageId};
use crate::error::{Error, Result};

impl<'a, A: PageAllocator<'a>> KvCache<'a, A> {
    /// Grows a contiguous sequence's run to hold at least `need` pages.
    ///
    /// The new capacity is `max(2 × held, need)` rounded up to a power of two (capped at the
    /// page-table length), so capacity doubles and a sequence of n tokens sees O(log n) growth
    /// events and amortized O(1) copying per token. The run is extended in place when the pages
    /// after it are free; otherwise a new run is allocated, the used pages copied and the old run
    /// released. If no run of that capacity exists, exactly `need` pages are tried before giving
    /// up. On error nothing changed.
    pub(super) fn grow_contiguous(&mut self, slot: usize, need: usize) -> Result<()> {
        let rec = *self.seqs.record(slot);
        let held = rec.held as usize;
        let target = (held * 2)
            .max(need)
            .next_power_of_two()
            .min(self.plan.table_len);
        let mut last = Error::NoContiguousRun;
        let caps = [target, need];
        let tries = if target == need { 1 } else { 2 };
        for &cap in &caps[..tries] {
            if held > 0 {
                let start = *self.seqs.entry_mut(slot, 0);
                let end = start as usize + held;
                if end < crate::plan::MAX_PAGES && self.pool.extend_run(end as PageId, cap - held) {
                    for i in held..cap {
                        *self.seqs.entry_mut(slot, i) = start + i as PageId;
                    }
                    self.seqs.record_mut(slot).held = cap as u16;
                    return Ok(());
                }
            }
            match self.pool.alloc_run(cap) {
                Ok(new) => {
                    if held > 0 {
                        let old = *self.seqs.entry_mut(slot, 0);
                        self.copy_pages(old, new, self.pages_for(rec.len));
                        self.release_tail(slot, 0);
                    }
                    for i in 0..cap {
                        *self.seqs.entry_mut(slot, i) = new + i as PageId;
                    }
                    self.seqs.record_mut(slot).held = cap as u16;
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}
