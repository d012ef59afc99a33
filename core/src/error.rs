//! The error types of the configuration (planner, arenas, set-up) and of the cache's calls.
//! Snapshot calls have their own, [`SnapshotError`](crate::snapshot::SnapshotError).
//!
//! Which type a call returns says what the caller can do about it: a [`ConfigError`] is fixed
//! by changing the configuration or the memory given (most appear at compile time, since the
//! planner is `const`); an [`Error`] is a call the cache refused at run time (no pages left, a
//! stale handle, a wrong slice length); a snapshot error is a flash image or a flash driver
//! that failed. `?` converts a [`ConfigError`] into an [`Error`] ([`Error::Config`]) and either
//! into a snapshot error.

use core::fmt;

/// Why a configuration does not plan, or a cache cannot be set up over the memory given.
///
/// Returned by the `const fn` planner ([`CacheConfig::geometry`](crate::CacheConfig::geometry),
/// [`CacheConfig::plan`](crate::CacheConfig::plan), ...), the format layout functions, the arena
/// and allocator constructors and [`KvCache::new`](crate::KvCache::new). Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ConfigError {
    /// A size in the configuration is zero (layers, heads, head_dim, page_tokens, sequences,
    /// pages, an arena, an attention window…).
    ZeroSize,
    /// `page_tokens` is not a power of two.
    PageTokensNotPowerOfTwo,
    /// The alignment is not a power of two, or is below [`MIN_ALIGN`](crate::MIN_ALIGN).
    InvalidAlignment,
    /// A size computation overflowed `usize` (or a page-id, position or reference-count type).
    Overflow,
    /// An arena is smaller than the plan needs (for the data arena: not even one page fits).
    ArenaTooSmall,
    /// An arena does not start at the alignment the plan needs.
    MisalignedArena,
    /// A quantized format's parameters do not fit the shape (group not dividing head_dim, FP8
    /// `dv` not a multiple of `tile` or larger than head_dim, zero group or tile).
    InvalidFormat,
    /// `chunk_tokens` is not a multiple of `page_tokens`.
    InvalidChunkSize,
    /// A page format this build leaves out (its cargo feature, e.g. `fp8`, is off).
    FormatDisabled,
    /// More layer groups than [`MAX_GROUPS`](crate::MAX_GROUPS).
    TooManyGroups,
    /// A listed layer group of [`Layers::Rest`](crate::Layers::Rest) (the base group's).
    InvalidGroup,
    /// A listed layer group names a layer past the shape's.
    GroupLayerOutOfRange,
    /// Two listed layer groups name the same layer.
    LayerInTwoGroups,
    /// A layer group holds no layer (listed groups took every layer from the base group).
    EmptyGroup,
    /// The call handles configurations of one layer group only (plan several with
    /// [`CacheConfig::plan_groups`](crate::CacheConfig::plan_groups)).
    MultipleGroups,
    /// A [`PlannedConfig`](crate::PlannedConfig) made for an allocator with another number of
    /// metadata bits a page than the cache's.
    PlannedForOtherAllocator,
}

