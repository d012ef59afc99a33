//! Writing and reading K/V rows, with copy-on-write of shared pages.

use super::KvCache;
use crate::alloc::PageAllocator;
use crate::error::{Error, Result};
use crate::format::{Element, decode, encode};
use crate::pool::PageState;
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
    /// Errors: [`UnknownSequence`](Error::UnknownSequence),
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
        let slot = self.slot(seq)?;
        let n = self.check_rows(slot, layer, start, rows.len())?;
        self.make_writable(slot, start, n)?;
        self.store(slot, layer, kv, start, rows);
        Ok(())
    }

    /// Writes K and V rows of one layer for the same positions in one call (both lengths are
    /// checked before anything is written).
    pub fn write_kv<T: Element>(
        &mut self,
        seq: SeqId,
        layer: u16,
        start: u32,
        k: &[T],
        v: &[T],
    ) -> Result<()> {
        let slot = self.slot(seq)?;
        if k.len() != v.len() {
            return Err(Error::LengthMismatch);
        }
        let n = self.check_rows(slot, layer, start, k.len())?;
        self.make_writable(slot, start, n)?;
        self.store(slot, layer, Kv::K, start, k);
        self.store(slot, layer, Kv::V, start, v);
        Ok(())
    }

    /// Reads rows for positions `[start, start + n)` of one layer's K or V into `out` (`n` rows
    /// of `kv_heads × head_dim`), converting from the page format. Reserved positions that were
    /// never written read as whatever the page last held (zero in a fresh arena).
    pub fn read<T: Element>(
        &self,
        seq: SeqId,
        layer: u16,
        kv: Kv,
        start: u32,
        out: &mut [T],
    ) -> Result<()> {
        let slot = self.slot(seq)?;
        let n = self.check_rows(slot, layer, start, out.len())?;
        let (p, row_elems, row_bytes, fmt) = self.row_geometry(kv);
        let mut pos = start as usize;
        let mut done = 0;
        while done < n {
            // page_tokens is a power of two: shift and mask instead of dividing.
            let page = self.table(slot)[pos >> p.trailing_zeros()];
            let in_page = pos & (p - 1);
            let count = (p - in_page).min(n - done);
            let off = self.plan.page_offset(layer, kv, page).unwrap_or(0) + in_page * row_bytes;
            decode(
                fmt,
                &self.data[off..off + count * row_bytes],
                &mut out[done * row_elems..(done + count) * row_elems],
            );
            pos += count;
            done += count;
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
            .ok_or(Error::Overflow)?;
        if end > self.records[slot].len as u64 {
            return Err(Error::PositionOutOfRange);
        }
        Ok(n)
    }

    fn row_geometry(&self, kv: Kv) -> (usize, usize, usize, crate::ElementFormat) {
        let fmt = match kv {
            Kv::K => self.config.k_format,
            Kv::V => self.config.v_format,
        };
        (
            self.config.page_tokens as usize,
            self.config.shape.row_elems(),
            self.plan.geometry.row_bytes(kv),
            fmt,
        )
    }

    /// Copies every shared or registered page covering `[start, start + n)` so the sequence owns
    /// it alone. Checks availability first: all or nothing.
    fn make_writable(&mut self, slot: usize, start: u32, n: usize) -> Result<()> {
        if n == 0 || self.records[slot].contiguous() {
            // Contiguous sequences never share pages.
            return Ok(());
        }
        let p = self.config.page_tokens as usize;
        let first = start as usize / p;
        let last = (start as usize + n - 1) / p;
        let needs_copy = |cache: &Self, i: usize| {
            let page = cache.table(slot)[i];
            matches!(cache.pool.state(page), Some(PageState::Used(rc)) if rc > 1)
                || cache.pool.is_registered(page)
        };
        let copies = (first..=last).filter(|&i| needs_copy(self, i)).count();
        if copies == 0 {
            return Ok(());
        }
        if copies > self.pool.available() {
            return Err(Error::OutOfPages);
        }
        for i in first..=last {
            if needs_copy(self, i) {
                let old = self.table(slot)[i];
                let new = self.pool.alloc()?; // cannot fail after the check above
                self.copy_pages(old, new, 1);
                *self.table_entry(slot, i) = new;
                let _ = self.pool.release(old);
            }
        }
        Ok(())
    }

    /// Encodes validated rows into their pages.
    fn store<T: Element>(&mut self, slot: usize, layer: u16, kv: Kv, start: u32, rows: &[T]) {
        let (p, row_elems, row_bytes, fmt) = self.row_geometry(kv);
        let n = rows.len() / row_elems;
        let mut pos = start as usize;
        let mut done = 0;
        while done < n {
            // page_tokens is a power of two: shift and mask instead of dividing.
            let page = self.table(slot)[pos >> p.trailing_zeros()];
            let in_page = pos & (p - 1);
            let count = (p - in_page).min(n - done);
            let off = self.plan.page_offset(layer, kv, page).unwrap_or(0) + in_page * row_bytes;
            encode(
                fmt,
                &rows[done * row_elems..(done + count) * row_elems],
                &mut self.data[off..off + count * row_bytes],
            );
            pos += count;
            done += count;
        }
    }
}
