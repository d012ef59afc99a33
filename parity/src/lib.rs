//! Deterministic attention parity cases, written once in `no_std` Rust: host-tests runs them
//! against a dense reference, board firmware runs the very same cases and prints their digests.
//!
//! Every [`Case`] is a fixed script over a tiny SmolLM2-shaped cache ([`SHAPE`], [`Q_HEADS`] query
//! heads, [`PAGE_TOKENS`]-token pages, prefill chunks of [`CHUNK`]): it creates sequences, writes
//! K/V rows from a small xorshift generator, prefills in [`plan_prefill`] chunks, decodes, forks,
//! truncates, reuses prefixes, and runs [`KvCache::attention`] over the pages. [`run`] digests all
//! attention outputs with CRC-32 (ISO-HDLC, the zlib one) over their little-endian bytes, in the
//! order they are produced. The inputs are generated with integer arithmetic and exactly
//! representable f32 steps, and the kernels are deterministic, so a host and a Cortex-M print the
//! same line for every case:
//!
//! ```text
//! case paged_f32 crc32 1a2b3c4d
//! ```
//!
//! Memory is the caller's ([`Arenas`], sizes in [`DATA_BYTES`], [`META_BYTES`], [`WORK_F32`], so
//! firmware can use statics); nothing large lives on the stack. The sink of [`run`] receives every
//! step as an [`Event`] with the original f32 rows and queries, from which a host rebuilds a dense
//! model of every sequence and checks each output block.
//!
//! ```
//! use core::mem::MaybeUninit;
//! use edgekv_parity::{Arenas, Case, DATA_BYTES, Event, META_BYTES, WORK_F32, run};
//!
//! let mut data = vec![MaybeUninit::<u8>::uninit(); DATA_BYTES];
//! let mut meta = vec![MaybeUninit::<u8>::uninit(); META_BYTES];
//! let mut work = vec![0f32; WORK_F32];
//! let mut arenas = Arenas { data: &mut data, meta: &mut meta, work: &mut work };
//! let mut rows = 0;
//! let digest = run(Case::OnePass, &mut arenas, &mut |e: Event<'_>| {
//!     if let Event::Attention { out, .. } = e {
//!         rows += out.len() / edgekv_parity::Q_ROW;
//!     }
//! })?;
//! assert_eq!(rows, 2 * 48); // two layers, 48 query rows each
//! assert_eq!(digest.name(), "prefill_one_pass");
//! println!("{digest}");
//! # Ok::<(), edgekv_parity::Error>(())
//! ```
#![no_std]

use core::fmt;
use core::mem::MaybeUninit;
use core::ops::Range;

pub mod snapshot;

use crc::{CRC_32_ISO_HDLC, Crc};
use edgekv::attention::{AttentionParams, scratch_len};
use edgekv::prefix::plan_prefill;
use edgekv::{
    CacheConfig, ElementFormat, FreeList, KvCache, META_ALIGN, PageAllocator, SeqId, SeqMode, Shape,
};

// ---------------------------------------------------------------------------------------------
// Shape and memory
// ---------------------------------------------------------------------------------------------

/// The attention shape of every case (SmolLM2-135M's heads and head_dim, two layers).
pub const SHAPE: Shape = Shape {
    layers: 2,
    kv_heads: 3,
    head_dim: 64,
};
/// Query heads (grouped-query attention, three per KV head).
pub const Q_HEADS: u16 = 9;
/// Tokens per page.
pub const PAGE_TOKENS: u16 = 16;
/// Prefill chunk size C in tokens.
pub const CHUNK: u16 = 32;
/// Elements of one token's K (or V) row: `kv_heads × head_dim`.
pub const KV_ROW: usize = SHAPE.kv_heads as usize * SHAPE.head_dim as usize;
/// Elements of one query row (and output row): `q_heads × head_dim`.
pub const Q_ROW: usize = Q_HEADS as usize * SHAPE.head_dim as usize;
/// The most query rows any case passes to one attention call.
pub const MAX_ROWS: usize = 48;
/// The longest sequence of any case, in tokens.
pub const MAX_TOKENS: u32 = 160;
/// Sequence slots of every case's cache.
pub const MAX_SEQS: u16 = 3;
/// Alignment the data arena is cut to (the caches' `align`).
pub const DATA_ALIGN: usize = 64;

/// The allocator of every case's cache.
type Alloc = FreeList<'static>;
const BITS: usize = <Alloc as PageAllocator<'static>>::META_BITS_PER_PAGE;

