//! Running out of pages in one group at every possible point: a grouped cache of three groups
//! (two windowed with different windows, sinks and rollback, one global) is built so that after
//! a scenario group `g` has exactly `k` pages left and the others plenty, for every `g` and
//! every `k` from 0 to past what the call needs, with or without cached pages of a published
//! prompt among those `k` (evicted first by allocations); then reserve, fork and copy-on-write
//! writes run. A call that fails must fail with `OutOfPages` and leave every group exactly as it
//! was (pool counts, evictions, every page's state, page tables, every readable row's bits, the
//! prefix indexes' hits); one that succeeds leaves the invariants holding; and a call that
//! succeeds with `k` pages succeeds with more.

use edgekv::{
    CacheConfig, ElementFormat, Error, FreeList, GroupWindow, GroupedCache, HeapArena, Kv,
    LayerGroup, Layers, META_ALIGN, PageState, SeqId, SeqMode, Shape, Stats,
};

const SHAPE: Shape = Shape {
    layers: 6,
    kv_heads: 1,
    head_dim: 32,
};
const ROW: usize = 32;
const P: u32 = 4;
/// Pages of a group that is not the one being exhausted.
const PLENTY: usize = 64;

/// Layers 1, 3, 4: window 8 with a rollback of 2, q8_0. Layers 2, 5: global, f16. Layer 0:
/// window 6 with 2 sinks, f32.
fn config() -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(P as u16)
        .with_sequences(6, 128)
        .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0)
        .with_window(GroupWindow {
            window: 8,
            sinks: 0,
            rollback: 2,
        })
        .with_group(
            LayerGroup::new(Layers::Every {
                period: 3,
                first: 2,
            })
            .with_formats(ElementFormat::F16, ElementFormat::F16),
        )
        .with_group(
            LayerGroup::new(Layers::Run { first: 0, count: 1 }).with_window(GroupWindow::new(6, 2)),
        )
}

fn row(seed: u32, layer: u16, pos: u32) -> Vec<f32> {
    (0..ROW as u32)
        .map(|e| ((pos * 31 + e * 7 + layer as u32 * 13 + seed * 5) % 64) as f32 / 16.0 - 2.0)
        .collect()
}

/// Appends `n` positions to `seq`, writing every layer's K and V.
fn push(c: &mut GroupedCache<'_>, seq: SeqId, n: u32, seed: u32) -> Result<(), Error> {
    let start = c.reserve(seq, n)?;
    for layer in 0..SHAPE.layers {
        let rows: Vec<f32> = (start..start + n)
            .flat_map(|t| row(seed, layer, t))
            .collect();
        c.write_kv(seq, layer, start, &rows, &rows)?;
    }
    Ok(())
}

/// Everything observable in every group.
#[derive(Debug, PartialEq)]
struct State {
    stats: Vec<Stats>,
    pages: Vec<Vec<Option<PageState>>>,
    tables: Vec<Vec<u16>>,
    lens: Vec<Result<u32, Error>>,
    rows: Vec<Option<Vec<u32>>>,
    /// Tokens of the cached prompt every group can still reuse, and each group's.
    lookup: (u32, Vec<u32>),
}

fn state(c: &GroupedCache<'_>, seqs: &[SeqId]) -> State {
    let mut scratch = [0u16; 256];
    c.check_invariants(&mut scratch).unwrap();
    let groups: Vec<_> = (0..c.group_count()).map(|g| c.group(g).unwrap()).collect();
    let mut rows = Vec::new();
    for &s in seqs {
        let len = c.seq_len(s).unwrap_or(0);
        for layer in 0..SHAPE.layers {
            for kv in [Kv::K, Kv::V] {
                for t in 0..len {
                    let mut r = [0f32; ROW];
                    rows.push(
                        c.read(s, layer, kv, t, &mut r)
                            .ok()
                            .map(|()| r.iter().map(|x| x.to_bits()).collect()),
                    );
                }
            }
        }
    }
    State {
        stats: groups.iter().map(|k| k.stats()).collect(),
        pages: groups
            .iter()
            .map(|k| {
                (0..=k.arena_plan().num_pages)
                    .map(|p| k.page_state(p))
                    .collect()
            })
            .collect(),
        tables: groups
            .iter()
            .flat_map(|k| {
                seqs.iter()
                    .map(move |&s| k.page_table(s).map_or(vec![], <[u16]>::to_vec))
            })
            .collect(),
        lens: seqs.iter().map(|&s| c.seq_len(s)).collect(),
        rows,
        lookup: {
            let hit = c.lookup(&old_prompt()).unwrap();
            (
                hit.tokens,
                (0..3).map(|g| hit.group(g).unwrap().tokens).collect(),
            )
        },
    }
}

