//! Writing and reading K/V rows, with copy-on-write of shared pages.

use super::KvCache;
use crate::alloc::PageAllocator;
use core::ops::Range;

use crate::alloc::{NO_PAGE, PageId};
use crate::error::{ConfigError, Error, Result};
use crate::format::{Element, ElementFormat, Rotation};
use crate::plan::Plan;
use crate::pool::PageState;
use crate::quant::{decode_rotated, encode_rotated};
use crate::sequence::SeqId;
use crate::shape::Kv;

impl<'a, A: PageAllocator<'a>> KvCache<'a, A> {
    /// Writes rows for positions `[start, start + n)` of one layer's K or V, where `rows` holds
    /// `n` token rows of `kv_heads × head_dim` elements (token-major). Positions must be
    /// reserved. Rows are converted to the page format (round to nearest even) unless `T` is it.
    ///
    /// A page shared with another sequence (or registered for prefix reuse) is copied first, so
    /// the write is never seen through another sequence.
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence),
    /// [`LayerOutOfRange`](Error::LayerOutOfRange), [`LengthMismatch`](Error::LengthMismatch),
    /// [`PositionOutOfRange`](Error::PositionOutOfRange), [`OutOfPages`](Error::OutOfPages)
    /// (no page for a copy-on-write).
    pub fn write<T: Element>(
        &mut self,
        seq: SeqId,
        layer: u16,
        kv: Kv,
        start: u32,
        rows: &[T],
    ) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        let n = self.check_rows(slot, layer, start, rows.len())?;
        self.make_writable(slot, start, n)?;
        self.store(slot, layer, kv, start, rows)
    }

    /// Writes K and V rows of one layer for the same positions in one call (both lengths are
    /// checked before anything is written).
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write); [`LengthMismatch`](Error::LengthMismatch) also when K and V
    /// differ in length.
    pub fn write_kv<T: Element>(
        &mut self,
        seq: SeqId,
        layer: u16,
        start: u32,
        k: &[T],
        v: &[T],
    ) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        if k.len() != v.len() {
            return Err(Error::LengthMismatch);
        }
        let n = self.check_rows(slot, layer, start, k.len())?;
        self.make_writable(slot, start, n)?;
        self.store(slot, layer, Kv::K, start, k)?;
        self.store(slot, layer, Kv::V, start, v)
    }

    /// Reads rows for positions `[start, start + n)` of one layer's K or V into `out` (`n` rows
    /// of `kv_heads × head_dim`), converting from the page format. Reserved positions that were
    /// never written read as whatever the page last held (zero in a fresh arena).
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence), [`LayerOutOfRange`](Error::LayerOutOfRange),
    /// [`LengthMismatch`](Error::LengthMismatch) (`out` not whole rows),
    /// [`PositionOutOfRange`](Error::PositionOutOfRange) (past the reserved positions, or in pages
    /// released by a window).
    pub fn read<T: Element>(
        &self,
        seq: SeqId,
        layer: u16,
        kv: Kv,
        start: u32,
        out: &mut [T],
    ) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        let n = self.check_rows(slot, layer, start, out.len())?;
        let (fmt, row_elems, head_dim) = self.row_format(kv);
        let rot = self.rotation(kv);
        for run in PageRuns::new(self.seqs.table(slot), self.config.page_tokens, start, n) {
            let (vals, scales) = run_ranges(&self.plan, layer, kv, &run);
            decode_rotated(
                fmt,
                rot,
                head_dim,
                &self.data[vals],
                &self.data[scales],
                &mut out[run.done * row_elems..(run.done + run.count) * row_elems],
            )?;
        }
        Ok(())
    }

    /// Checks a [`read`](Self::read) of `elems` elements at `start` of `(seq, layer)` without
    /// reading: `Ok` means that read succeeds. For callers that must check everything before
    /// writing any output (device views filling a staging tensor row by row).
    ///
    /// # Errors
    ///
    /// Those of [`read`](Self::read): [`UnknownSequence`](Error::UnknownSequence),
    /// [`LayerOutOfRange`](Error::LayerOutOfRange), [`LengthMismatch`](Error::LengthMismatch),
    /// [`PositionOutOfRange`](Error::PositionOutOfRange).
    pub fn check_read(&self, seq: SeqId, layer: u16, start: u32, elems: usize) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        self.check_rows(slot, layer, start, elems).map(|_| ())
    }

    /// Checks a [`write`](Self::write) of `elems` elements at `start` of `(seq, layer)` without
    /// writing: `Ok` means that write succeeds (copy-on-write pages included), as long as the
    /// cache is not changed in between.
    ///
    /// # Errors
    ///
    /// Those of [`write`](Self::write): [`UnknownSequence`](Error::UnknownSequence),
    /// [`LayerOutOfRange`](Error::LayerOutOfRange), [`LengthMismatch`](Error::LengthMismatch),
    /// [`PositionOutOfRange`](Error::PositionOutOfRange), [`OutOfPages`](Error::OutOfPages).
    pub fn check_write(&self, seq: SeqId, layer: u16, start: u32, elems: usize) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        let n = self.check_rows(slot, layer, start, elems)?;
        if self.copies_needed(slot, start, n) > self.pool.available() {
            return Err(Error::OutOfPages);
        }
        Ok(())
    }

    /// Validates a row access and returns the row count.
    fn check_rows(&self, slot: usize, layer: u16, start: u32, elems: usize) -> Result<usize> {
        if layer >= self.config.shape.layers {
            return Err(Error::LayerOutOfRange);
        }
        let row_elems = self.config.shape.row_elems();
        if elems % row_elems != 0 {
            return Err(Error::LengthMismatch);
        }
        let n = elems / row_elems;
        let end = (start as u64)
            .checked_add(n as u64)
            .ok_or(ConfigError::Overflow)?;
        if end > self.seqs.record(slot).len as u64 {
            return Err(Error::PositionOutOfRange);
        }
        if n > 0 {
            // Positions in pages released by `slide` are gone.
            let shift = self.config.page_tokens.trailing_zeros();
            let pages = (start >> shift) as usize..=((end - 1) >> shift) as usize;
            match self.seqs.table(slot).get(pages) {
                Some(t) if !t.contains(&NO_PAGE) => {}
                _ => return Err(Error::PositionOutOfRange),
            }
        }
        Ok(n)
    }

    /// The format of K or V pages, elements per token row, and head_dim.
    fn rotation(&self, kv: Kv) -> Rotation {
        match kv {
            Kv::K => self.config.k_rotation,
            Kv::V => self.config.v_rotation,
        }
    }

    fn row_format(&self, kv: Kv) -> (ElementFormat, usize, usize) {
        let fmt = match kv {
            Kv::K => self.config.k_format,
            Kv::V => self.config.v_format,
        };
        (
            fmt,
            self.config.shape.row_elems(),
            self.config.shape.head_dim as usize,
        )
    }

    /// Copies every shared or registered page covering `[start, start + n)` so the sequence owns
    /// it alone. Checks availability first: all or nothing.
    pub(super) fn make_writable(&mut self, slot: usize, start: u32, n: usize) -> Result<()> {
        if n == 0 || Self::contiguous(self.seqs.record(slot)) {
            // Contiguous sequences never share pages.
            return Ok(());
        }
        let p = self.page_len();
        let first = start as usize / p;
        let last = (start as usize + n - 1) / p;
        let needs_copy = |cache: &Self, i: usize| cache.needs_copy(slot, i);
        let copies = self.copies_needed(slot, start, n);
        if copies == 0 {
            return Ok(());
        }
        if copies > self.pool.available() {
            return Err(Error::OutOfPages);
        }
        for i in first..=last {
            if needs_copy(self, i) {
                let old = self.seqs.table(slot)[i];
                let new = self.alloc_page()?; // cannot fail after the check above
                self.copy_pages(old, new, 1);
                *self.seqs.entry_mut(slot, i) = new;
                let _ = self.pool.release(old);
            }
        }
        Ok(())
    }

    /// Pages a write of rows `[start, start + n)` (validated) must copy first.
    fn copies_needed(&self, slot: usize, start: u32, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let p = self.page_len();
        let (first, last) = (start as usize / p, (start as usize + n - 1) / p);
        (first..=last).filter(|&i| self.needs_copy(slot, i)).count()
    }

    /// Whether table entry `index` of `slot` holds a page a write must copy first: shared with
    /// another sequence or published for prefix reuse (`false` past the held pages, for released
    /// pages and for contiguous sequences).
    pub(super) fn needs_copy(&self, slot: usize, index: usize) -> bool {
        if Self::contiguous(self.seqs.record(slot)) {
            return false;
        }
        match self.seqs.table(slot).get(index) {
            Some(&page) if page != NO_PAGE => {
                matches!(self.pool.state(page), Some(PageState::Used(rc)) if rc > 1)
                    || self.pool.is_registered(page)
            }
            _ => false,
        }
    }

    /// Encodes validated rows into their pages (quantizing for quantized formats). Fails only if
    /// the plan's layout invariants are broken (then rows before the failure may be written).
    fn store<T: Element>(
        &mut self,
        slot: usize,
        layer: u16,
        kv: Kv,
        start: u32,
        rows: &[T],
    ) -> Result<()> {
        let (fmt, row_elems, head_dim) = self.row_format(kv);
        let rot = self.rotation(kv);
        let n = rows.len() / row_elems;
        // A field borrow: the table is read while `data` is written.
        let table = self.seqs.table(slot);
        for run in PageRuns::new(table, self.config.page_tokens, start, n) {
            let (vals, scales) = run_ranges(&self.plan, layer, kv, &run);
            // The scale pool follows the value pool of the same layer and K/V (and is empty
            // without scales), so one split gives both ranges.
            let (head, tail) = self.data.split_at_mut(scales.start.max(vals.end));
            encode_rotated(
                fmt,
                rot,
                head_dim,
                &rows[run.done * row_elems..(run.done + run.count) * row_elems],
                &mut head[vals],
                &mut tail[..scales.len()],
            )?;
        }
        Ok(())
    }
}

