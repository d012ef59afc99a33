//! Unit tests of the grouped cache: a one-group configuration is a `KvCache` call for call,
//! layers reach their groups, one handle names a sequence in every group, and refused calls
//! change no group.

use super::*;
use crate::alloc::{Bitmap, NO_PAGE};
use crate::attention::AttentionParams;
use crate::config::{GroupWindow, LayerGroup, Layers};
use crate::format::ElementFormat;
use crate::sequence::SeqMode;
use crate::shape::{Kv, Shape};
use std::vec::Vec;

const SHAPE: Shape = Shape {
    layers: 4,
    kv_heads: 1,
    head_dim: 32,
};
const ROW: usize = 32;
const P: u32 = 4;
/// Positions the longer tests append (fewer under Miri: the same paths).
const STEPS: u32 = if cfg!(miri) { 20 } else { 50 };

/// Layers 0 and 2 windowed (8 positions), 1 and 3 global in q8_0.
fn grouped_cfg() -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(P as u16)
        .with_sequences(4, 256)
        .with_window(GroupWindow::new(8, 0))
        .with_group(
            LayerGroup::new(Layers::Every {
                period: 2,
                first: 1,
            })
            .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0),
        )
}

/// Heap memory for arenas, aligned by hand (a `Vec<u8>` guarantees no alignment).
struct Mem(Vec<MaybeUninit<u8>>, Vec<MaybeUninit<u8>>);

impl Mem {
    fn new(data: usize, meta: usize) -> Mem {
        Mem(
            std::vec![MaybeUninit::uninit(); data + 256],
            std::vec![MaybeUninit::uninit(); meta + 16],
        )
    }

    fn arenas(
        &mut self,
        data: usize,
        meta: usize,
    ) -> (&mut [MaybeUninit<u8>], &mut [MaybeUninit<u8>]) {
        let d = self.0.as_ptr().align_offset(256);
        let m = self.1.as_ptr().align_offset(META_ALIGN);
        (&mut self.0[d..d + data], &mut self.1[m..m + meta])
    }
}

fn row(layer: u16, kv: Kv, pos: u32) -> [f32; ROW] {
    core::array::from_fn(|e| {
        ((pos * 13 + layer as u32 * 7 + kv as u32 * 5 + e as u32 * 3) % 23) as f32 * 0.25 - 2.5
    })
}

/// Appends `n` positions to `seq` and writes every layer's rows.
fn push<'a, A: PageAllocator<'a>>(c: &mut GroupedCache<'a, A>, seq: SeqId, n: u32) -> Result<()> {
    let start = c.reserve(seq, n)?;
    for layer in 0..SHAPE.layers {
        let k: Vec<f32> = (start..start + n)
            .flat_map(|t| row(layer, Kv::K, t))
            .collect();
        let v: Vec<f32> = (start..start + n)
            .flat_map(|t| row(layer, Kv::V, t))
            .collect();
        c.write_kv(seq, layer, start, &k, &v)?;
    }
    Ok(())
}

fn invariants<'a, A: PageAllocator<'a>>(c: &GroupedCache<'a, A>) {
    let mut scratch = std::vec![0u16; 1024];
    c.check_invariants(&mut scratch).unwrap();
}

/// Every group's page tables and pool counts.
fn fingerprint<'a, A: PageAllocator<'a>>(c: &GroupedCache<'a, A>, seqs: &[SeqId]) -> Vec<u64> {
    let mut s = Vec::new();
    for g in 0..c.group_count() {
        let k = c.group(g).unwrap();
        s.extend([k.pool().free_pages() as u64, k.pool().cached_pages() as u64]);
        for &q in seqs {
            s.push(k.seq_len(q).map_or(u64::MAX, u64::from));
            if let Ok(t) = k.page_table(q) {
                s.extend(t.iter().map(|&p| p as u64));
            }
        }
    }
    s
}