/// Bytes of the data arena each case's cache gets: ten f32 pages, i.e. one f32 sequence of
/// [`MAX_TOKENS`] (more pages for narrower formats).
pub const DATA_USED: usize = match base(ElementFormat::F32, ElementFormat::F32)
    .plan_pages(MAX_TOKENS as usize / PAGE_TOKENS as usize, BITS)
{
    Ok(p) => p.data_bytes,
    Err(_) => panic!("f32 plan"),
};
/// Bytes the caller's data arena needs ([`DATA_USED`] plus room to align its start).
pub const DATA_BYTES: usize = DATA_USED + DATA_ALIGN;
/// Bytes the caller's metadata arena needs (the largest plan of any case, plus room to align).
pub const META_BYTES: usize = max_meta() + META_ALIGN;
/// Scratch f32s of one attention call.
pub const SCRATCH_F32: usize = scratch_len(Q_HEADS, PAGE_TOKENS);
/// f32s of the caller's work buffer: queries and outputs of [`MAX_ROWS`] rows, one K and one V
/// row, attention scratch.
pub const WORK_F32: usize = 2 * MAX_ROWS * Q_ROW + 2 * KV_ROW + SCRATCH_F32;

const fn max_meta() -> usize {
    let mut i = 0;
    let mut max = 0;
    while i < CASES.len() {
        let total = match CASES[i].config().plan(DATA_USED, BITS) {
            Ok(p) => p.meta.total,
            Err(_) => panic!("case plan"),
        };
        if total > max {
            max = total;
        }
        i += 1;
    }
    max
}

const fn base(k: ElementFormat, v: ElementFormat) -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(PAGE_TOKENS)
        .with_chunk_tokens(CHUNK)
        .with_formats(k, v)
        .with_align(DATA_ALIGN)
        .with_sequences(MAX_SEQS, MAX_TOKENS)
}

/// Caller-supplied memory of a run: any alignment (the run cuts aligned parts out of `data` and
/// `meta`), lengths at least [`DATA_BYTES`], [`META_BYTES`] and [`WORK_F32`]. Every run starts
/// from a fresh cache, so the arenas may be reused from case to case.
pub struct Arenas<'a> {
    /// The cache's data arena (pages).
    pub data: &'a mut [MaybeUninit<u8>],
    /// The cache's metadata arena.
    pub meta: &'a mut [MaybeUninit<u8>],
    /// Queries, outputs, rows and scratch.
    pub work: &'a mut [f32],
}

// ---------------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------------

/// A named, fixed parity case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Case {
    /// f32 pages: prefill 144 tokens in chunks of 32, decode 16 more; every output.
    PagedF32,
    /// As [`PagedF32`](Case::PagedF32) (same inputs) over f16 K and V pages.
    PagedF16,
    /// Same inputs over bf16 pages.
    PagedBf16,
    /// Same inputs over int8 pages, groups of 32 (ggml Q8_0).
    PagedQ8_0,
    /// Same inputs over int8 pages, one scale per token and head (group = head_dim).
    PagedInt8Head,
    /// Same inputs over FP8 E4M3 tile pages (`dv` 48, tiles of 16, f32 scales and tail).
    PagedFp8Tile,
    /// 48 tokens (K int8 Q8_0, V f16), prefilled in chunks of 32 with each chunk's queries
    /// attended right after its rows are written, layer by layer.
    Chunked,
    /// The inputs of [`Chunked`](Case::Chunked), all rows written first and all 48 queries
    /// attended in one call per layer: the same digest.
    OnePass,
    /// Prefix reuse (f16 pages): sequence A writes a 120-token prompt and publishes it
    /// ([`commit_prompt`](KvCache::commit_prompt)); sequence B's 150-token prompt shares A's
    /// first 100 tokens, attaches the 96-token hit ([`lookup`](KvCache::lookup),
    /// [`attach`](KvCache::attach)), prefills the rest in [`plan_prefill`] chunks and decodes 8
    /// tokens. Rows and queries are functions of the token prefix, as a model's are. Outputs of
    /// B's positions from 96 on.
    PrefixWarm,
    /// B of [`PrefixWarm`](Case::PrefixWarm) prefilled cold in a fresh cache: the same outputs
    /// and digest.
    PrefixCold,
    /// f32: a 56-token prefill, [`fork`](KvCache::fork), then 40 decode steps on each branch with
    /// different rows and queries, interleaved.
    ForkDiverge,
    /// f32: prefill 100 tokens, [`truncate`](KvCache::truncate) to 70, re-append 60 different
    /// tokens in chunks, decode 6.
    TruncateReappend,
    /// f32: the inputs of [`PagedF32`](Case::PagedF32) under a sliding window of 40 with 4
    /// attention sinks (as a mask; no page is released).
    WindowSinks,
    /// [`WindowSinks`](Case::WindowSinks) releasing the pages no later query sees
    /// ([`slide`](KvCache::slide) after every block): the same digest.
    WindowSlide,
    /// K int8 Q8_0, V f16: the 48-token system prompt of [`snapshot`] prefilled cold, then the 8
    /// tokens after it decoded; their outputs.
    SnapshotCold,
    /// The same 8 decode steps after restoring the system prompt from a snapshot image
    /// ([`snapshot::decode_after_image`]): the same digest. Not in [`CASES`] (it needs the
    /// image); [`run`] refuses it with [`Error::NeedsImage`].
    SnapshotRestored,
}

