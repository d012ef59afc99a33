//! Model-based property test of [`edgekv::KvCache`].
//!
//! Random sequences of create / free / reserve / write / write_kv / read / fork / truncate, valid
//! calls and failing ones interleaved (stale and forged handles, bad layers, ragged or mismatched
//! slices, positions out of range, oversized reservations, exhausted pools and slots), run against
//! a plain `Vec` model, for both allocators (`FreeList`: paged only; `Bitmap`: paged and
//! contiguous), several page sizes, pool sizes and page formats. After every operation:
//!
//! - the result (returned value or exact error) is the one the model predicts;
//! - a failing call left the cache exactly as it was: stats, page states, sequence records,
//!   page tables and every byte of every page;
//! - `check_invariants` passes; every page is in exactly one state and every refcount equals the
//!   number of page-table references (recomputed here from `page_table`);
//! - page sharing is the model's: model pages and real pages correspond one to one;
//! - `stats` and the pool's counters agree with the model;
//! - every written row of every live sequence reads back as the model holds it.
//!
//! Written values are small multiples of 0.5, exact in f32, f16 and bf16, so the model is exact
//! for every page format.

use std::collections::HashMap;

use edgekv::{
    ArenaBuf, Bitmap, CacheConfig, ElementFormat, Error, FreeList, Kv, KvCache, PageAllocator,
    PageId, PageState, SeqId, SeqInfo, SeqMode, Shape, Stats,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const LAYERS: u16 = 2;
const SHAPE: Shape = Shape {
    layers: LAYERS,
    kv_heads: 2,
    head_dim: 2,
};
/// Elements of one token row (`kv_heads * head_dim`).
const ROW: usize = 4;
/// Largest pool of a case.
const MAX_POOL: usize = 16;
/// Largest `max_seq_tokens` of a case.
const MAX_TOKENS: u32 = 40;
/// Largest page id's bytes: every stride is 64 bytes (P ≤ 4 rows of ≤ 16 bytes), K and V, 2 layers.
const PAGE_BYTES_MAX: usize = 2 * 2 * 64;
const DATA_BYTES: usize = MAX_POOL * PAGE_BYTES_MAX;
const META_BYTES: usize = 4096;
const KVS: [Kv; 2] = [Kv::K, Kv::V];

// ---------------------------------------------------------------------------------------------
// Cases: a configuration and a list of operations whose arguments are resolved against the model
// when they run (so most are valid and some are deliberately not).
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Setup {
    page_tokens: u16,
    pages: usize,
    max_seqs: u16,
    max_seq_tokens: u32,
    k_format: ElementFormat,
    v_format: ElementFormat,
}

impl Setup {
    fn config(&self) -> CacheConfig {
        CacheConfig::new(SHAPE)
            .with_page_tokens(self.page_tokens)
            .with_formats(self.k_format, self.v_format)
            .with_sequences(self.max_seqs, self.max_seq_tokens)
    }
}

/// Which handle an operation uses.
#[derive(Debug, Clone, Copy)]
enum H {
    /// A live sequence (any issued handle if none is live).
    Live(u8),
    /// Any handle ever issued, live or stale.
    Any(u8),
    /// A handle made from raw bits (usually invalid; sometimes a live one).
    Raw(u32),
}

/// A position, relative to the sequence's length when the operation runs.
#[derive(Debug, Clone, Copy)]
enum Pos {
    /// In `0..=len`.
    In(u8),
    /// Past `len`.
    Past(u8),
    /// `u32::MAX`.
    Max,
}

impl Pos {
    fn resolve(self, len: u32) -> u32 {
        match self {
            Pos::In(x) => u32::from(x) % (len + 1),
            Pos::Past(x) => len + 1 + u32::from(x) % 4,
            Pos::Max => u32::MAX,
        }
    }
}

/// A row count, relative to the rows left after `start`.
#[derive(Debug, Clone, Copy)]
enum Count {
    /// At most the rows left.
    Fit(u8),
    /// More than the rows left.
    Over(u8),
}

impl Count {
    fn resolve(self, start: u32, len: u32) -> usize {
        let left = len.saturating_sub(start) as usize;
        match self {
            Count::Fit(x) => x as usize % (left + 1),
            Count::Over(x) => left + 1 + x as usize % 2,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Create(SeqMode),
    Free(H),
    Reserve(H, u32),
    Write {
        h: H,
        layer: u16,
        kv: Kv,
        start: Pos,
        rows: Count,
        ragged: bool,
    },
    WriteKv {
        h: H,
        layer: u16,
        start: Pos,
        rows: Count,
        ragged: bool,
        v_extra: usize,
    },
    Read {
        h: H,
        layer: u16,
        kv: Kv,
        start: Pos,
        rows: Count,
        ragged: bool,
    },
    Fork(H),
    Truncate(H, Pos),
}

fn setup_strategy() -> impl Strategy<Value = Setup> {
    let formats = prop_oneof![
        2 => Just((ElementFormat::F32, ElementFormat::F32)),
        1 => Just((ElementFormat::F16, ElementFormat::Bf16)),
        1 => Just((ElementFormat::Bf16, ElementFormat::F32)),
    ];
    (
        prop_oneof![1 => Just(1u16), 2 => Just(2u16), 4 => Just(4u16)],
        3..=MAX_POOL,
        1u16..=5,
        prop_oneof![1 => 1..8u32, 4 => 8..=MAX_TOKENS],
        formats,
    )
        .prop_map(
            |(page_tokens, pages, max_seqs, max_seq_tokens, (k_format, v_format))| Setup {
                page_tokens,
                pages,
                max_seqs,
                max_seq_tokens,
                k_format,
                v_format,
            },
        )
}

fn handle() -> impl Strategy<Value = H> {
    prop_oneof![
        12 => any::<u8>().prop_map(H::Live),
        3 => any::<u8>().prop_map(H::Any),
        1 => any::<u32>().prop_map(H::Raw),
        1 => (0u32..4, 0u32..6).prop_map(|(generation, slot)| H::Raw(generation << 16 | slot)),
    ]
}

fn pos() -> impl Strategy<Value = Pos> {
    prop_oneof![
        16 => any::<u8>().prop_map(Pos::In),
        2 => any::<u8>().prop_map(Pos::Past),
        1 => Just(Pos::Max),
    ]
}

fn count() -> impl Strategy<Value = Count> {
    prop_oneof![
        12 => any::<u8>().prop_map(Count::Fit),
        1 => any::<u8>().prop_map(Count::Over),
    ]
}

fn layer() -> impl Strategy<Value = u16> {
    prop_oneof![20 => 0..LAYERS, 1 => LAYERS..=u16::MAX]
}

fn kv() -> impl Strategy<Value = Kv> {
    prop_oneof![Just(Kv::K), Just(Kv::V)]
}

fn ragged() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.04)
}

fn op() -> impl Strategy<Value = Op> {
    let reserve_n = prop_oneof![
        24 => 0..10u32,
        3 => 10..=MAX_TOKENS + 4,
        1 => Just(u32::MAX),
        1 => u32::MAX - MAX_TOKENS..u32::MAX,
    ];
    prop_oneof![
        4 => prop_oneof![Just(SeqMode::Paged), Just(SeqMode::Contiguous)].prop_map(Op::Create),
        2 => handle().prop_map(Op::Free),
        8 => (handle(), reserve_n).prop_map(|(h, n)| Op::Reserve(h, n)),
        7 => (handle(), layer(), kv(), pos(), count(), ragged()).prop_map(
            |(h, layer, kv, start, rows, ragged)| Op::Write { h, layer, kv, start, rows, ragged }
        ),
        3 => (
            handle(),
            layer(),
            pos(),
            count(),
            ragged(),
            prop_oneof![12 => Just(0usize), 1 => 1..=ROW],
        )
            .prop_map(|(h, layer, start, rows, ragged, v_extra)| Op::WriteKv {
                h,
                layer,
                start,
                rows,
                ragged,
                v_extra
            }),
        2 => (handle(), layer(), kv(), pos(), count(), ragged()).prop_map(
            |(h, layer, kv, start, rows, ragged)| Op::Read { h, layer, kv, start, rows, ragged }
        ),
        3 => handle().prop_map(Op::Fork),
        3 => (handle(), pos()).prop_map(|(h, to)| Op::Truncate(h, to)),
    ]
}

/// Operations after the leading creates (fewer under Miri, where each costs ~0.5 s).
const MAX_OPS: usize = if cfg!(miri) { 10 } else { 38 };

/// 1 to 40 operations (12 under Miri), the first 0 to 2 of them creates (so fewer early calls
/// find no sequence).
fn ops() -> impl Strategy<Value = Vec<Op>> {
    let create = prop_oneof![Just(SeqMode::Paged), Just(SeqMode::Contiguous)].prop_map(Op::Create);
    (
        prop::collection::vec(create, 0..=2),
        prop::collection::vec(op(), 1..=MAX_OPS),
    )
        .prop_map(|(mut ops, rest)| {
            ops.extend(rest);
            ops
        })
}

/// Cases per test: 2 × 50,000 = 100,000 random operation sequences (4 each under Miri: the
/// arena's `unsafe` is on every path; about 11 s each there).
fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 50_000 },
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    /// Paged sequences over the free-list allocator (contiguous ones are refused).
    #[test]
    fn free_list_matches_model(setup in setup_strategy(), ops in ops()) {
        let cfg = setup.config();
        let plan = cfg.plan_pages(setup.pages, FreeList::META_BITS_PER_PAGE).unwrap();
        let mut data = ArenaBuf::<DATA_BYTES>::new();
        let mut meta = ArenaBuf::<META_BYTES>::new();
        let mut cache: KvCache<'_, FreeList<'_>> = KvCache::new(
            cfg,
            &mut data.as_uninit_mut()[..plan.data_bytes],
            &mut meta.as_uninit_mut()[..plan.meta.total],
        )
        .unwrap();
        run(&mut cache, &setup, &ops)?;
    }

    /// Paged and contiguous sequences mixed over the bitmap allocator.
    #[test]
    fn bitmap_matches_model(setup in setup_strategy(), ops in ops()) {
        let cfg = setup.config();
        let plan = cfg.plan_pages(setup.pages, Bitmap::META_BITS_PER_PAGE).unwrap();
        let mut data = ArenaBuf::<DATA_BYTES>::new();
        let mut meta = ArenaBuf::<META_BYTES>::new();
        let mut cache: KvCache<'_, Bitmap<'_>> = KvCache::new(
            cfg,
            &mut data.as_uninit_mut()[..plan.data_bytes],
            &mut meta.as_uninit_mut()[..plan.meta.total],
        )
        .unwrap();
        run(&mut cache, &setup, &ops)?;
    }
}

