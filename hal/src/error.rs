//! The error type shared by every HAL operation.

use core::fmt;

/// Why a HAL operation was refused.
///
/// Every fallible operation in this crate checks its inputs before touching
/// anything, so an error from a check means *nothing was done*: no address was
/// handed out, no cache line was cleaned or invalidated and no output written.
/// A failure of the cache-maintenance implementation itself stops the operation
/// before its outputs are written too, except in [`gather`](crate::gather),
/// whose clean must follow the copy into the staging tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum HalError {
    /// Some byte of the range has no device address, or the range is not
    /// contiguous on the device side.
    Unmapped,
    /// An address computation (range end, window end, line rounding) does not
    /// fit in `usize` (CPU side) or `u64` (device side).
    Overflow,
    /// A cache-maintenance range does not start and end on cache-line
    /// boundaries.
    Misaligned,
    /// A cache line size is zero or not a power of two.
    InvalidLineSize,
    /// An address-map window has length zero.
    EmptyWindow,
    /// Two address-map windows share CPU addresses, so a lookup would be
    /// ambiguous.
    Overlap,
    /// The cache refused the request (unknown sequence, layer or page…).
    Cache(edgekv::Error),
    /// An output slice is too short; `needed` entries would hold the answer.
    BufferTooSmall {
        /// Entries the answer needs.
        needed: u32,
    },
    /// A buffer's length does not match the shape it must hold.
    LengthMismatch,
    /// The operation needs the memory itself (a slice), which an address cannot give: the
    /// simulated cache's address-only methods.
    Unsupported,
    /// No NPU job has this id, or its result was already taken.
    UnknownJob,
    /// The NPU queue holds as many jobs as it can.
    QueueFull,
}

impl From<edgekv::Error> for HalError {
    fn from(e: edgekv::Error) -> Self {
        HalError::Cache(e)
    }
}

impl From<edgekv::ConfigError> for HalError {
    fn from(e: edgekv::ConfigError) -> Self {
        HalError::Cache(e.into())
    }
}

impl fmt::Display for HalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unmapped => "range is not contiguously mapped to device addresses",
            Self::Overflow => "address arithmetic overflowed",
            Self::Misaligned => "range is not aligned to cache lines",
            Self::InvalidLineSize => "cache line size is not a non-zero power of two",
            Self::EmptyWindow => "address-map window has length zero",
            Self::Overlap => "address-map windows overlap in CPU address space",
            Self::Cache(e) => return write!(f, "cache: {e}"),
            Self::BufferTooSmall { needed } => {
                return write!(f, "output buffer too small: {needed} entries needed");
            }
            Self::LengthMismatch => "buffer length does not match its shape",
            Self::Unsupported => "operation needs the memory slice, not an address",
            Self::UnknownJob => "unknown NPU job",
            Self::QueueFull => "NPU queue is full",
        })
    }
}

impl core::error::Error for HalError {}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [HalError; 12] = [
        HalError::BufferTooSmall { needed: 3 },
        HalError::LengthMismatch,
        HalError::Unsupported,
        HalError::UnknownJob,
        HalError::QueueFull,
        HalError::Cache(edgekv::Error::InvalidPage),
        HalError::Unmapped,
        HalError::Overflow,
        HalError::Misaligned,
        HalError::InvalidLineSize,
        HalError::EmptyWindow,
        HalError::Overlap,
    ];

    #[test]
    fn display_is_distinct_and_non_empty() {
        for (i, a) in ALL.iter().enumerate() {
            let sa = a.to_string();
            assert!(!sa.is_empty());
            for b in &ALL[i + 1..] {
                assert_ne!(sa, b.to_string());
            }
        }
    }

    #[test]
    fn is_a_core_error() {
        fn takes(_: &dyn core::error::Error) {}
        takes(&HalError::Overflow);
        let copy = HalError::Misaligned;
        let again = copy;
        assert_eq!(copy, again);
    }
}