/// The value and scale byte ranges of a run of rows in layer `layer`'s K or V pools (the scale
/// range is empty for formats without scales).
#[inline]
fn run_ranges(plan: &Plan, layer: u16, kv: Kv, run: &PageRun) -> (Range<usize>, Range<usize>) {
    let g = &plan.geometry;
    let (row, srow) = (g.row_bytes(kv), g.scale_row_bytes(kv));
    // Validated callers: the page and layer are in range.
    let vals = plan.page_offset(layer, kv, run.page).unwrap_or(0) + run.in_page * row;
    let scales = plan.scale_offset(layer, kv, run.page).unwrap_or(0) + run.in_page * srow;
    (
        vals..vals + run.count * row,
        scales..scales + run.count * srow,
    )
}

/// A run of consecutive positions inside one page.
struct PageRun {
    page: PageId,
    /// First row inside the page.
    in_page: usize,
    /// Rows before this run in the access.
    done: usize,
    /// Rows in this run.
    count: usize,
}

/// Splits positions `[start, start + n)` of a page table into per-page runs.
struct PageRuns<'t> {
    table: &'t [PageId],
    shift: u32,
    pos: usize,
    done: usize,
    n: usize,
}

impl<'t> PageRuns<'t> {
    fn new(table: &'t [PageId], page_tokens: u16, start: u32, n: usize) -> Self {
        // page_tokens is a power of two: shift and mask instead of dividing.
        PageRuns {
            table,
            shift: page_tokens.trailing_zeros(),
            pos: start as usize,
            done: 0,
            n,
        }
    }
}

impl Iterator for PageRuns<'_> {
    type Item = PageRun;

    #[inline]
    fn next(&mut self) -> Option<PageRun> {
        if self.done >= self.n {
            return None;
        }
        let p = 1usize << self.shift;
        let page = *self.table.get(self.pos >> self.shift)?;
        let in_page = self.pos & (p - 1);
        let count = (p - in_page).min(self.n - self.done);
        let run = PageRun {
            page,
            in_page,
            done: self.done,
            count,
        };
        self.pos += count;
        self.done += count;
        Some(run)
    }
}
