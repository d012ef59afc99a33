//! Why a GGUF file was refused.

use core::fmt;

/// A GGUF file the reader refuses, with the reason. Every malformed input maps to one of these;
/// the reader never panics and never reads outside the slice it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufError {
    /// The file ends inside a structure that starts at byte `at`.
    Truncated {
        /// Offset of the structure that does not fit.
        at: usize,
    },
    /// The first four bytes are not `GGUF`.
    BadMagic,
    /// A version other than 3.
    UnsupportedVersion(u32),
    /// A metadata value type id outside the GGUF specification (0..=12).
    BadValueType(u32),
    /// Arrays nested deeper than [`MAX_NESTING`](crate::gguf::MAX_NESTING).
    NestingTooDeep,
    /// A metadata key or tensor name that is not UTF-8.
    BadUtf8,
    /// A size or offset computation overflowed (`u64`/`usize` counts beyond the address space).
    Overflow,
    /// `general.alignment` is not a nonzero power of two, or has a type other than u32.
    BadAlignment(u32),
    /// A tensor with 0 or more than four dimensions.
    BadDimensions(u32),
    /// A tensor with a zero dimension.
    BadShape,
    /// A tensor whose rows (first dimension) are not a whole number of its type's blocks (32
    /// values, or 256 for the K-quants).
    PartialBlock {
        /// The tensor's ggml type id.
        type_id: u32,
        /// Its row length in values.
        row_len: usize,
    },
    /// A ggml tensor type this reader does not support (it reads F32, Q4_0, Q4_1, Q5_0, Q5_1,
    /// Q8_0, Q4_K, Q5_K and Q6_K).
    UnsupportedTensorType(u32),
    /// A tensor's data offset is not a multiple of the alignment.
    MisalignedTensor,
    /// A tensor's data lies (partly) outside the file.
    TensorOutOfBounds,
    /// Two tensors with the same name.
    DuplicateTensor,
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgufError::Truncated { at } => write!(f, "GGUF truncated at byte {at}"),
            GgufError::BadMagic => f.write_str("not a GGUF file (bad magic)"),
            GgufError::UnsupportedVersion(v) => write!(f, "GGUF version {v} (only 3 is read)"),
            GgufError::BadValueType(t) => write!(f, "unknown GGUF value type {t}"),
            GgufError::NestingTooDeep => f.write_str("GGUF arrays nested too deep"),
            GgufError::BadUtf8 => f.write_str("GGUF key or tensor name is not UTF-8"),
            GgufError::Overflow => f.write_str("GGUF size computation overflows"),
            GgufError::BadAlignment(a) => write!(f, "GGUF alignment {a} is not a power of two"),
            GgufError::BadDimensions(n) => write!(f, "tensor with {n} dimensions"),
            GgufError::BadShape => f.write_str("tensor has a zero dimension"),
            GgufError::PartialBlock { type_id, row_len } => write!(
                f,
                "tensor rows of {row_len} values are not whole blocks of ggml type {type_id}"
            ),
            GgufError::UnsupportedTensorType(t) => write!(f, "unsupported ggml tensor type {t}"),
            GgufError::MisalignedTensor => f.write_str("tensor data offset is misaligned"),
            GgufError::TensorOutOfBounds => f.write_str("tensor data lies outside the file"),
            GgufError::DuplicateTensor => f.write_str("two tensors share a name"),
        }
    }
}

impl core::error::Error for GgufError {}
