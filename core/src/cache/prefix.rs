//! Prefix reuse on a cache: committing prompts, looking up and attaching published prefixes, and
//! the single-conversation path.

use super::KvCache;
use crate::alloc::{NO_PAGE, PageAllocator, PageId};
use crate::error::{Error, Result};
use crate::prefix::index::PrefixIndex;
use crate::prefix::{PageHasher, PrefixHit, common_prefix_len, reuse_boundary};
use crate::sequence::SeqId;

impl<'a, A: PageAllocator<'a>> KvCache<'a, A> {
    /// Switches the prefix namespace (e.g. another adapter is loaded): later lookups and commits
    /// chain from `namespace`. Pages published under the old one are never found under the new
    /// one (the namespace is part of every first page's identity, not only of its hash) and are
    /// evicted in time; committing a sequence whose published pages belong to the old namespace
    /// fails with [`PromptMismatch`](Error::PromptMismatch).
    pub fn set_namespace(&mut self, namespace: u64) {
        self.config.namespace = namespace;
    }

    /// Replaces the page hash (default [`page_hash`](crate::prefix::page_hash)). Pages published
    /// before are no longer found by lookups (their hashes were made by the old function) until
    /// evicted; nothing wrong is ever reused, since every hit is verified token for token.
    pub fn set_page_hasher(&mut self, hasher: PageHasher) {
        self.hasher = hasher;
    }

    /// Commits positions `[0, prompt.len())` of a sequence as prompt with these token ids: they
    /// were written by a prefill in chunks aligned to absolute multiples of the chunk size C
    /// ([`plan_prefill`](crate::prefix::plan_prefill)). Publishes the pages of every whole chunk
    /// to the prefix index (pages an equal published page already covers are left unpublished),
    /// and records the prompt length for [`reuse_prefix`](Self::reuse_prefix). Returns the pages
    /// newly published. A contiguous sequence, or a cache without an index, only records the
    /// length. Call it again after each prefill of a longer prompt (e.g. every chat turn).
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence);
    /// [`PromptMismatch`](Error::PromptMismatch) when the prompt is longer than the sequence or
    /// differs from the tokens its already-published pages hold.
    pub fn commit_prompt(&mut self, seq: SeqId, prompt: &[u32]) -> Result<u16> {
        let slot = self.seqs.slot(seq)?;
        let rec = *self.seqs.record(slot);
        let len = u32::try_from(prompt.len()).map_err(|_| Error::PromptMismatch)?;
        if len > rec.len {
            return Err(Error::PromptMismatch);
        }
        let mut published = 0;
        if !Self::contiguous(&rec) && self.index.enabled() {
            let pages = (len / self.config.chunk() * self.config.chunk()) as usize
                / self.config.page_tokens as usize;
            // Check everything first, then change: all or nothing.
            self.publish_check(slot, prompt, pages)?;
            published = self.publish(slot, prompt, pages)?;
        }
        self.seqs.record_mut(slot).prompt = len;
        Ok(published)
    }

    /// Registers a used, unregistered page in the prefix index (its last release will cache it
    /// instead of freeing it) and returns its registration id.
    fn register_page(
        &mut self,
        page: PageId,
        hash: u64,
        parent: u64,
        tokens: &[u32],
    ) -> Result<u64> {
        if !self.index.enabled() {
            return Err(Error::NoPrefixIndex);
        }
        if !self.pool.registrable(page) {
            return Err(Error::InvalidPage);
        }
        if tokens.len() != self.index.tokens(page).len() {
            return Err(Error::LengthMismatch);
        }
        self.pool.set_registered(page);
        Ok(self.index.insert(page, hash, parent, tokens))
    }

    /// Walks the first `pages` pages of a sequence's table against `prompt`: a registered page
    /// must hold these tokens under the chain so far; an unregistered one is published unless an
    /// equal page already is. Returns the pages published. Checked first by
    /// [`publish_check`](Self::publish_check), which takes the same steps.
    fn publish(&mut self, slot: usize, prompt: &[u32], pages: usize) -> Result<u16> {
        let p = self.config.page_tokens as usize;
        let mut chain = Chain::new(self.config.namespace);
        let mut published = 0u16;
        for i in 0..pages {
            let tokens = prompt
                .get(i * p..(i + 1) * p)
                .ok_or(Error::PromptMismatch)?;
            match self.publish_step(&mut chain, slot, i, tokens)? {
                PublishStep::End => break,
                PublishStep::Linked => {}
                PublishStep::New(page, hash) => {
                    chain.parent = self.register_page(page, hash, chain.parent, tokens)?;
                    published += 1;
                }
            }
        }
        Ok(published)
    }

    /// [`publish`](Self::publish)'s walk without registering: `Ok` means it succeeds.
    fn publish_check(&self, slot: usize, prompt: &[u32], pages: usize) -> Result<()> {
        let p = self.config.page_tokens as usize;
        let mut chain = Chain::new(self.config.namespace);
        let mut simulated = 0u64;
        for i in 0..pages {
            let tokens = prompt
                .get(i * p..(i + 1) * p)
                .ok_or(Error::PromptMismatch)?;
            match self.publish_step(&mut chain, slot, i, tokens)? {
                PublishStep::End => break,
                PublishStep::Linked => {}
                PublishStep::New(..) => {
                    // A placeholder no existing entry names as parent (registration ids count
                    // up from 1, root links have the top bit set).
                    simulated += 1;
                    chain.parent = (1 << 62) + simulated;
                }
            }
        }
        Ok(())
    }

    /// Page `i` of the publish walk, holding `tokens`: checks it against the chain so far and
    /// links a published page (or an equal one) into it. A page to publish is returned with
    /// its hash, the chain's parent left for the caller to set; the checks
    /// [`register_page`](Self::register_page) makes come first, so it cannot then fail.
    fn publish_step(
        &self,
        chain: &mut Chain,
        slot: usize,
        i: usize,
        tokens: &[u32],
    ) -> Result<PublishStep> {
        let hash = (self.hasher)(chain.prev_hash, tokens);
        let page = self.seqs.table(slot).get(i).copied().unwrap_or(NO_PAGE);
        if page == NO_PAGE {
            // Released by a window: the chain cannot continue past it.
            return Ok(PublishStep::End);
        }
        chain.prev_hash = hash;
        let index = &self.index;
        if let Some(entry) = index.entry(page) {
            if entry.parent != chain.parent || index.tokens(page) != tokens {
                return Err(Error::PromptMismatch);
            }
            chain.parent = index.reg(page);
        } else if let Some(equal) = index.find(hash, chain.parent, tokens) {
            chain.parent = index.reg(equal);
        } else {
            if !self.pool.registrable(page) || tokens.len() != index.tokens(page).len() {
                return Err(Error::InvalidPage);
            }
            return Ok(PublishStep::New(page, hash));
        }
        Ok(PublishStep::Linked)
    }

    /// Looks up the longest published prefix of `prompt` that may be reused: verified page by
    /// page, aligned down to the chunk size, capped below `prompt.len()` (the last prompt token
    /// is always recomputed). Changes nothing; an empty prompt or index gives
    /// [`PrefixHit::NONE`]'s zero reuse.
    ///
    /// # Errors
    ///
    /// [`NoPrefixIndex`](Error::NoPrefixIndex).
    pub fn lookup(&self, prompt: &[u32]) -> Result<PrefixHit> {
        if !self.index.enabled() {
            return Err(Error::NoPrefixIndex);
        }
        let p = self.config.page_tokens as usize;
        let per_chunk = (self.config.chunk() as usize / p).max(1);
        let len = u32::try_from(prompt.len()).unwrap_or(u32::MAX);
        let limit = reuse_boundary(len, len, self.config.chunk()) as usize / p;
        let limit = limit.min(self.plan.table_len);
        let mut last = 0;
        let index = &self.index;
        let ns = self.config.namespace;
        let matched = walk(index, self.hasher, ns, p, prompt, limit, |i, page| {
            if (i + 1) % per_chunk == 0 {
                last = index.reg(page);
            }
        });
        let pages = matched / per_chunk * per_chunk;
        Ok(PrefixHit {
            tokens: (pages * p) as u32,
            pages: pages as u16,
            matched: (matched * p) as u32,
            last: if pages == 0 { 0 } else { last },
        })
    }

    /// Attaches a hit from [`lookup`](Self::lookup) of the same `prompt` to an empty paged
    /// sequence: its first `hit.tokens` positions become the hit's pages, shared by reference
    /// count (cached pages are revived), committed as prompt. Returns the positions attached;
    /// prefill continues from there ([`plan_prefill`](crate::prefix::plan_prefill)).
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence), [`NotPaged`](Error::NotPaged),
    /// [`SequenceNotEmpty`](Error::SequenceNotEmpty), [`NoPrefixIndex`](Error::NoPrefixIndex),
    /// [`StaleHit`](Error::StaleHit) when pages of the hit were evicted since the lookup or the
    /// hit does not belong to this prompt.
    pub fn attach(&mut self, seq: SeqId, hit: &PrefixHit, prompt: &[u32]) -> Result<u32> {
        let slot = self.seqs.slot(seq)?;
        let pages = self.attach_precheck(slot, hit, prompt)?;
        let p = self.config.page_tokens as usize;
        if pages == 0 {
            return Ok(0);
        }
        // Re-verify and fill the (not yet held) table entries; nothing is retained yet.
        let table = self.seqs.entries_mut(slot, pages);
        let index = &self.index;
        let mut last = 0;
        let ns = self.config.namespace;
        let matched = walk(index, self.hasher, ns, p, prompt, pages, |i, page| {
            table[i] = page;
            last = index.reg(page);
        });
        if matched != pages || last != hit.last {
            return Err(Error::StaleHit);
        }
        for i in 0..pages {
            let page = *self.seqs.entry_mut(slot, i);
            if let Err(e) = self.pool.retain(page) {
                self.release_entries(slot, 0..i);
                return Err(e);
            }
        }
        let r = self.seqs.record_mut(slot);
        r.len = hit.tokens;
        r.held = hit.pages;
        r.prompt = hit.tokens;
        Ok(hit.tokens)
    }

    /// The checks of [`attach`](Self::attach) before its walk, in its order: the pages of the
    /// hit (0: nothing to attach).
    fn attach_precheck(&self, slot: usize, hit: &PrefixHit, prompt: &[u32]) -> Result<usize> {
        let rec = *self.seqs.record(slot);
        if Self::contiguous(&rec) {
            return Err(Error::NotPaged);
        }
        if rec.len != 0 || rec.held != 0 {
            return Err(Error::SequenceNotEmpty);
        }
        if !self.index.enabled() {
            return Err(Error::NoPrefixIndex);
        }
        let pages = hit.pages as usize;
        let p = self.config.page_tokens as usize;
        if pages != 0
            && (pages > self.plan.table_len
                || pages * p >= prompt.len()
                || hit.tokens as usize != pages * p)
        {
            return Err(Error::StaleHit);
        }
        Ok(pages)
    }

    /// Checks an [`attach`](Self::attach) without changing anything: `Ok` means it succeeds.
    pub(crate) fn check_attach(&self, seq: SeqId, hit: &PrefixHit, prompt: &[u32]) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        let pages = self.attach_precheck(slot, hit, prompt)?;
        if pages == 0 {
            return Ok(());
        }
        let index = &self.index;
        let mut last = 0;
        let (p, ns) = (self.config.page_tokens as usize, self.config.namespace);
        let matched = walk(index, self.hasher, ns, p, prompt, pages, |_, page| {
            last = index.reg(page);
        });
        if matched != pages || last != hit.last {
            return Err(Error::StaleHit);
        }
        Ok(())
    }

    /// Checks a [`commit_prompt`](Self::commit_prompt) without changing anything: `Ok` means
    /// it succeeds.
    pub(crate) fn check_commit(&self, seq: SeqId, prompt: &[u32]) -> Result<()> {
        let slot = self.seqs.slot(seq)?;
        let rec = *self.seqs.record(slot);
        let len = u32::try_from(prompt.len()).map_err(|_| Error::PromptMismatch)?;
        if len > rec.len {
            return Err(Error::PromptMismatch);
        }
        if !Self::contiguous(&rec) && self.index.enabled() {
            let pages = (len / self.config.chunk() * self.config.chunk()) as usize
                / self.config.page_tokens as usize;
            self.publish_check(slot, prompt, pages)?;
        }
        Ok(())
    }

    /// The single-conversation path (one cached sequence, as llama-cpp-python keeps): `held` are
    /// the token ids at the sequence's positions (the caller's record), `prompt` the new prompt.
    /// Keeps the longest common prefix that lies in the committed prompt, aligned down to the
    /// chunk size and capped below `prompt.len()`, truncates the sequence there and returns the
    /// positions kept; prefill continues from there. Decode positions are never kept.
    ///
    /// # Errors
    ///
    /// [`UnknownSequence`](Error::UnknownSequence);
    /// [`PromptMismatch`](Error::PromptMismatch) when `held` is longer than the sequence.
    pub fn reuse_prefix(&mut self, seq: SeqId, held: &[u32], prompt: &[u32]) -> Result<u32> {
        let slot = self.seqs.slot(seq)?;
        let rec = *self.seqs.record(slot);
        if held.len() > rec.len as usize {
            return Err(Error::PromptMismatch);
        }
        let common = common_prefix_len(held, prompt).min(rec.prompt as usize) as u32;
        let len = u32::try_from(prompt.len()).unwrap_or(u32::MAX);
        let keep = reuse_boundary(common, len, self.config.chunk());
        self.truncate(seq, keep)?;
        Ok(keep)
    }
}

