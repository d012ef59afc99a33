//! Prefix reuse over layer groups: a prompt reused from a grouped cache's prefix indexes, then
//! prefilled to its end, equals a cold prefill of it bit for bit — every row a layer keeps,
//! every position a window released (released in both), and attention in every layer — for
//! prompts shorter and longer than the window, committed once at the end or after every
//! chunk (as a chat commits each turn). A windowed group only publishes the pages it still
//! held when the prompt was committed: committed once, a prompt that outgrew the window gives
//! no hit; committed per chunk, its pages stay cached after the window released them and a
//! later prompt reuses them past the window.

use edgekv::attention::AttentionParams;
use edgekv::prefix::plan_prefill;
use edgekv::{
    CacheConfig, ElementFormat, Error, FreeList, GroupWindow, GroupedCache, HeapArena, Kv,
    LayerGroup, Layers, META_ALIGN, SeqId, SeqMode, Shape,
};

const SHAPE: Shape = Shape {
    layers: 3,
    kv_heads: 1,
    head_dim: 8,
};
const ROW: usize = 8;
const WINDOW: u32 = 16;

/// Layers 0 and 2: window 16 with a sink, f16. Layer 1: global, f32. Pages of 4, chunks of 8.
fn config() -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(4)
        .with_chunk_tokens(8)
        .with_sequences(4, 256)
        .with_formats(ElementFormat::F16, ElementFormat::F16)
        .with_window(GroupWindow::new(WINDOW, 1))
        .with_group(LayerGroup::new(Layers::Run { first: 1, count: 1 }))
}

struct Arenas(HeapArena, HeapArena);

/// Pages of the windowed and the global group.
const PAGES: [usize; 2] = [48, 96];

fn arenas(cfg: &CacheConfig, pages: &[usize]) -> Arenas {
    let plan = GroupedCache::<FreeList>::plan_pages(cfg, pages).unwrap();
    Arenas(
        HeapArena::new(plan.data_bytes, cfg.align).unwrap(),
        HeapArena::new(plan.meta_bytes, META_ALIGN).unwrap(),
    )
}

fn cache<'a>(cfg: &CacheConfig, pages: &[usize], a: &'a mut Arenas) -> GroupedCache<'a> {
    GroupedCache::with_pages(*cfg, pages, a.0.as_uninit_mut(), a.1.as_uninit_mut()).unwrap()
}

/// The row of position `t` in `(layer, kv)`: a function of the tokens `[0, t]` (as a model's),
/// exact in f16.
fn kv_row(tokens: &[u32], t: usize, layer: u16, kv: Kv) -> [f32; ROW] {
    let h = tokens[..=t].iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x0100_0000_01b3)
    }) ^ ((layer as u64) << 40)
        ^ ((kv == Kv::V) as u64 * 0x9e37_79b9);
    core::array::from_fn(|e| ((h >> (e * 7)) & 0x7f) as f32 / 8.0 - 8.0)
}

/// Prefills `[from, tokens.len())` in chunks on the absolute grid, committing the prompt so far
/// after each chunk when `per_chunk`, else once at the end.
fn prefill(c: &mut GroupedCache<'_>, seq: SeqId, tokens: &[u32], from: u32, per_chunk: bool) {
    assert_eq!(c.seq_len(seq), Ok(from));
    for ch in plan_prefill(from, tokens.len() as u32, 8) {
        assert_eq!(c.reserve(seq, ch.end - ch.start), Ok(ch.start));
        for layer in 0..SHAPE.layers {
            let (mut k, mut v) = (Vec::new(), Vec::new());
            for t in ch.start..ch.end {
                k.extend(kv_row(tokens, t as usize, layer, Kv::K));
                v.extend(kv_row(tokens, t as usize, layer, Kv::V));
            }
            c.write_kv(seq, layer, ch.start, &k, &v).unwrap();
        }
        if per_chunk {
            c.commit_prompt(seq, &tokens[..ch.end as usize]).unwrap();
        }
    }
    c.commit_prompt(seq, tokens).unwrap();
    let mut scratch = [0u16; 128];
    c.check_invariants(&mut scratch).unwrap();
}

