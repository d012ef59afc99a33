//! Prefix reuse through the public API: publish, lookup, attach, the single-conversation path,
//! the reuse boundary, forced hash collisions, namespaces, and bad input.

use crate::common::{Arenas, append, assert_rows, invariants, prefill};
use edgekv::prefix::{PrefixHit, namespace};
use edgekv::{
    Bitmap, CacheConfig, Error, FreeList, KvCache, PageId, PageState, SeqId, SeqMode, Shape,
};

const SHAPE: Shape = Shape {
    layers: 2,
    kv_heads: 2,
    head_dim: 4,
};

/// 4-token pages, 8-token chunks.
fn cfg() -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(4)
        .with_chunk_tokens(8)
        .with_sequences(4, 256)
        .with_namespace(namespace(&[b"test-model"]))
}

fn toks(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| seed * 1000 + i).collect()
}

/// A new sequence prefilled cold with `prompt` and committed.
fn cold<'a, A: edgekv::PageAllocator<'a>>(c: &mut KvCache<'a, A>, prompt: &[u32]) -> SeqId {
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    prefill(c, s, prompt, 0);
    c.commit_prompt(s, prompt).unwrap();
    s
}

/// Everything a failing call must leave unchanged.
fn snapshot(c: &KvCache<'_>, seqs: &[SeqId]) -> String {
    let mut s = format!("{:?}", c.stats());
    for &q in seqs {
        s += &format!("{:?}{:?}", c.sequence(q), c.page_table(q));
    }
    for p in 0..c.arena_plan().num_pages {
        s += &format!("{:?}", c.page_state(p));
    }
    s
}

#[test]
fn publish_lookup_attach_round_trip() {
    let cfg = cfg();
    let mut a = Arenas::new::<FreeList>(&cfg, 24);
    let mut c: KvCache = a.cache(cfg);
    let prompt = toks(1, 20);
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    prefill(&mut c, s, &prompt, 0);
    // Whole chunks only: 16 of 20 tokens, 4 pages.
    assert_eq!(c.commit_prompt(s, &prompt), Ok(4));
    assert_eq!(c.commit_prompt(s, &prompt), Ok(0), "idempotent");
    assert_eq!(c.stats().pages_registered, 4);
    assert_eq!(c.sequence(s).unwrap().prompt, 20);
    // Decode three tokens: never published.
    let mut conv = prompt.clone();
    conv.extend([7, 8, 9]);
    for t in 20..23 {
        append(&mut c, s, &conv, t, t + 1);
    }
    conv.extend(toks(2, 5));
    let hit = c.lookup(&conv).unwrap();
    assert_eq!((hit.tokens, hit.pages, hit.matched), (16, 4, 16));
    let published: Vec<PageId> = c.page_table(s).unwrap()[..4].to_vec();

    // Shared while the first sequence lives.
    let s2 = c.create_sequence(SeqMode::Paged).unwrap();
    assert_eq!(c.attach(s2, &hit, &conv), Ok(16));
    assert_eq!(c.page_table(s2).unwrap(), &published[..]);
    for &p in &published {
        assert_eq!(c.page_state(p), Some(PageState::Used(2)));
    }
    assert_eq!(c.sequence(s2).unwrap().prompt, 16);
    assert_rows(&c, s2, &conv, 16);
    invariants(&c);

    // Freed: published pages are cached, the rest freed; a hit revives them.
    c.free_sequence(s).unwrap();
    c.free_sequence(s2).unwrap();
    let st = c.stats();
    assert_eq!((st.pages_cached, st.pages_used), (4, 0));
    invariants(&c);
    let s3 = c.create_sequence(SeqMode::Paged).unwrap();
    let hit = c.lookup(&conv).unwrap();
    assert_eq!(c.attach(s3, &hit, &conv), Ok(16));
    assert_eq!(c.stats().pages_cached, 0);
    for &p in &published {
        assert_eq!(c.page_state(p), Some(PageState::Used(1)));
    }
    prefill(&mut c, s3, &conv, 16);
    assert_rows(&c, s3, &conv, conv.len() as u32);
    // The conversation's next whole chunk (16..24) is published now.
    assert_eq!(c.commit_prompt(s3, &conv), Ok(2));
    assert_eq!(c.lookup(&conv).unwrap().tokens, 24);
    invariants(&c);
}

#[test]
fn reuse_is_chunk_aligned_and_leaves_the_last_token() {
    let cfg = cfg();
    let mut a = Arenas::new::<FreeList>(&cfg, 16);
    let mut c: KvCache = a.cache(cfg);
    let p = toks(3, 24);
    cold(&mut c, &p);
    let tokens = |q: &[u32]| c.lookup(q).unwrap().tokens;
    assert_eq!(tokens(&p), 16, "the whole prompt: cap at 23, aligned down");
    assert_eq!(tokens(&p[..17]), 16);
    assert_eq!(tokens(&p[..16]), 8, "cap at 15");
    assert_eq!(tokens(&p[..9]), 8);
    assert_eq!(tokens(&p[..8]), 0);
    let mut diverged = p.clone();
    diverged[13] = 1;
    let hit = c.lookup(&diverged).unwrap();
    assert_eq!(
        (hit.matched, hit.tokens),
        (12, 8),
        "page 3 differs: 3 pages, one chunk"
    );
    assert_eq!(c.lookup(&[]), Ok(PrefixHit::NONE));
    assert_eq!(c.lookup(&[5]), Ok(PrefixHit::NONE));
}

