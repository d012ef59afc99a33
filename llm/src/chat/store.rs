//! [`ChatStore`]: what the scripted chat needs of a cache beyond [`KvStore`] — snapshot images
//! of a sequence and their restore, and each layer group's pages for the transcript —
//! implemented by edgekv's [`KvCache`] (one group) and [`GroupedCache`] (e.g. Gemma 3's
//! sliding-window layers in their own group).

use edgekv::snapshot::{GroupedHeader, Header};
use edgekv::{GroupedCache, KvCache, NO_PAGE, PageAllocator, SeqId};
use embedded_storage::nor_flash::{NorFlash, ReadNorFlash};

use crate::error::Result;
use crate::kv::KvStore;

/// A layer group's pages as a sequence holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupPages {
    /// Pages the sequence holds in the group.
    pub held: u16,
    /// Pages of the sequence's positions the group's window released.
    pub released: u16,
    /// Unreferenced pages the group keeps for prefix reuse.
    pub cached: u16,
    /// Pages in the group's allocator.
    pub free: u16,
}

/// A [`KvStore`] the scripted chat ([`run`](super::run)) can snapshot, restore and report on.
pub trait ChatStore: KvStore {
    /// The header of a snapshot image ([`Header`] or [`GroupedHeader`]).
    type Header;

    /// Writes `seq` and its `tokens` as a snapshot image into `flash` at `offset`
    /// ([`KvCache::snapshot`], [`GroupedCache::snapshot`]).
    ///
    /// # Errors
    ///
    /// The cache's snapshot errors.
    fn snapshot_to<F: NorFlash>(
        &self,
        seq: SeqId,
        tokens: &[u32],
        fingerprint: u64,
        flash: &mut F,
        offset: u32,
    ) -> Result<Self::Header>;

    /// Restores the image at `offset` of `flash` into a new sequence, its token ids into
    /// `tokens` ([`KvCache::restore`], [`GroupedCache::restore`]).
    ///
    /// # Errors
    ///
    /// The cache's restore errors.
    fn restore_from<F: ReadNorFlash>(
        &mut self,
        flash: &mut F,
        offset: u32,
        fingerprint: u64,
        tokens: &mut [u32],
    ) -> Result<(SeqId, Self::Header)>;

    /// Token positions an image of `header` holds.
    fn header_tokens(header: &Self::Header) -> u32;

    /// Layer groups (1 for a [`KvCache`]).
    fn groups(&self) -> usize;

    /// Group `g`'s pages for `seq` (`None` past the last group).
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](edgekv::Error::UnknownSequence).
    fn group_pages(&self, g: usize, seq: SeqId) -> Result<Option<GroupPages>>;
}

/// `cache`'s pages for `seq`: its page table's entries, those a window released being
/// [`NO_PAGE`] (the table keeps them, so `SeqInfo::pages` counts them too).
fn pages_of<'c, A: PageAllocator<'c>>(cache: &KvCache<'c, A>, seq: SeqId) -> Result<GroupPages> {
    let table = cache.page_table(seq)?;
    let held = table.iter().filter(|&&p| p != NO_PAGE).count();
    let stats = cache.stats();
    Ok(GroupPages {
        held: u16::try_from(held).unwrap_or(u16::MAX),
        released: u16::try_from(table.len() - held).unwrap_or(u16::MAX),
        cached: stats.pages_cached,
        free: stats.pages_free,
    })
}

impl<'c, A: PageAllocator<'c> + Sync> ChatStore for KvCache<'c, A> {
    type Header = Header;

    fn snapshot_to<F: NorFlash>(
        &self,
        seq: SeqId,
        tokens: &[u32],
        fingerprint: u64,
        flash: &mut F,
        offset: u32,
    ) -> Result<Header> {
        Ok(self.snapshot(seq, tokens, fingerprint, flash, offset)?)
    }

    fn restore_from<F: ReadNorFlash>(
        &mut self,
        flash: &mut F,
        offset: u32,
        fingerprint: u64,
        tokens: &mut [u32],
    ) -> Result<(SeqId, Header)> {
        Ok(self.restore(flash, offset, fingerprint, tokens)?)
    }

    fn header_tokens(header: &Header) -> u32 {
        header.tokens
    }

    fn groups(&self) -> usize {
        1
    }

    fn group_pages(&self, g: usize, seq: SeqId) -> Result<Option<GroupPages>> {
        if g > 0 {
            return Ok(None);
        }
        pages_of(self, seq).map(Some)
    }
}

impl<'c, A: PageAllocator<'c> + Sync> ChatStore for GroupedCache<'c, A> {
    type Header = GroupedHeader;

    fn snapshot_to<F: NorFlash>(
        &self,
        seq: SeqId,
        tokens: &[u32],
        fingerprint: u64,
        flash: &mut F,
        offset: u32,
    ) -> Result<GroupedHeader> {
        Ok(self.snapshot(seq, tokens, fingerprint, flash, offset)?)
    }

    fn restore_from<F: ReadNorFlash>(
        &mut self,
        flash: &mut F,
        offset: u32,
        fingerprint: u64,
        tokens: &mut [u32],
    ) -> Result<(SeqId, GroupedHeader)> {
        Ok(self.restore(flash, offset, fingerprint, tokens)?)
    }

    fn header_tokens(header: &GroupedHeader) -> u32 {
        header.tokens
    }

    fn groups(&self) -> usize {
        self.group_count()
    }

    fn group_pages(&self, g: usize, seq: SeqId) -> Result<Option<GroupPages>> {
        match self.group(g) {
            Some(c) => pages_of(c, seq).map(Some),
            None => Ok(None),
        }
    }
}
