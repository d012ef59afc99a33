//! Model-based property test of the prefix index of [`edgekv::KvCache`].
//!
//! Random sequences of create / free_sequence / reserve / write / commit_prompt / lookup / attach /
//! fork / truncate / set_namespace on paged sequences ("prefill" is reserve, writes of the chunks
//! and commit, each checked as its own call), against a plain model of the page pool (refcounts,
//! free pages, the LRU list of cached pages), of the prefix index (per registered page: its
//! registration id, chained hash (by [`page_hash`], the public default), parent link and token
//! ids) and of every page's rows (which token each row was written for). Pools are small (6–12
//! pages of 2 or 4 tokens, chunks of 1 or 2 pages), so evictions are frequent; prompts are
//! prefixes of six scripts in three families sharing prefixes, so lookups hit, partially hit and
//! miss. The model predicts, and the test checks after every call:
//!
//! - every result and exact error: `lookup`'s `PrefixHit` (tokens, pages, matched; its private
//!   `last` through which later attaches of it succeed or fail); `commit_prompt`'s count of pages
//!   newly published and its `PromptMismatch`; `attach`'s `StaleHit` for hits made stale by
//!   evictions, forged hits and hits of other prompts; `SequenceNotEmpty`; unknown and stale
//!   handles; `OutOfPages` (copy-on-write included);
//! - which page an allocation takes: any free page (the model learns its id from `page_table`),
//!   else exactly the LRU head, whose index entry disappears;
//! - every page table (so an attach's pages are those the model says hold that prefix), page
//!   state, registered flag, the LRU order, the free set, `stats` (evictions included), every row
//!   of every live sequence read back bit for bit (attached rows: as written by the sequence that
//!   committed them), and lookups of every script's longest prompt; `check_invariants` passes;
//! - a failing call, and every `lookup`, leaves the cache exactly as it was.
//!
//! A run checks 30,000 cases of 1 to 60 generated operations (uniform: 30.5 on average, 915,000
//! per run), which expand to about 1.7 checked calls each (prefills and attaches to new sequences
//! are several), so about 1.5 million calls. Under Miri: 4 cases of 1 to 6 operations.

use std::collections::VecDeque;

