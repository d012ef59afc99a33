//! The C structs and enumeration constants of the ABI, and their conversions to the Rust types.
//! Enumerations cross the boundary as plain integers (`uint32_t`) and are range-checked here, so
//! an out-of-range value is [`EKV_ERR_INVALID_ARGUMENT`], never an invalid Rust enum.

use edgekv::{CacheConfig, ElementFormat, Kv, PoolKind, Rotation, SeqMode, Shape};

use super::status::{EKV_ERR_INVALID_ARGUMENT, Fail, Res};

/// A sequence handle, bound to one cache instance: slot in bits 0..16, generation in bits
/// 16..32, the cache instance's epoch in bits 32..64 (treat it as opaque). A handle is rejected
/// with `EKV_ERR_UNKNOWN_SEQUENCE` after `ekv_seq_free`, even when its slot is reused, and on
/// any other cache instance, including one created later in the same storage and arenas.
/// Limits: the generation is per slot and 16 bits wide, so a handle kept through exactly
/// 65,536 (or a multiple) create/free cycles of its slot in the same cache names the slot's
/// sequence again; epochs come from a 32-bit process-wide counter, so the same holds for a
/// cache created 2^32 caches later.
pub type EkvSeq = u64;

/// `ekv_format_t.kind`: IEEE binary32 pages: f32 rows are stored bit for bit, f16 rows widened
/// exactly; reads give the stored values.
pub const EKV_FORMAT_F32: u32 = 0;
/// `ekv_format_t.kind`: IEEE binary16 pages: f32 values are rounded to nearest even (beyond the
/// f16 range to +-inf; NaN stays NaN), f16 rows (`ekv_write_f16`) stored bit for bit; reads
/// widen exactly.
pub const EKV_FORMAT_F16: u32 = 1;
/// `ekv_format_t.kind`: bfloat16 pages: f32 (and widened f16) values are rounded to nearest
/// even; reads widen exactly.
pub const EKV_FORMAT_BF16: u32 = 2;
/// `ekv_format_t.kind`: int8 codes with one f16 scale per `group` values along head_dim, ggml
/// Q8_0 math (for `group` = 32 bit for bit ggml's `quantize_row_q8_0_ref`): per group
/// `amax = max|x|`, `d = amax / 127` in f32, codes `round_half_away_from_zero(x * (1 / d))`
/// (f32, saturated to int8; 0 when `d` is 0), stored scale `d` rounded to f16 (nearest even; 0
/// or inf where `d` under- or overflows f16, as in ggml). A value reads back as
/// `code * (float)scale`. A group holding an inf or a NaN gets codes 0 and scale inf or NaN: the
/// whole group reads back NaN. Keys in this format score against the query rounded to 16-bit
/// codes per group (see `ekv_attention`).
pub const EKV_FORMAT_INT8: u32 = 3;
/// `ekv_format_t.kind`: FP8 E4M3 (`float8_e4m3fn`) tiles, SGLang NSA rows: the first `dv`
/// values of each head row in tiles of `tile` values, each tile with an f32 scale
/// `s = amax / 448` and codes `e4m3(x / s)` (computed in f32, rounded to nearest even, saturating
/// at +-448), then the `head_dim - dv` tail values raw (f32; bf16 if `bf16`). With `bf16` = 1 the
/// values are first rounded to bf16, each scale is rounded to bf16 and the tail is stored as
/// bf16. A value reads back as `e4m3 value * s` (the tail as stored). An all-zero tile gets
/// codes 0 (the reference writes NaN codes); a tile holding a NaN or an inf gets scale NaN or
/// inf and reads back NaN throughout.
pub const EKV_FORMAT_FP8_TILE: u32 = 4;
/// `ekv_format_t.kind`: ggml Q4_0 blocks (32 values, f16 scale, 4-bit codes: 18 bytes, exactly
/// ggml's); head_dim a multiple of 32. Bit for bit ggml's `quantize_row_q4_0_ref`: `max` is the
/// block's first value of largest magnitude (sign kept), `d = max / -8`, codes
/// `min(15, trunc(x * (1 / d) + 8.5))` with `1 / d` in f32 before `d` is rounded to f16; a value
/// reads back as `(code - 8) * d`.
pub const EKV_FORMAT_Q4_0: u32 = 5;
/// `ekv_format_t.kind`: ggml Q4_1 blocks (32 values, f16 scale and minimum, 4-bit codes: 20
/// bytes, exactly ggml's); head_dim a multiple of 32. Bit for bit ggml's
/// `quantize_row_q4_1_ref`: `d = (max - min) / 15`, codes
/// `min(15, trunc((x - min) * (1 / d) + 0.5))` with `1 / d` in f32, `d` and `m = min` stored as
/// f16; a value reads back as `code * d + m`.
pub const EKV_FORMAT_Q4_1: u32 = 6;

