//! Prefix reuse: committing prompts, looking up and attaching published prefixes, and the
//! single-conversation path. Token ids are `uint32_t` arrays with their lengths in tokens.

use edgekv::SeqId;

use super::handle::{AnyCache, EkvCache, Handle, dispatch};
use super::ptr::{Buf, Out, disjoint, input, opt_span};
use super::status::{EKV_ERR_INVALID_ARGUMENT, EKV_ERR_STALE_HIT, EkvStatus, Fail, status};
use super::types::{EkvPrefixHit, EkvSeq};

/// Commits positions `[0, n)` of a sequence as prompt with these token ids and publishes its
/// whole chunks for reuse; writes the pages newly published to `published` (optional: may be
/// NULL). The positions must have been prefilled in chunks aligned to absolute multiples of the
/// chunk size C (`chunk_tokens`). Pages an equal published page already covers stay
/// unpublished; published pages are shared (a later write copies first) and stay cached after
/// the sequence is freed. A contiguous sequence, or a cache without a prefix index, only records
/// the length. Call it again after each prefill of a longer prompt (each chat turn).
///
/// Errors: `EKV_ERR_UNKNOWN_SEQUENCE`, `EKV_ERR_PROMPT_MISMATCH` (`n` above the sequence's
/// length, tokens that differ from those its published pages hold, or pages published under
/// another namespace, see `ekv_set_namespace`).
///
/// # Safety
///
/// `cache` is NULL or points to readable `ekv_cache_t` storage; `tokens` NULL (with `n` 0) or
/// `n` readable `uint32_t`s; `published` (optional) NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_commit_prompt(
    cache: *mut EkvCache,
    seq: EkvSeq,
    tokens: *const u32,
    n: usize,
    published: *mut u16,
) -> EkvStatus {
    let r = (|| {
        let tokens = Buf::input(tokens, n)?;
        let published = Out::optional(published)?;
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        let count = h.with(|c, a| {
            let [s, d, m] = a.spans();
            disjoint(&[opt_span(&published), tokens.span(), s, d, m])?;
            // SAFETY: readable (caller), outside the cache's memory.
            let tokens = unsafe { tokens.get() };
            Ok(dispatch!(c, c => c.commit_prompt(SeqId::from_raw(seq), tokens))?)
        })?;
        if let Some(out) = published {
            // SAFETY: checked, writable by the caller's obligation.
            unsafe { out.set(count) };
        }
        Ok(())
    })();
    status(r)
}

/// Looks up the longest published prefix of a prompt that may be reused: verified page by page
/// and token for token (a hash collision never matches), aligned down to the chunk size C,
/// capped at `n - 1` (the last prompt token is always recomputed: its logits are needed).
/// Changes nothing; an empty prompt or index gives 0 tokens. Prefill continues from
/// `hit.tokens` in chunks aligned to multiples of C, which write what a cold prefill writes.
///
/// Errors: `EKV_ERR_NO_PREFIX_INDEX`, `EKV_ERR_NULL`, `EKV_ERR_OVERLAP`.
///
/// # Safety
///
/// `cache` as `ekv_commit_prompt`; `tokens` NULL (with `n` 0) or `n` readable `uint32_t`s;
/// `hit` (required) NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_prefix_lookup(
    cache: *mut EkvCache,
    tokens: *const u32,
    n: usize,
    hit: *mut EkvPrefixHit,
) -> EkvStatus {
    let r = (|| {
        let tokens = Buf::input(tokens, n)?;
        let hit = Out::new(hit)?;
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        let h = h.with(|c, a| {
            let [s, d, m] = a.spans();
            disjoint(&[hit.span(), tokens.span(), s, d, m])?;
            // SAFETY: readable (caller), outside the cache's memory.
            let tokens = unsafe { tokens.get() };
            Ok(match c {
                AnyCache::Grouped(g) => summary(g.group_count(), &g.lookup(tokens)?),
                AnyCache::List(c) => flat(&c.lookup(tokens)?),
                AnyCache::Bitmap(c) => flat(&c.lookup(tokens)?),
            })
        })?;
        // SAFETY: checked, writable by the caller's obligation.
        unsafe { hit.set(h) };
        Ok(())
    })();
    status(r)
}