/// Every case, in the order firmware runs and prints them.
pub const CASES: &[Case] = &[
    Case::PagedF32,
    Case::PagedF16,
    Case::PagedBf16,
    Case::PagedQ8_0,
    Case::PagedInt8Head,
    Case::PagedFp8Tile,
    Case::Chunked,
    Case::OnePass,
    Case::PrefixWarm,
    Case::PrefixCold,
    Case::ForkDiverge,
    Case::TruncateReappend,
    Case::WindowSinks,
    Case::WindowSlide,
    Case::SnapshotCold,
];

/// The FP8 tile format of [`Case::PagedFp8Tile`].
pub const FP8_TILE: ElementFormat = ElementFormat::Fp8Tile {
    dv: 48,
    tile: 16,
    bf16: false,
};

/// Sinks and window of [`Case::WindowSinks`].
pub const WINDOW: (u32, u32) = (4, 40);

/// Bytes of a [`Digest`]'s fixed-size name.
pub const NAME_LEN: usize = 24;

// Every name fits a digest's name field.
const _: () = {
    let mut i = 0;
    while i < CASES.len() {
        assert!(CASES[i].name().len() <= NAME_LEN);
        i += 1;
    }
};

impl Case {
    /// The case's stable name (lowercase ASCII, at most [`NAME_LEN`] bytes).
    pub const fn name(self) -> &'static str {
        match self {
            Case::PagedF32 => "paged_f32",
            Case::PagedF16 => "paged_f16",
            Case::PagedBf16 => "paged_bf16",
            Case::PagedQ8_0 => "paged_q8_0",
            Case::PagedInt8Head => "paged_int8_head",
            Case::PagedFp8Tile => "paged_fp8_tile",
            Case::Chunked => "prefill_chunked",
            Case::OnePass => "prefill_one_pass",
            Case::PrefixWarm => "prefix_warm",
            Case::PrefixCold => "prefix_cold",
            Case::ForkDiverge => "fork_diverge",
            Case::TruncateReappend => "truncate_reappend",
            Case::WindowSinks => "window_sinks",
            Case::WindowSlide => "window_slide",
            Case::SnapshotCold => "snapshot_cold",
            Case::SnapshotRestored => "snapshot_restored",
        }
    }

    /// The case with this name.
    pub fn from_name(name: &str) -> Option<Case> {
        CASES.iter().copied().find(|c| c.name() == name)
    }

    /// The K and V page formats.
    pub const fn formats(self) -> (ElementFormat, ElementFormat) {
        let f = match self {
            Case::PagedF16 | Case::PrefixWarm | Case::PrefixCold => ElementFormat::F16,
            Case::PagedBf16 => ElementFormat::Bf16,
            Case::PagedQ8_0 => ElementFormat::Q8_0,
            Case::PagedInt8Head => ElementFormat::Int8 {
                group: SHAPE.head_dim,
            },
            Case::PagedFp8Tile => FP8_TILE,
            Case::Chunked | Case::OnePass | Case::SnapshotCold | Case::SnapshotRestored => {
                return (ElementFormat::Q8_0, ElementFormat::F16);
            }
            _ => ElementFormat::F32,
        };
        (f, f)
    }

    /// The cache configuration the case runs on.
    pub const fn config(self) -> CacheConfig {
        let (k, v) = self.formats();
        base(k, v)
    }

    /// The attention parameters of every call of the case.
    pub fn params(self) -> AttentionParams {
        let p = AttentionParams::new(SHAPE, Q_HEADS);
        match self {
            Case::WindowSinks | Case::WindowSlide => p.with_window(WINDOW.0, WINDOW.1),
            _ => p,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Events, digests, errors
// ---------------------------------------------------------------------------------------------

/// One step of a case, as the sink of [`run`] sees it. Sequences are named by small labels
/// (0, 1, …) local to the case. Rows and queries are the original f32 values, before any page
/// format rounds or quantizes them.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// Sequence `seq` now holds these K and V rows of `layer` at positions
    /// `[start, start + k.len() / KV_ROW)` (written, or attached from the prefix index).
    Rows {
        /// Sequence label.
        seq: u8,
        /// Layer.
        layer: u16,
        /// First position.
        start: u32,
        /// K rows, `[n][kv_heads][head_dim]`.
        k: &'a [f32],
        /// V rows, `[n][kv_heads][head_dim]`.
        v: &'a [f32],
    },
    /// Sequence `child` was forked from `parent` (same positions and rows).
    Fork {
        /// Label of the forked sequence.
        parent: u8,
        /// Label of the new sequence.
        child: u8,
    },
    /// Sequence `seq` was truncated to `len` positions.
    Truncate {
        /// Sequence label.
        seq: u8,
        /// New length.
        len: u32,
    },
    /// Sequence `seq` released the pages no query at a position `≥ from` sees
    /// ([`KvCache::slide`]); the cache now uses `pages_used` pages.
    Slide {
        /// Sequence label.
        seq: u8,
        /// The position from which on queries are still to come.
        from: u32,
        /// Pages released by this call.
        released: u16,
        /// Pages in use in the whole cache afterwards.
        pages_used: u16,
    },
    /// Attention of queries at positions `[start, start + q.len() / Q_ROW)` of `seq` in `layer`;
    /// `out` is part of the digest.
    Attention {
        /// Sequence label.
        seq: u8,
        /// Layer.
        layer: u16,
        /// Position of the first query row.
        start: u32,
        /// The parameters of the call.
        params: AttentionParams,
        /// Query rows, `[n][q_heads][head_dim]`.
        q: &'a [f32],
        /// Output rows, `[n][q_heads][head_dim]`.
        out: &'a [f32],
    },
}

static CRC32: Crc<u32> = Crc::<u32>::new(&CRC_32_ISO_HDLC);

/// CRC-32 (ISO-HDLC) of f32 values as little-endian bytes, fed in any split.
pub struct OutputCrc {
    digest: crc::Digest<'static, u32>,
    values: u32,
}

impl OutputCrc {
    /// An empty digest.
    pub fn new() -> Self {
        OutputCrc {
            digest: CRC32.digest(),
            values: 0,
        }
    }

    /// Adds `values` (little-endian bytes of each).
    pub fn update(&mut self, values: &[f32]) {
        let mut bytes = [0u8; 256];
        for chunk in values.chunks(64) {
            for (b, x) in bytes.chunks_exact_mut(4).zip(chunk) {
                b.copy_from_slice(&x.to_le_bytes());
            }
            self.digest.update(&bytes[..4 * chunk.len()]);
        }
        self.values = self.values.wrapping_add(values.len() as u32);
    }

    /// Values added so far.
    pub fn values(&self) -> u32 {
        self.values
    }

    /// The CRC-32 of everything added.
    pub fn finish(self) -> u32 {
        self.digest.finalize()
    }
}

impl Default for OutputCrc {
    fn default() -> Self {
        Self::new()
    }
}

/// The result of a case: its name (fixed size, NUL-padded), the CRC-32 of its outputs and how
/// many f32 outputs it produced. `Display` gives the line hosts and boards compare:
/// `case <name> crc32 <8 hex digits>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest {
    /// The case.
    pub case: Case,
    /// [`Case::name`], NUL-padded.
    pub name: [u8; NAME_LEN],
    /// CRC-32 (ISO-HDLC) of every attention output f32, little-endian, in order.
    pub crc32: u32,
    /// f32 outputs digested.
    pub outputs: u32,
}

