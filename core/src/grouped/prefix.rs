//! Prefix reuse across groups: each group keeps its own prefix index over its own pages; a
//! hit is the longest prefix every group holds, attached and committed in every group or none.
//!
//! A windowed group publishes a prompt's pages only up to the first one its window released
//! (the chain of hashes cannot skip a page), so a prompt that outgrew the window before it was
//! committed gives no hit there, and then none at all (a hit must serve every group).

use super::GroupedCache;
use crate::alloc::PageAllocator;
use crate::config::MAX_GROUPS;
use crate::error::{Error, Result};
use crate::prefix::{PrefixHit, common_prefix_len, reuse_boundary};
use crate::sequence::SeqId;

/// What [`GroupedCache::lookup`] found: the tokens every group can reuse, and each group's hit
/// for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct GroupedPrefixHit {
    /// Tokens to reuse in every group (verified, aligned down to the chunk size, below the
    /// prompt's length).
    pub tokens: u32,
    hits: [PrefixHit; MAX_GROUPS],
}

impl GroupedPrefixHit {
    /// Group `g`'s hit (for the same tokens); `None` past [`MAX_GROUPS`], and a hit of no tokens
    /// for the groups past the cache's [`group_count`](GroupedCache::group_count).
    pub fn group(&self, g: usize) -> Option<&PrefixHit> {
        self.hits.get(g)
    }
}

impl<'a, A: PageAllocator<'a>> GroupedCache<'a, A> {
    /// Looks up the longest prefix of `prompt` every group holds published (see
    /// [`KvCache::lookup`](crate::KvCache::lookup)). Changes nothing.
    ///
    /// # Errors
    ///
    /// [`NoPrefixIndex`](Error::NoPrefixIndex).
    pub fn lookup(&self, prompt: &[u32]) -> Result<GroupedPrefixHit> {
        let mut hits = [PrefixHit::NONE; MAX_GROUPS];
        let mut tokens = u32::MAX;
        for (g, c) in self.groups().enumerate() {
            hits[g] = c.lookup(prompt)?;
            tokens = tokens.min(hits[g].tokens);
        }
        // Groups that hold more look up again for `tokens` (the prompt cut one token past them,
        // so they reuse at most `tokens`); what they then hold may be less: repeat until every
        // group agrees (the count only falls, so this ends).
        while hits
            .iter()
            .take(self.group_count())
            .any(|h| h.tokens != tokens)
        {
            let cut = prompt.get(..tokens as usize + 1).ok_or(Error::StaleHit)?;
            for (g, c) in self.groups().enumerate() {
                if hits[g].tokens != tokens {
                    hits[g] = c.lookup(cut)?;
                }
            }
            tokens = hits
                .iter()
                .take(self.group_count())
                .map(|h| h.tokens)
                .min()
                .unwrap_or(0);
        }
        if tokens == u32::MAX {
            tokens = 0;
        }
        Ok(GroupedPrefixHit { tokens, hits })
    }

    /// Attaches a hit from [`lookup`](Self::lookup) of the same `prompt` to an empty sequence in
    /// every group (see [`KvCache::attach`](crate::KvCache::attach)); returns the positions
    /// attached. All or nothing: every group's hit is verified first.
    ///
    /// # Errors
    ///
    /// As [`KvCache::attach`](crate::KvCache::attach), from the first group that refuses.
    pub fn attach(&mut self, seq: SeqId, hit: &GroupedPrefixHit, prompt: &[u32]) -> Result<u32> {
        for (g, c) in self.groups().enumerate() {
            c.check_attach(seq, &hit.hits[g], prompt)?;
        }
        for (g, c) in self.groups_mut().enumerate() {
            // Cannot fail: checked above.
            c.attach(seq, &hit.hits[g], prompt)?;
        }
        Ok(hit.tokens)
    }

    /// Commits the first `prompt.len()` positions of a sequence as its prompt in every group,
    /// publishing each group's whole-chunk pages (see
    /// [`KvCache::commit_prompt`](crate::KvCache::commit_prompt)); returns the pages newly
    /// published, summed over the groups. All or nothing: every group is checked first.
    ///
    /// # Errors
    ///
    /// As [`KvCache::commit_prompt`](crate::KvCache::commit_prompt).
    pub fn commit_prompt(&mut self, seq: SeqId, prompt: &[u32]) -> Result<u16> {
        for c in self.groups() {
            c.check_commit(seq, prompt)?;
        }
        let mut published = 0u16;
        for c in self.groups_mut() {
            // Cannot fail: checked above.
            published = published.saturating_add(c.commit_prompt(seq, prompt)?);
        }
        Ok(published)
    }

    /// The single-conversation path (see [`KvCache::reuse_prefix`](crate::KvCache::reuse_prefix)):
    /// keeps the longest common prefix of `held` and `prompt` that lies in the committed prompt,
    /// aligned down to the chunk size and below `prompt.len()`, truncating the sequence there in
    /// every group; returns the positions kept.
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence); [`PromptMismatch`](Error::PromptMismatch)
    /// when `held` is longer than the sequence;
    /// [`TruncateBeyondWindow`](Error::TruncateBeyondWindow) when a windowed group released
    /// positions a query at the kept length would see (nothing changed: start over from 0).
    pub fn reuse_prefix(&mut self, seq: SeqId, held: &[u32], prompt: &[u32]) -> Result<u32> {
        let info = self.first()?.sequence(seq)?;
        if held.len() > info.len as usize {
            return Err(Error::PromptMismatch);
        }
        let common = common_prefix_len(held, prompt).min(info.prompt as usize) as u32;
        let len = u32::try_from(prompt.len()).unwrap_or(u32::MAX);
        let keep = reuse_boundary(common, len, self.config.chunk());
        self.truncate(seq, keep)?;
        Ok(keep)
    }
}