/// Attaches a hit of `ekv_prefix_lookup` for the same prompt to an empty paged sequence: its
/// first `hit.tokens` positions become the hit's pages (shared by reference count: a write into
/// them copies first; cached pages are revived), committed as prompt. Writes the positions
/// attached to `attached` (optional: may be NULL); prefill continues from there.
///
/// The hit is verified again: the prompt is looked up anew and must give the same hit, else
/// `EKV_ERR_STALE_HIT` (pages evicted meanwhile, or another prompt). Other errors:
/// `EKV_ERR_UNKNOWN_SEQUENCE`, `EKV_ERR_NOT_PAGED`, `EKV_ERR_SEQUENCE_NOT_EMPTY`,
/// `EKV_ERR_NO_PREFIX_INDEX`; on error the sequence is unchanged.
///
/// # Safety
///
/// `cache` and `tokens` as `ekv_prefix_lookup`; `hit` NULL or readable; `attached`
/// (optional) NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_prefix_attach(
    cache: *mut EkvCache,
    seq: EkvSeq,
    hit: *const EkvPrefixHit,
    tokens: *const u32,
    n: usize,
    attached: *mut u32,
) -> EkvStatus {
    let r = (|| {
        // SAFETY: forwarded obligation; copied out at once.
        let want = *unsafe { input(hit) }?;
        if want.reserved != 0 {
            return Err(Fail(EKV_ERR_INVALID_ARGUMENT));
        }
        let tokens = Buf::input(tokens, n)?;
        let attached = Out::optional(attached)?;
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        let count = h.with(|c, a| {
            let [s, d, m] = a.spans();
            disjoint(&[opt_span(&attached), tokens.span(), s, d, m])?;
            // SAFETY: readable (caller), outside the cache's memory.
            let tokens = unsafe { tokens.get() };
            let seq = SeqId::from_raw(seq);
            // The C hit carries no registration id: look up again and insist on the same hit,
            // which `attach` then re-verifies page by page (in every group of a grouped cache).
            let same = |h: EkvPrefixHit| {
                if (h.tokens, h.matched, h.pages) == (want.tokens, want.matched, want.pages) {
                    Ok(())
                } else {
                    Err(Fail(EKV_ERR_STALE_HIT))
                }
            };
            match c {
                AnyCache::Grouped(g) => {
                    let fresh = g.lookup(tokens)?;
                    same(summary(g.group_count(), &fresh))?;
                    Ok(g.attach(seq, &fresh, tokens)?)
                }
                AnyCache::List(c) => {
                    let fresh = c.lookup(tokens)?;
                    same(flat(&fresh))?;
                    Ok(c.attach(seq, &fresh, tokens)?)
                }
                AnyCache::Bitmap(c) => {
                    let fresh = c.lookup(tokens)?;
                    same(flat(&fresh))?;
                    Ok(c.attach(seq, &fresh, tokens)?)
                }
            }
        })?;
        if let Some(out) = attached {
            // SAFETY: checked, writable by the caller's obligation.
            unsafe { out.set(count) };
        }
        Ok(())
    })();
    status(r)
}

/// The single-conversation path: `held` are the token ids at the sequence's positions, `prompt`
/// the new prompt. Keeps the longest reusable common prefix (chunk aligned, below the prompt's
/// length, inside the committed prompt), truncates the sequence there and writes the positions
/// kept to `kept` (optional: may be NULL). Decode positions are never kept. Works without a
/// prefix index and for contiguous sequences.
///
/// Errors: `EKV_ERR_UNKNOWN_SEQUENCE`, `EKV_ERR_PROMPT_MISMATCH` (`held` longer than the
/// sequence).
///
/// # Safety
///
/// `cache` as `ekv_commit_prompt`; `held` and `prompt` NULL (with length 0) or readable for
/// their lengths; `kept` (optional) NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_reuse_prefix(
    cache: *mut EkvCache,
    seq: EkvSeq,
    held: *const u32,
    n_held: usize,
    prompt: *const u32,
    n_prompt: usize,
    kept: *mut u32,
) -> EkvStatus {
    let r = (|| {
        let held = Buf::input(held, n_held)?;
        let prompt = Buf::input(prompt, n_prompt)?;
        let kept = Out::optional(kept)?;
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        let count = h.with(|c, a| {
            let [s, d, m] = a.spans();
            disjoint(&[opt_span(&kept), held.span(), s, d, m])?;
            disjoint(&[opt_span(&kept), prompt.span(), s, d, m])?;
            // SAFETY: readable (caller), outside the cache's memory (they may overlap each
            // other: both are only read).
            let (held, prompt) = unsafe { (held.get(), prompt.get()) };
            Ok(dispatch!(c, c => c.reuse_prefix(SeqId::from_raw(seq), held, prompt))?)
        })?;
        if let Some(out) = kept {
            // SAFETY: checked, writable by the caller's obligation.
            unsafe { out.set(count) };
        }
        Ok(())
    })();
    status(r)
}

/// The C view of a hit.
fn flat(h: &edgekv::prefix::PrefixHit) -> EkvPrefixHit {
    EkvPrefixHit {
        tokens: h.tokens,
        matched: h.matched,
        pages: h.pages,
        reserved: 0,
    }
}

/// The C view of a hit of a cache of `groups` groups: the tokens every group reuses, the fewest
/// tokens any group matched, the most pages any group attaches.
fn summary(groups: usize, h: &edgekv::GroupedPrefixHit) -> EkvPrefixHit {
    let mut out = EkvPrefixHit {
        tokens: h.tokens,
        matched: u32::MAX,
        pages: 0,
        reserved: 0,
    };
    for g in (0..groups).filter_map(|g| h.group(g)) {
        out.matched = out.matched.min(g.matched);
        out.pages = out.pages.max(g.pages);
    }
    if out.matched == u32::MAX {
        out.matched = 0;
    }
    out
}
