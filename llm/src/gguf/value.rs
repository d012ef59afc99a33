//! GGUF metadata values: the thirteen types, read in place.

use super::GgufError;
use super::cursor::Cursor;

/// Arrays may nest at most this deep (the file format allows any depth; real files use one level).
pub const MAX_NESTING: u32 = 4;

/// A metadata value type, as numbered by the GGUF specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// `u8` (0).
    U8,
    /// `i8` (1).
    I8,
    /// `u16` (2).
    U16,
    /// `i16` (3).
    I16,
    /// `u32` (4).
    U32,
    /// `i32` (5).
    I32,
    /// `f32` (6).
    F32,
    /// `bool` (7), one byte.
    Bool,
    /// A string (8): u64 length and bytes.
    String,
    /// An array (9): element type, u64 count, elements.
    Array,
    /// `u64` (10).
    U64,
    /// `i64` (11).
    I64,
    /// `f64` (12).
    F64,
}

impl ValueType {
    /// The type with GGUF id `id`.
    ///
    /// # Errors
    ///
    /// [`BadValueType`](GgufError::BadValueType) for an id past 12.
    pub fn from_id(id: u32) -> Result<Self, GgufError> {
        use ValueType::*;
        Ok(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return Err(GgufError::BadValueType(id)),
        })
    }

    /// Bytes of one value of a fixed-size type; `None` for strings and arrays.
    pub const fn fixed_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }
}

/// A metadata value borrowed from the file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// `bool` (any nonzero byte is true).
    Bool(bool),
    /// A string's bytes (GGUF says UTF-8; not checked for values).
    String(&'a [u8]),
    /// An array.
    Array(Array<'a>),
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

impl<'a> Value<'a> {
    /// The value as an unsigned integer, if it is one of the unsigned types or a nonnegative
    /// signed one.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as an `f32`, if it is an `f32` (or an `f64`, rounded).
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    /// The value as a `bool`, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The string's bytes, if the value is a string.
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match *self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The array, if the value is one.
    pub fn as_array(&self) -> Option<Array<'a>> {
        match *self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// An array value in place: its element type, count and encoded elements (validated when the
/// file was parsed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Array<'a> {
    ty: ValueType,
    len: u64,
    bytes: &'a [u8],
    depth: u32,
}

impl<'a> Array<'a> {
    /// Element type.
    pub fn element_type(&self) -> ValueType {
        self.ty
    }

    /// Number of elements.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Iterates over the elements in order (O(1) per step; strings are walked, not indexed).
    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter {
            array: *self,
            cursor: Cursor::new(self.bytes, 0),
            index: 0,
        }
    }

    /// Element `i`: O(1) for fixed-size types, a walk for strings and arrays.
    pub fn get(&self, i: u64) -> Option<Value<'a>> {
        if i >= self.len {
            return None;
        }
        match self.ty.fixed_size() {
            Some(size) => {
                let at = usize::try_from(i).ok()?.checked_mul(size)?;
                let mut c = Cursor::new(self.bytes, at);
                read_value(&mut c, self.ty, self.depth).ok()
            }
            None => self.iter().nth(usize::try_from(i).ok()?),
        }
    }
}

/// Iterator over an [`Array`]'s elements.
#[derive(Debug, Clone)]
pub struct ArrayIter<'a> {
    array: Array<'a>,
    cursor: Cursor<'a>,
    index: u64,
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Value<'a>;

    fn next(&mut self) -> Option<Value<'a>> {
        if self.index >= self.array.len {
            return None;
        }
        self.index += 1;
        // The array was validated at parse time, so this read succeeds; a failure ends the
        // iteration rather than panicking.
        read_value(&mut self.cursor, self.array.ty, self.array.depth).ok()
    }
}

/// Reads one value of type `ty` at the cursor, validating nested arrays (depth counts the arrays
/// this value is inside of).
pub(crate) fn read_value<'a>(
    c: &mut Cursor<'a>,
    ty: ValueType,
    depth: u32,
) -> Result<Value<'a>, GgufError> {
    Ok(match ty {
        ValueType::U8 => Value::U8(c.u8()?),
        ValueType::I8 => Value::I8(c.u8()? as i8),
        ValueType::U16 => Value::U16(c.u16()?),
        ValueType::I16 => Value::I16(c.u16()? as i16),
        ValueType::U32 => Value::U32(c.u32()?),
        ValueType::I32 => Value::I32(c.u32()? as i32),
        ValueType::F32 => Value::F32(f32::from_bits(c.u32()?)),
        ValueType::Bool => Value::Bool(c.u8()? != 0),
        ValueType::String => Value::String(c.string()?),
        ValueType::U64 => Value::U64(c.u64()?),
        ValueType::I64 => Value::I64(c.u64()? as i64),
        ValueType::F64 => Value::F64(f64::from_bits(c.u64()?)),
        ValueType::Array => {
            if depth >= MAX_NESTING {
                return Err(GgufError::NestingTooDeep);
            }
            let elem = ValueType::from_id(c.u32()?)?;
            let len = c.u64()?;
            let start = c.pos();
            match elem.fixed_size() {
                Some(size) => c.skip(len, size)?,
                None => skip_values(c, elem, len, depth + 1)?,
            }
            let bytes = c.whole().get(start..c.pos()).ok_or(GgufError::Overflow)?;
            Value::Array(Array {
                ty: elem,
                len,
                bytes,
                depth: depth + 1,
            })
        }
    })
}

/// Skips `len` values of the variable-size type `elem` at nesting `depth` (strings, or arrays
/// whose own elements are skipped in turn), validating them as [`read_value`] does and in the
/// same order, without recursion: the arrays being walked are an explicit stack of at most
/// [`MAX_NESTING`] entries (element type, elements left). Every element takes at least 8 bytes,
/// so the walk is bounded by the file's length.
fn skip_values(c: &mut Cursor<'_>, elem: ValueType, len: u64, depth: u32) -> Result<(), GgufError> {
    let mut stack = [(ValueType::U8, 0u64); MAX_NESTING as usize];
    stack[0] = (elem, len);
    let mut top = 1usize;
    while let Some(entry) = top.checked_sub(1).and_then(|i| stack.get_mut(i)) {
        let (ty, left) = *entry;
        if left == 0 {
            top -= 1;
            continue;
        }
        entry.1 = left - 1;
        match ty {
            ValueType::Array => {
                // This array is an element of the entry below: nested at `depth + top - 1`.
                if depth + top as u32 > MAX_NESTING {
                    return Err(GgufError::NestingTooDeep);
                }
                let inner = ValueType::from_id(c.u32()?)?;
                let n = c.u64()?;
                match inner.fixed_size() {
                    Some(size) => c.skip(n, size)?,
                    None => {
                        let slot = stack.get_mut(top).ok_or(GgufError::NestingTooDeep)?;
                        *slot = (inner, n);
                        top += 1;
                    }
                }
            }
            ValueType::String => {
                c.string()?;
            }
            fixed => c.skip(1, fixed.fixed_size().unwrap_or(0))?,
        }
    }
    Ok(())
}