#[test]
fn one_group_is_a_kv_cache_call_for_call() {
    let cfg = CacheConfig::new(SHAPE)
        .with_page_tokens(P as u16)
        .with_sequences(4, 256)
        .with_formats(ElementFormat::Q8_0, ElementFormat::F16)
        .with_window(GroupWindow {
            window: 10,
            sinks: 2,
            rollback: 3,
        });
    let plan = GroupedCache::<FreeList>::plan_pages(&cfg, &[24]).unwrap();
    let one = cfg.plan_pages(24, FreeList::META_BITS_PER_PAGE).unwrap();
    assert_eq!(plan.group(0), Some(&one));
    assert_eq!(
        (plan.data_bytes, plan.meta_bytes),
        (one.data_bytes, one.meta.total)
    );
    let (mut m1, mut m2) = (
        Mem::new(one.data_bytes, one.meta.total),
        Mem::new(one.data_bytes, one.meta.total),
    );
    let (d, m) = m1.arenas(one.data_bytes, one.meta.total);
    let mut g: GroupedCache = GroupedCache::new(cfg, d, m).unwrap();
    let (d, m) = m2.arenas(one.data_bytes, one.meta.total);
    let mut k: KvCache = KvCache::new(cfg, d, m).unwrap();
    assert_eq!(g.group(0).unwrap().arena_plan(), k.arena_plan());

    let (a, b) = (
        g.create_sequence(SeqMode::Paged).unwrap(),
        k.create_sequence(SeqMode::Paged).unwrap(),
    );
    let q: Vec<f32> = (0..ROW).map(|i| (i % 7) as f32 * 0.3 - 1.0).collect();
    let params = AttentionParams::new(SHAPE, 1);
    let mut scratch = std::vec![0f32; g.scratch_len(1)];
    for step in 0..STEPS.min(40) {
        let n = 1 + step % 3;
        let (x, y) = (g.reserve(a, n), k.reserve(b, n));
        assert_eq!(x, y);
        for layer in 0..SHAPE.layers {
            let start = x.unwrap();
            let rows: Vec<f32> = (start..start + n)
                .flat_map(|t| row(layer, Kv::K, t))
                .collect();
            assert_eq!(
                g.write(a, layer, Kv::K, start, &rows),
                k.write(b, layer, Kv::K, start, &rows)
            );
            assert_eq!(
                g.write(a, layer, Kv::V, start, &rows),
                k.write(b, layer, Kv::V, start, &rows)
            );
            let len = start + n;
            let (mut o1, mut o2) = (std::vec![0f32; ROW], std::vec![0f32; ROW]);
            assert_eq!(
                g.attention(a, layer, len - 1, &q, &mut o1, &params, &mut scratch),
                k.attention(b, layer, len - 1, &q, &mut o2, &params, &mut scratch)
            );
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&o1), bits(&o2), "step {step} layer {layer}");
        }
        assert_eq!(
            g.group(0).unwrap().page_table(a).unwrap(),
            k.page_table(b).unwrap()
        );
        if step % 9 == 8 {
            let len = g.seq_len(a).unwrap();
            assert_eq!(g.truncate(a, len - 2), k.truncate(b, len - 2));
            // Refused once the window released positions (steps 17 and 26), like the cache's.
            let r = g.truncate(a, len / 3);
            assert_eq!(r, k.truncate(b, len / 3));
            assert_eq!(r.is_err(), step > 8, "{r:?}");
        }
        if step == 20 {
            let (c1, c2) = (g.fork(a).unwrap(), k.fork(b).unwrap());
            assert_eq!(
                g.group(0).unwrap().page_table(c1).unwrap(),
                k.page_table(c2).unwrap()
            );
        }
    }
    assert_eq!(g.stats(), k.stats());
    invariants(&g);
}

#[test]
fn one_group_keeps_contiguous_sequences() {
    let cfg = CacheConfig::new(SHAPE)
        .with_page_tokens(P as u16)
        .with_sequences(2, 64);
    let plan = GroupedCache::<Bitmap>::plan_pages(&cfg, &[16]).unwrap();
    let mut mem = Mem::new(plan.data_bytes, plan.meta_bytes);
    let (d, m) = mem.arenas(plan.data_bytes, plan.meta_bytes);
    let mut c: GroupedCache<'_, Bitmap<'_>> = GroupedCache::new(cfg, d, m).unwrap();
    let s = c.create_sequence(SeqMode::Contiguous).unwrap();
    push(&mut c, s, 9).unwrap();
    let child = c.fork(s).unwrap();
    assert_eq!(
        c.group(0).unwrap().sequence(child).unwrap().mode,
        SeqMode::Contiguous
    );
    invariants(&c);
}