// ---------------------------------------------------------------------------------------------
// The model.
// ---------------------------------------------------------------------------------------------

type Row = [f32; ROW];

/// One live sequence as the model sees it.
#[derive(Debug, Clone)]
struct MSeq {
    id: SeqId,
    mode: SeqMode,
    len: u32,
    /// Model page ids of its page table (a model page shared by k tables has refcount k).
    pages: Vec<u32>,
    /// Per `(layer, K|V)`: per position, the row last written (`None`: never written since
    /// reserved, so its content is unspecified).
    rows: Vec<Vec<Option<Row>>>,
}

struct Model {
    p: u32,
    num_pages: usize,
    table_len: usize,
    max_seqs: usize,
    max_seq_tokens: u32,
    contiguous_ok: bool,
    seqs: Vec<MSeq>,
    /// Every handle the cache ever returned (freed ones stay, as stale handles to try).
    issued: Vec<SeqId>,
    next_page: u32,
    stamp: u32,
}

fn rows_index(layer: u16, kv: Kv) -> usize {
    layer as usize * 2
        + match kv {
            Kv::K => 0,
            Kv::V => 1,
        }
}

/// Element `j` of a write stamped `stamp`: a multiple of 0.5 in [-125, 125].
fn value(stamp: u32, j: usize) -> f32 {
    let k = (stamp as usize).wrapping_mul(37).wrapping_add(j * 11) % 501;
    (k as f32 - 250.0) * 0.5
}

