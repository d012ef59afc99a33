//! Status codes: `0` is success, every failure a distinct negative `int32_t`, one per
//! [`edgekv::ConfigError`], [`edgekv::Error`], [`SnapshotError`] and [`HalError`] case plus the
//! ABI's own (null pointers, bad handles...).

use core::ffi::{CStr, c_char};

use edgekv::snapshot::SnapshotError;

use edgekv_hal::HalError;

/// The return type of every fallible `ekv_*` call: [`EKV_OK`] or a negative `EKV_ERR_*` code.
pub type EkvStatus = i32;

/// Success.
pub const EKV_OK: EkvStatus = 0;

// ---- The ABI's own failures (-1 ..= -99) ----

/// A required pointer is NULL (or a buffer pointer is NULL with a nonzero length).
pub const EKV_ERR_NULL: EkvStatus = -1;
/// The cache handle is not a live cache: never created, destroyed, zeroed, moved or copied
/// after creation, or not an `ekv_cache_t` at all (detected by a magic word bound to the
/// storage's address).
pub const EKV_ERR_BAD_HANDLE: EkvStatus = -2;
/// A pointer is not aligned for its element type (`float`: 4, `uint16_t`: 2, `uint32_t`: 4,
/// structs: their alignment), or the cache storage is not aligned to
/// `ekv_cache_storage_align()`.
pub const EKV_ERR_MISALIGNED_POINTER: EkvStatus = -3;
/// An enumeration argument or field is out of range (K/V selector, sequence mode, format kind,
/// allocator, pool, map kind), a reserved field is nonzero, or a window has sinks but no size.
pub const EKV_ERR_INVALID_ARGUMENT: EkvStatus = -4;
/// Buffers that must be distinct overlap: an output overlaps an input, another output, the
/// cache storage or one of its arenas (or the two arenas overlap each other).
pub const EKV_ERR_OVERLAP: EkvStatus = -5;
/// The cache is in use: a maintenance callback called back into the library with the same
/// cache, or `ekv_cache_create` was given the storage of a live cache (destroy it first).
pub const EKV_ERR_BUSY: EkvStatus = -6;
/// A cache-maintenance callback returned nonzero; the view stopped there.
pub const EKV_ERR_MAINTENANCE: EkvStatus = -7;
/// A buffer length times its element size does not fit in the address space.
pub const EKV_ERR_BAD_LENGTH: EkvStatus = -8;
/// No Ethos-U hooks are registered (`ekv_ethosu_last_error`).
pub const EKV_ERR_NOT_REGISTERED: EkvStatus = -9;
/// An error this version of the ABI has no code for (a newer library variant).
pub const EKV_ERR_UNKNOWN: EkvStatus = -99;

// ---- edgekv::ConfigError, edgekv::Error, edgekv::snapshot::SnapshotError (-100 ..= -199) ----