/// `ekv_format_t.rotation`: rows stored as written.
pub const EKV_ROTATION_NONE: u8 = 0;
/// `ekv_format_t.rotation`: rows stored after an orthonormal Walsh-Hadamard transform (queries
/// rotated alike for K, outputs rotated back for V; reads give the rows rotated back). The
/// transform runs in f32 before the format rounds or quantizes: butterflies, then one multiply
/// by `1 / sqrt(head_dim)` (a power of two for head_dim 4, 16, 64, 256), the same bits on every
/// target. Reads and attention match the unrotated rows up to the format's rounding and f32
/// rounding (an f32 page reads back within f32 rounding of what was written, not bit for bit).
pub const EKV_ROTATION_HADAMARD: u8 = 1;
/// `ekv_format_t.rotation`: as `EKV_ROTATION_HADAMARD` after a fixed +-1 sign per element (bit
/// `i mod 64` of 0x243F6A8885A308D3 set: -1).
pub const EKV_ROTATION_SIGNED_HADAMARD: u8 = 2;

/// Keys (`kv` arguments).
pub const EKV_K: u32 = 0;
/// Values (`kv` arguments).
pub const EKV_V: u32 = 1;

/// Sequence mode: pages allocated one at a time, shared on fork (copy-on-write).
pub const EKV_SEQ_PAGED: u32 = 0;
/// Sequence mode: one run of consecutive pages growing geometrically (needs
/// `EKV_ALLOC_BITMAP`): its capacity doubles, in place when the pages after it are free, else
/// the run moves (used pages copied). Forks copy the run; truncation keeps it as capacity;
/// `ekv_seq_slide` and `ekv_prefix_attach` need paged sequences (`EKV_ERR_NOT_PAGED`).
pub const EKV_SEQ_CONTIGUOUS: u32 = 1;

/// `ekv_config_t.allocator`: LIFO free list (O(1), single pages).
pub const EKV_ALLOC_FREE_LIST: u32 = 0;
/// `ekv_config_t.allocator`: first-fit bitmap (contiguous runs).
pub const EKV_ALLOC_BITMAP: u32 = 1;

/// Pool selector of `ekv_segments`: K values.
pub const EKV_POOL_K_VALUES: u32 = 0;
/// Pool selector: K scales (empty unless int8).
pub const EKV_POOL_K_SCALES: u32 = 1;
/// Pool selector: V values.
pub const EKV_POOL_V_VALUES: u32 = 2;
/// Pool selector: V scales (empty unless int8).
pub const EKV_POOL_V_SCALES: u32 = 3;

/// A page format. Unused parameters must be zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EkvFormat {
    /// One of `EKV_FORMAT_*`.
    pub kind: u32,
    /// `EKV_FORMAT_INT8`: values per scale (at least 2, divides head_dim; 32 = Q8_0).
    pub group: u16,
    /// `EKV_FORMAT_FP8_TILE`: quantized values at the start of each head row (a nonzero multiple
    /// of `tile`, at most head_dim).
    pub dv: u16,
    /// `EKV_FORMAT_FP8_TILE`: values per scale (nonzero).
    pub tile: u16,
    /// `EKV_FORMAT_FP8_TILE`: 1 for a bf16 model (bf16 scales rounding and tail), else 0.
    pub bf16: u8,
    /// One of `EKV_ROTATION_*` (0: none): how this half's rows are rotated before they are
    /// stored (head_dim a power of two up to 256 when not 0).
    pub rotation: u8,
}

impl EkvFormat {
    /// The half's rotation, or `EKV_ERR_INVALID_ARGUMENT` (an unknown value).
    pub(crate) fn rotation(self) -> Res<Rotation> {
        match self.rotation {
            EKV_ROTATION_NONE => Ok(Rotation::None),
            EKV_ROTATION_HADAMARD => Ok(Rotation::Hadamard),
            EKV_ROTATION_SIGNED_HADAMARD => Ok(Rotation::SignedHadamard),
            _ => Err(Fail(EKV_ERR_INVALID_ARGUMENT)),
        }
    }

