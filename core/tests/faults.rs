//! Running out of pages at every possible point: each page-allocating call (reserve, fork, a
//! copy-on-write write, attach, restore) is tried with every number of available pages from 0 up
//! to what it needs, with evictable cached pages in the mix or not; when it fails it must fail
//! with `OutOfPages` and leave everything — pool counts, page tables, contents, the prefix index,
//! invariants — exactly as it was.

use edgekv::snapshot::{RamFlash, SliceFlash, SnapshotError};
use edgekv::{
    CacheConfig, ElementFormat, Error, HeapArenas, Kv, KvCache, PageAllocator, SeqId, SeqMode,
    Shape, Stats,
};

const SHAPE: Shape = Shape {
    layers: 2,
    kv_heads: 1,
    head_dim: 32,
};
const P: u32 = 4;
const PAGES: usize = 12;

fn config() -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(P as u16)
        .with_formats(ElementFormat::Q8_0, ElementFormat::F16)
        .with_sequences(8, 64)
}

fn rows(seed: u32, n: u32) -> Vec<f32> {
    (0..n * 32)
        .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}

fn prompt(n: u32) -> Vec<u32> {
    (0..n).map(|i| 500 + i).collect()
}

/// Everything observable, for before/after comparisons.
#[derive(Debug, PartialEq)]
struct State {
    stats: Stats,
    free: usize,
    cached: usize,
    registered: usize,
    seqs: Vec<(Vec<u16>, u32, Vec<u32>)>,
    lookup: u32,
}

fn state(c: &KvCache<'_>, seqs: &[SeqId]) -> State {
    let mut scratch = [0u16; 64];
    c.check_invariants(&mut scratch).unwrap();
    State {
        stats: c.stats(),
        free: c.pool().free_pages(),
        cached: c.pool().cached_pages(),
        registered: c.pool().registered_pages(),
        seqs: seqs
            .iter()
            .filter_map(|&s| {
                let len = c.seq_len(s).ok()?;
                let mut bits = Vec::new();
                for layer in 0..SHAPE.layers {
                    for kv in [Kv::K, Kv::V] {
                        let mut r = vec![0f32; len as usize * 32];
                        c.read(s, layer, kv, 0, &mut r).unwrap();
                        bits.extend(r.iter().map(|v| v.to_bits()));
                    }
                }
                Some((c.page_table(s).unwrap().to_vec(), len, bits))
            })
            .collect(),
        lookup: c.lookup(&prompt(40)).unwrap().tokens,
    }
}