#[test]
fn single_conversation_path_keeps_only_prompt_tokens() {
    let cfg = cfg().with_prefix_index(false);
    let mut a = Arenas::new::<FreeList>(&cfg, 16);
    let mut c: KvCache = a.cache(cfg);
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    let prompt = toks(4, 12);
    prefill(&mut c, s, &prompt, 0);
    assert_eq!(
        c.commit_prompt(s, &prompt),
        Ok(0),
        "no index: only the length is recorded"
    );
    let mut held = prompt.clone();
    held.extend(toks(5, 20));
    for t in 12..32 {
        append(&mut c, s, &held, t, t + 1);
    }
    // The new prompt extends everything held; only the committed prompt (12 → 8) is kept.
    let mut next = held.clone();
    next.extend(toks(6, 3));
    assert_eq!(c.reuse_prefix(s, &held, &next), Ok(8));
    assert_eq!(c.seq_len(s), Ok(8));
    prefill(&mut c, s, &next, 8);
    c.commit_prompt(s, &next).unwrap();
    assert_rows(&c, s, &next, next.len() as u32);
    // Second turn: the prompt is all committed now; 35 tokens, mismatch at 33.
    let mut third = next.clone();
    third[33] = 0;
    assert_eq!(c.reuse_prefix(s, &next, &third), Ok(32));
    // Nothing in common, an empty prompt, held tokens past the sequence.
    assert_eq!(c.reuse_prefix(s, &next[..32], &toks(9, 40)), Ok(0));
    assert_eq!(c.seq_len(s), Ok(0));
    assert_eq!(c.reuse_prefix(s, &[], &[]), Ok(0));
    assert_eq!(c.reuse_prefix(s, &[1], &[1, 2]), Err(Error::PromptMismatch));
    assert_eq!(c.lookup(&next), Err(Error::NoPrefixIndex));
    let s2 = c.create_sequence(SeqMode::Paged).unwrap();
    assert_eq!(
        c.attach(s2, &PrefixHit::NONE, &next),
        Err(Error::NoPrefixIndex)
    );
    invariants(&c);
}

/// Every page hashes to the same value: only token and chain verification tells pages apart.
fn collide(_prev: u64, _tokens: &[u32]) -> u64 {
    42
}

#[test]
fn colliding_hashes_never_reuse_wrong_kv() {
    let cfg = cfg().with_chunk_tokens(4);
    let mut a = Arenas::new::<FreeList>(&cfg, 12);
    let mut c: KvCache = a.cache(cfg);
    c.set_page_hasher(collide);
    let pa = toks(1, 12);
    let pb = toks(2, 12);
    let sa = cold(&mut c, &pa);
    let sb = cold(&mut c, &pb);
    assert_eq!(c.stats().pages_registered, 6);
    // A's first page, then B's second and third: only the first page matches.
    let mut mixed = pa[..4].to_vec();
    mixed.extend(&pb[4..]);
    mixed.push(0);
    assert_eq!(c.lookup(&mixed).unwrap().tokens, 4);
    let mut wa = pa.clone();
    wa.push(0);
    assert_eq!(c.lookup(&wa).unwrap().tokens, 12);
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    let hit = c.lookup(&mixed).unwrap();
    c.attach(s, &hit, &mixed).unwrap();
    prefill(&mut c, s, &mixed, 4);
    assert_rows(&c, s, &mixed, mixed.len() as u32);
    for q in [sa, sb, s] {
        c.free_sequence(q).unwrap();
    }
    invariants(&c);
}

#[test]
fn a_reregistered_parent_page_does_not_revive_its_old_children() {
    // Page ids alone would chain a child to whatever now occupies its parent's page id; with a
    // hash that always collides that would reuse KV computed after other tokens.
    let cfg = cfg().with_chunk_tokens(4);
    let mut a = Arenas::new::<FreeList>(&cfg, 4);
    let mut c: KvCache = a.cache(cfg);
    c.set_page_hasher(collide);
    let x = toks(1, 8); // X0 X1
    let mut y = x[..4].to_vec(); // X0 Y1: the child of X0 we keep
    y.extend(toks(2, 4));
    let sx = cold(&mut c, &x);
    let sy = c.create_sequence(SeqMode::Paged).unwrap();
    prefill(&mut c, sy, &y, 0); // cold, not attached: its own copy of X0
    assert_eq!(
        c.commit_prompt(sy, &y),
        Ok(1),
        "X0 is published already; Y1 is new"
    );
    let x0 = c.page_table(sx).unwrap()[0];
    c.free_sequence(sx).unwrap(); // X1 then X0 cached
    // Allocations evict X1, then X0: Z0 lands on X0's page id.
    let hog = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(hog, 4).unwrap();
    let z = c.create_sequence(SeqMode::Paged).unwrap();
    let zp = toks(3, 4); // Z0 differs from X0
    prefill(&mut c, z, &zp, 0);
    assert_eq!(c.page_table(z).unwrap()[0], x0, "X0's page id now holds Z0");
    assert_eq!(c.commit_prompt(z, &zp), Ok(1));
    // Z0 then Y1: Y1 was computed after X0, not Z0. Never reused.
    let mut zy = zp.clone();
    zy.extend(&y[4..]);
    zy.push(0);
    assert_eq!(c.lookup(&zy).unwrap().tokens, 4);
    invariants(&c);
}