/// A configured size is zero (layers, heads, head_dim, page_tokens, sequences...).
pub const EKV_ERR_ZERO_SIZE: EkvStatus = -101;
/// `page_tokens` is not a power of two.
pub const EKV_ERR_PAGE_TOKENS_NOT_POWER_OF_TWO: EkvStatus = -102;
/// The data-arena alignment is not a power of two of at least 64.
pub const EKV_ERR_INVALID_ALIGNMENT: EkvStatus = -103;
/// A size computation overflowed.
pub const EKV_ERR_OVERFLOW: EkvStatus = -104;
/// An arena is smaller than the plan needs.
pub const EKV_ERR_ARENA_TOO_SMALL: EkvStatus = -105;
/// An arena does not start at the alignment the plan needs (data: `align`, metadata: 8).
pub const EKV_ERR_MISALIGNED_ARENA: EkvStatus = -106;
/// Not enough free or evictable pages.
pub const EKV_ERR_OUT_OF_PAGES: EkvStatus = -107;
/// No contiguous run of free pages of the needed length.
pub const EKV_ERR_NO_CONTIGUOUS_RUN: EkvStatus = -108;
/// The allocator cannot hand out contiguous runs (use `EKV_ALLOC_BITMAP`).
pub const EKV_ERR_CONTIGUOUS_UNSUPPORTED: EkvStatus = -109;
/// All sequence slots are in use.
pub const EKV_ERR_TOO_MANY_SEQUENCES: EkvStatus = -110;
/// Unknown or freed sequence (a stale `ekv_seq_t`).
pub const EKV_ERR_UNKNOWN_SEQUENCE: EkvStatus = -111;
/// The sequence would exceed `max_seq_tokens`.
pub const EKV_ERR_SEQUENCE_FULL: EkvStatus = -112;
/// A token position lies outside the sequence's reserved range, or in a page released by
/// `ekv_seq_slide`.
pub const EKV_ERR_POSITION_OUT_OF_RANGE: EkvStatus = -113;
/// The layer index is not below `layers`.
pub const EKV_ERR_LAYER_OUT_OF_RANGE: EkvStatus = -114;
/// A buffer has the wrong length for the call (not whole rows, K and V of different lengths,
/// attention scratch too short...).
pub const EKV_ERR_LENGTH_MISMATCH: EkvStatus = -115;
/// `truncate` was asked to grow a sequence.
pub const EKV_ERR_TRUNCATE_BEYOND_LENGTH: EkvStatus = -116;
/// A page id is out of range or in the wrong state.
pub const EKV_ERR_INVALID_PAGE: EkvStatus = -117;
/// Quantized format parameters do not fit the shape.
pub const EKV_ERR_INVALID_FORMAT: EkvStatus = -118;
/// `chunk_tokens` is not a multiple of `page_tokens`.
pub const EKV_ERR_INVALID_CHUNK_SIZE: EkvStatus = -119;
/// The cache was configured without a prefix index.
pub const EKV_ERR_NO_PREFIX_INDEX: EkvStatus = -120;
/// The call needs a paged sequence.
pub const EKV_ERR_NOT_PAGED: EkvStatus = -121;
/// The call needs an empty sequence.
pub const EKV_ERR_SEQUENCE_NOT_EMPTY: EkvStatus = -122;
/// Prompt tokens differ from the sequence's published pages, or are longer than the sequence.
pub const EKV_ERR_PROMPT_MISMATCH: EkvStatus = -123;
/// The prefix hit is stale (pages evicted, or another prompt): look up again.
pub const EKV_ERR_STALE_HIT: EkvStatus = -124;
/// Query heads are not a nonzero multiple of the KV heads.
pub const EKV_ERR_HEAD_MISMATCH: EkvStatus = -125;
/// A page format this build leaves out (its cargo feature is off).
pub const EKV_ERR_FORMAT_DISABLED: EkvStatus = -126;
/// A snapshot image does not start with the magic bytes.
pub const EKV_ERR_BAD_MAGIC: EkvStatus = -127;
/// A snapshot image has a layout version this build does not read.
pub const EKV_ERR_UNSUPPORTED_VERSION: EkvStatus = -128;
/// A snapshot header's fields contradict each other.
pub const EKV_ERR_CORRUPT_SNAPSHOT: EkvStatus = -129;
/// The flash ends before the snapshot image does.
pub const EKV_ERR_TRUNCATED: EkvStatus = -130;
/// A snapshot image's CRC-32 does not match its bytes.
pub const EKV_ERR_CRC_MISMATCH: EkvStatus = -131;
/// A snapshot was written for another model or namespace.
pub const EKV_ERR_FINGERPRINT_MISMATCH: EkvStatus = -132;
/// A snapshot's shape, formats (rotations included) or page size differ from the cache's.
pub const EKV_ERR_CONFIG_MISMATCH: EkvStatus = -133;
/// A snapshot does not fit the flash at that offset, or the flash geometry is unsupported.
pub const EKV_ERR_FLASH_BOUNDS: EkvStatus = -134;
/// The flash driver reported an error.
pub const EKV_ERR_FLASH: EkvStatus = -135;
/// The sequence has pages released by a sliding window.
pub const EKV_ERR_WINDOWED_SEQUENCE: EkvStatus = -136;
/// More layer groups than the cache supports.
pub const EKV_ERR_TOO_MANY_GROUPS: EkvStatus = -137;
/// A layer group is malformed (a run or period of 0, a window of 0, a listed group that takes
/// "the rest").
pub const EKV_ERR_INVALID_GROUP: EkvStatus = -138;
/// A layer group names a layer not below `layers`.
pub const EKV_ERR_GROUP_LAYER_OUT_OF_RANGE: EkvStatus = -139;
/// Two layer groups name the same layer.
pub const EKV_ERR_LAYER_IN_TWO_GROUPS: EkvStatus = -140;
/// The base layer group is left with no layer.
pub const EKV_ERR_EMPTY_GROUP: EkvStatus = -141;
/// The call does not take a configuration of several layer groups (yet).
pub const EKV_ERR_MULTIPLE_GROUPS: EkvStatus = -142;
/// `truncate` was asked to go further back than a windowed sequence keeps (its window plus
/// rollback positions): nothing changed.
pub const EKV_ERR_TRUNCATE_BEYOND_WINDOW: EkvStatus = -143;