/// The scenario: `a` of 10 positions, a fork `child` truncated into a shared page, and `b`
/// grown to 30 positions (its windowed groups released pages). Returns `[a, child, b]`.
fn scenario(c: &mut GroupedCache<'_>, cached: bool) -> Vec<SeqId> {
    if cached {
        // A published prompt of 8 positions whose pages stay cached (evictable) in every group.
        let old = c.create_sequence(SeqMode::Paged).unwrap();
        push(c, old, 8, 9).unwrap();
        c.commit_prompt(old, &old_prompt()[..8]).unwrap();
        c.free_sequence(old).unwrap();
    }
    let a = c.create_sequence(SeqMode::Paged).unwrap();
    push(c, a, 10, 1).unwrap();
    let child = c.fork(a).unwrap();
    c.truncate(child, 6).unwrap();
    let b = c.create_sequence(SeqMode::Paged).unwrap();
    for i in 0..10 {
        push(c, b, 3, 2 + i).unwrap();
    }
    vec![a, child, b]
}

/// The prompt of the cached sequence (one token past its 8 positions, for lookups).
fn old_prompt() -> Vec<u32> {
    (0..9).map(|t| 700 + t).collect()
}

/// Pages each group uses after the scenario.
fn scenario_use(cached: bool) -> Vec<usize> {
    let cfg = config();
    let (mut data, mut meta) = arenas(&[PLENTY; 3], &cfg);
    let mut c = cache(&[PLENTY; 3], &cfg, &mut data, &mut meta);
    scenario(&mut c, cached);
    (0..3)
        .map(|g| c.group(g).unwrap().stats().pages_used as usize)
        .collect()
}

/// Heap arenas for `pages[g]` pages per group.
fn arenas(pages: &[usize], cfg: &CacheConfig) -> (HeapArena, HeapArena) {
    let plan = GroupedCache::<FreeList>::plan_pages(cfg, pages).unwrap();
    (
        HeapArena::new(plan.data_bytes, cfg.align).unwrap(),
        HeapArena::new(plan.meta_bytes, META_ALIGN).unwrap(),
    )
}

fn cache<'a>(
    pages: &[usize],
    cfg: &CacheConfig,
    data: &'a mut HeapArena,
    meta: &'a mut HeapArena,
) -> GroupedCache<'a> {
    GroupedCache::with_pages(*cfg, pages, data.as_uninit_mut(), meta.as_uninit_mut()).unwrap()
}

