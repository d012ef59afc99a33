//! Model-based property test of [`edgekv::GroupedCache`]: the pool model test extended to
//! layer groups.
//!
//! Random configurations of two or three layer groups (each with or without a window, with
//! sinks and rollback, its own pool size and page format) run random sequences of create /
//! free / reserve / write / read / fork / truncate, valid calls and failing ones interleaved
//! (stale and forged handles, bad layers, ragged slices, positions out of range or released,
//! oversized reservations, exhausted pools in one group, truncations past a window), against a
//! plain `Vec` model of every group's page tables, window releases, sharing and rows. After
//! every operation:
//!
//! - the result (value or exact error) is the model's;
//! - `check_invariants` passes (every group's, and the groups agree on every sequence);
//! - in every group, page tables are the model's (released entries included) up to a one-to-one
//!   renaming of pages, every page's state and refcount is the model's, and the pool's counts
//!   are;
//! - every kept row of every live sequence reads back as the model holds it in every layer, and
//!   every released one is `PositionOutOfRange`.
//!
//! A refused call therefore changed nothing in any group (the model did not change).
//! 30,000 cases of 30 to 50 operations: about 1.2 × 10⁶ operations per run (8 cases of 12 under
//! Miri, about 50 s).

use std::collections::HashMap;

use edgekv::{
    CacheConfig, ElementFormat, Error, FreeList, GroupWindow, GroupedCache, HeapArena, Kv,
    LayerGroup, Layers, META_ALIGN, NO_PAGE, PageState, SeqId, SeqMode, Shape,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const LAYERS: u16 = 4;
const SHAPE: Shape = Shape {
    layers: LAYERS,
    kv_heads: 1,
    head_dim: 2,
};
const ROW: usize = 2;
const MAX_POOL: usize = 14;
const MAX_TOKENS: u32 = 40;

type Row = [f32; ROW];

#[derive(Debug, Clone, Copy)]
struct GroupSetup {
    window: Option<GroupWindow>,
    pages: usize,
    format: ElementFormat,
}

#[derive(Debug, Clone)]
struct Setup {
    page_tokens: u16,
    max_seqs: u16,
    max_seq_tokens: u32,
    /// Group 0 (layers the others leave), group 1 (layers 1 and 3), group 2 if any (layer 0).
    groups: Vec<GroupSetup>,
}

impl Setup {
    fn config(&self) -> CacheConfig {
        let g0 = self.groups[0];
        let mut c = CacheConfig::new(SHAPE)
            .with_page_tokens(self.page_tokens)
            .with_sequences(self.max_seqs, self.max_seq_tokens)
            .with_formats(g0.format, g0.format);
        c.window = g0.window;
        let layers = [
            Layers::Every {
                period: 2,
                first: 1,
            },
            Layers::Run { first: 0, count: 1 },
        ];
        for (g, layers) in self.groups[1..].iter().zip(layers) {
            let mut lg = LayerGroup::new(layers).with_formats(g.format, g.format);
            lg.window = g.window;
            c = c.with_group(lg);
        }
        c
    }
}

fn window() -> impl Strategy<Value = Option<GroupWindow>> {
    prop_oneof![
        1 => Just(None),
        3 => (1u32..=10, 0u32..=4, 0u32..=4).prop_map(|(window, sinks, rollback)| Some(GroupWindow {
            window,
            sinks,
            rollback
        })),
    ]
}

fn group_setup() -> impl Strategy<Value = GroupSetup> {
    let format = prop_oneof![
        3 => Just(ElementFormat::F32),
        1 => Just(ElementFormat::F16),
        1 => Just(ElementFormat::Bf16),
    ];
    (window(), 2..=MAX_POOL, format).prop_map(|(window, pages, format)| GroupSetup {
        window,
        pages,
        format,
    })
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![Just(1u16), Just(2u16), Just(4u16)],
        1u16..=4,
        prop_oneof![1 => 1..8u32, 4 => 8..=MAX_TOKENS],
        prop::collection::vec(group_setup(), 2..=3),
    )
        .prop_map(|(page_tokens, max_seqs, max_seq_tokens, groups)| Setup {
            page_tokens,
            max_seqs,
            max_seq_tokens,
            groups,
        })
}