// ---- edgekv_hal::HalError (-200 ..= -299) ----

/// A range is not contiguously mapped to device addresses.
pub const EKV_ERR_UNMAPPED: EkvStatus = -201;
/// Address arithmetic overflowed.
pub const EKV_ERR_ADDRESS_OVERFLOW: EkvStatus = -202;
/// A range is not aligned to cache lines.
pub const EKV_ERR_MISALIGNED: EkvStatus = -203;
/// A cache line size is not a nonzero power of two.
pub const EKV_ERR_INVALID_LINE_SIZE: EkvStatus = -204;
/// An address-map window has length zero.
pub const EKV_ERR_EMPTY_WINDOW: EkvStatus = -205;
/// Address-map windows overlap in CPU address space.
pub const EKV_ERR_WINDOW_OVERLAP: EkvStatus = -206;
/// An output buffer is too short; the call's count output (where it has one) holds the
/// entries needed.
pub const EKV_ERR_BUFFER_TOO_SMALL: EkvStatus = -207;
/// A buffer's length does not match the shape it must hold (staging tensors).
pub const EKV_ERR_SHAPE_MISMATCH: EkvStatus = -208;
/// The operation needs the memory itself, not an address.
pub const EKV_ERR_UNSUPPORTED: EkvStatus = -209;
/// Unknown NPU job.
pub const EKV_ERR_UNKNOWN_JOB: EkvStatus = -210;
/// The NPU queue is full.
pub const EKV_ERR_QUEUE_FULL: EkvStatus = -211;

/// A failed call: its status code. `?` converts core and HAL errors into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fail(pub(crate) EkvStatus);

/// The result of an ABI call before it is flattened to a status code.
pub(crate) type Res<T> = Result<T, Fail>;

impl From<edgekv::Error> for Fail {
    fn from(e: edgekv::Error) -> Self {
        Fail(core_code(e))
    }
}

impl From<edgekv::ConfigError> for Fail {
    fn from(e: edgekv::ConfigError) -> Self {
        Fail(config_code(e))
    }
}

impl From<SnapshotError> for Fail {
    fn from(e: SnapshotError) -> Self {
        Fail(snapshot_code(e))
    }
}

impl From<HalError> for Fail {
    fn from(e: HalError) -> Self {
        Fail(hal_code(e))
    }
}

/// Flattens a result to a status code.
pub(crate) fn status(r: Res<()>) -> EkvStatus {
    match r {
        Ok(()) => EKV_OK,
        Err(Fail(code)) => code,
    }
}