/// Every position of every layer (its bits, or the error of a released one), and attention of
/// the last 5 positions in every layer.
fn observe(c: &GroupedCache<'_>, seq: SeqId) -> Vec<Result<Vec<u32>, Error>> {
    let len = c.seq_len(seq).unwrap();
    let mut seen = Vec::new();
    for layer in 0..SHAPE.layers {
        for kv in [Kv::K, Kv::V] {
            for t in 0..len {
                let mut r = [0f32; ROW];
                seen.push(
                    c.read(seq, layer, kv, t, &mut r)
                        .map(|()| r.map(f32::to_bits).to_vec()),
                );
            }
        }
        let start = len - 5;
        let q: Vec<f32> = (0..5 * 2 * ROW)
            .map(|i| (i % 13) as f32 * 0.25 - 1.5)
            .collect();
        let mut out = vec![0f32; q.len()];
        let params = AttentionParams::new(SHAPE, 2);
        let mut s = vec![0f32; c.scratch_len(2)];
        seen.push(
            c.attention(seq, layer, start, &q, &mut out, &params, &mut s)
                .map(|()| out.iter().map(|x| x.to_bits()).collect()),
        );
    }
    seen
}

/// Prefills `first` in a cache, then `second` reusing what it can; compares with a cold
/// prefill of `second`. Returns the tokens reused.
fn reuse_equals_cold(first: &[u32], second: &[u32], per_chunk: bool, keep_first: bool) -> u32 {
    let cfg = config();
    let mut a = arenas(&cfg, &PAGES);
    let mut c = cache(&cfg, &PAGES, &mut a);
    let s1 = c.create_sequence(SeqMode::Paged).unwrap();
    prefill(&mut c, s1, first, 0, per_chunk);
    if !keep_first {
        c.free_sequence(s1).unwrap();
    }
    let hit = c.lookup(second).unwrap();
    for g in 0..2 {
        assert_eq!(hit.group(g).unwrap().tokens, hit.tokens);
    }
    let s2 = c.create_sequence(SeqMode::Paged).unwrap();
    assert_eq!(c.attach(s2, &hit, second), Ok(hit.tokens));
    prefill(&mut c, s2, second, hit.tokens, per_chunk);

    let mut b = arenas(&cfg, &PAGES);
    let mut cold = cache(&cfg, &PAGES, &mut b);
    let s = cold.create_sequence(SeqMode::Paged).unwrap();
    prefill(&mut cold, s, second, 0, per_chunk);
    assert_eq!(
        observe(&c, s2),
        observe(&cold, s),
        "reused {} tokens",
        hit.tokens
    );
    hit.tokens
}

fn prompt(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| seed * 1000 + i).collect()
}

#[test]
fn prompts_shorter_than_the_window_are_reused_in_every_group() {
    let first = prompt(1, 14);
    let mut second = first[..11].to_vec();
    second.extend(prompt(2, 4));
    for per_chunk in [false, true] {
        for keep in [false, true] {
            assert_eq!(reuse_equals_cold(&first, &second, per_chunk, keep), 8);
        }
    }
}

#[test]
fn a_prompt_committed_once_past_the_window_gives_no_hit() {
    // 40 tokens with a window of 16: the windowed group released pages 1.. (page 0 is the
    // sink's) before the commit, so it published only page 0 and no chunk is reusable.
    let first = prompt(1, 40);
    let mut second = first[..37].to_vec();
    second.extend(prompt(3, 6));
    assert_eq!(reuse_equals_cold(&first, &second, false, false), 0);
    assert_eq!(reuse_equals_cold(&first, &second, false, true), 0);
}