/// A cache with history: a live 10-token sequence `a` (published prompt), a forked child, and —
/// if `cached` — a freed 16-token published sequence whose pages sit in the cache; then a hog
/// takes pages until exactly `avail` can still be had. Returns the live sequences (`a` first).
fn scenario(
    c: &mut KvCache<'_>,
    cached: bool,
    avail: usize,
    prep: &dyn Fn(&mut KvCache<'_>, &[SeqId]),
) -> Option<Vec<SeqId>> {
    let a = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(a, 10).unwrap();
    for layer in 0..SHAPE.layers {
        c.write_kv(a, layer, 0, &rows(1 + layer as u32, 10), &rows(9, 10))
            .unwrap();
    }
    c.commit_prompt(a, &prompt(10)).unwrap();
    let child = c.fork(a).unwrap();
    if cached {
        let old = c.create_sequence(SeqMode::Paged).unwrap();
        c.reserve(old, 16).unwrap();
        let mut p = prompt(40);
        p[0] = 1; // another prompt than `a`'s
        c.commit_prompt(old, &p[..16]).unwrap();
        c.free_sequence(old).unwrap();
    }
    prep(c, &[a, child]);
    let hog = c.create_sequence(SeqMode::Paged).unwrap();
    while c.pool().available() > avail {
        c.reserve(hog, P).unwrap();
    }
    (c.pool().available() == avail).then(|| vec![a, child, hog])
}

/// Runs `op` at every availability 0..=need+1 (with and without cached pages); a failure must be
/// `OutOfPages` with the state unchanged, and the op must succeed once `need` pages are there.
fn exhaust(
    what: &str,
    need: usize,
    op: impl Fn(&mut KvCache<'_>, &[SeqId]) -> Result<Option<SeqId>, Error>,
) {
    exhaust_after(what, need, |_, _| {}, op);
}

/// As [`exhaust`], with `prep` run on `[a, child]` before the pool is filled up.
fn exhaust_after(
    what: &str,
    need: usize,
    prep: impl Fn(&mut KvCache<'_>, &[SeqId]),
    op: impl Fn(&mut KvCache<'_>, &[SeqId]) -> Result<Option<SeqId>, Error>,
) {
    let cfg = config();
    let plan = cfg
        .plan_pages(
            PAGES,
            <edgekv::FreeList as PageAllocator>::META_BITS_PER_PAGE,
        )
        .unwrap();
    // Under Miri (slow): the edge only — one page short, exactly enough — with cached pages.
    let levels: Vec<usize> = if cfg!(miri) {
        let mut v = vec![need.saturating_sub(1), need];
        v.dedup();
        v
    } else {
        (0..=need + 1).collect()
    };
    let mixes: &[bool] = if cfg!(miri) { &[true] } else { &[false, true] };
    for &cached in mixes {
        for &avail in &levels {
            let mut arenas = HeapArenas::for_plan(&cfg, &plan).unwrap();
            let mut c: KvCache = arenas.cache(cfg).unwrap();
            let Some(seqs) = scenario(&mut c, cached, avail, &prep) else {
                continue; // the scenario itself needs more pages than that leaves
            };
            let before = state(&c, &seqs);
            match op(&mut c, &seqs) {
                Err(e) => {
                    assert_eq!(
                        e,
                        Error::OutOfPages,
                        "{what}: avail {avail} cached {cached}"
                    );
                    assert!(
                        avail < need,
                        "{what}: failed with {avail} ≥ {need} available"
                    );
                    assert_eq!(state(&c, &seqs), before, "{what}: avail {avail}");
                }
                Ok(new) => {
                    assert!(avail >= need, "{what}: succeeded with {avail} < {need}");
                    let mut all = seqs.clone();
                    all.extend(new);
                    state(&c, &all); // invariants hold
                }
            }
        }
    }
}

#[test]
fn reserve_is_all_or_nothing_at_every_fill_level() {
    // `a` holds 10 of 12 positions: 2 more fit its tail page, then one page per 4.
    for (n, need) in [(2, 0), (3, 1), (6, 1), (7, 2), (14, 3)] {
        exhaust(&format!("reserve {n}"), need, |c, s| {
            c.reserve(s[0], n).map(|_| None)
        });
    }
}

#[test]
fn reserve_secures_the_copy_on_write_of_a_shared_tail_at_every_fill_level() {
    // The child truncated into its first page (shared with `a` and published) or its second:
    // reserving more positions must copy that page now, so writing the reserved positions can
    // no longer run out of pages. Reserve `n` from length `len`: `need` = the copy plus the
    // new pages.
    for (len, n, need) in [(2, 1, 1), (6, 2, 1), (6, 3, 2), (5, 7, 2), (3, 9, 3)] {
        exhaust_after(
            &format!("truncate to {len}, reserve {n}, write"),
            need,
            |c, s| c.truncate(s[1], len).unwrap(),
            |c, s| {
                let first = c.reserve(s[1], n)?;
                assert_eq!(first, len);
                // Secured: these writes must not fail, whatever the pool holds.
                for layer in 0..SHAPE.layers {
                    c.write_kv(s[1], layer, first, &rows(40 + n, n), &rows(41, n))
                        .expect("a write into reserved positions");
                }
                c.write(s[1], 1, Kv::V, first, &rows(42, n))
                    .expect("a rewrite of reserved positions");
                Ok(None)
            },
        );
    }
}

#[test]
fn fork_is_all_or_nothing_at_every_fill_level() {
    // A paged fork shares full pages and copies the partial tail page.
    exhaust("fork", 1, |c, s| c.fork(s[0]).map(Some));
}

#[test]
fn copy_on_write_is_all_or_nothing_at_every_fill_level() {
    // Positions 2..10 of `a` span its three pages: the first two are shared with the child and
    // published, the tail page is `a`'s own (the fork copied it).
    exhaust("write over shared pages", 2, |c, s| {
        c.write(s[0], 1, Kv::V, 2, &rows(77, 8)).map(|()| None)
    });
    exhaust("write_kv over one shared page", 1, |c, s| {
        c.write_kv(s[1], 0, 5, &rows(5, 1), &rows(6, 1))
            .map(|()| None)
    });
}

#[test]
fn attach_then_reserve_is_all_or_nothing_at_every_fill_level() {
    // The hit shares `a`'s two published pages; growing to 14 positions needs 2 more pages.
    exhaust("attach + reserve", 2, |c, _| {
        let p = prompt(14);
        let hit = c.lookup(&p)?;
        let seq = c.create_sequence(SeqMode::Paged)?;
        let grown = c
            .attach(seq, &hit, &p)
            .and_then(|at| c.reserve(seq, 14 - at));
        match grown {
            Ok(_) => Ok(Some(seq)),
            Err(e) => {
                c.free_sequence(seq).unwrap();
                Err(e)
            }
        }
    });
}

#[test]
fn restore_is_all_or_nothing_at_every_fill_level() {
    // An image of a 10-token sequence: 3 pages.
    let cfg = config();
    let plan = cfg
        .plan_pages(
            PAGES,
            <edgekv::FreeList as PageAllocator>::META_BITS_PER_PAGE,
        )
        .unwrap();
    let mut arenas = HeapArenas::for_plan(&cfg, &plan).unwrap();
    let mut src: KvCache = arenas.cache(cfg).unwrap();
    let s = src.create_sequence(SeqMode::Paged).unwrap();
    src.reserve(s, 10).unwrap();
    src.write(s, 0, Kv::K, 0, &rows(3, 10)).unwrap();
    let mut mem = vec![0u8; 16384];
    let mut flash = RamFlash::<8, 1024>::new(&mut mem);
    let mut p = prompt(10);
    p[0] = 2;
    src.snapshot(s, &p, 7, &mut flash, 0).unwrap();
    exhaust("restore", 3, |c, _| {
        let mut toks = [0u32; 16];
        match c.restore(&mut SliceFlash(&mem), 0, 7, &mut toks) {
            Ok((seq, _)) => Ok(Some(seq)),
            Err(SnapshotError::Cache(e)) => Err(e),
            Err(e) => panic!("restore of a valid image: {e}"),
        }
    });
}