#[test]
fn layers_reach_their_groups_and_windows_release_pages() {
    let cfg = grouped_cfg();
    let plan = GroupedCache::<FreeList>::plan_pages(&cfg, &[16, 40]).unwrap();
    assert_eq!(plan.group_count(), 2);
    let mut mem = Mem::new(plan.data_bytes, plan.meta_bytes);
    let (d, m) = mem.arenas(plan.data_bytes, plan.meta_bytes);
    let mut c: GroupedCache = GroupedCache::new(cfg, d, m).unwrap();
    assert_eq!(c.group(0).unwrap().arena_plan().num_pages, 16);
    assert_eq!(c.group(1).unwrap().arena_plan().num_pages, 40);
    assert_eq!(c.group(0).unwrap().config().shape.layers, 2);
    assert_eq!(c.group(1).unwrap().config().k_format, ElementFormat::Q8_0);
    assert_eq!(
        (c.layer_group(2), c.layer_group(3), c.layer_group(4)),
        (Some((0, 1)), Some((1, 1)), None)
    );
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    for _ in 0..STEPS {
        push(&mut c, s, 1).unwrap();
        invariants(&c);
        let held = |g: usize| {
            c.group(g)
                .unwrap()
                .page_table(s)
                .unwrap()
                .iter()
                .filter(|&&p| p != NO_PAGE)
                .count()
        };
        // ⌈(8 + 4 − 1) / 4⌉ + 1 = 4 pages at most in the windowed group.
        assert!(held(0) <= 4, "{}", held(0));
        assert_eq!(held(1), c.seq_len(s).unwrap().div_ceil(P) as usize);
    }
    let mut out = [0f32; ROW];
    for layer in 0..SHAPE.layers {
        c.read(s, layer, Kv::V, STEPS - 1, &mut out).unwrap();
        if layer % 2 == 0 {
            assert_eq!(out, row(layer, Kv::V, STEPS - 1));
            assert_eq!(
                c.read(s, layer, Kv::K, 0, &mut out),
                Err(Error::PositionOutOfRange)
            );
        } else {
            c.read(s, layer, Kv::K, 0, &mut out).unwrap();
            // q8_0: within a step of 2.5 / 127.
            for (o, w) in out.iter().zip(row(layer, Kv::K, 0)) {
                assert!((o - w).abs() <= 0.02, "{o} vs {w}");
            }
        }
    }
    assert_eq!(
        c.read(s, 4, Kv::K, 0, &mut out),
        Err(Error::LayerOutOfRange)
    );
    assert_eq!(c.write(s, 9, Kv::K, 0, &out), Err(Error::LayerOutOfRange));
    let st = c.stats();
    assert_eq!(st.pages_total, 56);
    assert_eq!(st.sequences, 1);
    assert_eq!(st.tokens, STEPS as u64);
    // The windowed group: positions from STEPS − 8 on, in 2 or 3 pages; the global one: all.
    let windowed = if STEPS % 4 == 0 { 2 } else { 3 };
    assert_eq!(
        st.pages_used as usize,
        windowed + STEPS.div_ceil(P) as usize
    );
}

#[test]
fn one_handle_names_the_sequence_in_every_group() {
    let cfg = grouped_cfg();
    let plan = GroupedCache::<FreeList>::plan_pages(&cfg, &[16, 40]).unwrap();
    let mut mem = Mem::new(plan.data_bytes, plan.meta_bytes);
    let (d, m) = mem.arenas(plan.data_bytes, plan.meta_bytes);
    let mut c: GroupedCache = GroupedCache::new(cfg, d, m).unwrap();
    let a = c.create_sequence(SeqMode::Paged).unwrap();
    push(&mut c, a, 6).unwrap();
    let b = c.fork(a).unwrap();
    for g in 0..2 {
        assert_eq!(c.group(g).unwrap().seq_len(a), Ok(6));
        assert_eq!(c.group(g).unwrap().seq_len(b), Ok(6));
    }
    c.free_sequence(a).unwrap();
    assert_eq!(c.seq_len(a), Err(Error::UnknownSequence));
    assert_eq!(c.free_sequence(a), Err(Error::UnknownSequence));
    assert_eq!(c.reserve(a, 1), Err(Error::UnknownSequence));
    let again = c.create_sequence(SeqMode::Paged).unwrap();
    assert_eq!(again.slot(), a.slot());
    assert_ne!(again, a);
    assert_eq!(
        c.create_sequence(SeqMode::Contiguous),
        Err(Error::ContiguousUnsupported)
    );
    for _ in 0..2 {
        c.create_sequence(SeqMode::Paged).unwrap();
    }
    let before = fingerprint(&c, &[b, again]);
    assert_eq!(
        c.create_sequence(SeqMode::Paged),
        Err(Error::TooManySequences)
    );
    assert_eq!(c.fork(b), Err(Error::TooManySequences));
    assert_eq!(fingerprint(&c, &[b, again]), before);
    invariants(&c);
}

