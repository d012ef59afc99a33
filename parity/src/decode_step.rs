//! One decode step at a long context, counted: the boards' kernel benchmark. A one-layer cache
//! of Q8_0 pages of a model's attention shape ([`StepShape`]; SmolLM2-135M's by default) is
//! filled with [`STEP_KEYS`] positions of the parity generator's rows, then [`decode_step`]
//! times one attention call for the last position (every query head over every key) with the
//! caller's clock and digests its output. Under QEMU's `-icount` the clock counts instructions,
//! so the figure is deterministic; the digest is the same on every target (the host computes it
//! too).

use super::*;

/// Keys the decode step attends to.
pub const STEP_KEYS: u32 = 2048;

/// The attention shape of a decode step: one model's query heads, KV heads and head_dim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepShape {
    /// The model it is taken from.
    pub model: &'static str,
    /// Query heads.
    pub q_heads: u16,
    /// KV heads.
    pub kv_heads: u16,
    /// Dimensions of a head.
    pub head_dim: u16,
}

impl StepShape {
    /// Elements of one query (and output) row.
    pub const fn q_row(&self) -> usize {
        self.q_heads as usize * self.head_dim as usize
    }

    /// Elements of one K (or V) row.
    pub const fn kv_row(&self) -> usize {
        self.kv_heads as usize * self.head_dim as usize
    }

    /// The step's cache: this shape with one layer, Q8_0 K and V pages.
    pub const fn config(&self) -> CacheConfig {
        CacheConfig::new(Shape {
            layers: 1,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
        })
        .with_page_tokens(PAGE_TOKENS)
        .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0)
        .with_align(DATA_ALIGN)
        .with_sequences(1, STEP_KEYS)
    }

    const fn plan(&self) -> edgekv::Plan {
        match self.config().plan_pages(STEP_PAGES, BITS) {
            Ok(p) => p,
            Err(_) => panic!("decode step plan"),
        }
    }

    /// Bytes of arena [`decode_step_of`] needs for this shape: its pages and its metadata, each
    /// with room to align.
    pub const fn arena_bytes(&self) -> usize {
        let plan = self.plan();
        plan.data_bytes + DATA_ALIGN + plan.meta.total + META_ALIGN
    }

    /// f32s of work buffer [`decode_step_of`] needs for this shape: one query and one output
    /// row, one K and one V row, attention scratch.
    pub const fn work_f32(&self) -> usize {
        2 * self.q_row() + 2 * self.kv_row() + self.config().scratch_len(self.q_heads, 1)
    }
}

/// The decode steps' shapes: SmolLM2-135M's (the parity firmware's, [`decode_step`]'s) first,
/// then the other edge models' of FIGURES.md.
pub const STEP_SHAPES: [StepShape; 5] = [
    StepShape {
        model: "SmolLM2-135M",
        q_heads: Q_HEADS,
        kv_heads: SHAPE.kv_heads,
        head_dim: SHAPE.head_dim,
    },
    StepShape {
        model: "Gemma-3-270M",
        q_heads: 4,
        kv_heads: 1,
        head_dim: 256,
    },
    StepShape {
        model: "Qwen3-0.6B",
        q_heads: 16,
        kv_heads: 8,
        head_dim: 128,
    },
    StepShape {
        model: "Llama-3.2-1B",
        q_heads: 32,
        kv_heads: 8,
        head_dim: 64,
    },
    StepShape {
        model: "SmolLM2-360M",
        q_heads: 15,
        kv_heads: 5,
        head_dim: 64,
    },
];

/// The shapes of [`STEP_SHAPES`] a decode-step firmware runs: the one `filter` names as
/// `q_heads,kv_heads,head_dim` (spaces ignored), or all of them when `filter` is `None`; an empty
/// iterator when no shape matches.
pub fn step_shapes(filter: Option<&str>) -> impl Iterator<Item = &'static StepShape> + '_ {
    STEP_SHAPES.iter().filter(move |s| match filter {
        None => true,
        Some(f) => {
            let mut n = f.split(',').map(|x| x.trim().parse::<u16>().ok());
            let want = [n.next(), n.next(), n.next()];
            let have = [s.q_heads, s.kv_heads, s.head_dim].map(|x| Some(Some(x)));
            n.next().is_none() && want == have
        }
    })
}

/// The decode step's cache: [`SHAPE`] with one layer, Q8_0 K and V pages.
pub const fn step_config() -> CacheConfig {
    STEP_SHAPES[0].config()
}