#[test]
fn namespaces_separate_prefixes() {
    let cfg = cfg();
    let mut a = Arenas::new::<FreeList>(&cfg, 12);
    let mut c: KvCache = a.cache(cfg);
    c.set_page_hasher(collide); // separation must not rely on the hash
    let p = toks(1, 17);
    let s = cold(&mut c, &p);
    assert_eq!(c.lookup(&p).unwrap().tokens, 16);
    c.set_namespace(namespace(&[b"test-model", b"adapter-2"]));
    assert_eq!(c.lookup(&p).unwrap().tokens, 0);
    assert_eq!(c.commit_prompt(s, &p), Err(Error::PromptMismatch));
    c.set_namespace(cfg.namespace);
    assert_eq!(c.lookup(&p).unwrap().tokens, 16);
}

#[test]
fn failing_prefix_calls_change_nothing() {
    let cfg = cfg();
    let mut a = Arenas::new::<FreeList>(&cfg, 8);
    let mut c: KvCache = a.cache(cfg);
    let p = toks(1, 17);
    let s = cold(&mut c, &p);
    let hit = c.lookup(&p).unwrap();
    let t = c.create_sequence(SeqMode::Paged).unwrap();
    let seqs = [s, t];
    let before = snapshot(&c, &seqs);
    let mut other = p.clone();
    other[2] = 9;
    let stale = SeqId::from_raw(0x0005_0003);
    let cases: Vec<(&str, Result<u32, Error>)> = vec![
        ("unknown sequence", c.attach(stale, &hit, &p)),
        ("non-empty sequence", c.attach(s, &hit, &p)),
        ("hit of another prompt", c.attach(t, &hit, &other)),
        ("prompt shorter than the hit", c.attach(t, &hit, &p[..16])),
        (
            "commit longer than the sequence",
            c.commit_prompt(t, &p).map(u32::from),
        ),
        ("commit unknown", c.commit_prompt(stale, &p).map(u32::from)),
        (
            "commit other tokens",
            c.commit_prompt(s, &other).map(u32::from),
        ),
        ("reuse unknown", c.reuse_prefix(stale, &p, &p)),
        ("reuse held too long", c.reuse_prefix(t, &p, &p)),
    ];
    let want = [
        Error::UnknownSequence,
        Error::SequenceNotEmpty,
        Error::StaleHit,
        Error::StaleHit,
        Error::PromptMismatch,
        Error::UnknownSequence,
        Error::PromptMismatch,
        Error::UnknownSequence,
        Error::PromptMismatch,
    ];
    for ((what, got), want) in cases.into_iter().zip(want) {
        assert_eq!(got, Err(want), "{what}");
        assert_eq!(snapshot(&c, &seqs), before, "{what} changed the cache");
    }
    invariants(&c);
    // A hit whose pages were evicted since the lookup is stale.
    c.free_sequence(s).unwrap();
    let hog = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(hog, 8 * 4).unwrap(); // every page, evicting the cached ones
    c.free_sequence(hog).unwrap();
    let before = snapshot(&c, &[t]);
    assert_eq!(c.attach(t, &hit, &p), Err(Error::StaleHit));
    assert_eq!(snapshot(&c, &[t]), before);
    assert_eq!(
        c.lookup(&p),
        Ok(PrefixHit::NONE),
        "lookups on an emptied index miss"
    );
    // An empty hit attaches nothing.
    assert_eq!(c.attach(t, &PrefixHit::NONE, &p), Ok(0));
    invariants(&c);
}

#[test]
fn contiguous_sequences_record_prompts_but_never_share() {
    let cfg = cfg();
    let mut a = Arenas::new::<Bitmap>(&cfg, 16);
    let mut c: KvCache<'_, Bitmap<'_>> = a.cache(cfg);
    let p = toks(1, 17);
    let s = c.create_sequence(SeqMode::Contiguous).unwrap();
    prefill(&mut c, s, &p, 0);
    assert_eq!(c.commit_prompt(s, &p), Ok(0));
    assert_eq!(c.sequence(s).unwrap().prompt, 17);
    assert_eq!(c.lookup(&p).unwrap().tokens, 0);
    let paged = cold(&mut c, &p);
    let hit = c.lookup(&p).unwrap();
    assert_eq!(hit.tokens, 16);
    let s2 = c.create_sequence(SeqMode::Contiguous).unwrap();
    assert_eq!(c.attach(s2, &hit, &p), Err(Error::NotPaged));
    c.free_sequence(paged).unwrap();
    invariants(&c);
}