#[test]
fn truncating_past_one_groups_window_changes_no_group() {
    let cfg = grouped_cfg();
    let plan = GroupedCache::<FreeList>::plan_pages(&cfg, &[16, 40]).unwrap();
    let mut mem = Mem::new(plan.data_bytes, plan.meta_bytes);
    let (d, m) = mem.arenas(plan.data_bytes, plan.meta_bytes);
    let mut c: GroupedCache = GroupedCache::new(cfg, d, m).unwrap();
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    let len = STEPS.min(30);
    for _ in 0..len {
        push(&mut c, s, 1).unwrap();
    }
    let before = fingerprint(&c, &[s]);
    // The global group could go back to 10; the windowed one released positions below
    // len − 9 (≥ 11).
    assert_eq!(c.group(1).unwrap().check_truncate(s, 10), Ok(()));
    assert_eq!(c.truncate(s, 10), Err(Error::TruncateBeyondWindow));
    assert_eq!(c.truncate(s, len + 1), Err(Error::TruncateBeyondLength));
    assert_eq!(fingerprint(&c, &[s]), before);
    c.truncate(s, len - 1).unwrap();
    assert_eq!(c.seq_len(s), Ok(len - 1));
    assert_eq!(c.group(1).unwrap().seq_len(s), Ok(len - 1));
    invariants(&c);
}

#[test]
fn bad_configurations_and_arenas_are_refused() {
    let cfg = grouped_cfg();
    let plan = GroupedCache::<FreeList>::plan_pages(&cfg, &[16, 40]).unwrap();
    let mut mem = Mem::new(plan.data_bytes, plan.meta_bytes);
    let err =
        |c: CacheConfig, pages: &[usize]| GroupedCache::<FreeList>::plan_pages(&c, pages).err();
    assert_eq!(err(cfg, &[16]), Some(ConfigError::InvalidGroup));
    assert_eq!(err(cfg, &[16, 0]), Some(ConfigError::ZeroSize));
    let overlap = cfg.with_group(LayerGroup::new(Layers::Run { first: 3, count: 1 }));
    assert_eq!(
        err(overlap, &[1, 1, 1]),
        Some(ConfigError::LayerInTwoGroups)
    );
    let outside = grouped_cfg().with_group(LayerGroup::new(Layers::Run { first: 2, count: 5 }));
    assert_eq!(
        err(outside, &[1, 1, 1]),
        Some(ConfigError::GroupLayerOutOfRange)
    );
    let zero = grouped_cfg().with_window(GroupWindow::new(0, 0));
    assert_eq!(err(zero, &[1, 1]), Some(ConfigError::ZeroSize));
    {
        let (d, m) = mem.arenas(plan.data_bytes, plan.meta_bytes);
        let short = GroupedCache::<FreeList>::with_pages(cfg, &[16, 41], d, m).err();
        assert_eq!(short, Some(ConfigError::ArenaTooSmall));
    }
    let (d, m) = mem.arenas(plan.data_bytes, plan.meta_bytes);
    let misaligned = GroupedCache::<FreeList>::with_pages(cfg, &[16, 40], &mut d[8..], m).err();
    assert_eq!(misaligned, Some(ConfigError::MisalignedArena));
}

/// The configuration of [`grouped_cfg`], as a constant.
const CFG: CacheConfig = CacheConfig::new(SHAPE)
    .with_page_tokens(P as u16)
    .with_sequences(4, 256)
    .with_window(GroupWindow::new(8, 0))
    .with_group(
        LayerGroup::new(Layers::Every {
            period: 2,
            first: 1,
        })
        .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0),
    );

/// Planned at compile time: the arenas below are sized by it.
const PLAN: GroupedPlan = match GroupedCache::<FreeList>::plan_pages(&CFG, &[16, 40]) {
    Ok(p) => p,
    Err(_) => panic!("plan"),
};

#[test]
fn arenas_are_sized_at_compile_time() {
    assert_eq!(CFG, grouped_cfg());
    let mut data = crate::ArenaBuf::<{ PLAN.data_bytes }>::new();
    let mut meta = crate::ArenaBuf::<{ PLAN.meta_bytes }>::new();
    let mut c: GroupedCache =
        GroupedCache::with_pages(CFG, &[16, 40], data.as_uninit_mut(), meta.as_uninit_mut())
            .unwrap();
    assert_eq!(c.grouped_plan(), &PLAN);
    assert_eq!(PLAN.data_offset(1), Some(PLAN.group(0).unwrap().data_bytes));
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    push(&mut c, s, 12).unwrap();
    invariants(&c);
    // One byte short of either arena is refused.
    let mut small = crate::ArenaBuf::<{ PLAN.meta_bytes }>::new();
    let mut d2 = crate::ArenaBuf::<{ PLAN.data_bytes }>::new();
    let short = &mut small.as_uninit_mut()[..PLAN.meta_bytes - 8];
    let err = GroupedCache::<FreeList>::with_pages(CFG, &[16, 40], d2.as_uninit_mut(), short);
    assert_eq!(err.err(), Some(ConfigError::ArenaTooSmall));
}