const STEP_PAGES: usize = STEP_KEYS as usize / PAGE_TOKENS as usize;

/// Bytes of arena [`decode_step`] needs: its pages and its metadata, each with room to align.
pub const STEP_ARENA_BYTES: usize = STEP_SHAPES[0].arena_bytes();

/// f32s of work buffer [`decode_step`] needs: one query and one output row, one K and one V
/// row, attention scratch.
pub const STEP_WORK_F32: usize = STEP_SHAPES[0].work_f32();

/// The largest arena (`work == false`) or work buffer (`work == true`) of [`STEP_SHAPES`].
const fn largest(work: bool) -> usize {
    let mut m = 0;
    let mut i = 0;
    while i < STEP_SHAPES.len() {
        let s = &STEP_SHAPES[i];
        let x = if work { s.work_f32() } else { s.arena_bytes() };
        if x > m {
            m = x;
        }
        i += 1;
    }
    m
}

/// Bytes of arena the step of every shape of [`STEP_SHAPES`] fits in.
pub const STEP_SHAPES_ARENA_BYTES: usize = largest(false);

/// f32s of work buffer the step of every shape of [`STEP_SHAPES`] fits in.
pub const STEP_SHAPES_WORK_F32: usize = largest(true);

/// What [`decode_step`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCount {
    /// The clock's ticks across the attention call alone.
    pub ticks: u64,
    /// CRC-32 of the output row (as [`OutputCrc`]).
    pub crc32: u32,
}

/// [`decode_step_of`] SmolLM2-135M's shape (`arena` at least [`STEP_ARENA_BYTES`], `work` at
/// least [`STEP_WORK_F32`]).
///
/// # Errors
///
/// As [`decode_step_of`].
pub fn decode_step(
    arena: &mut [MaybeUninit<u8>],
    work: &mut [f32],
    clock: &mut dyn FnMut() -> u64,
) -> Result<StepCount, Error> {
    decode_step_of(&STEP_SHAPES[0], arena, work, clock)
}

/// Fills a fresh cache of `shape` over `arena` (any alignment, at least
/// [`shape.arena_bytes()`](StepShape::arena_bytes): pages first, then metadata) with
/// [`STEP_KEYS`] positions, then times one decode-step attention call with `clock` (read just
/// before and just after it).
///
/// # Errors
///
/// [`Error::WorkTooSmall`] if `work` is shorter than [`shape.work_f32()`](StepShape::work_f32),
/// an arena too small as a configuration error, any cache error.
pub fn decode_step_of(
    shape: &StepShape,
    arena: &mut [MaybeUninit<u8>],
    work: &mut [f32],
    clock: &mut dyn FnMut() -> u64,
) -> Result<StepCount, Error> {
    let (cfg, plan) = (shape.config(), shape.plan());
    let (q_row, kv_row, hd) = (shape.q_row(), shape.kv_row(), shape.head_dim as usize);
    let too_small = Error::from(edgekv::ConfigError::ArenaTooSmall);
    let split = (plan.data_bytes + DATA_ALIGN).min(arena.len());
    let (data, meta) = arena.split_at_mut(split);
    let data_range = aligned_range(data, DATA_ALIGN, plan.data_bytes).ok_or(too_small)?;
    let meta_range = aligned_range(meta, META_ALIGN, plan.meta.total).ok_or(too_small)?;
    if work.len() < shape.work_f32() {
        return Err(Error::WorkTooSmall);
    }
    let (q, rest) = work.split_at_mut(q_row);
    let (out, rest) = rest.split_at_mut(q_row);
    let (k, rest) = rest.split_at_mut(kv_row);
    let (v, scratch) = rest.split_at_mut(kv_row);
    let mut cache: KvCache<'_, FreeList<'_>> =
        KvCache::new(cfg, &mut data[data_range], &mut meta[meta_range])?;
    let seq = cache.create_sequence(SeqMode::Paged)?;
    cache.reserve(seq, STEP_KEYS)?;
    let src = Src::Stream(7);
    for pos in 0..STEP_KEYS {
        kv_rows_of(src.seed(0, pos, KIND_KV), hd, k, v);
        cache.write_kv(seq, 0, pos, k, v)?;
    }
    let last = STEP_KEYS - 1;
    query_row(src.seed(0, last, KIND_Q), q);
    let params = AttentionParams::new(cfg.shape, shape.q_heads);
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