use edgekv::prefix::{PrefixHit, page_hash};
use edgekv::{
    ArenaBuf, Bitmap, CacheConfig, ElementFormat, Error, FreeList, Kv, KvCache, PageAllocator,
    PageId, PageState, SeqId, SeqInfo, SeqMode, Shape, Stats,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const LAYERS: u16 = 2;
const SHAPE: Shape = Shape {
    layers: LAYERS,
    kv_heads: 1,
    head_dim: 2,
};
/// Elements of one token row.
const ROW: usize = 2;
/// Largest pool of a case.
const MAX_POOL: usize = 12;
const MAX_TOKENS: u32 = 24;
/// Every pool stride is one 64-byte granule (≤ 4 rows of ≤ 8 bytes): 2 layers × K, V.
const DATA_BYTES: usize = MAX_POOL * 2 * 2 * 64;
const META_BYTES: usize = 8192;
const KVS: [Kv; 2] = [Kv::K, Kv::V];
/// The first is the cache's initial namespace; the last differs from it only in the top bit.
///
/// NOTE (modelled as the code does it, arguably documented): namespaces are "compared on their
/// low 63 bits" (`CacheConfig::namespace`) in first pages' parent links, but the hash chain is
/// seeded with all 64 bits. So under the third namespace lookups miss pages published under the
/// first, yet `commit_prompt` accepts a sequence whose pages were published under the first (no
/// `PromptMismatch`, unlike `set_namespace`'s doc for an old namespace) and registers its further
/// pages with a hash no lookup under either namespace computes.
const NAMESPACES: [u64; 3] = [0x5eed_0a11, 0x5eed_0b22, 0x5eed_0a11 | 1 << 63];
/// Scripts `s`: family `s / 2`, variant `s % 2`.
const SCRIPTS: u8 = 6;
const KEPT_HITS: usize = 8;

/// Token `i` of script `s`: 5 tokens all scripts share, up to 11 its family shares, then its own.
fn token(script: u8, i: usize) -> u32 {
    let (family, variant, i) = (u32::from(script / 2), u32::from(script % 2), i as u32);
    match i {
        0..5 => 100 + i,
        5..11 => 1000 * (family + 1) + i,
        _ => 1000 * (family + 1) + 100 * (variant + 1) + i,
    }
}

fn tokens(script: u8, len: usize) -> Vec<u32> {
    (0..len).map(|i| token(script, i)).collect()
}

/// Element `j` of the row of `token` in `(layer, kv)`: a multiple of 0.5 in [-63.5, 63.5], exact
/// in f32, f16 and bf16.
fn value(token: u32, layer: u16, kv: Kv, j: usize) -> f32 {
    let k = (token * 31 + u32::from(layer) * 7 + kv_index(kv) as u32 * 3 + j as u32 * 11) % 255;
    (k as f32 - 127.0) * 0.5
}

fn kv_index(kv: Kv) -> usize {
    match kv {
        Kv::K => 0,
        Kv::V => 1,
    }
}

/// Rows of positions `[start, start + n)` of `script` in `(layer, kv)`.
fn rows(script: u8, layer: u16, kv: Kv, start: u32, n: usize) -> Vec<f32> {
    let pos = start as usize..start as usize + n;
    pos.flat_map(|p| (0..ROW).map(move |j| value(token(script, p), layer, kv, j)))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Cases: a configuration and operations whose arguments are resolved against the model.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Setup {
    page_tokens: u16,
    /// 0 (one page), or `page_tokens` times 1 or 2.
    chunk_tokens: u16,
    pages: usize,
    max_seqs: u16,
    max_seq_tokens: u32,
    formats: (ElementFormat, ElementFormat),
    bitmap: bool,
}

impl Setup {
    fn config(&self) -> CacheConfig {
        CacheConfig::new(SHAPE)
            .with_page_tokens(self.page_tokens)
            .with_chunk_tokens(self.chunk_tokens)
            .with_formats(self.formats.0, self.formats.1)
            .with_sequences(self.max_seqs, self.max_seq_tokens)
            .with_namespace(NAMESPACES[0])
    }
}

/// Which handle an operation uses: a live one, any ever issued, or forged from raw bits.
#[derive(Debug, Clone, Copy)]
enum H {
    Live(u8),
    Any(u8),
    Raw(u32),
}

/// A position relative to the sequence's length: in `0..=len`, or past it.
#[derive(Debug, Clone, Copy)]
enum Pos {
    In(u8),
    Past(u8),
}

impl Pos {
    fn resolve(self, len: u32) -> u32 {
        match self {
            Pos::In(x) => u32::from(x) % (len + 1),
            Pos::Past(x) => len + 1 + u32::from(x) % 3,
        }
    }
}

/// A prompt: the first `len` tokens of a script.
#[derive(Debug, Clone, Copy)]
struct Prompt {
    script: u8,
    len: usize,
}

impl Prompt {
    fn new(script: u8, len: usize) -> Self {
        Prompt { script, len }
    }

    fn tokens(self) -> Vec<u32> {
        tokens(self.script, self.len)
    }
}

/// A prompt chosen at generation: script and a length reduced modulo `max_seq_tokens + 5`.
#[derive(Debug, Clone, Copy)]
struct PromptSel(u8, u8);

impl PromptSel {
    fn resolve(self, max_tokens: u32) -> Prompt {
        Prompt::new(self.0, usize::from(self.1) % (max_tokens as usize + 5))
    }
}

/// What `commit_prompt` is given: a prefix of the sequence's own script, a prompt longer than the
/// sequence, or a prefix of another script (script, length) no longer than the sequence.
#[derive(Debug, Clone, Copy)]
enum CommitSel {
    Own(u8),
    TooLong(u8),
    Other(u8, u8),
}

/// The sequence an attach goes to: a new one (created by the operation, with this script, after
/// freeing the oldest one if no slot is free), or one by handle (perhaps not empty or stale).
#[derive(Debug, Clone, Copy)]
enum Target {
    Fresh(u8),
    Seq(H),
}

/// Where an attach's hit comes from: a lookup made just before it (the normal use), or one of
/// the last hits looked up (perhaps stale since).
#[derive(Debug, Clone, Copy)]
enum Source {
    Lookup(PromptSel),
    Stored(u8),
}

/// How an attach alters the stored hit it uses (only public fields can be forged).
#[derive(Debug, Clone, Copy)]
enum Forge {
    Keep,
    MorePages,
    FewerPages,
    BadTokens,
    /// `PrefixHit::NONE` claiming `n % 4` pages.
    FromNone(u8),
}

/// Which rows a write stores: K and V of every layer (`write_kv` per layer), or one `(layer,
/// kv)` (the layer may be out of range).
#[derive(Debug, Clone, Copy)]
enum Layers {
    All,
    One(u16, Kv),
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Create(u8),
    Free(H),
    Reserve(H, u32),
    /// Handle, first position, rows (sometimes one more than fit), which rows.
    Write(H, Pos, u8, Layers),
    /// Reserve up to 16 more positions, write `[prompt, len)` in chunks on the chunk grid,
    /// commit the script's first `len` tokens.
    Prefill(H, u8),
    Commit(H, CommitSel),
    Lookup(PromptSel),
    /// Hit, sequence, prompt (`None`: the hit's), forgery.
    Attach(Source, Target, Option<PromptSel>, Forge),
    Fork(H),
    Truncate(H, Pos),
    SetNamespace(u8),
}

fn setup_strategy() -> impl Strategy<Value = Setup> {
    let formats = prop_oneof![
        3 => Just((ElementFormat::F32, ElementFormat::F32)),
        1 => Just((ElementFormat::F16, ElementFormat::Bf16)),
    ];
    (
        prop_oneof![Just(2u16), Just(4u16)],
        0u16..=2,
        6..=MAX_POOL,
        2u16..=5,
        12..=MAX_TOKENS,
        formats,
        any::<bool>(),
    )
        .prop_map(
            |(p, chunk_pages, pages, max_seqs, max_seq_tokens, formats, bitmap)| Setup {
                page_tokens: p,
                chunk_tokens: p * chunk_pages,
                pages,
                max_seqs,
                max_seq_tokens,
                formats,
                bitmap,
            },
        )
}

fn handle() -> impl Strategy<Value = H> {
    prop_oneof![
        12 => any::<u8>().prop_map(H::Live),
        2 => any::<u8>().prop_map(H::Any),
        1 => (0u32..4, 0u32..6).prop_map(|(generation, slot)| H::Raw(generation << 16 | slot)),
    ]
}

fn pos() -> impl Strategy<Value = Pos> {
    prop_oneof![12 => any::<u8>().prop_map(Pos::In), 1 => any::<u8>().prop_map(Pos::Past)]
}

fn prompt_sel() -> impl Strategy<Value = PromptSel> {
    (0..SCRIPTS, any::<u8>()).prop_map(|(s, len)| PromptSel(s, len))
}

fn op() -> impl Strategy<Value = Op> {
    let reserve_n = prop_oneof![12 => 0..8u32, 1 => Just(u32::MAX)];
    let layers = prop_oneof![
        4 => Just(Layers::All),
        1 => (0..=LAYERS, prop_oneof![Just(Kv::K), Just(Kv::V)])
            .prop_map(|(l, kv)| Layers::One(l, kv)),
    ];
    let commit = prop_oneof![
        6 => any::<u8>().prop_map(CommitSel::Own),
        1 => any::<u8>().prop_map(CommitSel::TooLong),
        1 => (0..SCRIPTS, any::<u8>()).prop_map(|(s, n)| CommitSel::Other(s, n)),
    ];
    let target = prop_oneof![
        6 => (0..SCRIPTS).prop_map(Target::Fresh),
        2 => handle().prop_map(Target::Seq),
    ];
    let source = prop_oneof![
        3 => prompt_sel().prop_map(Source::Lookup),
        1 => any::<u8>().prop_map(Source::Stored),
    ];
    let forge = prop_oneof![
        12 => Just(Forge::Keep),
        1 => Just(Forge::MorePages),
        1 => Just(Forge::FewerPages),
        1 => Just(Forge::BadTokens),
        1 => any::<u8>().prop_map(Forge::FromNone),
    ];
    prop_oneof![
        3 => (0..SCRIPTS).prop_map(Op::Create),
        3 => handle().prop_map(Op::Free),
        3 => (handle(), reserve_n).prop_map(|(h, n)| Op::Reserve(h, n)),
        4 => (handle(), pos(), any::<u8>(), layers).prop_map(|(h, at, n, l)| Op::Write(h, at, n, l)),
        6 => (handle(), any::<u8>()).prop_map(|(h, n)| Op::Prefill(h, n)),
        3 => (handle(), commit).prop_map(|(h, c)| Op::Commit(h, c)),
        3 => prompt_sel().prop_map(Op::Lookup),
        8 => (source, target, prop::option::weighted(0.2, prompt_sel()), forge)
            .prop_map(|(hit, to, prompt, forge)| Op::Attach(hit, to, prompt, forge)),
        2 => handle().prop_map(Op::Fork),
        3 => (handle(), pos()).prop_map(|(h, to)| Op::Truncate(h, to)),
        1 => any::<u8>().prop_map(Op::SetNamespace),
    ]
}

const MAX_OPS: usize = if cfg!(miri) { 6 } else { 60 };

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 30_000 },
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    /// Both allocators (chosen per case), paged sequences only.
    #[test]
    fn prefix_index_matches_model(
        setup in setup_strategy(),
        ops in prop::collection::vec(op(), 1..=MAX_OPS),
    ) {
        let mut data = ArenaBuf::<DATA_BYTES>::new();
        let mut meta = ArenaBuf::<META_BYTES>::new();
        if setup.bitmap {
            run_on::<Bitmap<'_>>(&setup, &ops, &mut data, &mut meta)?;
        } else {
            run_on::<FreeList<'_>>(&setup, &ops, &mut data, &mut meta)?;
        }
    }
}