    /// The Rust format, or `EKV_ERR_INVALID_ARGUMENT` (unknown kind, nonzero unused field).
    pub(crate) fn to_rust(self) -> Res<ElementFormat> {
        let bad = Err(Fail(EKV_ERR_INVALID_ARGUMENT));
        if self.bf16 > 1 {
            return bad;
        }
        let plain = self.group == 0 && self.dv == 0 && self.tile == 0 && self.bf16 == 0;
        match self.kind {
            EKV_FORMAT_F32 if plain => Ok(ElementFormat::F32),
            EKV_FORMAT_F16 if plain => Ok(ElementFormat::F16),
            EKV_FORMAT_BF16 if plain => Ok(ElementFormat::Bf16),
            EKV_FORMAT_Q4_0 if plain => Ok(ElementFormat::Q4_0),
            EKV_FORMAT_Q4_1 if plain => Ok(ElementFormat::Q4_1),
            EKV_FORMAT_INT8 if self.dv == 0 && self.tile == 0 && self.bf16 == 0 => {
                Ok(ElementFormat::Int8 { group: self.group })
            }
            EKV_FORMAT_FP8_TILE if self.group == 0 => Ok(ElementFormat::Fp8Tile {
                dv: self.dv,
                tile: self.tile,
                bf16: self.bf16 == 1,
            }),
            _ => bad,
        }
    }
}

/// Everything a cache is configured with (see `ekv_config_init` for the defaults).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EkvConfig {
    /// Transformer layers.
    pub layers: u16,
    /// Key/value heads per layer.
    pub kv_heads: u16,
    /// Elements per head vector.
    pub head_dim: u16,
    /// Tokens per page: a power of two (default 16).
    pub page_tokens: u16,
    /// Storage format of key pages (default f32).
    pub k_format: EkvFormat,
    /// Storage format of value pages (default f32).
    pub v_format: EkvFormat,
    /// Data-arena alignment in bytes: a power of two >= 64 and >= the target's data-cache line
    /// (default 64). Also the pool-stride granule: every page starts at a multiple of it, so no
    /// two pages share a cache line.
    pub align: u32,
    /// Longest sequence in tokens (default 8192; sizes each page table).
    pub max_seq_tokens: u32,
    /// Sequence slots (default 8).
    pub max_seqs: u16,
    /// Prefill chunk size C, a multiple of `page_tokens`; 0 = one page (default 0). Prompts are
    /// to be prefilled in chunks aligned to absolute multiples of C, and prefix reuse is aligned
    /// down to C, so a reused prefix holds what a cold prefill writes.
    pub chunk_tokens: u16,
    /// 1 to keep a prefix index (default), 0 for none. It takes about `28 + 4 x page_tokens`
    /// metadata bytes per page; without it `ekv_prefix_lookup` / `ekv_prefix_attach` fail with
    /// `EKV_ERR_NO_PREFIX_INDEX` (`ekv_reuse_prefix` still works).
    pub prefix_index: u8,
    /// Must be 0.
    pub reserved: [u8; 3],
    /// `EKV_ALLOC_FREE_LIST` (default) or `EKV_ALLOC_BITMAP` (needed for contiguous sequences).
    pub allocator: u32,
    /// Prefix namespace: fingerprint of model, adapter and salt (default 0): the seed of the
    /// prefix hash chain and the identity of every first page. First pages are linked by its low
    /// 63 bits and hashed with all 64: use namespaces that differ in their low 63 bits.
    pub namespace: u64,
}

/// The allocator a configuration asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AllocKind {
    /// `edgekv::FreeList`.
    FreeList,
    /// `edgekv::Bitmap`.
    Bitmap,
}

impl EkvConfig {
    /// The defaults of `CacheConfig::new` for a shape.
    pub(crate) fn defaults(layers: u16, kv_heads: u16, head_dim: u16) -> Self {
        let c = CacheConfig::new(Shape {
            layers,
            kv_heads,
            head_dim,
        });
        EkvConfig {
            layers,
            kv_heads,
            head_dim,
            page_tokens: c.page_tokens,
            k_format: EkvFormat::default(),
            v_format: EkvFormat::default(),
            align: c.align as u32,
            max_seq_tokens: c.max_seq_tokens,
            max_seqs: c.max_seqs,
            chunk_tokens: c.chunk_tokens,
            prefix_index: c.prefix_index as u8,
            reserved: [0; 3],
            allocator: EKV_ALLOC_FREE_LIST,
            namespace: c.namespace,
        }
    }

