//! The error type of every fallible edgekv call.

use core::fmt;

/// Why an edgekv call failed.
///
/// Every fallible call returns one of these and leaves the cache exactly as it was before the
/// call (all-or-nothing), with none of its output buffers written: calls check everything
/// first, then write. The type is small and `Copy` so firmware can log or return it freely.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Error {
    /// A size in the configuration is zero (layers, heads, head_dim, page_tokens, sequences…).
    ZeroSize,
    /// `page_tokens` is not a power of two.
    PageTokensNotPowerOfTwo,
    /// The alignment is not a power of two, or is below [`MIN_ALIGN`](crate::MIN_ALIGN).
    InvalidAlignment,
    /// A size computation overflowed `usize` (or a page-id / position type).
    Overflow,
    /// An arena is smaller than the plan needs (for the data arena: not even one page fits).
    ArenaTooSmall,
    /// An arena does not start at the alignment the plan needs.
    MisalignedArena,
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
    /// A quantized format's parameters do not fit the shape (group not dividing head_dim, FP8
    /// `dv` not a multiple of `tile` or larger than head_dim, zero group or tile).
    InvalidFormat,
    /// `chunk_tokens` is not a multiple of `page_tokens`.
    InvalidChunkSize,
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
    /// A snapshot image does not start with the magic bytes.
    BadMagic,
    /// A snapshot image has a layout version this crate does not read.
    UnsupportedVersion,
    /// A snapshot header's fields contradict each other (damaged header).
    CorruptSnapshot,
    /// The flash ends before the image does.
    Truncated,
    /// A snapshot image's CRC-32 does not match its bytes.
    CrcMismatch,
    /// A snapshot was written for another model / namespace.
    FingerprintMismatch,
    /// A snapshot's shape, formats or page size differ from the cache's.
    ConfigMismatch,
    /// The image does not fit the flash at that offset, the offset is not erase-aligned, or the
    /// flash's write / read size is unsupported (a power of two up to 256 is needed).
    FlashBounds,
    /// The flash driver reported an error.
    Flash,
    /// The sequence has pages released by a sliding window; a snapshot needs every page.
    WindowedSequence,
    /// A page format this build leaves out (its cargo feature, e.g. `fp8`, is off).
    FormatDisabled,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = match self {
            Error::ZeroSize => "a configured size is zero",
            Error::PageTokensNotPowerOfTwo => "page_tokens is not a power of two",
            Error::InvalidAlignment => "alignment is not a power of two of at least 64",
            Error::Overflow => "size computation overflowed",
            Error::ArenaTooSmall => "arena too small for the plan",
            Error::MisalignedArena => "arena start is not aligned as the plan needs",
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
            Error::InvalidFormat => "quantized format parameters do not fit the shape",
            Error::InvalidChunkSize => "chunk_tokens is not a multiple of page_tokens",
            Error::NoPrefixIndex => "the cache has no prefix index",
            Error::NotPaged => "the call needs a paged sequence",
            Error::SequenceNotEmpty => "the call needs an empty sequence",
            Error::PromptMismatch => "prompt tokens differ from the sequence's published pages",
            Error::StaleHit => "prefix hit is stale: look up again",
            Error::HeadMismatch => "query heads are not a nonzero multiple of the KV heads",
            Error::BadMagic => "not a snapshot image (bad magic)",
            Error::UnsupportedVersion => "snapshot layout version not supported",
            Error::CorruptSnapshot => "snapshot header is damaged",
            Error::Truncated => "flash ends before the snapshot image",
            Error::CrcMismatch => "snapshot CRC-32 does not match",
            Error::FingerprintMismatch => "snapshot belongs to another model or namespace",
            Error::ConfigMismatch => "snapshot shape, formats or page size differ from the cache's",
            Error::FlashBounds => {
                "image does not fit the flash there, or flash geometry unsupported"
            }
            Error::Flash => "flash driver error",
            Error::WindowedSequence => "sequence has pages released by a sliding window",
            Error::FormatDisabled => "page format not compiled in (cargo feature off)",
        };
        f.write_str(msg)
    }
}

impl core::error::Error for Error {}

/// Shorthand for `core::result::Result<T, edgekv::Error>`.
pub type Result<T> = core::result::Result<T, Error>;