fn run_on<'a, A: PageAllocator<'a>>(
    setup: &Setup,
    ops: &[Op],
    data: &'a mut ArenaBuf<DATA_BYTES>,
    meta: &'a mut ArenaBuf<META_BYTES>,
) -> Result<(), TestCaseError> {
    let cfg = setup.config();
    let plan = cfg.plan_pages(setup.pages, A::META_BITS_PER_PAGE).unwrap();
    let mut cache: KvCache<'a, A> = KvCache::new(
        cfg,
        &mut data.as_uninit_mut()[..plan.data_bytes],
        &mut meta.as_uninit_mut()[..plan.meta.total],
    )
    .unwrap();
    prop_assert_eq!(cache.arena_plan().num_pages as usize, setup.pages);
    let mut m = Model::new(setup, cache.arena_plan().table_len);
    check(&cache, &m).map_err(|e| fail(format!("fresh cache: {}", reason(e))))?;
    let mut steps = 0;
    for &op in ops {
        run_op(&mut cache, &mut m, &mut steps, op)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The model.
// ---------------------------------------------------------------------------------------------

/// A registered page's index entry.
#[derive(Debug, Clone)]
struct Entry {
    reg: u64,
    hash: u64,
    parent: u64,
    tokens: Vec<u32>,
}

/// One page (by real id): references, index entry, and per `(layer, kv, row)` the token the row
/// was written for (`None`: unknown, never written since the page was taken).
#[derive(Debug, Clone)]
struct MPage {
    refs: u16,
    entry: Option<Entry>,
    rows: Vec<Option<u32>>,
}

#[derive(Debug, Clone)]
struct MSeq {
    id: SeqId,
    /// The script its writes take tokens from.
    script: u8,
    len: u32,
    table: Vec<PageId>,
    prompt: u32,
}

/// A hit `lookup` returned, the registration id the model predicted for its last page, and its
/// prompt.
#[derive(Debug, Clone, Copy)]
struct StoredHit {
    hit: PrefixHit,
    last: u64,
    prompt: Prompt,
}

struct Model {
    p: usize,
    chunk: usize,
    table_len: usize,
    max_seqs: usize,
    max_seq_tokens: u32,
    namespace: u64,
    pages: Vec<MPage>,
    /// Cached pages, least recently released first.
    lru: VecDeque<PageId>,
    next_reg: u64,
    evictions: u64,
    seqs: Vec<MSeq>,
    issued: Vec<SeqId>,
    hits: Vec<StoredHit>,
}

/// The parent link of a first page: the namespace with the top bit set.
fn root_link(namespace: u64) -> u64 {
    namespace | 1 << 63
}

impl Model {
    fn new(setup: &Setup, table_len: usize) -> Self {
        let p = usize::from(setup.page_tokens);
        let page = MPage {
            refs: 0,
            entry: None,
            rows: vec![None; usize::from(LAYERS) * 2 * p],
        };
        Model {
            p,
            chunk: match setup.chunk_tokens {
                0 => p,
                c => usize::from(c),
            },
            table_len,
            max_seqs: usize::from(setup.max_seqs),
            max_seq_tokens: setup.max_seq_tokens,
            namespace: NAMESPACES[0],
            pages: vec![page; setup.pages],
            lru: VecDeque::new(),
            next_reg: 1,
            evictions: 0,
            seqs: Vec::new(),
            issued: Vec::new(),
            hits: Vec::new(),
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
            // Generation 0 is never issued.
            H::Live(i) | H::Any(i) => SeqId::from_raw(epoch | u64::from(i)),
            H::Raw(raw) => SeqId::from_raw(epoch | u64::from(raw)),
        }
    }

    fn find_seq(&self, id: SeqId) -> Option<usize> {
        self.seqs.iter().position(|s| s.id == id)
    }

    fn is_free(&self, page: PageId) -> bool {
        let pg = &self.pages[page as usize];
        pg.refs == 0 && pg.entry.is_none()
    }

    fn free_pages(&self) -> Vec<PageId> {
        (0..self.pages.len() as PageId)
            .filter(|&p| self.is_free(p))
            .collect()
    }

    fn available(&self) -> usize {
        self.free_pages().len() + self.lru.len()
    }

    fn state(&self, page: PageId) -> PageState {
        match &self.pages[page as usize] {
            MPage { refs: 0, entry, .. } if entry.is_some() => PageState::Cached,
            MPage { refs: 0, .. } => PageState::Free,
            MPage { refs, .. } => PageState::Used(*refs),
        }
    }

    fn reg(&self, page: PageId) -> u64 {
        self.pages[page as usize]
            .entry
            .as_ref()
            .map_or(0, |e| e.reg)
    }

    fn retain(&mut self, page: PageId) {
        if self.pages[page as usize].refs == 0 {
            self.lru.retain(|&q| q != page);
        }
        self.pages[page as usize].refs += 1;
    }

    /// Drops a reference; the last one caches a registered page at the LRU tail.
    fn release(&mut self, page: PageId) {
        let pg = &mut self.pages[page as usize];
        pg.refs -= 1;
        if pg.refs == 0 && pg.entry.is_some() {
            self.lru.push_back(page);
        }
    }

    /// An allocation the cache made, which put `real` in a page table: a free page if there is
    /// one, else the LRU head, evicted (unregistered).
    fn take(&mut self, real: PageId) -> Result<PageId, TestCaseError> {
        if self.free_pages().is_empty() {
            let head = self.lru.pop_front();
            prop_assert_eq!(Some(real), head, "an allocation evicts the LRU head");
            self.pages[real as usize].entry = None;
            self.evictions += 1;
        } else {
            prop_assert!(self.is_free(real), "allocated page {} was not free", real);
        }
        let pg = &mut self.pages[real as usize];
        pg.refs = 1;
        pg.rows.fill(None);
        Ok(real)
    }

    /// Whether a write to table entry `i` of sequence `s` copies the page first.
    fn needs_copy(&self, s: usize, i: usize) -> bool {
        self.seqs[s].table.get(i).is_some_and(|&page| {
            let pg = &self.pages[page as usize];
            pg.refs > 1 || pg.entry.is_some()
        })
    }

    /// Copy-on-write of table entry `i` of sequence `s` into the page `real` the cache took.
    fn copy_entry(&mut self, s: usize, i: usize, real: PageId) -> Result<(), TestCaseError> {
        let old = self.seqs[s].table[i];
        let new = self.take(real)?;
        self.pages[new as usize].rows = self.pages[old as usize].rows.clone();
        self.seqs[s].table[i] = new;
        self.release(old);
        Ok(())
    }

    /// The registered page with this hash, parent link and tokens (at most one exists).
    fn find(
        &self,
        hash: u64,
        parent: u64,
        tokens: &[u32],
    ) -> Result<Option<PageId>, TestCaseError> {
        let mut found = (0..self.pages.len() as PageId).filter(|&p| {
            self.pages[p as usize]
                .entry
                .as_ref()
                .is_some_and(|e| e.hash == hash && e.parent == parent && e.tokens == tokens)
        });
        let first = found.next();
        prop_assert!(found.next().is_none(), "two equal index entries");
        Ok(first)
    }

    /// The registered pages holding the first (at most `max_pages`) whole pages of `prompt`
    /// under the current namespace, each verified by hash, parent and tokens.
    fn walk(&self, prompt: &[u32], max_pages: usize) -> Result<Vec<PageId>, TestCaseError> {
        let (mut prev_hash, mut parent) = (self.namespace, root_link(self.namespace));
        let mut pages = Vec::new();
        for tokens in prompt.chunks_exact(self.p).take(max_pages) {
            let hash = page_hash(prev_hash, tokens);
            let Some(page) = self.find(hash, parent, tokens)? else {
                break;
            };
            pages.push(page);
            (prev_hash, parent) = (hash, self.reg(page));
        }
        Ok(pages)
    }

    /// `lookup(prompt)`: the walk capped at the reuse boundary (the last prompt token is
    /// recomputed, aligned down to the chunk) and the table, its pages aligned down to the chunk.
    /// Also the registration id of the hit's last page.
    fn lookup(&self, prompt: &[u32]) -> Result<((u32, u16, u32), u64), TestCaseError> {
        let boundary = prompt.len().saturating_sub(1) / self.chunk * self.chunk;
        let found = self.walk(prompt, (boundary / self.p).min(self.table_len))?;
        let per_chunk = self.chunk / self.p;
        let pages = found.len() / per_chunk * per_chunk;
        let last = pages.checked_sub(1).map_or(0, |i| self.reg(found[i]));
        let hit = (
            (pages * self.p) as u32,
            pages as u16,
            (found.len() * self.p) as u32,
        );
        Ok((hit, last))
    }

    /// `commit_prompt`'s walk over the sequence's pages of whole chunks of `prompt`: registered
    /// pages must hold these tokens under this chain, unregistered ones are published unless an
    /// equal page is registered (`apply == false` only predicts). Returns the pages published.
    fn publish(
        &mut self,
        s: usize,
        prompt: &[u32],
        apply: bool,
    ) -> Result<Result<u16, Error>, TestCaseError> {
        let pages = prompt.len() / self.chunk * self.chunk / self.p;
        let (mut prev_hash, mut parent) = (self.namespace, root_link(self.namespace));
        let mut published = 0;
        for (i, tokens) in prompt.chunks_exact(self.p).take(pages).enumerate() {
            let hash = page_hash(prev_hash, tokens);
            let page = self.seqs[s].table[i];
            if let Some(e) = &self.pages[page as usize].entry {
                if e.parent != parent || e.tokens != tokens {
                    return Ok(Err(Error::PromptMismatch));
                }
                parent = e.reg;
            } else if let Some(equal) = self.find(hash, parent, tokens)? {
                parent = self.reg(equal);
            } else {
                parent = if apply {
                    let reg = self.next_reg;
                    self.next_reg += 1;
                    let tokens = tokens.to_vec();
                    self.pages[page as usize].entry = Some(Entry {
                        reg,
                        hash,
                        parent,
                        tokens,
                    });
                    reg
                } else {
                    // A placeholder no entry names as parent.
                    (1 << 62) + i as u64
                };
                published += 1;
            }
            prev_hash = hash;
        }
        Ok(Ok(published))
    }
}

// ---------------------------------------------------------------------------------------------
// Running a case: each operation resolves to one or more calls, each checked on its own.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Call {
    Create(u8),
    Free(SeqId),
    Reserve(SeqId, u32),
    /// Sequence, first position, rows, which rows.
    Write(SeqId, u32, usize, Layers),
    Commit(SeqId, Prompt),
    Lookup(Prompt),
    /// Sequence, hit, the registration id the model predicted for the hit's last page, prompt.
    Attach(SeqId, PrefixHit, u64, Prompt),
    Fork(SeqId),
    Truncate(SeqId, u32),
    SetNamespace(u64),
}

