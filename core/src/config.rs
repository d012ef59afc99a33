//! [`CacheConfig`]: everything a cache is configured with, and its builder methods. What a
//! configuration plans to (geometry, arena sizes) is the planner's (`crate::planner`).

use crate::format::{ElementFormat, Rotation};
use crate::planner::MIN_ALIGN;
use crate::shape::Shape;

/// Everything a cache is configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CacheConfig {
    /// The model's attention shape.
    pub shape: Shape,
    /// Tokens per page (P): a power of two, 16 by default.
    pub page_tokens: u16,
    /// Storage format of key pages.
    pub k_format: ElementFormat,
    /// Storage format of value pages.
    pub v_format: ElementFormat,
    /// Rotation of key rows before they are stored (queries are rotated alike in attention).
    pub k_rotation: Rotation,
    /// Rotation of value rows before they are stored (attention rotates its output back).
    pub v_rotation: Rotation,
    /// Data-arena alignment and pool-stride granule: a power of two ≥ [`MIN_ALIGN`] and ≥ the
    /// target's data-cache line.
    pub align: usize,
    /// Sequence slots.
    pub max_seqs: u16,
    /// Longest sequence in tokens (sizes each page table).
    pub max_seq_tokens: u32,
    /// Prefill chunk size C in tokens: a multiple of `page_tokens`; 0 (the default) means one
    /// page. Prompts are prefilled in chunks aligned to absolute multiples of C, and prefix reuse
    /// is aligned down to C, so a reused prefix is bit-identical to a cold prefill.
    pub chunk_tokens: u16,
    /// Keep a prefix index (per page: a chained hash, the page's token ids and chain links, about
    /// `28 + 4 × page_tokens` bytes of metadata). Without it prefix lookups fail with
    /// [`Error::NoPrefixIndex`](crate::Error::NoPrefixIndex); the single-conversation path still works.
    pub prefix_index: bool,
    /// Seed of the prefix hash chain and identity of every first page: a fingerprint of everything
    /// besides the tokens that KV depends on (model, adapter, salt); see
    /// [`crate::prefix::namespace`]. First pages are linked to its low 63 bits and hashed with all
    /// 64: two namespaces that differ only in bit 63 share links but not hashes, so lookups keep
    /// them apart while `commit_prompt` treats them as one (no wrong data is reused either way).
    /// Use distinct low 63 bits.
    pub namespace: u64,
}

impl CacheConfig {
    /// Defaults for `shape`: 16-token f32 pages, 64-byte alignment, 8 sequences of up to 8192
    /// tokens.
    pub const fn new(shape: Shape) -> Self {
        CacheConfig {
            shape,
            page_tokens: 16,
            k_format: ElementFormat::F32,
            v_format: ElementFormat::F32,
            k_rotation: Rotation::None,
            v_rotation: Rotation::None,
            align: MIN_ALIGN,
            max_seqs: 8,
            max_seq_tokens: 8192,
            chunk_tokens: 0,
            prefix_index: true,
            namespace: 0,
        }
    }

    /// Sets the prefill chunk size C (a multiple of `page_tokens`; 0 means one page).
    pub const fn with_chunk_tokens(mut self, chunk_tokens: u16) -> Self {
        self.chunk_tokens = chunk_tokens;
        self
    }

    /// Keeps a prefix index, or not.
    pub const fn with_prefix_index(mut self, on: bool) -> Self {
        self.prefix_index = on;
        self
    }

    /// Sets the prefix namespace (see [`crate::prefix::namespace`]).
    pub const fn with_namespace(mut self, namespace: u64) -> Self {
        self.namespace = namespace;
        self
    }

    /// The effective prefill chunk size in tokens: `chunk_tokens`, or `page_tokens` when 0.
    pub const fn chunk(&self) -> u32 {
        if self.chunk_tokens == 0 {
            self.page_tokens as u32
        } else {
            self.chunk_tokens as u32
        }
    }

    /// Sets tokens per page.
    pub const fn with_page_tokens(mut self, page_tokens: u16) -> Self {
        self.page_tokens = page_tokens;
        self
    }

    /// Sets the K and V page formats.
    pub const fn with_formats(mut self, k: ElementFormat, v: ElementFormat) -> Self {
        self.k_format = k;
        self.v_format = v;
        self
    }

    /// Sets the K and V rotations (see [`Rotation`]; head_dim must be a power of two up to
    /// [`MAX_ROTATED_DIM`](crate::MAX_ROTATED_DIM) for either to be on). Rows are stored
    /// rotated and read back rotated back; attention gives what it gives over unrotated rows,
    /// up to the format's rounding.
    pub const fn with_rotations(mut self, k: Rotation, v: Rotation) -> Self {
        self.k_rotation = k;
        self.v_rotation = v;
        self
    }

    /// Sets the data-arena alignment.
    pub const fn with_align(mut self, align: usize) -> Self {
        self.align = align;
        self
    }

    /// Sets the number of sequence slots and the longest sequence.
    pub const fn with_sequences(mut self, max_seqs: u16, max_seq_tokens: u32) -> Self {
        self.max_seqs = max_seqs;
        self.max_seq_tokens = max_seq_tokens;
        self
    }
}