impl Digest {
    fn new(case: Case, crc32: u32, outputs: u32) -> Self {
        let mut name = [0u8; NAME_LEN];
        let n = case.name().as_bytes();
        name[..n.len()].copy_from_slice(n);
        Digest {
            case,
            name,
            crc32,
            outputs,
        }
    }

    /// The name without padding.
    pub fn name(&self) -> &str {
        let len = self.name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        core::str::from_utf8(&self.name[..len]).unwrap_or("?")
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "case {} crc32 {:08x}", self.name(), self.crc32)
    }
}

/// Why a case failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A cache call failed.
    Cache(edgekv::Error),
    /// The work buffer is shorter than [`WORK_F32`].
    WorkTooSmall,
    /// A cache call succeeded with another result than the script expects (e.g. the prefix hit
    /// has another length).
    Unexpected(&'static str),
    /// [`Case::SnapshotRestored`] runs only through [`snapshot::decode_after_image`].
    NeedsImage,
}

impl From<edgekv::Error> for Error {
    fn from(e: edgekv::Error) -> Self {
        Error::Cache(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Cache(e) => write!(f, "cache: {e}"),
            Error::WorkTooSmall => f.write_str("work buffer shorter than WORK_F32"),
            Error::Unexpected(what) => write!(f, "unexpected result: {what}"),
            Error::NeedsImage => f.write_str("this case needs a snapshot image"),
        }
    }
}