impl ConfigError {
    /// The error's English description (what `Display` writes).
    pub const fn message(self) -> &'static str {
        match self {
            ConfigError::ZeroSize => "a configured size is zero",
            ConfigError::PageTokensNotPowerOfTwo => "page_tokens is not a power of two",
            ConfigError::InvalidAlignment => "alignment is not a power of two of at least 64",
            ConfigError::Overflow => "size computation overflowed",
            ConfigError::ArenaTooSmall => "arena too small for the plan",
            ConfigError::MisalignedArena => "arena start is not aligned as the plan needs",
            ConfigError::InvalidFormat => "quantized format parameters do not fit the shape",
            ConfigError::InvalidChunkSize => "chunk_tokens is not a multiple of page_tokens",
            ConfigError::FormatDisabled => "page format not compiled in (cargo feature off)",
            ConfigError::TooManyGroups => "more layer groups than MAX_GROUPS",
            ConfigError::InvalidGroup => "a listed layer group cannot be Rest",
            ConfigError::GroupLayerOutOfRange => "a layer group names a layer past the shape's",
            ConfigError::LayerInTwoGroups => "two layer groups name the same layer",
            ConfigError::EmptyGroup => "a layer group holds no layer",
            ConfigError::MultipleGroups => "the call handles one layer group only",
            ConfigError::PlannedForOtherAllocator => "the plan is for another page allocator",
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl core::error::Error for ConfigError {}

/// Why a cache call failed at run time.
///
/// Every fallible call returns one of these and leaves the cache exactly as it was before the
/// call (all-or-nothing), with none of its output buffers written: calls check everything
/// first, then write. The type is small and `Copy` so firmware can log or return it freely.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Error {
    /// A configuration check failed: the cache's set-up, or a call's parameter that is
    /// configuration (an attention window of 0, a codec's group size, a reference count or size
    /// past its type).
    Config(ConfigError),
    /// The pool has fewer available pages (free plus evictable) than the call needs.
    OutOfPages,
    /// No contiguous run of free pages of the needed length exists.
    NoContiguousRun,
    /// The allocator cannot hand out contiguous runs (contiguous sequences need one that can).
    ContiguousUnsupported,
    /// All sequence slots are in use.
    TooManySequences,
    /// The sequence handle is unknown: never created, or already freed.
    UnknownSequence,
    /// The sequence would exceed its page-table capacity (`max_seq_tokens`).
    SequenceFull,
    /// A token position lies outside the sequence's reserved range.
    PositionOutOfRange,
    /// The layer index is not below `Shape::layers`.
    LayerOutOfRange,
    /// A slice has the wrong length for the call (e.g. not a whole number of rows).
    LengthMismatch,
    /// `truncate` was asked to grow a sequence.
    TruncateBeyondLength,
    /// A page id is out of range or the page is not in the state the call needs.
    InvalidPage,
    /// The cache was configured without a prefix index.
    NoPrefixIndex,
    /// The call needs a paged sequence (contiguous sequences never share pages).
    NotPaged,
    /// The call needs an empty sequence (`attach` fills a new one).
    SequenceNotEmpty,
    /// Token ids given for a sequence differ from those its published pages hold, or are longer
    /// than the sequence.
    PromptMismatch,
    /// A prefix hit no longer matches the index (pages were evicted or the namespace changed
    /// since the lookup); look up again.
    StaleHit,
    /// Query heads are not a nonzero multiple of the cache's KV heads.
    HeadMismatch,
    /// `truncate` was asked to go back past the positions a windowed layer group kept (its
    /// window plus its rollback): queries at the new length would miss released keys.
    TruncateBeyondWindow,
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Error::Config(e)
    }
}

impl Error {
    /// The error's English description (what `Display` writes).
    pub const fn message(self) -> &'static str {
        match self {
            Error::Config(e) => e.message(),
            Error::OutOfPages => "not enough free or evictable pages",
            Error::NoContiguousRun => "no contiguous run of free pages of the needed length",
            Error::ContiguousUnsupported => "allocator cannot hand out contiguous runs",
            Error::TooManySequences => "all sequence slots are in use",
            Error::UnknownSequence => "unknown or freed sequence",
            Error::SequenceFull => "sequence would exceed max_seq_tokens",
            Error::PositionOutOfRange => "token position outside the reserved range",
            Error::LayerOutOfRange => "layer index out of range",
            Error::LengthMismatch => "slice length does not match the call",
            Error::TruncateBeyondLength => "truncate length exceeds the sequence length",
            Error::InvalidPage => "page id out of range or in the wrong state",
            Error::NoPrefixIndex => "the cache has no prefix index",
            Error::NotPaged => "the call needs a paged sequence",
            Error::SequenceNotEmpty => "the call needs an empty sequence",
            Error::PromptMismatch => "prompt tokens differ from the sequence's published pages",
            Error::StaleHit => "prefix hit is stale: look up again",
            Error::HeadMismatch => "query heads are not a nonzero multiple of the KV heads",
            Error::TruncateBeyondWindow => "truncate goes back past the positions a window kept",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl core::error::Error for Error {}

/// Shorthand for `core::result::Result<T, E>`, by default with [`edgekv::Error`](Error).
pub type Result<T, E = Error> = core::result::Result<T, E>;