/// Whether `free` has a run of `n` free pages (first fit would find one).
fn has_run(free: &[bool], n: usize) -> bool {
    let mut run = 0;
    for &f in free {
        run = if f { run + 1 } else { 0 };
        if run >= n {
            return true;
        }
    }
    n == 0
}

/// Whether pages `[start, start + n)` exist and are all free.
fn range_free(free: &[bool], start: usize, n: usize) -> bool {
    free.get(start..start + n)
        .is_some_and(|r| r.iter().all(|&f| f))
}

impl Model {
    fn new(setup: &Setup, table_len: usize, contiguous_ok: bool) -> Self {
        Model {
            p: u32::from(setup.page_tokens),
            num_pages: setup.pages,
            table_len,
            max_seqs: setup.max_seqs as usize,
            max_seq_tokens: setup.max_seq_tokens,
            contiguous_ok,
            seqs: Vec::new(),
            issued: Vec::new(),
            next_page: 0,
            stamp: 0,
        }
    }

    fn handle(&self, h: H) -> SeqId {
        match h {
            H::Live(i) if !self.seqs.is_empty() => self.seqs[i as usize % self.seqs.len()].id,
            H::Live(i) | H::Any(i) if !self.issued.is_empty() => {
                self.issued[i as usize % self.issued.len()]
            }
            // Generation 0 is never issued.
            H::Live(i) | H::Any(i) => SeqId::from_raw(self.epoch() | u64::from(i)),
            // Forged in the cache's epoch (once known), so slot and generation are what is
            // checked.
            H::Raw(raw) => SeqId::from_raw(self.epoch() | u64::from(raw)),
        }
    }