    /// The Rust configuration and allocator, or `EKV_ERR_INVALID_ARGUMENT`. Sizes are checked
    /// later, by the planner.
    pub(crate) fn to_rust(self) -> Res<(CacheConfig, AllocKind)> {
        let bad = Fail(EKV_ERR_INVALID_ARGUMENT);
        if self.reserved != [0; 3] || self.prefix_index > 1 {
            return Err(bad);
        }
        let alloc = match self.allocator {
            EKV_ALLOC_FREE_LIST => AllocKind::FreeList,
            EKV_ALLOC_BITMAP => AllocKind::Bitmap,
            _ => return Err(bad),
        };
        let shape = Shape {
            layers: self.layers,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
        };
        let config = CacheConfig::new(shape)
            .with_page_tokens(self.page_tokens)
            .with_formats(self.k_format.to_rust()?, self.v_format.to_rust()?)
            .with_rotations(self.k_format.rotation()?, self.v_format.rotation()?)
            .with_align(self.align as usize)
            .with_sequences(self.max_seqs, self.max_seq_tokens)
            .with_chunk_tokens(self.chunk_tokens)
            .with_prefix_index(self.prefix_index == 1)
            .with_namespace(self.namespace);
        Ok((config, alloc))
    }
}

/// A plan: how many pages a configuration gets and how big each arena must be.
///
/// The data arena's layout (part of the ABI: device views address it): for each layer in order,
/// four pools (K values, K scales, V values, V scales), each `num_pages` slots of its own stride
/// (a page's bytes rounded up to `align`; 0 for the scale pools of formats without scales). A
/// value page is token-major `[page_tokens][kv_heads][head_dim]` in the format's bytes
/// (little-endian; FP8 and 4-bit: per head row, as their formats say); an int8 scale page is
/// `[page_tokens][kv_heads][head_dim / group]` f16.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EkvPlan {
    /// Pages in the pool.
    pub num_pages: u32,
    /// Page-table slots per sequence.
    pub table_len: u32,
    /// Bytes the data arena must have (aligned to `data_align`).
    pub data_bytes: usize,
    /// Bytes the metadata arena must have (aligned to `meta_align`).
    pub meta_bytes: usize,
    /// Bytes of one buffer holding both (`ekv_cache_create_split`), 0 if it would overflow.
    pub split_bytes: usize,
    /// Data bytes of one page id (all layers, K and V, values and scales, padding).
    pub page_bytes: usize,
    /// Token positions the pool holds.
    pub token_capacity: usize,
    /// Alignment the data arena needs.
    pub data_align: usize,
    /// Alignment the metadata arena needs.
    pub meta_align: usize,
    /// 1 when every pool's page size is already a multiple of `align`: a run of consecutive
    /// pages is then one linear `[tokens][kv_heads][head_dim]` tensor.
    pub natural: u8,
    /// Zero.
    pub reserved: [u8; 7],
}

impl EkvPlan {
    /// The C view of a plan.
    pub(crate) fn from_rust(p: &edgekv::Plan) -> Self {
        EkvPlan {
            num_pages: p.num_pages as u32,
            table_len: p.table_len as u32,
            data_bytes: p.data_bytes,
            meta_bytes: p.meta.total,
            split_bytes: p.split_bytes().unwrap_or(0),
            page_bytes: p.geometry.page_bytes,
            token_capacity: p.token_capacity(),
            data_align: p.geometry.align,
            meta_align: edgekv::META_ALIGN,
            natural: p.geometry.natural as u8,
            reserved: [0; 7],
        }
    }
}

/// What `ekv_seq_info` reports about a sequence.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EkvSeqInfo {
    /// Reserved token positions.
    pub len: u32,
    /// Tokens the held pages take without allocating.
    pub capacity: u32,
    /// Leading positions committed as prompt (`ekv_commit_prompt`, `ekv_prefix_attach`, a
    /// restore with a prefix index; truncation lowers it to the new length).
    pub prompt: u32,
    /// Pages in its page table (the length `ekv_bind_region` outputs need).
    pub pages: u16,
    /// `EKV_SEQ_PAGED` or `EKV_SEQ_CONTIGUOUS` (as a 16-bit value).
    pub mode: u16,
}