/// The parent link of a first page: the namespace's low 63 bits with the top bit set, so it never
/// equals a registration id (those count up from 1 and stay far below 2^62).
const fn root_link(namespace: u64) -> u64 {
    namespace | 1 << 63
}

/// Walks the index along `prompt` from its first page, for at most `max_pages` pages, calling
/// `f(i, page)` for each verified page; returns the pages matched. Takes the cache's parts, so
/// callers can write page tables meanwhile.
fn walk(
    index: &PrefixIndex<'_>,
    hasher: PageHasher,
    namespace: u64,
    page_tokens: usize,
    prompt: &[u32],
    max_pages: usize,
    mut f: impl FnMut(usize, PageId),
) -> usize {
    let mut prev_hash = namespace;
    let mut parent = root_link(namespace);
    for (i, tokens) in prompt.chunks_exact(page_tokens).take(max_pages).enumerate() {
        let hash = hasher(prev_hash, tokens);
        let Some(page) = index.find(hash, parent, tokens) else {
            return i;
        };
        f(i, page);
        parent = index.reg(page);
        prev_hash = hash;
    }
    max_pages.min(prompt.len() / page_tokens)
}

/// Where the publish walk stands between pages: the last page's hash and the registration id
/// (or root link) the next page must name as parent.
struct Chain {
    prev_hash: u64,
    parent: u64,
}

impl Chain {
    /// The start of a chain under `namespace`.
    fn new(namespace: u64) -> Self {
        Chain {
            prev_hash: namespace,
            parent: root_link(namespace),
        }
    }
}

/// What the publish walk finds at one page.
enum PublishStep {
    /// The page was released by a window: the chain ends before it.
    End,
    /// The page, or an equal published one, is linked into the chain.
    Linked,
    /// An unregistered page to publish, with its hash.
    New(PageId, u64),
}
