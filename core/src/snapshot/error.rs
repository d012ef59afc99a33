//! [`SnapshotError`]: why an image could not be written or restored.

use core::fmt;

use embedded_storage::nor_flash::NorFlashErrorKind;

use crate::error::{ConfigError, Error};

/// Why [`KvCache::snapshot`](crate::KvCache::snapshot),
/// [`KvCache::restore`](crate::KvCache::restore) or their
/// [`GroupedCache`](crate::GroupedCache) forms failed: the image (damaged, another model, another
/// cache layout), the flash (too small, unsupported geometry, a driver error with the driver's
/// [`NorFlashErrorKind`]), or the cache itself ([`Cache`](SnapshotError::Cache): an unknown
/// sequence, no pages left for the restored one...). Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The cache refused the call (see [`Error`]); [`Error::Config`] for a configuration whose
    /// image would not plan or would pass 4 GiB.
    Cache(Error),
    /// The sequence has pages released by a sliding window; a snapshot needs every page.
    WindowedSequence,
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
    /// The flash driver reported an error, of this kind.
    Flash(NorFlashErrorKind),
    /// A [`SnapshotStore`](super::SnapshotStore) holds no committed image that is intact.
    NoImage,
    /// The image is a grouped one (layout [`VERSION`](super::VERSION)): several layer groups, or
    /// positions released by a sliding window. [`KvCache::restore`](crate::KvCache::restore)
    /// does not read it; [`GroupedCache::restore`](crate::GroupedCache::restore) does.
    GroupedImage,
    /// A grouped image's entry of one layer group contradicts the rest of the header: its layers,
    /// window or formats do not form a valid configuration, or the positions it says were
    /// released are not ones its window releases, or its page count does not follow (damage).
    CorruptGroupEntry,
    /// The image has another number of layer groups than the cache.
    GroupCountMismatch,
    /// A layer group of the image holds other layers than the cache's group of that index.
    GroupLayersMismatch,
    /// A layer group of the image has another sliding window (size, sinks or rollback) than the
    /// cache's group of that index.
    GroupWindowMismatch,
    /// A layer group of the image has other K / V formats or rotations than the cache's group of
    /// that index.
    GroupFormatMismatch,
}

impl From<Error> for SnapshotError {
    fn from(e: Error) -> Self {
        SnapshotError::Cache(e)
    }
}

impl From<ConfigError> for SnapshotError {
    fn from(e: ConfigError) -> Self {
        SnapshotError::Cache(Error::Config(e))
    }
}

impl SnapshotError {
    /// The error's English description (what `Display` writes, without a flash error's kind).
    pub const fn message(self) -> &'static str {
        match self {
            SnapshotError::Cache(e) => e.message(),
            SnapshotError::WindowedSequence => "sequence has pages released by a sliding window",
            SnapshotError::BadMagic => "not a snapshot image (bad magic)",
            SnapshotError::UnsupportedVersion => "snapshot layout version not supported",
            SnapshotError::CorruptSnapshot => "snapshot header is damaged",
            SnapshotError::Truncated => "flash ends before the snapshot image",
            SnapshotError::CrcMismatch => "snapshot CRC-32 does not match",
            SnapshotError::FingerprintMismatch => "snapshot belongs to another model or namespace",
            SnapshotError::ConfigMismatch => {
                "snapshot shape, formats or page size differ from the cache's"
            }
            SnapshotError::FlashBounds => {
                "image does not fit the flash there, or flash geometry unsupported"
            }
            SnapshotError::Flash(_) => "flash driver error",
            SnapshotError::NoImage => "no intact committed snapshot image in the store",
            SnapshotError::GroupedImage => "grouped snapshot image: restore it with a GroupedCache",
            SnapshotError::CorruptGroupEntry => "snapshot layer-group entry is damaged",
            SnapshotError::GroupCountMismatch => "snapshot has another number of layer groups",
            SnapshotError::GroupLayersMismatch => "a snapshot layer group holds other layers",
            SnapshotError::GroupWindowMismatch => "a snapshot layer group has another window",
            SnapshotError::GroupFormatMismatch => {
                "a snapshot layer group has other formats or rotations"
            }
        }
    }
}

/// The name of a flash error kind (`NorFlashErrorKind` has no `defmt::Format`).
const fn kind_name(kind: NorFlashErrorKind) -> &'static str {
    match kind {
        NorFlashErrorKind::NotAligned => "not aligned",
        NorFlashErrorKind::OutOfBounds => "out of bounds",
        _ => "other",
    }
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())?;
        match self {
            SnapshotError::Flash(kind) => write!(f, " ({})", kind_name(*kind)),
            _ => Ok(()),
        }
    }
}

impl core::error::Error for SnapshotError {}

#[cfg(feature = "defmt")]
impl defmt::Format for SnapshotError {
    fn format(&self, f: defmt::Formatter<'_>) {
        match self {
            SnapshotError::Cache(e) => defmt::write!(f, "Cache({})", e),
            SnapshotError::Flash(kind) => defmt::write!(f, "Flash({=str})", kind_name(*kind)),
            other => defmt::write!(f, "{=str}", other.message()),
        }
    }
}