    /// The cache's epoch bits of its handles (0 before the first one).
    fn epoch(&self) -> u64 {
        self.issued
            .first()
            .map_or(0, |id| id.to_raw() & 0xffff_ffff_0000_0000)
    }

    fn find(&self, id: SeqId) -> Option<usize> {
        self.seqs.iter().position(|s| s.id == id)
    }

    fn len_of(&self, id: SeqId) -> u32 {
        self.find(id).map_or(0, |i| self.seqs[i].len)
    }

    fn fresh_page(&mut self) -> u32 {
        self.next_page += 1;
        self.next_page
    }

    fn fresh_pages(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| self.fresh_page()).collect()
    }

    fn next_stamp(&mut self) -> u32 {
        self.stamp += 1;
        self.stamp
    }

    fn refcount(&self, page: u32) -> usize {
        self.seqs.iter().filter(|s| s.pages.contains(&page)).count()
    }

    fn used_pages(&self) -> usize {
        let mut all: Vec<u32> = self
            .seqs
            .iter()
            .flat_map(|s| s.pages.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        all.len()
    }

    fn free_pages(&self) -> usize {
        self.num_pages - self.used_pages()
    }

    /// Registers a handle the cache just returned for a new sequence.
    fn adopt(&mut self, seq: MSeq) -> Result<(), TestCaseError> {
        let id = seq.id;
        prop_assert!(
            !self.issued.contains(&id),
            "handle {id:?} was issued before"
        );
        prop_assert!((id.slot() as usize) < self.max_seqs, "slot of {id:?}");
        prop_assert!(
            self.seqs.iter().all(|s| s.id.slot() != id.slot()),
            "slot of {id:?} is live"
        );
        self.issued.push(id);
        self.seqs.push(seq);
        Ok(())
    }

    /// The row count of a valid row access, or the error the cache must return.
    fn check_rows(&self, layer: u16, start: u32, elems: usize, len: u32) -> Result<usize, Error> {
        if layer >= LAYERS {
            return Err(Error::LayerOutOfRange);
        }
        if elems % ROW != 0 {
            return Err(Error::LengthMismatch);
        }
        let n = elems / ROW;
        if u64::from(start) + n as u64 > u64::from(len) {
            return Err(Error::PositionOutOfRange);
        }
        Ok(n)
    }

    /// Table indices of sequence `i` a write of rows `[start, start + n)` must copy first.
    fn shared_in(&self, i: usize, start: u32, n: usize) -> Vec<usize> {
        let s = &self.seqs[i];
        if n == 0 || s.mode == SeqMode::Contiguous {
            return Vec::new();
        }
        let p = self.p as usize;
        let (first, last) = (start as usize / p, (start as usize + n - 1) / p);
        (first..=last)
            .filter(|&t| self.refcount(s.pages[t]) > 1)
            .collect()
    }

    /// Whether the page holding position `len` of sequence `i` (where its next reserved
    /// positions land) exists and is shared: `reserve` copies it.
    fn tail_shared(&self, i: usize) -> bool {
        let s = &self.seqs[i];
        let t = (s.len / self.p) as usize;
        s.mode == SeqMode::Paged && t < s.pages.len() && self.refcount(s.pages[t]) > 1
    }

    fn predict_write(&self, i: usize, start: u32, n: usize) -> Result<(), Error> {
        if self.shared_in(i, start, n).len() > self.free_pages() {
            return Err(Error::OutOfPages);
        }
        Ok(())
    }

    /// Copy-on-write, then the rows.
    fn apply_write(&mut self, i: usize, layer: u16, kv: Kv, start: u32, data: &[f32]) {
        let n = data.len() / ROW;
        for t in self.shared_in(i, start, n) {
            let fresh = self.fresh_page();
            self.seqs[i].pages[t] = fresh;
        }
        let rows = &mut self.seqs[i].rows[rows_index(layer, kv)];
        for (r, chunk) in data.chunks_exact(ROW).enumerate() {
            rows[start as usize + r] = Some(chunk.try_into().unwrap());
        }
    }

    /// The page-table length after `reserve(n)` on sequence `i`, or the errors it may return.
    fn predict_reserve(
        &self,
        i: usize,
        n: u32,
        before: &Snapshot,
    ) -> Result<usize, &'static [Error]> {
        let s = &self.seqs[i];
        // Past max_seq_tokens, even past u32::MAX: SequenceFull.
        let Some(new_len) = s.len.checked_add(n).filter(|&l| l <= self.max_seq_tokens) else {
            return Err(&[Error::SequenceFull]);
        };
        let need = new_len.div_ceil(self.p) as usize;
        if need > self.table_len {
            return Err(&[Error::OutOfPages]);
        }
        let held = s.pages.len();
        if s.mode == SeqMode::Paged {
            // A shared tail page is copied now, so the writes cannot run out of pages.
            let copy = usize::from(n > 0 && self.tail_shared(i));
            return if need.saturating_sub(held) + copy > self.free_pages() {
                Err(&[Error::OutOfPages])
            } else {
                Ok(need.max(held))
            };
        }
        if need <= held {
            return Ok(held);
        }
        // Contiguous growth (documented): capacity max(2 × held, need) rounded up to a power of
        // two, capped at the table length, in place if the pages after the run are free, else
        // as a new run; failing that, exactly `need` pages the same two ways.
        let free = before.free_map();
        let end = if held > 0 {
            before.table(s.id)[0] as usize + held
        } else {
            0
        };
        let target = (held * 2).max(need).next_power_of_two().min(self.table_len);
        let fits =
            |cap: usize| (held > 0 && range_free(&free, end, cap - held)) || has_run(&free, cap);
        if fits(target) {
            Ok(target)
        } else if fits(need) {
            Ok(need)
        } else {
            Err(&[Error::OutOfPages, Error::NoContiguousRun])
        }
    }

    fn predict_fork(&self, i: usize, before: &Snapshot) -> Result<(), Error> {
        if self.seqs.len() == self.max_seqs {
            return Err(Error::TooManySequences);
        }
        let s = &self.seqs[i];
        match s.mode {
            SeqMode::Paged if s.len % self.p != 0 && self.free_pages() == 0 => {
                Err(Error::OutOfPages)
            }
            SeqMode::Paged => Ok(()),
            SeqMode::Contiguous => {
                let held = s.pages.len();
                if held == 0 {
                    Ok(())
                } else if held > self.free_pages() {
                    Err(Error::OutOfPages)
                } else if !has_run(&before.free_map(), held) {
                    Err(Error::NoContiguousRun)
                } else {
                    Ok(())
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Observable state, for failure atomicity.
// ---------------------------------------------------------------------------------------------

/// A handle, what `sequence()` says of it and its `page_table()` if live.
type SeqView = (SeqId, Result<SeqInfo, Error>, Option<Vec<PageId>>);

#[derive(Debug, PartialEq)]
struct Snapshot {
    stats: Stats,
    free: usize,
    available: usize,
    cached: usize,
    /// `page_state` of pages `0..=num_pages` (the last one is out of range).
    states: Vec<Option<PageState>>,
    /// For every issued handle: `sequence()` and `page_table()`.
    seqs: Vec<SeqView>,
    /// Every byte of every value page, layer-major, K then V.
    data: Vec<u8>,
}

impl Snapshot {
    fn take<'a, A: PageAllocator<'a>>(cache: &KvCache<'a, A>, m: &Model) -> Self {
        let n = m.num_pages;
        let mut data = Vec::with_capacity(DATA_BYTES);
        for layer in 0..LAYERS {
            for kv in KVS {
                for page in 0..n {
                    data.extend_from_slice(cache.page_bytes(layer, kv, page as PageId).unwrap());
                }
            }
        }
        Snapshot {
            stats: cache.stats(),
            free: cache.pool().free_pages(),
            available: cache.pool().available(),
            cached: cache.pool().cached_pages(),
            states: (0..=n).map(|p| cache.page_state(p as PageId)).collect(),
            seqs: m
                .issued
                .iter()
                .map(|&id| {
                    (
                        id,
                        cache.sequence(id),
                        cache.page_table(id).ok().map(<[PageId]>::to_vec),
                    )
                })
                .collect(),
            data,
        }
    }

    fn free_map(&self) -> Vec<bool> {
        self.states
            .iter()
            .map(|&s| s == Some(PageState::Free))
            .collect()
    }

    fn table(&self, id: SeqId) -> &[PageId] {
        self.seqs
            .iter()
            .find(|s| s.0 == id)
            .and_then(|s| s.2.as_deref())
            .unwrap_or(&[])
    }

    /// Asserts nothing observable changed.
    fn assert_same(&self, after: &Snapshot) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.stats, after.stats, "stats changed");
        prop_assert_eq!(
            (self.free, self.available, self.cached),
            (after.free, after.available, after.cached),
            "pool counters changed"
        );
        prop_assert_eq!(&self.states, &after.states, "page states changed");
        prop_assert_eq!(&self.seqs, &after.seqs, "sequences or page tables changed");
        if self.data != after.data {
            let at = (0..self.data.len()).find(|&i| self.data[i] != after.data[i]);
            prop_assert!(false, "data arena changed at value byte {at:?}");
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Running a case.
// ---------------------------------------------------------------------------------------------

fn run<'a, A: PageAllocator<'a>>(
    cache: &mut KvCache<'a, A>,
    setup: &Setup,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    prop_assert_eq!(cache.arena_plan().num_pages as usize, setup.pages);
    let mut m = Model::new(setup, cache.arena_plan().table_len, A::CONTIGUOUS);
    let at = |step: usize, op: Op| {
        move |e: TestCaseError| TestCaseError::fail(format!("step {step}, {op:?}: {}", reason(e)))
    };
    check(cache, &m).map_err(|e| TestCaseError::fail(format!("fresh cache: {}", reason(e))))?;
    for (step, &op) in ops.iter().enumerate() {
        let before = Snapshot::take(cache, &m);
        let outcome = apply(cache, &mut m, &before, op).map_err(at(step, op))?;
        if let Err(e) = outcome {
            let after = Snapshot::take(cache, &m);
            before
                .assert_same(&after)
                .map_err(|f| TestCaseError::fail(format!("failed with {e:?}, yet {}", reason(f))))
                .map_err(at(step, op))?;
        }
        check(cache, &m).map_err(at(step, op))?;
    }
    Ok(())
}

/// The message of a failed check, without proptest's "Case failed" prefix.
fn reason(e: TestCaseError) -> String {
    match e {
        TestCaseError::Fail(r) | TestCaseError::Reject(r) => r.message().to_owned(),
    }
}

/// Runs one operation on the cache and the model, checking the result against the model's
/// prediction. Returns the operation's own outcome.
fn apply<'a, A: PageAllocator<'a>>(
    cache: &mut KvCache<'a, A>,
    m: &mut Model,
    before: &Snapshot,
    op: Op,
) -> Result<Result<(), Error>, TestCaseError> {
    let outcome = match op {
        Op::Create(mode) => {
            let expect = if mode == SeqMode::Contiguous && !m.contiguous_ok {
                Err(Error::ContiguousUnsupported)
            } else if m.seqs.len() == m.max_seqs {
                Err(Error::TooManySequences)
            } else {
                Ok(())
            };
            let got = cache.create_sequence(mode);
            prop_assert_eq!(got.map(|_| ()), expect);
            if let Ok(id) = got {
                m.adopt(MSeq {
                    id,
                    mode,
                    len: 0,
                    pages: Vec::new(),
                    rows: vec![Vec::new(); LAYERS as usize * 2],
                })?;
            }
            got.map(|_| ())
        }

        Op::Free(h) => {
            let id = m.handle(h);
            let idx = m.find(id);
            let got = cache.free_sequence(id);
            prop_assert_eq!(got, idx.map(|_| ()).ok_or(Error::UnknownSequence));
            if let Some(i) = idx {
                m.seqs.remove(i);
            }
            got
        }

        Op::Reserve(h, n) => {
            let id = m.handle(h);
            let idx = m.find(id);
            let expect = match idx {
                None => Err(&[Error::UnknownSequence][..]),
                Some(i) => m.predict_reserve(i, n, before),
            };
            let got = cache.reserve(id, n);
            match (got, expect, idx) {
                (Ok(first), Ok(held), Some(i)) => {
                    if n > 0 && m.tail_shared(i) {
                        let t = (m.seqs[i].len / m.p) as usize;
                        let fresh = m.fresh_page();
                        m.seqs[i].pages[t] = fresh;
                    }
                    let old_held = m.seqs[i].pages.len();
                    let fresh = m.fresh_pages(held.max(old_held));
                    let s = &mut m.seqs[i];
                    prop_assert_eq!(first, s.len, "reserve returns the first new position");
                    s.len += n;
                    for rows in &mut s.rows {
                        rows.resize(s.len as usize, None);
                    }
                    match s.mode {
                        SeqMode::Paged => s.pages.extend_from_slice(&fresh[old_held..held]),
                        // A grown run may have moved: all its pages are new to the model.
                        SeqMode::Contiguous if held != old_held => s.pages = fresh[..held].to_vec(),
                        SeqMode::Contiguous => {}
                    }
                }
                (Err(e), Err(allowed), _) => prop_assert!(
                    allowed.contains(&e),
                    "reserve({n}) failed with {e:?}; the model expects one of {allowed:?}"
                ),
                (got, expect, _) => prop_assert!(
                    false,
                    "reserve({n}) returned {got:?}; the model expects {expect:?} \
                     (Ok = page-table length after)"
                ),
            }
            got.map(|_| ())
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
            let len = m.len_of(id);
            let start = start.resolve(len);
            let elems = rows.resolve(start, len) * ROW + usize::from(ragged);
            let stamp = m.next_stamp();
            let data: Vec<f32> = (0..elems).map(|j| value(stamp, j)).collect();
            let expect = match idx {
                None => Err(Error::UnknownSequence),
                Some(i) => m
                    .check_rows(layer, start, elems, len)
                    .and_then(|n| m.predict_write(i, start, n)),
            };
            let got = cache.write(id, layer, kv, start, &data);
            prop_assert_eq!(got, expect);
            if let (Ok(()), Some(i)) = (got, idx) {
                m.apply_write(i, layer, kv, start, &data);
            }
            got
        }

        Op::WriteKv {
            h,
            layer,
            start,
            rows,
            ragged,
            v_extra,
        } => {
            let id = m.handle(h);
            let idx = m.find(id);
            let len = m.len_of(id);
            let start = start.resolve(len);
            let elems = rows.resolve(start, len) * ROW + usize::from(ragged);
            let (ks, vs) = (m.next_stamp(), m.next_stamp());
            let k: Vec<f32> = (0..elems).map(|j| value(ks, j)).collect();
            let v: Vec<f32> = (0..elems + v_extra).map(|j| value(vs, j)).collect();
            let expect = match idx {
                None => Err(Error::UnknownSequence),
                Some(_) if v_extra != 0 => Err(Error::LengthMismatch),
                Some(i) => m
                    .check_rows(layer, start, elems, len)
                    .and_then(|n| m.predict_write(i, start, n)),
            };
            let got = cache.write_kv(id, layer, start, &k, &v);
            prop_assert_eq!(got, expect);
            if let (Ok(()), Some(i)) = (got, idx) {
                m.apply_write(i, layer, Kv::K, start, &k);
                m.apply_write(i, layer, Kv::V, start, &v);
            }
            got
        }

        Op::Read {
            h,
            layer,
            kv,
            start,
            rows,
            ragged,
        } => {
            let id = m.handle(h);
            let idx = m.find(id);
            let len = m.len_of(id);
            let start = start.resolve(len);
            let elems = rows.resolve(start, len) * ROW + usize::from(ragged);
            let mut out = vec![f32::NAN; elems];
            let expect = match idx {
                None => Err(Error::UnknownSequence),
                Some(_) => m.check_rows(layer, start, elems, len).map(|_| ()),
            };
            let got = cache.read(id, layer, kv, start, &mut out);
            prop_assert_eq!(got, expect);
            if let (Ok(()), Some(i)) = (got, idx) {
                let model = &m.seqs[i].rows[rows_index(layer, kv)];
                for (r, row) in out.chunks_exact(ROW).enumerate() {
                    let pos = start as usize + r;
                    if let Some(want) = &model[pos] {
                        prop_assert_eq!(row, &want[..], "read of position {}", pos);
                    }
                }
            }
            got
        }

        Op::Fork(h) => {
            let id = m.handle(h);
            let idx = m.find(id);
            let expect = match idx {
                None => Err(Error::UnknownSequence),
                Some(i) => m.predict_fork(i, before),
            };
            let got = cache.fork(id);
            prop_assert_eq!(got.map(|_| ()), expect);
            if let (Ok(child), Some(i)) = (got, idx) {
                let parent = m.seqs[i].clone();
                let pages = match parent.mode {
                    SeqMode::Paged => {
                        // Full pages are shared; a partial tail page is copied.
                        let full = (parent.len / m.p) as usize;
                        let mut pages = parent.pages[..full].to_vec();
                        if parent.pages.len() > full {
                            pages.push(m.fresh_page());
                        }
                        pages
                    }
                    SeqMode::Contiguous => m.fresh_pages(parent.pages.len()),
                };
                m.adopt(MSeq {
                    id: child,
                    pages,
                    ..parent
                })?;
            }
            got.map(|_| ())
        }

        Op::Truncate(h, to) => {
            let id = m.handle(h);
            let idx = m.find(id);
            let len = m.len_of(id);
            let to = to.resolve(len);
            let expect = match idx {
                None => Err(Error::UnknownSequence),
                Some(_) if to > len => Err(Error::TruncateBeyondLength),
                Some(_) => Ok(()),
            };
            let got = cache.truncate(id, to);
            prop_assert_eq!(got, expect);
            if let (Ok(()), Some(i)) = (got, idx) {
                let p = m.p;
                let s = &mut m.seqs[i];
                s.len = to;
                for rows in &mut s.rows {
                    rows.truncate(to as usize);
                }
                if s.mode == SeqMode::Paged {
                    s.pages.truncate(to.div_ceil(p) as usize);
                }
            }
            got
        }
    };
    Ok(outcome)
}

/// Checks the whole cache against the model.
fn check<'a, A: PageAllocator<'a>>(cache: &KvCache<'a, A>, m: &Model) -> Result<(), TestCaseError> {
    let n = m.num_pages;
    let mut scratch = [0u16; MAX_POOL];
    let verdict = cache.check_invariants(&mut scratch);
    prop_assert!(verdict.is_ok(), "check_invariants: {:?}", verdict);

    let mut refs = [0u16; MAX_POOL];
    let mut model_of: [Option<u32>; MAX_POOL] = [None; MAX_POOL];
    let mut real_of: HashMap<u32, PageId> = HashMap::new();
    let mut out = [0f32; MAX_TOKENS as usize * ROW];
    let mut tokens = 0u64;
    for s in &m.seqs {
        let held = s.pages.len();
        prop_assert_eq!(
            cache.sequence(s.id),
            Ok(SeqInfo {
                len: s.len,
                pages: held as u16,
                capacity: held as u32 * m.p,
                mode: s.mode,
                prompt: 0, // this model commits no prompts
            }),
            "sequence {:?}",
            s.id
        );
        prop_assert_eq!(cache.seq_len(s.id), Ok(s.len));
        let used = s.len.div_ceil(m.p) as usize;
        match s.mode {
            SeqMode::Paged => prop_assert_eq!(held, used),
            SeqMode::Contiguous => prop_assert!(held >= used),
        }
        let table = match cache.page_table(s.id) {
            Ok(t) => t,
            Err(e) => return Err(TestCaseError::fail(format!("page_table: {e:?}"))),
        };
        prop_assert_eq!(table.len(), held);
        for (&real, &model) in table.iter().zip(&s.pages) {
            prop_assert!((real as usize) < n, "page {} out of range", real);
            refs[real as usize] += 1;
            let seen = *model_of[real as usize].get_or_insert(model);
            prop_assert_eq!(seen, model, "real page {} is two model pages", real);
            let seen = *real_of.entry(model).or_insert(real);
            prop_assert_eq!(seen, real, "model page {} is two real pages", model);
        }
        tokens += u64::from(s.len);
        for layer in 0..LAYERS {
            for kv in KVS {
                let buf = &mut out[..s.len as usize * ROW];
                prop_assert_eq!(cache.read(s.id, layer, kv, 0, buf), Ok(()));
                let model = &s.rows[rows_index(layer, kv)];
                prop_assert_eq!(model.len(), s.len as usize);
                for (pos, want) in model.iter().enumerate() {
                    if let Some(want) = want {
                        prop_assert_eq!(
                            &buf[pos * ROW..][..ROW],
                            &want[..],
                            "{:?} layer {} {:?} position {}",
                            s.id,
                            layer,
                            kv,
                            pos
                        );
                    }
                }
            }
        }
    }

    // Every page in exactly one state, refcount = page-table references.
    for (page, &r) in refs.iter().enumerate().take(n) {
        let want = if r > 0 {
            PageState::Used(r)
        } else {
            PageState::Free
        };
        prop_assert_eq!(
            cache.page_state(page as PageId),
            Some(want),
            "page {}",
            page
        );
    }
    prop_assert_eq!(cache.page_state(n as PageId), None);

    let used = refs.iter().filter(|&&r| r > 0).count();
    prop_assert_eq!(used, m.used_pages(), "pages in use vs the model's");
    let st = cache.stats();
    prop_assert_eq!(st.pages_total as usize, n);
    prop_assert_eq!(
        st.pages_free + st.pages_used + st.pages_cached,
        st.pages_total
    );
    prop_assert_eq!(st.pages_cached, 0);
    prop_assert_eq!(st.pages_used as usize, used);
    prop_assert_eq!(st.pages_free as usize, n - used);
    prop_assert_eq!(st.sequences as usize, m.seqs.len());
    prop_assert_eq!(st.tokens, tokens);
    prop_assert_eq!(st.bytes_used, used * st.page_bytes);
    prop_assert_eq!(cache.pool().free_pages(), n - used);
    prop_assert_eq!(cache.pool().cached_pages(), 0);
    prop_assert_eq!(cache.pool().available(), n - used);

    // Stale handles stay dead.
    for &id in &m.issued {
        if m.find(id).is_none() {
            prop_assert_eq!(cache.seq_len(id), Err(Error::UnknownSequence));
            prop_assert_eq!(cache.page_table(id).err(), Some(Error::UnknownSequence));
        }
    }
    Ok(())
}
