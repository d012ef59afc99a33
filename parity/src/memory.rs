//! The test shape, the arena sizes firmware reserves, and the caller-supplied memory.

use super::*;

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
pub(crate) type Alloc = FreeList<'static>;
pub(crate) const BITS: usize = <Alloc as PageAllocator<'static>>::META_BITS_PER_PAGE;

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
/// Scratch f32s of one attention call (the most: a case with rotated keys).
pub const SCRATCH_F32: usize = Case::PagedQ4_0Rot.config().scratch_len(Q_HEADS, 1);
/// f32s of the caller's work buffer: queries and outputs of [`MAX_ROWS`] rows, one K and one V
/// row, attention scratch.
pub const WORK_F32: usize = 2 * MAX_ROWS * Q_ROW + 2 * KV_ROW + SCRATCH_F32;

pub(crate) const fn max_meta() -> usize {
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

pub(crate) const fn base(k: ElementFormat, v: ElementFormat) -> CacheConfig {
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

/// The range of `len` bytes of `buf` that starts at its first `align`-aligned byte, if `buf` is
/// long enough.
pub(crate) fn aligned_range(
    buf: &[MaybeUninit<u8>],
    align: usize,
    len: usize,
) -> Option<Range<usize>> {
    let off = buf.as_ptr().align_offset(align);
    off.checked_add(len)
        .filter(|&end| end <= buf.len())
        .map(|end| off..end)
}