/// Occupancy statistics (mirrors `edgekv::Stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EkvStats {
    /// Pages in the pool.
    pub pages_total: u16,
    /// Pages in the allocator.
    pub pages_free: u16,
    /// Pages referenced by at least one sequence.
    pub pages_used: u16,
    /// Unreferenced pages kept for prefix reuse (evictable).
    pub pages_cached: u16,
    /// Pages published in the prefix index.
    pub pages_registered: u16,
    /// Live sequences.
    pub sequences: u16,
    /// Zero.
    pub reserved: u32,
    /// Cached pages evicted since creation.
    pub evictions: u64,
    /// Reserved positions summed over live sequences.
    pub tokens: u64,
    /// Data bytes of one page id.
    pub page_bytes: usize,
    /// Data bytes held by used pages.
    pub bytes_used: usize,
    /// Data bytes per token position of a full page.
    pub bytes_per_token: usize,
}

impl EkvStats {
    /// The C view of the statistics.
    pub(crate) fn from_rust(s: &edgekv::Stats) -> Self {
        EkvStats {
            pages_total: s.pages_total,
            pages_free: s.pages_free,
            pages_used: s.pages_used,
            pages_cached: s.pages_cached,
            pages_registered: s.pages_registered,
            sequences: s.sequences,
            reserved: 0,
            evictions: s.evictions,
            tokens: s.tokens,
            page_bytes: s.page_bytes,
            bytes_used: s.bytes_used,
            bytes_per_token: s.bytes_per_token,
        }
    }
}

/// A prefix hit from `ekv_prefix_lookup`, to pass to `ekv_prefix_attach` with the same prompt.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EkvPrefixHit {
    /// Tokens to reuse (prefill continues from here): verified token for token, aligned down to
    /// the chunk size, below the prompt's length (the last prompt token is always recomputed).
    pub tokens: u32,
    /// Leading tokens matched by verified pages (up to that cap), before chunk alignment.
    pub matched: u32,
    /// Pages holding the reused tokens.
    pub pages: u16,
    /// Zero.
    pub reserved: u16,
}

/// How `ekv_attention` computes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EkvAttentionParams {
    /// Query heads: a nonzero multiple of `kv_heads`.
    pub q_heads: u16,
    /// Zero.
    pub reserved: u16,
    /// Score scale (`ekv_attention_params_init` sets `1 / sqrt(head_dim)`); with int8 keys it is
    /// folded into the query's per-group scales (see `ekv_attention`).
    pub scale: f32,
    /// Sliding window: leading positions always kept (needs `window_size` > 0, else
    /// `EKV_ERR_INVALID_ARGUMENT`).
    pub window_sinks: u32,
    /// Sliding window: most recent positions kept, the query's own included; 0 = full causal.
    /// Query position `t` sees key `j <= t` when `j < window_sinks` or `t - j < window_size`
    /// (positions keep their absolute values).
    pub window_size: u32,
}

/// The Rust selector of a `kv` argument.
pub(crate) fn parse_kv(kv: u32) -> Res<Kv> {
    match kv {
        EKV_K => Ok(Kv::K),
        EKV_V => Ok(Kv::V),
        _ => Err(Fail(EKV_ERR_INVALID_ARGUMENT)),
    }
}

/// The Rust mode of a `mode` argument.
pub(crate) fn parse_mode(mode: u32) -> Res<SeqMode> {
    match mode {
        EKV_SEQ_PAGED => Ok(SeqMode::Paged),
        EKV_SEQ_CONTIGUOUS => Ok(SeqMode::Contiguous),
        _ => Err(Fail(EKV_ERR_INVALID_ARGUMENT)),
    }
}

/// The Rust pool of a `pool` argument.
pub(crate) fn parse_pool(pool: u32) -> Res<PoolKind> {
    match pool {
        EKV_POOL_K_VALUES => Ok(PoolKind::KValues),
        EKV_POOL_K_SCALES => Ok(PoolKind::KScales),
        EKV_POOL_V_VALUES => Ok(PoolKind::VValues),
        EKV_POOL_V_SCALES => Ok(PoolKind::VScales),
        _ => Err(Fail(EKV_ERR_INVALID_ARGUMENT)),
    }
}