#[test]
fn a_prompt_committed_per_chunk_is_reused_past_the_window() {
    let first = prompt(1, 40);
    let mut second = first[..37].to_vec();
    second.extend(prompt(3, 6));
    // The windowed group published pages 0..6 at the commit of 24 tokens; reserving the next
    // chunk then released page 1 (it stays cached), so later commits could not chain past it:
    // the hit is 24 tokens, past the window of 16.
    assert_eq!(reuse_equals_cold(&first, &second, true, false), 24);
    assert_eq!(reuse_equals_cold(&first, &second, true, true), 24);
    // A prompt that leaves the first one early reuses less, the same way.
    let mut third = first[..20].to_vec();
    third.extend(prompt(4, 30));
    assert_eq!(reuse_equals_cold(&first, &third, true, false), 16);
}

#[test]
fn an_evicted_page_in_one_group_makes_the_hit_stale_in_none() {
    let cfg = config();
    // A global group of 40 pages: fewer than a 256-token sequence needs.
    let mut a = arenas(&cfg, &[48, 40]);
    let mut c = cache(&cfg, &[48, 40], &mut a);
    let first = prompt(1, 14);
    let s1 = c.create_sequence(SeqMode::Paged).unwrap();
    prefill(&mut c, s1, &first, 0, false);
    c.free_sequence(s1).unwrap();
    let hit = c.lookup(&first).unwrap();
    assert_eq!(hit.tokens, 8);
    // A hog cannot take the windowed group's pages (its window releases them as it grows),
    // but it fills the global group, evicting the cached pages of the hit there.
    let hog = c.create_sequence(SeqMode::Paged).unwrap();
    while c.reserve(hog, 4).is_ok() {}
    let s2 = c.create_sequence(SeqMode::Paged).unwrap();
    let before: Vec<_> = (0..2).map(|g| c.group(g).unwrap().stats()).collect();
    assert_eq!(c.attach(s2, &hit, &first), Err(Error::StaleHit));
    let after: Vec<_> = (0..2).map(|g| c.group(g).unwrap().stats()).collect();
    assert_eq!(before, after);
    assert_eq!(c.seq_len(s2), Ok(0));
    assert_eq!(c.lookup(&first).unwrap().tokens, 0);
}

#[test]
fn the_single_conversation_path_keeps_what_every_group_holds() {
    let cfg = config();
    // 14 tokens, 11 shared: 8 kept. 40 tokens (window 16), 37 shared: 32 kept, the window's 16
    // positions before it still held; 21 shared: 16 kept would need positions 1..16, released.
    let cases = [
        (11usize, Ok(8u32)),
        (37, Ok(32)),
        (21, Err(Error::TruncateBeyondWindow)),
    ];
    for (shared, keep) in cases {
        let first = prompt(1, if shared < 16 { 14 } else { 40 });
        let mut second = first[..shared].to_vec();
        second.extend(prompt(5, 6));
        let mut a = arenas(&cfg, &PAGES);
        let mut c = cache(&cfg, &PAGES, &mut a);
        let s = c.create_sequence(SeqMode::Paged).unwrap();
        prefill(&mut c, s, &first, 0, false);
        let before: Vec<_> = (0..2).map(|g| c.group(g).unwrap().stats()).collect();
        let got = c.reuse_prefix(s, &first, &second);
        assert_eq!(got, keep);
        let from = match got {
            Ok(kept) => kept,
            Err(_) => {
                // Nothing changed; starting over is always possible.
                let after: Vec<_> = (0..2).map(|g| c.group(g).unwrap().stats()).collect();
                assert_eq!(after, before);
                assert_eq!(c.seq_len(s), Ok(first.len() as u32));
                c.truncate(s, 0).unwrap();
                0
            }
        };
        prefill(&mut c, s, &second, from, false);
        let mut b = arenas(&cfg, &PAGES);
        let mut cold = cache(&cfg, &PAGES, &mut b);
        let t = cold.create_sequence(SeqMode::Paged).unwrap();
        prefill(&mut cold, t, &second, 0, false);
        assert_eq!(observe(&c, s), observe(&cold, t));
    }
}
