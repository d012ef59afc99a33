//! A GGUF v3 reader that parses in place: the header, metadata and tensor table are validated
//! once by [`Gguf::parse`], then read straight from the slice (no copies, no allocation); tensor
//! data stays where it is.
//!
//! Layout (all little-endian): magic `GGUF`, version u32 (3), tensor count u64, metadata count
//! u64; the metadata key/value pairs (key: u64 length + UTF-8; value type u32; value); the tensor
//! infos (name; dimension count u32; dimensions u64 each; ggml type u32; data offset u64); then,
//! at the next multiple of the alignment (`general.alignment`, default 32), the data section,
//! where each tensor's offset is relative to the section's start and a multiple of the
//! alignment.

mod cursor;
mod error;
mod tensor;
mod value;

pub use error::GgufError;
pub use tensor::{QK_K, Tensor, TensorType};
pub use value::{Array, ArrayIter, MAX_NESTING, Value, ValueType};

use cursor::Cursor;
use tensor::tensor_bytes;
use value::read_value;

/// `GGUF` as a little-endian u32.
pub const MAGIC: u32 = 0x4655_4747;
/// The version this reader reads.
pub const VERSION: u32 = 3;
/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;
/// At most this many dimensions per tensor (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;

/// A validated GGUF file in memory.
#[derive(Debug, Clone, Copy)]
pub struct Gguf<'a> {
    bytes: &'a [u8],
    metadata_count: u64,
    tensor_count: u64,
    /// Offset of the first metadata pair.
    metadata_at: usize,
    /// Offset of the first tensor info.
    tensors_at: usize,
    /// Offset of the data section.
    data_at: usize,
    alignment: usize,
}

impl<'a> Gguf<'a> {
    /// Parses and validates `bytes`: header, every metadata value (arrays included, nested at
    /// most [`MAX_NESTING`] deep), every tensor info (type supported, shape whole blocks, data
    /// aligned and inside the file, names unique and UTF-8). All arithmetic is checked, so any
    /// input gives `Ok` or a [`GgufError`].
    ///
    /// # Errors
    ///
    /// A [`GgufError`] naming the first thing that is wrong: truncation, magic, version, a value
    /// type, UTF-8, nesting, alignment, or a tensor's dimensions, shape, type, offset or name.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, GgufError> {
        let mut c = Cursor::new(bytes, 0);
        if c.u32()? != MAGIC {
            return Err(GgufError::BadMagic);
        }
        let version = c.u32()?;
        if version != VERSION {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let tensor_count = c.u64()?;
        let metadata_count = c.u64()?;
        let metadata_at = c.pos();
        let mut alignment = DEFAULT_ALIGNMENT;
        // Each pair takes at least 12 bytes, so these loops are bounded by the file's length.
        for _ in 0..metadata_count {
            let (key, value) = read_pair(&mut c)?;
            if key == "general.alignment" {
                alignment = match value {
                    Value::U32(a) if a.is_power_of_two() => a as usize,
                    Value::U32(a) => return Err(GgufError::BadAlignment(a)),
                    _ => return Err(GgufError::BadAlignment(0)),
                };
            }
        }
        let tensors_at = c.pos();
        for _ in 0..tensor_count {
            read_info(&mut c)?;
        }
        let data_at = align_up(c.pos(), alignment).ok_or(GgufError::Overflow)?;
        let gguf = Gguf {
            bytes,
            metadata_count,
            tensor_count,
            metadata_at,
            tensors_at,
            data_at,
            alignment,
        };
        // Second pass: offsets, bounds and unique names (needs the data section's start).
        let mut c = Cursor::new(bytes, tensors_at);
        for i in 0..tensor_count {
            let info = read_info(&mut c)?;
            gguf.locate(&info)?;
            let mut d = Cursor::new(bytes, tensors_at);
            for _ in 0..i {
                if read_info(&mut d)?.name == info.name {
                    return Err(GgufError::DuplicateTensor);
                }
            }
        }
        Ok(gguf)
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The data alignment.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Offset of the data section in the file.
    pub fn data_offset(&self) -> usize {
        self.data_at
    }

    /// Number of metadata pairs.
    pub fn metadata_count(&self) -> u64 {
        self.metadata_count
    }

    /// Number of tensors.
    pub fn tensor_count(&self) -> u64 {
        self.tensor_count
    }

    /// The metadata pairs in file order.
    pub fn metadata(&self) -> MetadataIter<'a> {
        MetadataIter {
            cursor: Cursor::new(self.bytes, self.metadata_at),
            left: self.metadata_count,
        }
    }