#[derive(Debug, Clone, Copy)]
enum H {
    Live(u8),
    Any(u8),
    Raw(u32),
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Create,
    Free(H),
    Reserve(H, u32),
    Write {
        h: H,
        layer: u16,
        kv: Kv,
        /// In `0..=len` (modulo), or past it when ≥ 200.
        start: u8,
        rows: u8,
        ragged: bool,
    },
    Read {
        h: H,
        layer: u16,
        kv: Kv,
        start: u8,
        rows: u8,
    },
    Fork(H),
    /// Back by this many positions (modulo `len + 1`), or past the length when ≥ 250.
    Truncate(H, u8),
}

fn handle() -> impl Strategy<Value = H> {
    prop_oneof![
        14 => any::<u8>().prop_map(H::Live),
        2 => any::<u8>().prop_map(H::Any),
        1 => (0u32..4, 0u32..5).prop_map(|(generation, slot)| H::Raw(generation << 16 | slot)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let layer = prop_oneof![20 => 0..LAYERS, 1 => LAYERS..=u16::MAX];
    let kv = prop_oneof![Just(Kv::K), Just(Kv::V)];
    let n = prop_oneof![20 => 0..6u32, 3 => 6..=MAX_TOKENS + 2, 1 => Just(u32::MAX)];
    prop_oneof![
        3 => Just(Op::Create),
        1 => handle().prop_map(Op::Free),
        10 => (handle(), n).prop_map(|(h, n)| Op::Reserve(h, n)),
        7 => (handle(), layer.clone(), kv.clone(), any::<u8>(), 0u8..8, prop::bool::weighted(0.04))
            .prop_map(|(h, layer, kv, start, rows, ragged)| Op::Write { h, layer, kv, start, rows, ragged }),
        2 => (handle(), layer, kv, any::<u8>(), 0u8..8)
            .prop_map(|(h, layer, kv, start, rows)| Op::Read { h, layer, kv, start, rows }),
        3 => handle().prop_map(Op::Fork),
        3 => (handle(), any::<u8>()).prop_map(|(h, back)| Op::Truncate(h, back)),
    ]
}

// Under Miri, 3 cases (about 16 s; 8 took 42 s): the grouped cache is safe code over the
// `KvCache`s the other Miri tests drive.
const CASES: u32 = if cfg!(miri) { 3 } else { 30_000 };
const OPS: std::ops::RangeInclusive<usize> = if cfg!(miri) { 12..=12 } else { 30..=50 };

proptest! {
    #![proptest_config(ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn grouped_cache_matches_model(setup in setup(), ops in prop::collection::vec(op(), OPS)) {
        let cfg = setup.config();
        let pages: Vec<usize> = setup.groups.iter().map(|g| g.pages).collect();
        let plan = GroupedCache::<FreeList>::plan_pages(&cfg, &pages).unwrap();
        let mut data = HeapArena::new(plan.data_bytes, cfg.align).unwrap();
        let mut meta = HeapArena::new(plan.meta_bytes, META_ALIGN).unwrap();
        let mut cache: GroupedCache = GroupedCache::with_pages(
            cfg, &pages, data.as_uninit_mut(), meta.as_uninit_mut()).unwrap();
        let mut m = Model::new(&setup, &cache);
        for op in &ops {
            step(&mut cache, &mut m, *op)?;
            check(&cache, &m)?;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The model.
// ---------------------------------------------------------------------------------------------

/// One group's view of the configuration.
struct MGroup {
    window: Option<GroupWindow>,
    num_pages: usize,
    table_len: usize,
}

#[derive(Debug, Clone)]
struct MSeq {
    id: SeqId,
    len: u32,
    /// Per group: model page ids of the page table (`None`: released by the window).
    tables: Vec<Vec<Option<u32>>>,
    /// Per `(layer, K|V)`: per position, the row last written.
    rows: Vec<Vec<Option<Row>>>,
}

struct Model {
    p: u32,
    max_seqs: usize,
    max_seq_tokens: u32,
    groups: Vec<MGroup>,
    /// Group of each layer.
    group_of: Vec<usize>,
    seqs: Vec<MSeq>,
    issued: Vec<SeqId>,
    next_page: u32,
    stamp: u32,
}

fn rows_index(layer: u16, kv: Kv) -> usize {
    layer as usize * 2 + kv as usize
}

/// Element `j` of a write stamped `stamp`: a multiple of 0.5 in [-62, 62], exact in f16 and bf16.
fn value(stamp: u32, j: usize) -> f32 {
    let k = (stamp as usize).wrapping_mul(37).wrapping_add(j * 11) % 249;
    (k as f32 - 124.0) * 0.5
}

impl Model {
    fn new(setup: &Setup, cache: &GroupedCache<'_>) -> Model {
        let cfg = cache.config();
        Model {
            p: setup.page_tokens as u32,
            max_seqs: setup.max_seqs as usize,
            max_seq_tokens: setup.max_seq_tokens,
            groups: setup
                .groups
                .iter()
                .enumerate()
                .map(|(g, gs)| MGroup {
                    window: gs.window,
                    num_pages: gs.pages,
                    table_len: cache.group(g).unwrap().arena_plan().table_len,
                })
                .collect(),
            group_of: (0..LAYERS).map(|l| cfg.layer_group(l).unwrap().0).collect(),
            seqs: Vec::new(),
            issued: Vec::new(),
            next_page: 0,
            stamp: 0,
        }
    }

    fn handle(&self, h: H) -> SeqId {
        let epoch = self
            .issued
            .first()
            .map_or(0, |id| id.to_raw() & 0xffff_ffff_0000_0000);
        match h {
            H::Live(i) if !self.seqs.is_empty() => self.seqs[i as usize % self.seqs.len()].id,
            H::Live(i) | H::Any(i) if !self.issued.is_empty() => {
                self.issued[i as usize % self.issued.len()]
            }
            H::Live(i) | H::Any(i) => SeqId::from_raw(epoch | u64::from(i)),
            H::Raw(raw) => SeqId::from_raw(epoch | u64::from(raw)),
        }
    }

    fn find(&self, id: SeqId) -> Option<usize> {
        self.seqs.iter().position(|s| s.id == id)
    }

    fn fresh(&mut self) -> u32 {
        self.next_page += 1;
        self.next_page
    }

    fn refcount(&self, g: usize, page: u32) -> usize {
        self.seqs
            .iter()
            .map(|s| s.tables[g].iter().filter(|&&p| p == Some(page)).count())
            .sum()
    }

    fn used(&self, g: usize) -> usize {
        let mut all: Vec<u32> = self
            .seqs
            .iter()
            .flat_map(|s| s.tables[g].iter().flatten().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        all.len()
    }

    fn available(&self, g: usize) -> usize {
        self.groups[g].num_pages - self.used(g)
    }

    /// Table entries of seq `i` in group `g` a window releases when the sequence grows.
    fn release_range(&self, i: usize, g: usize) -> std::ops::Range<usize> {
        let Some(w) = self.groups[g].window else {
            return 0..0;
        };
        let s = &self.seqs[i];
        let from = s.len.saturating_sub(w.rollback) as u64;
        let visible = (from + 1).saturating_sub(w.window as u64);
        let first = (w.sinks as u64).div_ceil(self.p as u64) as usize;
        let end = ((visible / self.p as u64) as usize).min(s.tables[g].len());
        first..end.max(first)
    }

    /// Whether entry `idx` of seq `i` in group `g` is shared (a write must copy it).
    fn shared(&self, i: usize, g: usize, idx: usize) -> bool {
        match self.seqs[i].tables[g].get(idx) {
            Some(Some(p)) => self.refcount(g, *p) > 1,
            _ => false,
        }
    }

    fn predict_reserve(&self, i: usize, n: u32) -> Result<(), Error> {
        let s = &self.seqs[i];
        let new_len = s
            .len
            .checked_add(n)
            .filter(|&l| l <= self.max_seq_tokens)
            .ok_or(Error::SequenceFull)?;
        let need = new_len.div_ceil(self.p) as usize;
        for g in 0..self.groups.len() {
            if need > self.groups[g].table_len {
                return Err(Error::OutOfPages);
            }
            let held = s.tables[g].len();
            let copy = n > 0 && self.shared(i, g, (s.len / self.p) as usize);
            let frees = if n > 0 {
                self.release_range(i, g)
                    .filter(|&e| s.tables[g][e].is_some_and(|p| self.refcount(g, p) == 1))
                    .count()
            } else {
                0
            };
            if need - held + usize::from(copy) > self.available(g) + frees {
                return Err(Error::OutOfPages);
            }
        }
        Ok(())
    }

    fn apply_reserve(&mut self, i: usize, n: u32) {
        let need = (self.seqs[i].len + n).div_ceil(self.p) as usize;
        for g in 0..self.groups.len() {
            if n > 0 {
                for e in self.release_range(i, g) {
                    self.seqs[i].tables[g][e] = None;
                }
                let tail = (self.seqs[i].len / self.p) as usize;
                if self.shared(i, g, tail) {
                    let page = self.fresh();
                    self.seqs[i].tables[g][tail] = Some(page);
                }
            }
            while self.seqs[i].tables[g].len() < need {
                let page = self.fresh();
                self.seqs[i].tables[g].push(Some(page));
            }
        }
        let s = &mut self.seqs[i];
        s.len += n;
        for rows in &mut s.rows {
            rows.resize(s.len as usize, None);
        }
    }

    /// Rows of a row access, or its error (as `check_rows` orders them).
    fn check_rows(&self, i: usize, layer: u16, start: u32, elems: usize) -> Result<usize, Error> {
        if layer >= LAYERS {
            return Err(Error::LayerOutOfRange);
        }
        if elems % ROW != 0 {
            return Err(Error::LengthMismatch);
        }
        let n = elems / ROW;
        let s = &self.seqs[i];
        if start as u64 + n as u64 > s.len as u64 {
            return Err(Error::PositionOutOfRange);
        }
        if n > 0 {
            let g = self.group_of[layer as usize];
            let pages = (start / self.p) as usize..=((start + n as u32 - 1) / self.p) as usize;
            if s.tables[g][pages].contains(&None) {
                return Err(Error::PositionOutOfRange);
            }
        }
        Ok(n)
    }

    fn copies(&self, i: usize, g: usize, start: u32, n: usize) -> Vec<usize> {
        if n == 0 {
            return vec![];
        }
        let (first, last) = (
            (start / self.p) as usize,
            ((start + n as u32 - 1) / self.p) as usize,
        );
        (first..=last).filter(|&e| self.shared(i, g, e)).collect()
    }

    /// Whether a window of group `g` lets seq `i` go back to `to` positions.
    fn keeps(&self, i: usize, g: usize, to: u32) -> bool {
        let Some(w) = self.groups[g].window else {
            return true;
        };
        if to == 0 {
            return true;
        }
        let lo = (to + 1).saturating_sub(w.window).min(to - 1);
        let t = &self.seqs[i].tables[g];
        (lo / self.p..=(to - 1) / self.p).all(|e| t.get(e as usize).is_some_and(Option::is_some))
    }
}

fn step(cache: &mut GroupedCache<'_>, m: &mut Model, op: Op) -> Result<(), TestCaseError> {
    match op {
        Op::Create => {
            let expect = if m.seqs.len() >= m.max_seqs {
                Err(Error::TooManySequences)
            } else {
                Ok(())
            };
            let got = cache.create_sequence(SeqMode::Paged);
            prop_assert_eq!(got.map(|_| ()), expect);
            if let Ok(id) = got {
                prop_assert!(!m.issued.contains(&id));
                m.issued.push(id);
                m.seqs.push(MSeq {
                    id,
                    len: 0,
                    tables: vec![vec![]; m.groups.len()],
                    rows: vec![vec![]; LAYERS as usize * 2],
                });
            }
        }
        Op::Free(h) => {
            let id = m.handle(h);
            let idx = m.find(id);
            let got = cache.free_sequence(id);
            prop_assert_eq!(got, idx.map(|_| ()).ok_or(Error::UnknownSequence));
            if let Some(i) = idx {
                m.seqs.remove(i);
            }
        }
        Op::Reserve(h, n) => {
            let id = m.handle(h);
            let idx = m.find(id);
            let expect = match idx {
                None => Err(Error::UnknownSequence),
                Some(i) => m.predict_reserve(i, n).map(|()| m.seqs[i].len),
            };
            let got = cache.reserve(id, n);
            prop_assert_eq!(got, expect, "reserve({})", n);
            if let (Ok(_), Some(i)) = (got, idx) {
                m.apply_reserve(i, n);
            }
        }
        Op::Write {
            h,
            layer,
            kv,
            start,
            rows,
            ragged,
        } => {
            let id = m.handle(h);
            let idx = m.find(id);
            let len = idx.map_or(0, |i| m.seqs[i].len);
            let start = if start >= 200 {
                len + 1 + start as u32 % 3
            } else {
                start as u32 % (len + 1)
            };
            let elems = rows as usize * ROW + usize::from(ragged);
            m.stamp += 1;
            let data: Vec<f32> = (0..elems).map(|j| value(m.stamp, j)).collect();
            let expect = match idx {
                None => Err(Error::UnknownSequence),
                Some(i) => m.check_rows(i, layer, start, elems).and_then(|n| {
                    let g = m.group_of[layer as usize];
                    if m.copies(i, g, start, n).len() > m.available(g) {
                        Err(Error::OutOfPages)
                    } else {
                        Ok(n)
                    }
                }),
            };
            let got = cache.write(id, layer, kv, start, &data);
            prop_assert_eq!(got, expect.map(|_| ()));
            if let (Ok(n), Some(i)) = (expect, idx) {
                let g = m.group_of[layer as usize];
                for e in m.copies(i, g, start, n) {
                    let page = m.fresh();
                    m.seqs[i].tables[g][e] = Some(page);
                }
                let model = &mut m.seqs[i].rows[rows_index(layer, kv)];
                for (r, chunk) in data.chunks_exact(ROW).enumerate() {
                    model[start as usize + r] = Some([chunk[0], chunk[1]]);
                }
            }
        }
        Op::Read {
            h,
            layer,
            kv,
            start,
            rows,
        } => {
            let id = m.handle(h);
            let idx = m.find(id);
            let len = idx.map_or(0, |i| m.seqs[i].len);
            let start = if start >= 200 {
                len + 1
            } else {
                start as u32 % (len + 1)
            };
            let mut out = vec![f32::NAN; rows as usize * ROW];
            let expect = match idx {
                None => Err(Error::UnknownSequence),
                Some(i) => m.check_rows(i, layer, start, out.len()).map(|_| ()),
            };
            let got = cache.read(id, layer, kv, start, &mut out);
            prop_assert_eq!(got, expect);
        }
        Op::Fork(h) => {
            let id = m.handle(h);
            let idx = m.find(id);
            let expect = match idx {
                None => Err(Error::UnknownSequence),
                Some(_) if m.seqs.len() >= m.max_seqs => Err(Error::TooManySequences),
                Some(i) => {
                    let partial = m.seqs[i].len % m.p != 0;
                    if partial && (0..m.groups.len()).any(|g| m.available(g) == 0) {
                        Err(Error::OutOfPages)
                    } else {
                        Ok(())
                    }
                }
            };
            let got = cache.fork(id);
            prop_assert_eq!(got.map(|_| ()), expect);
            if let (Ok(child), Some(i)) = (got, idx) {
                let mut s = m.seqs[i].clone();
                let full = (s.len / m.p) as usize;
                for g in 0..m.groups.len() {
                    s.tables[g].truncate(full);
                    if m.seqs[i].tables[g].len() > full {
                        let page = m.fresh();
                        s.tables[g].push(Some(page));
                    }
                }
                s.id = child;
                prop_assert!(!m.issued.contains(&child));
                m.issued.push(child);
                m.seqs.push(s);
            }
        }
        Op::Truncate(h, back) => {
            let id = m.handle(h);
            let idx = m.find(id);
            let len = idx.map_or(0, |i| m.seqs[i].len);
            let to = if back >= 250 {
                len + 1
            } else {
                len - (back as u32 % (len + 1))
            };
            let expect = match idx {
                None => Err(Error::UnknownSequence),
                Some(_) if to > len => Err(Error::TruncateBeyondLength),
                Some(i) if (0..m.groups.len()).any(|g| !m.keeps(i, g, to)) => {
                    Err(Error::TruncateBeyondWindow)
                }
                Some(_) => Ok(()),
            };
            let got = cache.truncate(id, to);
            prop_assert_eq!(got, expect, "truncate {} to {}", len, to);
            if let (Ok(()), Some(i)) = (got, idx) {
                let keep = to.div_ceil(m.p) as usize;
                let s = &mut m.seqs[i];
                s.len = to;
                for t in &mut s.tables {
                    t.truncate(keep);
                }
                for r in &mut s.rows {
                    r.truncate(to as usize);
                }
            }
        }
    }
    Ok(())
}

/// Checks every group of the cache against the model.
fn check(cache: &GroupedCache<'_>, m: &Model) -> Result<(), TestCaseError> {
    let mut scratch = [0u16; MAX_POOL];
    let verdict = cache.check_invariants(&mut scratch);
    prop_assert!(verdict.is_ok(), "check_invariants: {:?}", verdict);
    for (g, mg) in m.groups.iter().enumerate() {
        let c = cache.group(g).unwrap();
        let mut real_of: HashMap<u32, u16> = HashMap::new();
        let mut model_of: HashMap<u16, u32> = HashMap::new();
        for s in &m.seqs {
            let table = c.page_table(s.id).unwrap();
            prop_assert_eq!(
                table.len(),
                s.tables[g].len(),
                "group {} table of {:?}",
                g,
                s.id
            );
            for (&real, &model) in table.iter().zip(&s.tables[g]) {
                match model {
                    None => prop_assert_eq!(real, NO_PAGE, "group {}: a released entry", g),
                    Some(model) => {
                        prop_assert!(real != NO_PAGE, "group {}: entry released too early", g);
                        prop_assert_eq!(*real_of.entry(model).or_insert(real), real);
                        prop_assert_eq!(*model_of.entry(real).or_insert(model), model);
                    }
                }
            }
        }
        for page in 0..mg.num_pages as u16 {
            let want = match model_of.get(&page) {
                Some(&mp) => PageState::Used(m.refcount(g, mp) as u16),
                None => PageState::Free,
            };
            prop_assert_eq!(c.page_state(page), Some(want), "group {} page {}", g, page);
        }
        prop_assert_eq!(c.pool().free_pages(), m.available(g));
        prop_assert_eq!(
            c.stats().tokens,
            m.seqs.iter().map(|s| s.len as u64).sum::<u64>()
        );
    }
    // Rows: every kept position reads back, every released one is gone.
    let mut out = [0f32; MAX_TOKENS as usize * ROW];
    for s in &m.seqs {
        prop_assert_eq!(cache.seq_len(s.id), Ok(s.len));
        for layer in 0..LAYERS {
            let table = &s.tables[m.group_of[layer as usize]];
            for kv in [Kv::K, Kv::V] {
                let model = &s.rows[rows_index(layer, kv)];
                // Runs of consecutive kept pages, one read each.
                let mut t = 0u32;
                while t < s.len {
                    let kept = table[(t / m.p) as usize].is_some();
                    let mut end = t;
                    while end < s.len && table[(end / m.p) as usize].is_some() == kept {
                        end += 1;
                    }
                    let buf = &mut out[..(end - t) as usize * ROW];
                    let got = cache.read(s.id, layer, kv, t, buf);
                    if !kept {
                        prop_assert_eq!(got, Err(Error::PositionOutOfRange));
                    } else {
                        prop_assert_eq!(got, Ok(()));
                        for (r, row) in buf.chunks_exact(ROW).enumerate() {
                            if let Some(want) = model[t as usize + r] {
                                prop_assert_eq!(
                                    row,
                                    &want[..],
                                    "{:?} layer {} {:?} pos {}",
                                    s.id,
                                    layer,
                                    kv,
                                    t as usize + r
                                );
                            }
                        }
                    }
                    t = end;
                }
            }
        }
    }
    for &id in &m.issued {
        if m.find(id).is_none() {
            prop_assert_eq!(cache.seq_len(id), Err(Error::UnknownSequence));
        }
    }
    Ok(())
}
