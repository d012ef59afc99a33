//! Tensor types and tensor views into the file.

use super::GgufError;

/// The ggml tensor types this crate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorType {
    /// 32-bit floats (ggml type 0).
    F32,
    /// 4-bit blocks of 32 with an f16 scale and an f16 minimum, 20 bytes (ggml type 3).
    Q4_1,
    /// 8-bit blocks of 32 with an f16 scale, 34 bytes (ggml type 8).
    Q8_0,
}

impl TensorType {
    /// The type with ggml id `id`; other ids are
    /// [`UnsupportedTensorType`](GgufError::UnsupportedTensorType).
    ///
    /// # Errors
    ///
    /// [`UnsupportedTensorType`](GgufError::UnsupportedTensorType) for another id.
    pub fn from_id(id: u32) -> Result<Self, GgufError> {
        match id {
            0 => Ok(TensorType::F32),
            3 => Ok(TensorType::Q4_1),
            8 => Ok(TensorType::Q8_0),
            _ => Err(GgufError::UnsupportedTensorType(id)),
        }
    }

    /// The ggml id.
    pub const fn id(self) -> u32 {
        match self {
            TensorType::F32 => 0,
            TensorType::Q4_1 => 3,
            TensorType::Q8_0 => 8,
        }
    }

    /// Values per block (1 for F32).
    pub const fn block_values(self) -> usize {
        match self {
            TensorType::F32 => 1,
            TensorType::Q4_1 | TensorType::Q8_0 => 32,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            TensorType::F32 => 4,
            TensorType::Q4_1 => 20,
            TensorType::Q8_0 => 34,
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

/// Byte size of a tensor of type `ty` and shape `dims`, checked: zero dimensions and rows that
/// are not whole blocks are [`BadShape`](GgufError::BadShape), products past `usize`
/// [`Overflow`](GgufError::Overflow).
pub(crate) fn tensor_bytes(ty: TensorType, dims: &[usize; 4]) -> Result<usize, GgufError> {
    if dims.contains(&0) {
        return Err(GgufError::BadShape);
    }
    let row = ty.row_bytes(dims[0]).ok_or(GgufError::BadShape)?;
    dims[1..]
        .iter()
        .try_fold(row, |acc, &d| acc.checked_mul(d))
        .ok_or(GgufError::Overflow)
}
