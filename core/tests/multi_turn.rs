//! Twenty chat turns, each prompt extending the conversation so far, under a pool small enough
//! that distractor prompts force evictions. Hit lengths, page sharing and refcounts are checked
//! against a model of the pool (free pages, LRU of cached pages, chain of published pages), and
//! every reused row is compared bit for bit with a cold-written copy in a second cache.

use crate::common::{Arenas, ROW, append, assert_rows, invariants, prefill};
use edgekv::prefix::reuse_boundary;
use edgekv::{CacheConfig, FreeList, Kv, KvCache, PageState, SeqId, SeqMode, Shape};
use std::collections::VecDeque;

const P: usize = 4;
const C: usize = 8;
const POOL: usize = 96;
/// Turns (fewer under Miri, where the cold reference prefill of each turn is slow).
const TURNS: usize = if cfg!(miri) { 5 } else { 20 };

fn cfg() -> CacheConfig {
    CacheConfig::new(Shape {
        layers: 2,
        kv_heads: 2,
        head_dim: 4,
    })
    .with_page_tokens(P as u16)
    .with_chunk_tokens(C as u16)
    .with_sequences(4, 512)
}

/// The pool as the cache should see it. Published pages are named by keys.
#[derive(Default)]
struct Model {
    free: usize,
    /// Cached published pages, least recently released first.
    lru: VecDeque<u64>,
    /// Published pages referenced by the live sequence.
    in_use: Vec<u64>,
    next_key: u64,
    evicted_conv: usize,
    /// Keys of the conversation's published pages, by page index.
    chain: Vec<u64>,
}

impl Model {
    fn alloc(&mut self, n: usize) {
        let from_free = n.min(self.free);
        self.free -= from_free;
        for _ in from_free..n {
            let key = self.lru.pop_front().expect("model: out of pages");
            if self.chain.contains(&key) {
                self.evicted_conv += 1;
            }
        }
    }

    fn alive(&self, key: u64) -> bool {
        self.lru.contains(&key) || self.in_use.contains(&key)
    }

    fn key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }

    /// Releases a sequence's table (published keys or None), last page first.
    fn release(&mut self, table: &[Option<u64>]) {
        for page in table.iter().rev() {
            match page {
                Some(k) => {
                    self.in_use.retain(|x| x != k);
                    self.lru.push_back(*k);
                }
                None => self.free += 1,
            }
        }
    }
}

/// Deterministic pseudo-random numbers (no dependency, same on every run).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Prefills `prompt` cold in the reference cache and compares rows `[0, n)` bit for bit.
fn compare_with_cold(
    reference: &mut KvCache<'_>,
    cache: &KvCache<'_>,
    seq: SeqId,
    prompt: &[u32],
    n: u32,
) {
    let cold = reference.create_sequence(SeqMode::Paged).unwrap();
    prefill(reference, cold, prompt, 0);
    let mut a = vec![0f32; n as usize * ROW];
    let mut b = vec![0f32; n as usize * ROW];
    for layer in 0..2 {
        for kv in [Kv::K, Kv::V] {
            cache.read(seq, layer, kv, 0, &mut a).unwrap();
            reference.read(cold, layer, kv, 0, &mut b).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "reused rows differ from a cold prefill");
        }
    }
    reference.free_sequence(cold).unwrap();
}