/// Runs `op` with group `g` left `k` pages for every `g` and `k` (the edges only under Miri),
/// with and without cached pages among them (with only, under Miri). Returns, per group, the
/// fewest pages with which `op` succeeded (the same either way: cached pages are available).
fn exhaust(
    what: &str,
    op: impl Fn(&mut GroupedCache<'_>, &[SeqId]) -> Result<(), Error>,
) -> Vec<usize> {
    let cfg = config();
    let mixes: &[bool] = if cfg!(miri) { &[true] } else { &[false, true] };
    let mut all = Vec::new();
    for &cached in mixes {
        let used = scenario_use(cached);
        let mut needs = Vec::new();
        for g in 0..3 {
            let levels: Vec<usize> = if cfg!(miri) {
                vec![0, 1, 3]
            } else {
                (0..=8).collect()
            };
            let mut first_ok = None;
            for k in levels {
                let mut pages = [PLENTY; 3];
                pages[g] = used[g] + k;
                let (mut data, mut meta) = arenas(&pages, &cfg);
                let mut c = cache(&pages, &cfg, &mut data, &mut meta);
                let seqs = scenario(&mut c, cached);
                assert_eq!(c.group(g).unwrap().pool().available(), k);
                let before = state(&c, &seqs);
                let at = format!("{what}: group {g}, {k} pages, cached {cached}");
                match op(&mut c, &seqs) {
                    Err(e) => {
                        assert_eq!(e, Error::OutOfPages, "{at}");
                        assert!(
                            first_ok.is_none(),
                            "{at}: failed after succeeding with fewer"
                        );
                        assert_eq!(state(&c, &seqs), before, "{at}");
                    }
                    Ok(()) => {
                        first_ok.get_or_insert(k);
                        state(&c, &seqs); // invariants hold
                    }
                }
            }
            needs.push(first_ok.unwrap_or(usize::MAX));
        }
        all.push(needs);
    }
    if all.len() == 2 {
        assert_eq!(
            all[0], all[1],
            "{what}: needs with and without cached pages"
        );
    }
    all.swap_remove(0)
}

#[test]
fn reserve_is_all_or_nothing_across_groups_at_every_fill_level() {
    // `a` holds 10 positions: 2 more fit its tail page in every group.
    assert_eq!(
        exhaust("reserve a 2", |c, s| c.reserve(s[0], 2).map(|_| ())),
        [0, 0, 0]
    );
    // 3 more: a new page everywhere; no window releases anything yet.
    let needs = exhaust("reserve a 3", |c, s| c.reserve(s[0], 3).map(|_| ()));
    assert_eq!(needs, [1, 1, 1]);
    // `b` at 30 positions, 9 more: 2 new pages, which the global group needs; each windowed
    // group first releases one page leaving its window (group 0: positions < 29 − 8 with the
    // rollback of 2, page 4; group 2: < 31 − 6 after its sinks' page, page 5), so needs one.
    let needs = exhaust("reserve b 9", |c, s| c.reserve(s[2], 9).map(|_| ()));
    assert_eq!(needs, [1, 2, 1]);
}

#[test]
fn a_shared_tail_is_copied_all_or_nothing_across_groups() {
    // The child truncated to 6 shares `a`'s second page: reserving copies it in every group.
    let needs = exhaust("reserve child 1", |c, s| c.reserve(s[1], 1).map(|_| ()));
    assert_eq!(needs, [1, 1, 1]);
    // Reserved, then written: the writes cannot fail.
    exhaust("reserve child 5 and write", |c, s| {
        let start = c.reserve(s[1], 5)?;
        for layer in 0..SHAPE.layers {
            let rows: Vec<f32> = (start..start + 5).flat_map(|t| row(9, layer, t)).collect();
            c.write_kv(s[1], layer, start, &rows, &rows).unwrap();
        }
        Ok(())
    });
}

#[test]
fn fork_is_all_or_nothing_across_groups_at_every_fill_level() {
    // `a`'s partial tail page is copied in every group; `b` (30 positions) too.
    assert_eq!(
        exhaust("fork a", |c, s| c.fork(s[0]).map(|_| ())),
        [1, 1, 1]
    );
    assert_eq!(
        exhaust("fork b", |c, s| c.fork(s[2]).map(|_| ())),
        [1, 1, 1]
    );
}

#[test]
fn a_copy_on_write_write_touches_only_its_group() {
    // Rewriting position 2 of the child (shared with `a`) copies the page in that layer's group.
    for layer in [0u16, 1, 2] {
        let needs = exhaust(&format!("write layer {layer}"), |c, s| {
            c.write(s[1], layer, Kv::K, 2, &row(7, layer, 2))
        });
        let g = config().layer_group(layer).unwrap().0;
        for (h, &need) in needs.iter().enumerate() {
            assert_eq!(need, usize::from(h == g), "layer {layer} group {h}");
        }
    }
}

#[test]
fn the_scenario_uses_every_group() {
    let used = scenario_use(false);
    // Global: a 3 pages (the child shares 2 of them), b 8 pages.
    assert_eq!(used[1], 3 + 8);
    assert!(used[0] < used[1] && used[2] < used[1], "{used:?}");
    assert_eq!(scenario_use(true), used);
    // With 2 pages left in the global group, the cached prompt's 2 pages are those 2 (its 8
    // tokens reusable); with 1, the least recently cached (its second: a free releases the
    // last page first) was evicted, and its first 4 tokens are still reusable.
    let cfg = config();
    for (k, cached, hit) in [(2, 2, 8), (1, 1, 4)] {
        let mut pages = [PLENTY; 3];
        pages[1] = used[1] + k;
        let (mut data, mut meta) = arenas(&pages, &cfg);
        let mut c = cache(&pages, &cfg, &mut data, &mut meta);
        scenario(&mut c, true);
        assert_eq!(c.group(1).unwrap().stats().pages_cached, cached);
        assert_eq!(c.lookup(&old_prompt()).unwrap().tokens, hit);
    }
}