/// The code of a configuration error.
pub(crate) const fn config_code(e: edgekv::ConfigError) -> EkvStatus {
    use edgekv::ConfigError as C;
    match e {
        C::ZeroSize => EKV_ERR_ZERO_SIZE,
        C::PageTokensNotPowerOfTwo => EKV_ERR_PAGE_TOKENS_NOT_POWER_OF_TWO,
        C::InvalidAlignment => EKV_ERR_INVALID_ALIGNMENT,
        C::Overflow => EKV_ERR_OVERFLOW,
        C::ArenaTooSmall => EKV_ERR_ARENA_TOO_SMALL,
        C::MisalignedArena => EKV_ERR_MISALIGNED_ARENA,
        C::InvalidFormat => EKV_ERR_INVALID_FORMAT,
        C::InvalidChunkSize => EKV_ERR_INVALID_CHUNK_SIZE,
        C::FormatDisabled => EKV_ERR_FORMAT_DISABLED,
        C::TooManyGroups => EKV_ERR_TOO_MANY_GROUPS,
        C::InvalidGroup => EKV_ERR_INVALID_GROUP,
        C::GroupLayerOutOfRange => EKV_ERR_GROUP_LAYER_OUT_OF_RANGE,
        C::LayerInTwoGroups => EKV_ERR_LAYER_IN_TWO_GROUPS,
        C::EmptyGroup => EKV_ERR_EMPTY_GROUP,
        C::MultipleGroups => EKV_ERR_MULTIPLE_GROUPS,
        _ => EKV_ERR_UNKNOWN,
    }
}

/// The code of a core error (a configuration error gets its own code).
pub(crate) const fn core_code(e: edgekv::Error) -> EkvStatus {
    use edgekv::Error as E;
    match e {
        E::Config(c) => config_code(c),
        E::OutOfPages => EKV_ERR_OUT_OF_PAGES,
        E::NoContiguousRun => EKV_ERR_NO_CONTIGUOUS_RUN,
        E::ContiguousUnsupported => EKV_ERR_CONTIGUOUS_UNSUPPORTED,
        E::TooManySequences => EKV_ERR_TOO_MANY_SEQUENCES,
        E::UnknownSequence => EKV_ERR_UNKNOWN_SEQUENCE,
        E::SequenceFull => EKV_ERR_SEQUENCE_FULL,
        E::PositionOutOfRange => EKV_ERR_POSITION_OUT_OF_RANGE,
        E::LayerOutOfRange => EKV_ERR_LAYER_OUT_OF_RANGE,
        E::LengthMismatch => EKV_ERR_LENGTH_MISMATCH,
        E::TruncateBeyondLength => EKV_ERR_TRUNCATE_BEYOND_LENGTH,
        E::InvalidPage => EKV_ERR_INVALID_PAGE,
        E::NoPrefixIndex => EKV_ERR_NO_PREFIX_INDEX,
        E::NotPaged => EKV_ERR_NOT_PAGED,
        E::SequenceNotEmpty => EKV_ERR_SEQUENCE_NOT_EMPTY,
        E::PromptMismatch => EKV_ERR_PROMPT_MISMATCH,
        E::StaleHit => EKV_ERR_STALE_HIT,
        E::HeadMismatch => EKV_ERR_HEAD_MISMATCH,
        E::TruncateBeyondWindow => EKV_ERR_TRUNCATE_BEYOND_WINDOW,
        _ => EKV_ERR_UNKNOWN,
    }
}

