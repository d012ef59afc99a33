//! One decode step at a long context, counted: the boards' kernel benchmark. A one-layer
//! SmolLM2-shaped cache of Q8_0 pages is filled with [`STEP_KEYS`] positions of the parity
//! generator's rows, then [`decode_step`] times one attention call for the last position (nine
//! query heads over every key) with the caller's clock and digests its output. Under QEMU's
//! `-icount` the clock counts instructions, so the figure is deterministic; the digest is the
//! same on every target (the host computes it too).

use super::*;

/// Keys the decode step attends to.
pub const STEP_KEYS: u32 = 2048;

/// The decode step's cache: [`SHAPE`] with one layer, Q8_0 K and V pages.
pub const fn step_config() -> CacheConfig {
    CacheConfig::new(Shape { layers: 1, ..SHAPE })
        .with_page_tokens(PAGE_TOKENS)
        .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0)
        .with_align(DATA_ALIGN)
        .with_sequences(1, STEP_KEYS)
}

const STEP_PAGES: usize = STEP_KEYS as usize / PAGE_TOKENS as usize;

const STEP_PLAN: edgekv::Plan = match step_config().plan_pages(STEP_PAGES, BITS) {
    Ok(p) => p,
    Err(_) => panic!("decode step plan"),
};

/// Bytes of arena [`decode_step`] needs: its pages and its metadata, each with room to align.
pub const STEP_ARENA_BYTES: usize =
    STEP_PLAN.data_bytes + DATA_ALIGN + STEP_PLAN.meta.total + META_ALIGN;

/// f32s of work buffer [`decode_step`] needs: one query and one output row, one K and one V
/// row, attention scratch.
pub const STEP_WORK_F32: usize = 2 * Q_ROW + 2 * KV_ROW + scratch_len_for(&step_config(), Q_HEADS);

/// What [`decode_step`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCount {
    /// The clock's ticks across the attention call alone.
    pub ticks: u64,
    /// CRC-32 of the output row (as [`OutputCrc`]).
    pub crc32: u32,
}

/// Fills a fresh cache over `arena` (any alignment, at least [`STEP_ARENA_BYTES`]: pages first,
/// then metadata) with [`STEP_KEYS`] positions, then times one decode-step attention call with
/// `clock` (read just before and just after it).
///
/// # Errors
///
/// [`Error::WorkTooSmall`] if `work` is shorter than [`STEP_WORK_F32`], an arena too small as a
/// configuration error, any cache error.
pub fn decode_step(
    arena: &mut [MaybeUninit<u8>],
    work: &mut [f32],
    clock: &mut dyn FnMut() -> u64,
) -> Result<StepCount, Error> {
    let (cfg, plan) = (step_config(), STEP_PLAN);
    let too_small = Error::from(edgekv::ConfigError::ArenaTooSmall);
    let split = (plan.data_bytes + DATA_ALIGN).min(arena.len());
    let (data, meta) = arena.split_at_mut(split);
    let data_range = aligned_range(data, DATA_ALIGN, plan.data_bytes).ok_or(too_small)?;
    let meta_range = aligned_range(meta, META_ALIGN, plan.meta.total).ok_or(too_small)?;
    if work.len() < STEP_WORK_F32 {
        return Err(Error::WorkTooSmall);
    }
    let (q, rest) = work.split_at_mut(Q_ROW);
    let (out, rest) = rest.split_at_mut(Q_ROW);
    let (k, rest) = rest.split_at_mut(KV_ROW);
    let (v, scratch) = rest.split_at_mut(KV_ROW);
    let mut cache: KvCache<'_, FreeList<'_>> =
        KvCache::new(cfg, &mut data[data_range], &mut meta[meta_range])?;
    let seq = cache.create_sequence(SeqMode::Paged)?;
    cache.reserve(seq, STEP_KEYS)?;
    let src = Src::Stream(7);
    for pos in 0..STEP_KEYS {
        kv_rows(src.seed(0, pos, KIND_KV), k, v);
        cache.write_kv(seq, 0, pos, k, v)?;
    }
    let last = STEP_KEYS - 1;
    query_row(src.seed(0, last, KIND_Q), q);
    let params = AttentionParams::new(cfg.shape, Q_HEADS);
    let t0 = clock();
    cache.attention(seq, 0, last, q, out, &params, scratch)?;
    let ticks = clock() - t0;
    let mut crc = OutputCrc::new();
    crc.update(out);
    Ok(StepCount {
        ticks,
        crc32: crc.finish(),
    })
}