fn run_op<'a, A: PageAllocator<'a>>(
    cache: &mut KvCache<'a, A>,
    m: &mut Model,
    steps: &mut usize,
    op: Op,
) -> Result<(), TestCaseError> {
    let mut call = |cache: &mut KvCache<'a, A>, m: &mut Model, call: Call| {
        *steps += 1;
        step(cache, m, call).map_err(|e| {
            fail(format!(
                "call {}, {call:?} (of {op:?}): {}",
                *steps,
                reason(e)
            ))
        })
    };
    let single = match op {
        Op::Create(script) => Call::Create(script),
        Op::Free(h) => Call::Free(m.handle(h)),
        Op::Reserve(h, n) => Call::Reserve(m.handle(h), n),
        Op::Write(h, start, rows, layers) => {
            let id = m.handle(h);
            let len = m.find_seq(id).map_or(0, |s| m.seqs[s].len);
            let start = start.resolve(len);
            let rows = usize::from(rows) % (len.saturating_sub(start) as usize + 2);
            Call::Write(id, start, rows, layers)
        }
        Op::Prefill(h, more) => {
            let id = m.handle(h);
            let Some(s) = m.find_seq(id) else {
                return call(cache, m, Call::Reserve(id, 1)).map(drop);
            };
            let MSeq {
                script,
                len,
                prompt,
                ..
            } = m.seqs[s];
            let end = (len + 1 + u32::from(more) % 16).min(m.max_seq_tokens);
            if call(cache, m, Call::Reserve(id, end - len))?.is_err() {
                return Ok(());
            }
            // Chunks on the absolute chunk grid, from the committed prompt on.
            let c = m.chunk as u32;
            let mut start = prompt;
            while start < end {
                let stop = ((start / c + 1) * c).min(end);
                let chunk = Call::Write(id, start, (stop - start) as usize, Layers::All);
                if call(cache, m, chunk)?.is_err() {
                    return Ok(());
                }
                start = stop;
            }
            Call::Commit(id, Prompt::new(script, end as usize))
        }
        Op::Commit(h, sel) => {
            let id = m.handle(h);
            let s = m.find_seq(id);
            let (script, len) = s.map_or((0, 0), |s| (m.seqs[s].script, m.seqs[s].len as usize));
            let prompt = match sel {
                CommitSel::Own(n) => Prompt::new(script, usize::from(n) % (len + 1)),
                CommitSel::TooLong(n) => Prompt::new(script, len + 1 + usize::from(n) % 3),
                CommitSel::Other(other, n) => Prompt::new(other, usize::from(n) % (len + 1)),
            };
            Call::Commit(id, prompt)
        }
        Op::Lookup(sel) => Call::Lookup(sel.resolve(m.max_seq_tokens)),
        Op::Attach(source, target, prompt, forge) => {
            let pick = match source {
                Source::Lookup(sel) => {
                    // Never fails (checked).
                    let _ = call(cache, m, Call::Lookup(sel.resolve(m.max_seq_tokens)))?;
                    usize::MAX
                }
                Source::Stored(i) => usize::from(i),
            };
            let stored = match m.hits.len() {
                0 => StoredHit {
                    hit: PrefixHit::NONE,
                    last: 0,
                    prompt: Prompt::new(0, 0),
                },
                n => m.hits[pick.min(n - 1) % n],
            };
            let prompt = prompt.map_or(stored.prompt, |sel| sel.resolve(m.max_seq_tokens));
            let (mut hit, mut last) = (stored.hit, stored.last);
            let p = m.p as u32;
            match forge {
                Forge::Keep => {}
                Forge::MorePages => (hit.pages, hit.tokens) = (hit.pages + 1, hit.tokens + p),
                Forge::FewerPages => {
                    hit.pages = hit.pages.saturating_sub(1);
                    hit.tokens = u32::from(hit.pages) * p;
                }
                Forge::BadTokens => hit.tokens += 1,
                Forge::FromNone(n) => {
                    (hit, last) = (PrefixHit::NONE, 0);
                    hit.pages = u16::from(n % 4);
                    hit.tokens = u32::from(hit.pages) * p;
                }
            }
            let id = match target {
                Target::Fresh(script) => {
                    // A new conversation: the oldest one makes room if the slots are full.
                    if m.seqs.len() == m.max_seqs {
                        let _ = call(cache, m, Call::Free(m.seqs[0].id))?;
                    }
                    match call(cache, m, Call::Create(script))? {
                        Ok(()) => m.seqs.last().map(|s| s.id).unwrap(),
                        Err(_) => m.handle(H::Live(0)),
                    }
                }
                Target::Seq(h) => m.handle(h),
            };
            Call::Attach(id, hit, last, prompt)
        }
        Op::Fork(h) => Call::Fork(m.handle(h)),
        Op::Truncate(h, to) => {
            let id = m.handle(h);
            let len = m.find_seq(id).map_or(0, |s| m.seqs[s].len);
            Call::Truncate(id, to.resolve(len))
        }
        Op::SetNamespace(i) => Call::SetNamespace(NAMESPACES[usize::from(i) % NAMESPACES.len()]),
    };
    call(cache, m, single).map(drop)
}