/// The code of a snapshot error (a wrapped core error gets the core's code; every flash
/// driver error kind is [`EKV_ERR_FLASH`]).
pub(crate) const fn snapshot_code(e: SnapshotError) -> EkvStatus {
    use SnapshotError as S;
    match e {
        S::Cache(e) => core_code(e),
        S::WindowedSequence => EKV_ERR_WINDOWED_SEQUENCE,
        S::BadMagic => EKV_ERR_BAD_MAGIC,
        S::UnsupportedVersion => EKV_ERR_UNSUPPORTED_VERSION,
        S::CorruptSnapshot => EKV_ERR_CORRUPT_SNAPSHOT,
        S::Truncated => EKV_ERR_TRUNCATED,
        S::CrcMismatch => EKV_ERR_CRC_MISMATCH,
        S::FingerprintMismatch => EKV_ERR_FINGERPRINT_MISMATCH,
        S::ConfigMismatch => EKV_ERR_CONFIG_MISMATCH,
        S::FlashBounds => EKV_ERR_FLASH_BOUNDS,
        S::Flash(_) => EKV_ERR_FLASH,
        _ => EKV_ERR_UNKNOWN,
    }
}

/// The code of a HAL error (a wrapped core error gets the core's code).
pub(crate) const fn hal_code(e: HalError) -> EkvStatus {
    match e {
        HalError::Unmapped => EKV_ERR_UNMAPPED,
        HalError::Overflow => EKV_ERR_ADDRESS_OVERFLOW,
        HalError::Misaligned => EKV_ERR_MISALIGNED,
        HalError::InvalidLineSize => EKV_ERR_INVALID_LINE_SIZE,
        HalError::EmptyWindow => EKV_ERR_EMPTY_WINDOW,
        HalError::Overlap => EKV_ERR_WINDOW_OVERLAP,
        HalError::Cache(e) => core_code(e),
        HalError::BufferTooSmall { .. } => EKV_ERR_BUFFER_TOO_SMALL,
        HalError::LengthMismatch => EKV_ERR_SHAPE_MISMATCH,
        HalError::Unsupported => EKV_ERR_UNSUPPORTED,
        HalError::UnknownJob => EKV_ERR_UNKNOWN_JOB,
        HalError::QueueFull => EKV_ERR_QUEUE_FULL,
        #[allow(unreachable_patterns)]
        _ => EKV_ERR_UNKNOWN,
    }
}