#[test]
fn twenty_turns_with_evictions() {
    let cfg = cfg();
    let mut arenas = Arenas::new::<FreeList>(&cfg, POOL);
    let mut c: KvCache = arenas.cache(cfg);
    let ref_cfg = cfg.with_prefix_index(false);
    let mut ref_arenas = Arenas::new::<FreeList>(&ref_cfg, 160);
    let mut reference: KvCache = ref_arenas.cache(ref_cfg);

    let mut m = Model {
        free: POOL,
        ..Model::default()
    };
    let mut rng = Lcg(7);
    let mut conv: Vec<u32> = Vec::new();
    let mut next_token = 1u32;
    let mut fresh = |n: u64| -> Vec<u32> {
        (0..n)
            .map(|_| {
                next_token += 1;
                next_token
            })
            .collect()
    };
    let (mut full_hits, mut cut_hits) = (0, 0);
    for turn in 0..TURNS {
        let user_len = 3 + rng.below(11);
        let mut prompt = conv.clone();
        prompt.extend(fresh(user_len));
        let len = prompt.len();

        // Expected hit: the alive prefix of the chain, capped, aligned to whole chunks.
        let limit = reuse_boundary(len as u32, len as u32, C as u32) as usize / P;
        let alive = m
            .chain
            .iter()
            .take_while(|&&k| m.alive(k))
            .count()
            .min(limit);
        let expect = alive / (C / P) * (C / P);
        let possible = m.chain.len().min(limit) / (C / P) * (C / P);
        if expect == possible {
            full_hits += 1;
        } else {
            cut_hits += 1;
        }

        let seq = c.create_sequence(SeqMode::Paged).unwrap();
        let hit = c.lookup(&prompt).unwrap();
        assert_eq!(hit.pages as usize, expect, "turn {turn}: hit pages");
        assert_eq!(c.attach(seq, &hit, &prompt), Ok((expect * P) as u32));
        let mut table: Vec<Option<u64>> = Vec::new();
        for i in 0..expect {
            let k = m.chain[i];
            m.lru.retain(|x| *x != k);
            m.in_use.push(k);
            table.push(Some(k));
        }
        // Shared with nobody now: refcount 1, revived out of the cache.
        for &page in c.page_table(seq).unwrap() {
            assert_eq!(c.page_state(page), Some(PageState::Used(1)), "turn {turn}");
        }
        compare_with_cold(&mut reference, &c, seq, &prompt, hit.tokens);

        // Prefill the rest; publish whole chunks.
        let pages = len.div_ceil(P);
        m.alloc(pages - expect);
        table.resize(pages, None);
        prefill(&mut c, seq, &prompt, hit.tokens);
        let published = len / C * C / P;
        let mut newly = 0;
        for (i, entry) in table.iter_mut().enumerate().take(published).skip(expect) {
            let dup = m.chain.get(i).is_some_and(|&k| m.alive(k));
            if !dup {
                m.chain.truncate(i);
                let k = m.key();
                m.chain.push(k);
                m.in_use.push(k);
                *entry = Some(k);
                newly += 1;
            }
        }
        assert_eq!(
            c.commit_prompt(seq, &prompt),
            Ok(newly),
            "turn {turn}: published"
        );
        assert_rows(&c, seq, &prompt, len as u32);

        // Decode the answer one token at a time (never published).
        let answer = fresh(2 + rng.below(8));
        let mut held = prompt.clone();
        held.extend(&answer);
        for t in len..held.len() {
            if t % P == 0 {
                m.alloc(1);
                table.push(None);
            }
            append(&mut c, seq, &held, t as u32, t as u32 + 1);
        }
        assert_eq!(c.stats().pages_used as usize, table.len());
        invariants(&c);
        c.free_sequence(seq).unwrap();
        m.release(&table);
        conv = held;

        // A distractor prompt, published and freed: it pushes older pages out.
        let d_len = 4 + rng.below(if turn % 4 == 3 { 240 } else { 60 });
        let d = fresh(d_len);
        let ds = c.create_sequence(SeqMode::Paged).unwrap();
        let d_pages = (d_len as usize).div_ceil(P);
        m.alloc(d_pages);
        prefill(&mut c, ds, &d, 0);
        let d_pub = d_len as usize / C * C / P;
        assert_eq!(c.commit_prompt(ds, &d), Ok(d_pub as u16));
        let d_table: Vec<Option<u64>> =
            (0..d_pages).map(|i| (i < d_pub).then(|| m.key())).collect();
        m.in_use.extend(d_table.iter().flatten());
        c.free_sequence(ds).unwrap();
        m.release(&d_table);

        let st = c.stats();
        assert_eq!(st.pages_free as usize, m.free, "turn {turn}: free pages");
        assert_eq!(
            st.pages_cached as usize,
            m.lru.len(),
            "turn {turn}: cached pages"
        );
        invariants(&c);
    }
    // Under Miri the five turns are too few for the distractors to evict conversation pages.
    if TURNS == 20 {
        assert!(
            m.evicted_conv > 0 && cut_hits > 0,
            "evictions must cut some hits"
        );
        assert!(
            full_hits >= 10,
            "most turns reuse everything published: {full_hits}"
        );
        assert!(c.stats().evictions > 0);
    }
}
