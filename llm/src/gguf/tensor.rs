//! Tensor types and tensor views into the file.

use super::GgufError;

/// The ggml tensor types this crate reads: ggml's ids, block sizes and block bytes
/// (`ggml-common.h`'s `block_*` layouts, all little-endian, f16 scales).
#[allow(non_camel_case_types)] // ggml's names
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorType {
    /// 32-bit floats (ggml type 0).
    F32,
    /// 4-bit blocks of 32 with an f16 scale, values `q − 8`, 18 bytes (ggml type 2).
    Q4_0,
    /// 4-bit blocks of 32 with an f16 scale and an f16 minimum, 20 bytes (ggml type 3).
    Q4_1,
    /// 5-bit blocks of 32 with an f16 scale, values `q − 16`, 22 bytes (ggml type 6).
    Q5_0,
    /// 5-bit blocks of 32 with an f16 scale and an f16 minimum, 24 bytes (ggml type 7).
    Q5_1,
    /// 8-bit blocks of 32 with an f16 scale, 34 bytes (ggml type 8).
    Q8_0,
    /// 4-bit super-blocks of 256: eight 32-value sub-blocks with 6-bit scales and minimums under
    /// an f16 scale and an f16 minimum, 144 bytes (ggml type 12).
    Q4_K,
    /// 5-bit super-blocks of 256, Q4_K's scales plus a high-bit plane, 176 bytes (ggml type 13).
    Q5_K,
    /// 6-bit super-blocks of 256: sixteen 16-value sub-blocks with i8 scales under an f16
    /// scale, values `q − 32`, 210 bytes (ggml type 14).
    Q6_K,
}

/// Values per K-quant super-block (ggml's `QK_K`).
pub const QK_K: usize = 256;

impl TensorType {
    /// The type with ggml id `id`; other ids are
    /// [`UnsupportedTensorType`](GgufError::UnsupportedTensorType).
    ///
    /// # Errors
    ///
    /// [`UnsupportedTensorType`](GgufError::UnsupportedTensorType) for another id.
    pub fn from_id(id: u32) -> Result<Self, GgufError> {
        Ok(match id {
            0 => TensorType::F32,
            2 => TensorType::Q4_0,
            3 => TensorType::Q4_1,
            6 => TensorType::Q5_0,
            7 => TensorType::Q5_1,
            8 => TensorType::Q8_0,
            12 => TensorType::Q4_K,
            13 => TensorType::Q5_K,
            14 => TensorType::Q6_K,
            _ => return Err(GgufError::UnsupportedTensorType(id)),
        })
    }

    /// The ggml id.
    pub const fn id(self) -> u32 {
        match self {
            TensorType::F32 => 0,
            TensorType::Q4_0 => 2,
            TensorType::Q4_1 => 3,
            TensorType::Q5_0 => 6,
            TensorType::Q5_1 => 7,
            TensorType::Q8_0 => 8,
            TensorType::Q4_K => 12,
            TensorType::Q5_K => 13,
            TensorType::Q6_K => 14,
        }
    }

    /// Values per block (1 for F32, [`QK_K`] for the K-quants, 32 for the others).
    pub const fn block_values(self) -> usize {
        match self {
            TensorType::F32 => 1,
            TensorType::Q4_0
            | TensorType::Q4_1
            | TensorType::Q5_0
            | TensorType::Q5_1
            | TensorType::Q8_0 => 32,
            TensorType::Q4_K | TensorType::Q5_K | TensorType::Q6_K => QK_K,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            TensorType::F32 => 4,
            TensorType::Q4_0 => 18,
            TensorType::Q4_1 => 20,
            TensorType::Q5_0 => 22,
            TensorType::Q5_1 => 24,
            TensorType::Q8_0 => 34,
            TensorType::Q4_K => 144,
            TensorType::Q5_K => 176,
            TensorType::Q6_K => 210,
        }
    }

    /// Bytes of a row of `values` values (a whole number of blocks), or `None` if it is not.
    pub const fn row_bytes(self, values: usize) -> Option<usize> {
        if values % self.block_values() != 0 {
            return None;
        }
        (values / self.block_values()).checked_mul(self.block_bytes())
    }
}

/// A tensor in place: name, type, shape (ggml order: `dims[0]` is the contiguous dimension) and
/// its data bytes inside the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tensor<'a> {
    /// Name (`blk.0.attn_q.weight`, …).
    pub name: &'a str,
    /// Type.
    pub ty: TensorType,
    /// Number of dimensions used (1..=4).
    pub n_dims: u32,
    /// Dimensions, ggml order; unused ones are 1.
    pub dims: [usize; 4],
    /// The data (exactly the tensor's bytes).
    pub data: &'a [u8],
}

impl<'a> Tensor<'a> {
    /// Values in one row (`dims[0]`).
    pub fn row_len(&self) -> usize {
        self.dims[0]
    }

    /// Rows: the product of `dims[1..]`.
    pub fn rows(&self) -> usize {
        self.dims[1] * self.dims[2] * self.dims[3]
    }
}

/// Byte size of a tensor of type `ty` and shape `dims`, checked: zero dimensions are
/// [`BadShape`](GgufError::BadShape), rows that are not whole blocks
/// [`PartialBlock`](GgufError::PartialBlock), products past `usize`
/// [`Overflow`](GgufError::Overflow).
pub(crate) fn tensor_bytes(ty: TensorType, dims: &[usize; 4]) -> Result<usize, GgufError> {
    if dims.contains(&0) {
        return Err(GgufError::BadShape);
    }
    if dims[0] % ty.block_values() != 0 {
        return Err(GgufError::PartialBlock {
            type_id: ty.id(),
            row_len: dims[0],
        });
    }
    let row = ty.row_bytes(dims[0]).ok_or(GgufError::Overflow)?;
    dims[1..]
        .iter()
        .try_fold(row, |acc, &d| acc.checked_mul(d))
        .ok_or(GgufError::Overflow)
}