/// The message of a status code (static, NUL-terminated).
pub(crate) const fn message(code: EkvStatus) -> &'static CStr {
    match code {
        EKV_OK => c"ok",
        EKV_ERR_NULL => c"required pointer is NULL",
        EKV_ERR_BAD_HANDLE => c"not a live cache handle",
        EKV_ERR_MISALIGNED_POINTER => c"pointer not aligned for its type",
        EKV_ERR_INVALID_ARGUMENT => c"enumeration value or reserved field out of range",
        EKV_ERR_OVERLAP => c"buffers overlap each other, the cache storage or its arenas",
        EKV_ERR_BUSY => c"cache is busy (re-entered from a callback) or storage holds a live cache",
        EKV_ERR_MAINTENANCE => c"cache-maintenance callback failed",
        EKV_ERR_BAD_LENGTH => c"buffer length overflows the address space",
        EKV_ERR_NOT_REGISTERED => c"no Ethos-U hooks registered",
        EKV_ERR_ZERO_SIZE => c"a configured size is zero",
        EKV_ERR_PAGE_TOKENS_NOT_POWER_OF_TWO => c"page_tokens is not a power of two",
        EKV_ERR_INVALID_ALIGNMENT => c"alignment is not a power of two of at least 64",
        EKV_ERR_OVERFLOW => c"size computation overflowed",
        EKV_ERR_ARENA_TOO_SMALL => c"arena too small for the plan",
        EKV_ERR_MISALIGNED_ARENA => c"arena start is not aligned as the plan needs",
        EKV_ERR_OUT_OF_PAGES => c"not enough free or evictable pages",
        EKV_ERR_NO_CONTIGUOUS_RUN => c"no contiguous run of free pages of the needed length",
        EKV_ERR_CONTIGUOUS_UNSUPPORTED => c"allocator cannot hand out contiguous runs",
        EKV_ERR_TOO_MANY_SEQUENCES => c"all sequence slots are in use",
        EKV_ERR_UNKNOWN_SEQUENCE => c"unknown or freed sequence",
        EKV_ERR_SEQUENCE_FULL => c"sequence would exceed max_seq_tokens",
        EKV_ERR_POSITION_OUT_OF_RANGE => c"token position outside the reserved range",
        EKV_ERR_LAYER_OUT_OF_RANGE => c"layer index out of range",
        EKV_ERR_LENGTH_MISMATCH => c"buffer length does not match the call",
        EKV_ERR_TRUNCATE_BEYOND_LENGTH => c"truncate length exceeds the sequence length",
        EKV_ERR_INVALID_PAGE => c"page id out of range or in the wrong state",
        EKV_ERR_INVALID_FORMAT => c"quantized format parameters do not fit the shape",
        EKV_ERR_INVALID_CHUNK_SIZE => c"chunk_tokens is not a multiple of page_tokens",
        EKV_ERR_NO_PREFIX_INDEX => c"the cache has no prefix index",
        EKV_ERR_NOT_PAGED => c"the call needs a paged sequence",
        EKV_ERR_SEQUENCE_NOT_EMPTY => c"the call needs an empty sequence",
        EKV_ERR_PROMPT_MISMATCH => c"prompt tokens differ from the sequence's published pages",
        EKV_ERR_STALE_HIT => c"prefix hit is stale: look up again",
        EKV_ERR_HEAD_MISMATCH => c"query heads are not a nonzero multiple of the KV heads",
        EKV_ERR_FORMAT_DISABLED => c"page format not compiled in (cargo feature off)",
        EKV_ERR_BAD_MAGIC => c"not a snapshot image (bad magic)",
        EKV_ERR_UNSUPPORTED_VERSION => c"snapshot layout version not supported",
        EKV_ERR_CORRUPT_SNAPSHOT => c"snapshot header is damaged",
        EKV_ERR_TRUNCATED => c"flash ends before the snapshot image",
        EKV_ERR_CRC_MISMATCH => c"snapshot CRC-32 does not match",
        EKV_ERR_FINGERPRINT_MISMATCH => c"snapshot belongs to another model or namespace",
        EKV_ERR_CONFIG_MISMATCH => c"snapshot shape, formats or page size differ from the cache's",
        EKV_ERR_FLASH_BOUNDS => {
            c"image does not fit the flash there, or flash geometry unsupported"
        }
        EKV_ERR_FLASH => c"flash driver error",
        EKV_ERR_WINDOWED_SEQUENCE => c"sequence has pages released by a sliding window",
        EKV_ERR_UNMAPPED => c"range is not contiguously mapped to device addresses",
        EKV_ERR_ADDRESS_OVERFLOW => c"address arithmetic overflowed",
        EKV_ERR_MISALIGNED => c"range is not aligned to cache lines",
        EKV_ERR_INVALID_LINE_SIZE => c"cache line size is not a nonzero power of two",
        EKV_ERR_EMPTY_WINDOW => c"address-map window has length zero",
        EKV_ERR_WINDOW_OVERLAP => c"address-map windows overlap in CPU address space",
        EKV_ERR_BUFFER_TOO_SMALL => c"output buffer too small",
        EKV_ERR_SHAPE_MISMATCH => c"buffer length does not match its shape",
        EKV_ERR_UNSUPPORTED => c"operation needs the memory slice, not an address",
        EKV_ERR_UNKNOWN_JOB => c"unknown NPU job",
        EKV_ERR_QUEUE_FULL => c"NPU queue is full",
        EKV_ERR_UNKNOWN => c"unknown error",
        _ => c"not an edgekv status code",
    }
}

/// A static, NUL-terminated English description of `status` (never NULL; unknown codes give
/// `"not an edgekv status code"`).
#[unsafe(no_mangle)]
pub extern "C" fn ekv_strerror(status: EkvStatus) -> *const c_char {
    message(status).as_ptr()
}