impl core::error::Error for Error {}

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

/// splitmix64's finalizer: a seed mixer.
const fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// xorshift64 (13, 7, 17).
struct Rng(u64);

impl Rng {
    const fn new(seed: u64) -> Self {
        Rng(mix(seed) | 1)
    }

    const fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in [0, 1) on a 2^-24 grid (exact in f32).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 * (1.0 / 16_777_216.0)
    }

    /// Uniform in [-1, 1) on a 2^-23 grid (exact in f32).
    fn signed(&mut self) -> f32 {
        2.0 * self.unit() - 1.0
    }
}

/// K channels (of each head) scaled by [`K_OUTLIER`], as LLM keys have a few large channels.
pub const K_OUTLIERS: [usize; 3] = [5, 22, 47];
/// Factor of the K outlier channels.
pub const K_OUTLIER: f32 = 8.0;
/// The V channel (of each head) scaled by [`V_OUTLIER`].
pub const V_OUTLIER_CHANNEL: usize = 11;
/// Factor of the V outlier channel.
pub const V_OUTLIER: f32 = 4.0;

/// Where a sequence's rows and queries come from.
#[derive(Clone, Copy)]
enum Src {
    /// A numbered stream of pseudo-random rows.
    Stream(u64),
    /// Rows and queries as functions of the token prefix `tokens[..=pos]` (FNV-1a hash).
    Tokens(&'static [u32]),
}

const KIND_KV: u64 = 1;
const KIND_Q: u64 = 2;

impl Src {
    fn seed(self, layer: u16, pos: u32, kind: u64) -> u64 {
        let word = match self {
            Src::Stream(s) => mix(s),
            Src::Tokens(tokens) => tokens
                .iter()
                .take(pos as usize + 1)
                .fold(0xcbf2_9ce4_8422_2325u64, |h, &t| {
                    (h ^ t as u64).wrapping_mul(0x0100_0000_01b3)
                }),
        };
        mix(mix(word ^ layer as u64) ^ ((pos as u64) << 8 | kind))
    }
}

/// One token's K and V rows: per head a row scale in [0.25, 2), values uniform in ±scale, K
/// channels [`K_OUTLIERS`] × [`K_OUTLIER`], V channel [`V_OUTLIER_CHANNEL`] × [`V_OUTLIER`].
fn kv_rows(seed: u64, k: &mut [f32], v: &mut [f32]) {
    let mut r = Rng::new(seed);
    let hd = SHAPE.head_dim as usize;
    for (kh, vh) in k.chunks_exact_mut(hd).zip(v.chunks_exact_mut(hd)) {
        let sk = 0.25 + 1.75 * r.unit();
        let sv = 0.25 + 1.75 * r.unit();
        for (i, (x, y)) in kh.iter_mut().zip(vh.iter_mut()).enumerate() {
            *x = r.signed() * sk;
            if K_OUTLIERS.contains(&i) {
                *x *= K_OUTLIER;
            }
            *y = r.signed() * sv;
            if i == V_OUTLIER_CHANNEL {
                *y *= V_OUTLIER;
            }
        }
    }
}

/// One query row: uniform in [-2, 2).
fn query_row(seed: u64, q: &mut [f32]) {
    let mut r = Rng::new(seed);
    for x in q {
        *x = 2.0 * r.signed();
    }
}

const fn tokens<const N: usize>(seed: u64, prefix: &[u32]) -> [u32; N] {
    let mut out = [0u32; N];
    let mut r = Rng::new(seed);
    let mut i = 0;
    while i < N {
        out[i] = if i < prefix.len() {
            prefix[i]
        } else {
            (r.next() >> 40) as u32 % 49_152
        };
        i += 1;
    }
    out
}

/// Prompt length of sequence B in the prefix cases.
pub const PROMPT_B: usize = 150;
/// Tokens of sequence B (prompt and 8 decoded tokens).
pub const TOKENS_B: [u32; 158] = tokens(0xB, &[]);
/// Leading tokens A shares with B.
pub const SHARED: usize = 100;
/// Sequence A's prompt: B's first [`SHARED`] tokens, then 20 others.
pub const TOKENS_A: [u32; 120] = tokens(0xA, TOKENS_B.split_at(SHARED).0);
/// Positions of B reused from A (whole chunks of published pages, below B's prompt length).
pub const REUSED: u32 = 96;

// ---------------------------------------------------------------------------------------------
// Runner
// ---------------------------------------------------------------------------------------------

struct Runner<'r, F> {
    cache: KvCache<'r, FreeList<'r>>,
    q: &'r mut [f32],
    out: &'r mut [f32],
    k: &'r mut [f32],
    v: &'r mut [f32],
    scratch: &'r mut [f32],
    crc: OutputCrc,
    params: AttentionParams,
    /// Release pages outside the window after every block.
    slide: bool,
    sink: &'r mut F,
}

