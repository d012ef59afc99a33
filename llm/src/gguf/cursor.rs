//! Bounds-checked little-endian reads from a byte slice.

use super::GgufError;

/// A read position in a byte slice; every read checks the bounds and advances.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at `pos` of `bytes`.
    pub(crate) fn new(bytes: &'a [u8], pos: usize) -> Self {
        Cursor { bytes, pos }
    }

    /// The whole slice the cursor reads from.
    pub(crate) fn whole(&self) -> &'a [u8] {
        self.bytes
    }

    /// The current offset.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], GgufError> {
        let at = self.pos;
        let end = at.checked_add(n).ok_or(GgufError::Truncated { at })?;
        let s = self.bytes.get(at..end).ok_or(GgufError::Truncated { at })?;
        self.pos = end;
        Ok(s)
    }

    /// Skips `count × size` bytes.
    pub(crate) fn skip(&mut self, count: u64, size: usize) -> Result<(), GgufError> {
        let n = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(size))
            .ok_or(GgufError::Truncated { at: self.pos })?;
        self.take(n).map(|_| ())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// A u8.
    pub(crate) fn u8(&mut self) -> Result<u8, GgufError> {
        Ok(self.array::<1>()?[0])
    }

    /// A little-endian u16.
    pub(crate) fn u16(&mut self) -> Result<u16, GgufError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// A little-endian u32.
    pub(crate) fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A little-endian u64.
    pub(crate) fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A GGUF string: u64 length, then that many bytes (not checked for UTF-8 here).
    pub(crate) fn string(&mut self) -> Result<&'a [u8], GgufError> {
        let at = self.pos;
        let len = self.u64()?;
        let len = usize::try_from(len).map_err(|_| GgufError::Truncated { at })?;
        self.take(len).map_err(|_| GgufError::Truncated { at })
    }
}