    /// The value of metadata key `key`, if present.
    pub fn get(&self, key: &str) -> Option<Value<'a>> {
        self.metadata().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The tensors in file order.
    pub fn tensors(&self) -> TensorIter<'a> {
        TensorIter {
            gguf: *self,
            cursor: Cursor::new(self.bytes, self.tensors_at),
            left: self.tensor_count,
        }
    }

    /// The tensor named `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<Tensor<'a>> {
        self.tensors().find(|t| t.name == name)
    }

    /// The tensor an info describes, with its data slice.
    fn locate(&self, info: &Info<'a>) -> Result<Tensor<'a>, GgufError> {
        if info.offset % self.alignment as u64 != 0 {
            return Err(GgufError::MisalignedTensor);
        }
        let size = tensor_bytes(info.ty, &info.dims)?;
        let start = usize::try_from(info.offset)
            .ok()
            .and_then(|o| o.checked_add(self.data_at))
            .ok_or(GgufError::TensorOutOfBounds)?;
        let end = start
            .checked_add(size)
            .ok_or(GgufError::TensorOutOfBounds)?;
        let data = self
            .bytes
            .get(start..end)
            .ok_or(GgufError::TensorOutOfBounds)?;
        Ok(Tensor {
            name: info.name,
            ty: info.ty,
            n_dims: info.n_dims,
            dims: info.dims,
            data,
        })
    }
}

/// Iterator over metadata pairs `(key, value)`.
#[derive(Debug, Clone)]
pub struct MetadataIter<'a> {
    cursor: Cursor<'a>,
    left: u64,
}

impl<'a> Iterator for MetadataIter<'a> {
    type Item = (&'a str, Value<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Validated by `parse`; an error ends the iteration instead of panicking.
        read_pair(&mut self.cursor).ok()
    }
}

/// Iterator over the tensors.
#[derive(Debug, Clone)]
pub struct TensorIter<'a> {
    gguf: Gguf<'a>,
    cursor: Cursor<'a>,
    left: u64,
}

impl<'a> Iterator for TensorIter<'a> {
    type Item = Tensor<'a>;

    fn next(&mut self) -> Option<Tensor<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let info = read_info(&mut self.cursor).ok()?;
        self.gguf.locate(&info).ok()
    }
}

/// A tensor info as stored.
struct Info<'a> {
    name: &'a str,
    n_dims: u32,
    dims: [usize; 4],
    ty: TensorType,
    offset: u64,
}

fn utf8(b: &[u8]) -> Result<&str, GgufError> {
    core::str::from_utf8(b).map_err(|_| GgufError::BadUtf8)
}

fn read_pair<'a>(c: &mut Cursor<'a>) -> Result<(&'a str, Value<'a>), GgufError> {
    let key = utf8(c.string()?)?;
    let ty = ValueType::from_id(c.u32()?)?;
    let value = read_value(c, ty, 0)?;
    Ok((key, value))
}

fn read_info<'a>(c: &mut Cursor<'a>) -> Result<Info<'a>, GgufError> {
    let name = utf8(c.string()?)?;
    let n_dims = c.u32()?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(GgufError::BadDimensions(n_dims));
    }
    let mut dims = [1usize; 4];
    for d in dims.iter_mut().take(n_dims as usize) {
        *d = usize::try_from(c.u64()?).map_err(|_| GgufError::Overflow)?;
    }
    let ty = TensorType::from_id(c.u32()?)?;
    let offset = c.u64()?;
    // Shape checks here, so the first pass already refuses bad shapes.
    tensor_bytes(ty, &dims)?;
    Ok(Info {
        name,
        n_dims,
        dims,
        ty,
        offset,
    })
}

const fn align_up(x: usize, a: usize) -> Option<usize> {
    match x.checked_add(a - 1) {
        Some(v) => Some(v & !(a - 1)),
        None => None,
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_types;