/// How a block of positions is processed.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Write rows and attend their queries.
    WriteAttend,
    /// Write rows only.
    Write,
}

impl<F: FnMut(Event<'_>)> Runner<'_, F> {
    fn reserve(&mut self, seq: SeqId, positions: Range<u32>) -> Result<(), Error> {
        let first = self.cache.reserve(seq, positions.end - positions.start)?;
        if first != positions.start {
            return Err(Error::Unexpected("reserve position"));
        }
        Ok(())
    }

    /// Emits `Rows` for positions the cache holds already (attached), regenerating them.
    fn announce(&mut self, label: u8, layer: u16, positions: Range<u32>, src: Src) {
        for pos in positions {
            kv_rows(src.seed(layer, pos, KIND_KV), self.k, self.v);
            (self.sink)(Event::Rows {
                seq: label,
                layer,
                start: pos,
                k: self.k,
                v: self.v,
            });
        }
    }

    fn write(
        &mut self,
        seq: SeqId,
        label: u8,
        layer: u16,
        positions: Range<u32>,
        src: Src,
    ) -> Result<(), Error> {
        for pos in positions {
            kv_rows(src.seed(layer, pos, KIND_KV), self.k, self.v);
            self.cache.write_kv(seq, layer, pos, self.k, self.v)?;
            (self.sink)(Event::Rows {
                seq: label,
                layer,
                start: pos,
                k: self.k,
                v: self.v,
            });
        }
        Ok(())
    }

    fn attend(
        &mut self,
        seq: SeqId,
        label: u8,
        layer: u16,
        positions: Range<u32>,
        src: Src,
    ) -> Result<(), Error> {
        let n = (positions.end - positions.start) as usize;
        if n == 0 || n > MAX_ROWS {
            return Err(Error::Unexpected("attention block size"));
        }
        let q = &mut self.q[..n * Q_ROW];
        let out = &mut self.out[..n * Q_ROW];
        for (pos, row) in positions.clone().zip(q.chunks_exact_mut(Q_ROW)) {
            query_row(src.seed(layer, pos, KIND_Q), row);
        }
        self.cache.attention(
            seq,
            layer,
            positions.start,
            q,
            out,
            &self.params,
            self.scratch,
        )?;
        self.crc.update(out);
        (self.sink)(Event::Attention {
            seq: label,
            layer,
            start: positions.start,
            params: self.params,
            q,
            out,
        });
        Ok(())
    }

    /// Reserves a block, then per layer writes its rows and (unless `Write`) attends its queries.
    fn block(
        &mut self,
        seq: SeqId,
        label: u8,
        positions: Range<u32>,
        src: Src,
        mode: Mode,
    ) -> Result<(), Error> {
        self.reserve(seq, positions.clone())?;
        for layer in 0..SHAPE.layers {
            self.write(seq, label, layer, positions.clone(), src)?;
            if mode == Mode::WriteAttend {
                self.attend(seq, label, layer, positions.clone(), src)?;
            }
        }
        if let (true, Some(window)) = (self.slide, self.params.window) {
            let released = self.cache.slide(seq, &window, positions.end)?;
            (self.sink)(Event::Slide {
                seq: label,
                from: positions.end,
                released,
                pages_used: self.cache.stats().pages_used,
            });
        }
        Ok(())
    }

    /// Prefill of `[start, end)` in [`plan_prefill`] chunks.
    fn prefill(
        &mut self,
        seq: SeqId,
        label: u8,
        positions: Range<u32>,
        src: Src,
        mode: Mode,
    ) -> Result<(), Error> {
        for c in plan_prefill(positions.start, positions.end, CHUNK as u32) {
            self.block(seq, label, c, src, mode)?;
        }
        Ok(())
    }

    /// Decode steps: one position at a time.
    fn decode(
        &mut self,
        seq: SeqId,
        label: u8,
        positions: Range<u32>,
        src: Src,
    ) -> Result<(), Error> {
        for t in positions {
            self.block(seq, label, t..t + 1, src, Mode::WriteAttend)?;
        }
        Ok(())
    }

    fn new_seq(&mut self) -> Result<SeqId, Error> {
        Ok(self.cache.create_sequence(SeqMode::Paged)?)
    }

    fn script(&mut self, case: Case) -> Result<(), Error> {
        use Mode::{Write, WriteAttend};
        const PAGED: Src = Src::Stream(1);
        match case {
            Case::PagedF32
            | Case::PagedF16
            | Case::PagedBf16
            | Case::PagedQ8_0
            | Case::PagedInt8Head
            | Case::PagedFp8Tile
            | Case::WindowSinks
            | Case::WindowSlide => {
                let s = self.new_seq()?;
                self.prefill(s, 0, 0..144, PAGED, WriteAttend)?;
                self.decode(s, 0, 144..MAX_TOKENS, PAGED)?;
            }
            Case::Chunked => {
                let src = Src::Stream(2);
                let s = self.new_seq()?;
                // Layer by layer, so the outputs come in the order of the one-pass case.
                for layer in 0..SHAPE.layers {
                    for c in plan_prefill(0, MAX_ROWS as u32, CHUNK as u32) {
                        if layer == 0 {
                            self.reserve(s, c.clone())?;
                        }
                        self.write(s, 0, layer, c.clone(), src)?;
                        self.attend(s, 0, layer, c, src)?;
                    }
                }
            }
            Case::OnePass => {
                let src = Src::Stream(2);
                let s = self.new_seq()?;
                let all = 0..MAX_ROWS as u32;
                self.reserve(s, all.clone())?;
                for layer in 0..SHAPE.layers {
                    self.write(s, 0, layer, all.clone(), src)?;
                    self.attend(s, 0, layer, all.clone(), src)?;
                }
            }
            Case::PrefixWarm => {
                let (src_a, src_b) = (Src::Tokens(&TOKENS_A), Src::Tokens(&TOKENS_B));
                let a = self.new_seq()?;
                self.prefill(a, 0, 0..TOKENS_A.len() as u32, src_a, Write)?;
                self.cache.commit_prompt(a, &TOKENS_A)?;
                let prompt = &TOKENS_B[..PROMPT_B];
                let b = self.new_seq()?;
                let hit = self.cache.lookup(prompt)?;
                if self.cache.attach(b, &hit, prompt)? != REUSED {
                    return Err(Error::Unexpected("prefix hit length"));
                }
                for layer in 0..SHAPE.layers {
                    self.announce(1, layer, 0..REUSED, src_b);
                }
                self.prefill(b, 1, REUSED..PROMPT_B as u32, src_b, WriteAttend)?;
                self.decode(b, 1, PROMPT_B as u32..TOKENS_B.len() as u32, src_b)?;
            }
            Case::PrefixCold => {
                let src_b = Src::Tokens(&TOKENS_B);
                let b = self.new_seq()?;
                for c in plan_prefill(0, PROMPT_B as u32, CHUNK as u32) {
                    // Outputs below the reuse point are not part of the comparison.
                    let mode = if c.start >= REUSED {
                        WriteAttend
                    } else {
                        Write
                    };
                    self.block(b, 0, c, src_b, mode)?;
                }
                self.decode(b, 0, PROMPT_B as u32..TOKENS_B.len() as u32, src_b)?;
            }
            Case::ForkDiverge => {
                let s0 = self.new_seq()?;
                self.prefill(s0, 0, 0..56, Src::Stream(30), WriteAttend)?;
                let s1 = self.cache.fork(s0)?;
                (self.sink)(Event::Fork {
                    parent: 0,
                    child: 1,
                });
                for t in 56..96 {
                    self.block(s0, 0, t..t + 1, Src::Stream(31), WriteAttend)?;
                    self.block(s1, 1, t..t + 1, Src::Stream(32), WriteAttend)?;
                }
            }
            Case::TruncateReappend => {
                let s = self.new_seq()?;
                self.prefill(s, 0, 0..100, Src::Stream(40), WriteAttend)?;
                self.cache.truncate(s, 70)?;
                (self.sink)(Event::Truncate { seq: 0, len: 70 });
                self.prefill(s, 0, 70..130, Src::Stream(41), WriteAttend)?;
                self.decode(s, 0, 130..136, Src::Stream(41))?;
            }
            Case::SnapshotCold => {
                let src = Src::Tokens(&snapshot::SYSTEM_CHAT);
                let s = self.new_seq()?;
                let end = snapshot::SYSTEM_CHAT.len() as u32;
                self.prefill(s, 0, 0..snapshot::SYSTEM_TOKENS, src, Write)?;
                self.decode(s, 0, snapshot::SYSTEM_TOKENS..end, src)?;
            }
            Case::SnapshotRestored => return Err(Error::NeedsImage),
        }
        Ok(())
    }
}

/// Runs `case` in a fresh cache over `arenas`, feeding every step to `sink`, and returns the
/// digest of its attention outputs.
///
/// Errors: [`Error::Cache`] with [`ArenaTooSmall`](edgekv::Error::ArenaTooSmall) when `data` or
/// `meta` is shorter than [`DATA_BYTES`] / [`META_BYTES`]; [`Error::WorkTooSmall`];
/// [`Error::NeedsImage`] for [`Case::SnapshotRestored`]; any other error means the cache
/// misbehaved.
pub fn run<F: FnMut(Event<'_>)>(
    case: Case,
    arenas: &mut Arenas<'_>,
    sink: &mut F,
) -> Result<Digest, Error> {
    run_with(case, arenas, sink, |r| r.script(case))
}

/// Sets up a fresh cache and runner for `case` over `arenas`, runs `script` and digests its
/// attention outputs.
fn run_with<F: FnMut(Event<'_>)>(
    case: Case,
    arenas: &mut Arenas<'_>,
    sink: &mut F,
    script: impl FnOnce(&mut Runner<'_, F>) -> Result<(), Error>,
) -> Result<Digest, Error> {
    let cut = |buf: &mut [MaybeUninit<u8>], align: usize, len: usize| {
        let off = buf.as_ptr().align_offset(align);
        off.checked_add(len)
            .filter(|&end| end <= buf.len())
            .map(|end| off..end)
    };
    let too_small = Error::Cache(edgekv::Error::ArenaTooSmall);
    let data_range = cut(arenas.data, DATA_ALIGN, DATA_USED).ok_or(too_small)?;
    let plan = case.config().plan(DATA_USED, BITS)?;
    let meta_range = cut(arenas.meta, META_ALIGN, plan.meta.total).ok_or(too_small)?;
    if arenas.work.len() < WORK_F32 {
        return Err(Error::WorkTooSmall);
    }
    let (q, rest) = arenas.work.split_at_mut(MAX_ROWS * Q_ROW);
    let (out, rest) = rest.split_at_mut(MAX_ROWS * Q_ROW);
    let (k, rest) = rest.split_at_mut(KV_ROW);
    let (v, rest) = rest.split_at_mut(KV_ROW);
    let scratch = &mut rest[..SCRATCH_F32];
    let cache = KvCache::new(
        case.config(),
        &mut arenas.data[data_range],
        &mut arenas.meta[meta_range],
    )?;
    let mut runner = Runner {
        cache,
        q,
        out,
        k,
        v,
        scratch,
        crc: OutputCrc::new(),
        params: case.params(),
        slide: case == Case::WindowSlide,
        sink,
    };
    script(&mut runner)?;
    let outputs = runner.crc.values();
    Ok(Digest::new(case, runner.crc.finish(), outputs))
}