/// Runs one call on the cache and the model, then checks everything. Returns the call's own
/// outcome.
fn step<'a, A: PageAllocator<'a>>(
    cache: &mut KvCache<'a, A>,
    m: &mut Model,
    call: Call,
) -> Result<Result<(), Error>, TestCaseError> {
    let before = Snapshot::take(cache, m);
    let (outcome, changes_nothing) = apply(cache, m, call)?;
    if outcome.is_err() || changes_nothing {
        let after = Snapshot::take(cache, m);
        prop_assert!(
            before == after,
            "{outcome:?} changed the cache:\nbefore {before:?}\nafter  {after:?}"
        );
    }
    check(cache, m)?;
    Ok(outcome)
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

/// The message of a failed check, without proptest's prefix.
fn reason(e: TestCaseError) -> String {
    match e {
        TestCaseError::Fail(r) | TestCaseError::Reject(r) => r.message().to_owned(),
    }
}

/// A real page table (the model takes the ids of newly allocated pages from it).
fn table_of<'a, A: PageAllocator<'a>>(cache: &KvCache<'a, A>, id: SeqId) -> Vec<PageId> {
    cache
        .page_table(id)
        .map(<[PageId]>::to_vec)
        .unwrap_or_default()
}

/// Runs `call`, checking its result against the model's prediction and updating the model.
/// Returns the outcome and whether the call must have left the cache unchanged even if it
/// succeeded.
fn apply<'a, A: PageAllocator<'a>>(
    cache: &mut KvCache<'a, A>,
    m: &mut Model,
    call: Call,
) -> Result<(Result<(), Error>, bool), TestCaseError> {
    let p = m.p;
    let outcome = match call {
        Call::Create(script) => {
            let expect = if m.seqs.len() == m.max_seqs {
                Err(Error::TooManySequences)
            } else {
                Ok(())
            };
            let got = cache.create_sequence(SeqMode::Paged);
            prop_assert_eq!(got.map(drop), expect);
            if let Ok(id) = got {
                prop_assert!(!m.issued.contains(&id), "handle {:?} issued twice", id);
                m.issued.push(id);
                let table = Vec::new();
                m.seqs.push(MSeq {
                    id,
                    script,
                    len: 0,
                    table,
                    prompt: 0,
                });
            }
            got.map(drop)
        }

        Call::Free(id) => {
            let s = m.find_seq(id);
            let got = cache.free_sequence(id);
            prop_assert_eq!(got, s.map(drop).ok_or(Error::UnknownSequence));
            if let Some(s) = s {
                // Pages are released last first.
                for page in m.seqs.remove(s).table.into_iter().rev() {
                    m.release(page);
                }
            }
            got
        }

        Call::Reserve(id, n) => {
            let s = m.find_seq(id);
            let expect = s.map_or(Err(Error::UnknownSequence), |s| {
                let seq = &m.seqs[s];
                let new_len = seq
                    .len
                    .checked_add(n)
                    .filter(|&l| l <= m.max_seq_tokens)
                    .ok_or(Error::SequenceFull)?;
                let need = (new_len as usize).div_ceil(p);
                let copy = n > 0 && m.needs_copy(s, seq.len as usize / p);
                let new = need.saturating_sub(seq.table.len());
                if need > m.table_len || new + usize::from(copy) > m.available() {
                    return Err(Error::OutOfPages);
                }
                Ok(seq.len)
            });
            let got = cache.reserve(id, n);
            prop_assert_eq!(got, expect);
            if let (Ok(_), Some(s)) = (got, s) {
                let real = table_of(cache, id);
                let len = m.seqs[s].len;
                // The shared or published tail page is copied first, then new pages taken.
                if n > 0 && m.needs_copy(s, len as usize / p) {
                    m.copy_entry(s, len as usize / p, real[len as usize / p])?;
                }
                for &page in &real[m.seqs[s].table.len()..] {
                    let page = m.take(page)?;
                    m.seqs[s].table.push(page);
                }
                m.seqs[s].len += n;
            }
            got.map(drop)
        }

        Call::Write(id, start, n, layers) => {
            let s = m.find_seq(id);
            let script = s.map_or(0, |s| m.seqs[s].script);
            // The pages written (none for no rows).
            let pages = match n {
                0 => 0..0,
                _ => start as usize / p..(start as usize + n).div_ceil(p),
            };
            let expect = match (s, layers) {
                (None, _) => Err(Error::UnknownSequence),
                (_, Layers::One(layer, _)) if layer >= LAYERS => Err(Error::LayerOutOfRange),
                (Some(s), _) if start + n as u32 > m.seqs[s].len => Err(Error::PositionOutOfRange),
                (Some(s), _) => {
                    let copies = pages.clone().filter(|&i| m.needs_copy(s, i)).count();
                    if copies > m.available() {
                        Err(Error::OutOfPages)
                    } else {
                        Ok(())
                    }
                }
            };
            let got = match layers {
                Layers::One(layer, kv) => {
                    cache.write(id, layer, kv, start, &rows(script, layer, kv, start, n))
                }
                Layers::All => (0..LAYERS).try_for_each(|layer| {
                    let k = rows(script, layer, Kv::K, start, n);
                    let v = rows(script, layer, Kv::V, start, n);
                    let got = cache.write_kv(id, layer, start, &k, &v);
                    // Only the first layer's call can fail (it copies the pages).
                    assert!(
                        layer == 0 || got.is_ok(),
                        "write_kv of layer {layer}: {got:?}"
                    );
                    got
                }),
            };
            prop_assert_eq!(got, expect);
            if let (Ok(()), Some(s)) = (got, s) {
                let real = table_of(cache, id);
                for i in pages {
                    if m.needs_copy(s, i) {
                        m.copy_entry(s, i, real[i])?;
                    }
                }
                let written: &[(u16, Kv)] = match layers {
                    Layers::One(layer, kv) => &[(layer, kv)],
                    Layers::All => &[(0, Kv::K), (0, Kv::V), (1, Kv::K), (1, Kv::V)],
                };
                for pos in start as usize..start as usize + n {
                    let page = m.seqs[s].table[pos / p] as usize;
                    for &(layer, kv) in written {
                        let row = (usize::from(layer) * 2 + kv_index(kv)) * p + pos % p;
                        m.pages[page].rows[row] = Some(token(script, pos));
                    }
                }
            }
            got
        }

        Call::Commit(id, prompt) => {
            let s = m.find_seq(id);
            let tokens = prompt.tokens();
            let expect = match s {
                None => Err(Error::UnknownSequence),
                Some(s) if prompt.len > m.seqs[s].len as usize => Err(Error::PromptMismatch),
                Some(s) => m.publish(s, &tokens, false)?,
            };
            let got = cache.commit_prompt(id, &tokens);
            prop_assert_eq!(got, expect);
            if let (Ok(published), Some(s)) = (got, s) {
                prop_assert_eq!(m.publish(s, &tokens, true)?, Ok(published));
                m.seqs[s].prompt = prompt.len as u32;
            }
            got.map(drop)
        }

        Call::Lookup(prompt) => {
            let tokens = prompt.tokens();
            let (expect, last) = m.lookup(&tokens)?;
            let hit = cache.lookup(&tokens);
            let got = hit.map(|h| (h.tokens, h.pages, h.matched));
            prop_assert_eq!(got, Ok(expect), "lookup of {} tokens", tokens.len());
            if let Ok(hit) = hit {
                if m.hits.len() == KEPT_HITS {
                    m.hits.remove(0);
                }
                m.hits.push(StoredHit { hit, last, prompt });
            }
            return Ok((hit.map(drop), true));
        }

        Call::Attach(id, hit, last, prompt) => {
            let s = m.find_seq(id);
            let tokens = prompt.tokens();
            let pages = usize::from(hit.pages);
            let found = m.walk(&tokens, pages)?;
            let expect = match s {
                None => Err(Error::UnknownSequence),
                Some(s) if m.seqs[s].len != 0 => Err(Error::SequenceNotEmpty),
                Some(_) if pages == 0 => Ok(0),
                Some(_)
                    if pages > m.table_len
                        || pages * p >= tokens.len()
                        || hit.tokens as usize != pages * p
                        || found.len() != pages
                        || m.reg(found[pages - 1]) != last =>
                {
                    Err(Error::StaleHit)
                }
                Some(_) => Ok(hit.tokens),
            };
            let got = cache.attach(id, &hit, &tokens);
            prop_assert_eq!(got, expect);
            match (got, s) {
                (Ok(0), _) => return Ok((Ok(()), true)),
                (Ok(t), Some(s)) => {
                    // The hit's pages, shared (cached ones revived); rows are checked by `check`.
                    for &page in &found {
                        m.retain(page);
                    }
                    let seq = &mut m.seqs[s];
                    (seq.table, seq.len, seq.prompt, seq.script) = (found, t, t, prompt.script);
                }
                _ => {}
            }
            got.map(drop)
        }

        Call::Fork(id) => {
            let s = m.find_seq(id);
            let expect = s.map_or(Err(Error::UnknownSequence), |s| {
                let seq = &m.seqs[s];
                if m.seqs.len() == m.max_seqs {
                    Err(Error::TooManySequences)
                } else if seq.len as usize % p != 0 && m.available() == 0 {
                    Err(Error::OutOfPages)
                } else {
                    Ok(())
                }
            });
            let got = cache.fork(id);
            prop_assert_eq!(got.map(drop), expect);
            if let (Ok(child), Some(s)) = (got, s) {
                let parent = m.seqs[s].clone();
                let full = parent.len as usize / p;
                // Full pages shared, a partial tail page copied.
                for &page in &parent.table[..full] {
                    m.retain(page);
                }
                let mut table = parent.table[..full].to_vec();
                if parent.table.len() > full {
                    let copy = m.take(table_of(cache, child)[full])?;
                    let from = parent.table[full] as usize;
                    m.pages[copy as usize].rows = m.pages[from].rows.clone();
                    table.push(copy);
                }
                prop_assert!(
                    !m.issued.contains(&child),
                    "handle {:?} issued twice",
                    child
                );
                m.issued.push(child);
                m.seqs.push(MSeq {
                    id: child,
                    table,
                    ..parent
                });
            }
            got.map(drop)
        }

        Call::Truncate(id, to) => {
            let s = m.find_seq(id);
            let expect = match s {
                None => Err(Error::UnknownSequence),
                Some(s) if to > m.seqs[s].len => Err(Error::TruncateBeyondLength),
                Some(_) => Ok(()),
            };
            let got = cache.truncate(id, to);
            prop_assert_eq!(got, expect);
            if let (Ok(()), Some(s)) = (got, s) {
                let keep = (to as usize).div_ceil(p);
                let released = m.seqs[s].table.split_off(keep);
                for page in released.into_iter().rev() {
                    m.release(page);
                }
                let seq = &mut m.seqs[s];
                seq.len = to;
                seq.prompt = seq.prompt.min(to);
            }
            got
        }

        Call::SetNamespace(ns) => {
            cache.set_namespace(ns);
            m.namespace = ns;
            Ok(())
        }
    };
    Ok((outcome, false))
}

// ---------------------------------------------------------------------------------------------
// Checks.
// ---------------------------------------------------------------------------------------------

/// Everything a failing call (or a lookup) must leave unchanged.
#[derive(Debug, PartialEq)]
struct Snapshot {
    stats: Stats,
    seqs: Vec<(Result<SeqInfo, Error>, Vec<PageId>)>,
    states: Vec<(Option<PageState>, bool)>,
    lru: Vec<PageId>,
    free: Vec<PageId>,
}

impl Snapshot {
    fn take<'a, A: PageAllocator<'a>>(cache: &KvCache<'a, A>, m: &Model) -> Self {
        let n = m.pages.len() as PageId;
        let pool = cache.pool();
        let (mut lru, mut free) = (Vec::new(), Vec::new());
        pool.for_each_cached(|p| lru.push(p));
        pool.for_each_free(|p| free.push(p));
        free.sort_unstable();
        Snapshot {
            stats: cache.stats(),
            seqs: (m.issued.iter())
                .map(|&id| (cache.sequence(id), table_of(cache, id)))
                .collect(),
            states: (0..=n)
                .map(|p| (cache.page_state(p), pool.is_registered(p)))
                .collect(),
            lru,
            free,
        }
    }
}

/// Checks the whole cache against the model.
fn check<'a, A: PageAllocator<'a>>(cache: &KvCache<'a, A>, m: &Model) -> Result<(), TestCaseError> {
    let mut scratch = [0u16; MAX_POOL];
    let verdict = cache.check_invariants(&mut scratch);
    prop_assert!(verdict.is_ok(), "check_invariants: {:?}", verdict);
    let p = m.p;

    // Sequences, page tables, and every row whose token the model knows.
    let mut refs = vec![0u16; m.pages.len()];
    let mut out = [0f32; MAX_TOKENS as usize * ROW];
    for s in &m.seqs {
        let info = SeqInfo {
            len: s.len,
            pages: s.table.len() as u16,
            capacity: (s.table.len() * p) as u32,
            mode: SeqMode::Paged,
            prompt: s.prompt,
        };
        prop_assert_eq!(cache.sequence(s.id), Ok(info), "sequence {:?}", s.id);
        let table = table_of(cache, s.id);
        prop_assert_eq!(&table, &s.table, "page table of {:?}", s.id);
        for &page in &s.table {
            refs[page as usize] += 1;
        }
        for layer in 0..LAYERS {
            for kv in KVS {
                let buf = &mut out[..s.len as usize * ROW];
                prop_assert_eq!(cache.read(s.id, layer, kv, 0, buf), Ok(()));
                for (pos, row) in buf.chunks_exact(ROW).enumerate() {
                    let page = &m.pages[s.table[pos / p] as usize];
                    let at = (usize::from(layer) * 2 + kv_index(kv)) * p + pos % p;
                    if let Some(t) = page.rows[at] {
                        let want: Vec<f32> = (0..ROW).map(|j| value(t, layer, kv, j)).collect();
                        let (id, at) = (s.id, format!("layer {layer} {kv:?} position {pos}"));
                        prop_assert!(row == want, "{id:?} {at}: {row:?}, want token {t}'s");
                    }
                }
            }
        }
    }

    // Page states and registrations, the LRU order, the free set, the counts.
    let model_refs: Vec<u16> = m.pages.iter().map(|pg| pg.refs).collect();
    prop_assert_eq!(&model_refs, &refs, "model refcounts vs page tables");
    let n = m.pages.len() as PageId;
    let states = (0..n).map(|pg| (Some(m.state(pg)), m.pages[pg as usize].entry.is_some()));
    let snap = Snapshot::take(cache, m);
    prop_assert_eq!(
        &snap.states,
        &states.chain([(None, false)]).collect::<Vec<_>>()
    );
    prop_assert_eq!(
        &snap.lru,
        &Vec::from(m.lru.clone()),
        "LRU list of cached pages"
    );
    let free = m.free_pages();
    prop_assert_eq!(&snap.free, &free, "free pages");
    let used = refs.iter().filter(|&&r| r > 0).count() as u16;
    let want = Stats {
        pages_total: n,
        pages_free: free.len() as u16,
        pages_used: used,
        pages_cached: m.lru.len() as u16,
        pages_registered: m.pages.iter().filter(|pg| pg.entry.is_some()).count() as u16,
        evictions: m.evictions,
        sequences: m.seqs.len() as u16,
        tokens: m.seqs.iter().map(|s| u64::from(s.len)).sum(),
        bytes_used: usize::from(used) * snap.stats.page_bytes,
        ..snap.stats
    };
    prop_assert_eq!(snap.stats, want);
    prop_assert_eq!(cache.pool().evictions(), m.evictions);

    // The index, through the longest prompt of every script.
    for script in 0..SCRIPTS {
        let prompt = tokens(script, m.max_seq_tokens as usize);
        let got = cache
            .lookup(&prompt)
            .map(|h| (h.tokens, h.pages, h.matched));
        prop_assert_eq!(got, Ok(m.lookup(&prompt)?.0), "lookup of script {}", script);
    }

    // Stale handles stay dead.
    for &id in &m.issued {
        if m.find_seq(id).is_none() {
            prop_assert_eq!(cache.seq_len(id), Err(Error::UnknownSequence));
        }
    }
    Ok(())
}
