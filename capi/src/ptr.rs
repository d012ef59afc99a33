//! Turning C pointers into Rust references: every pointer + length pair is checked here (NULL,
//! alignment, size overflow) and every set of buffers for disjointness.

use core::mem::size_of;

use super::status::{
    EKV_ERR_BAD_LENGTH, EKV_ERR_MISALIGNED_POINTER, EKV_ERR_NULL, EKV_ERR_OVERLAP, Fail, Res,
};

/// A byte range of the address space, for overlap checks (addresses only: no provenance).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: usize,
    pub(crate) len: usize,
}

impl Span {
    /// The empty span.
    pub(crate) const EMPTY: Span = Span { start: 0, len: 0 };

    /// The bytes of `len` elements of `T` at `ptr` (callers checked that they fit).
    pub(crate) fn of<T>(ptr: *const T, len: usize) -> Span {
        Span {
            start: ptr.addr(),
            len: len.saturating_mul(size_of::<T>()),
        }
    }

    /// Whether the two spans share a byte (empty spans share none).
    pub(crate) fn overlaps(self, other: Span) -> bool {
        self.len != 0
            && other.len != 0
            && self.start < other.start.saturating_add(other.len)
            && other.start < self.start.saturating_add(self.len)
    }
}

/// Fails with [`EKV_ERR_OVERLAP`] unless every pair of `spans` is disjoint.
pub(crate) fn disjoint(spans: &[Span]) -> Res<()> {
    for (i, a) in spans.iter().enumerate() {
        if spans[i + 1..].iter().any(|b| a.overlaps(*b)) {
            return Err(Fail(EKV_ERR_OVERLAP));
        }
    }
    Ok(())
}

/// Checks a buffer of `len` elements at `ptr`: NULL only with `len == 0`, aligned for `T`, its
/// byte size at most `isize::MAX` and not wrapping the address space.
fn check<T>(ptr: *const T, len: usize) -> Res<()> {
    if len == 0 {
        return Ok(());
    }
    if ptr.is_null() {
        return Err(Fail(EKV_ERR_NULL));
    }
    if !ptr.is_aligned() {
        return Err(Fail(EKV_ERR_MISALIGNED_POINTER));
    }
    let bytes = len
        .checked_mul(size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or(Fail(EKV_ERR_BAD_LENGTH))?;
    ptr.addr()
        .checked_add(bytes)
        .ok_or(Fail(EKV_ERR_BAD_LENGTH))?;
    Ok(())
}

/// `len` elements at `ptr` as a shared slice (empty for `len == 0`, whatever `ptr`).
///
/// # Safety
///
/// When `len > 0` and the checks pass, `ptr` must point to `len` initialized `T`s that nothing
/// writes while the slice lives.
pub(crate) unsafe fn slice<'a, T>(ptr: *const T, len: usize) -> Res<&'a [T]> {
    check(ptr, len)?;
    if len == 0 {
        return Ok(&[]);
    }
    // SAFETY: non-null, aligned, size within isize::MAX (checked above); validity and the
    // absence of writers are the caller's obligation.
    Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// `len` elements at `ptr` as an exclusive slice (empty for `len == 0`, whatever `ptr`).
///
/// # Safety
///
/// When `len > 0` and the checks pass, `ptr` must point to `len` initialized `T`s that nothing
/// else reads or writes while the slice lives.
pub(crate) unsafe fn slice_mut<'a, T>(ptr: *mut T, len: usize) -> Res<&'a mut [T]> {
    check(ptr, len)?;
    if len == 0 {
        return Ok(&mut []);
    }
    // SAFETY: as in `slice`, plus exclusivity, which is the caller's obligation.
    Ok(unsafe { core::slice::from_raw_parts_mut(ptr, len) })
}

/// A required input struct.
///
/// # Safety
///
/// A non-null, aligned `ptr` must point to an initialized `T` nothing writes meanwhile.
pub(crate) unsafe fn input<'a, T>(ptr: *const T) -> Res<&'a T> {
    check(ptr, 1)?;
    if ptr.is_null() {
        return Err(Fail(EKV_ERR_NULL));
    }
    // SAFETY: checked non-null and aligned; validity is the caller's obligation.
    Ok(unsafe { &*ptr })
}

/// An optional input struct: `None` for NULL.
///
/// # Safety
///
/// As [`input`].
pub(crate) unsafe fn optional<'a, T>(ptr: *const T) -> Res<Option<&'a T>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded obligation.
    unsafe { input(ptr) }.map(Some)
}

/// A required output: checked now, written with [`Out::set`] once the call succeeded.
pub(crate) struct Out<T>(*mut T);

impl<T> Out<T> {
    /// Checks `ptr` (non-null, aligned).
    pub(crate) fn new(ptr: *mut T) -> Res<Self> {
        if ptr.is_null() {
            return Err(Fail(EKV_ERR_NULL));
        }
        check(ptr.cast_const(), 1)?;
        Ok(Out(ptr))
    }

    /// An optional output: NULL means the caller does not want it.
    pub(crate) fn optional(ptr: *mut T) -> Res<Option<Self>> {
        if ptr.is_null() {
            Ok(None)
        } else {
            Self::new(ptr).map(Some)
        }
    }

    /// The bytes the output occupies.
    pub(crate) fn span(&self) -> Span {
        Span::of(self.0.cast_const(), 1)
    }

    /// Writes the value.
    ///
    /// # Safety
    ///
    /// The pointer given to [`Out::new`] must be valid for a write of `T` (any previous content,
    /// initialized or not, is overwritten without being read or dropped).
    pub(crate) unsafe fn set(self, value: T) {
        // SAFETY: non-null and aligned (checked in `new`); writable by the caller's obligation.
        unsafe { self.0.write(value) }
    }
}

/// The span of an optional output (empty for none).
pub(crate) fn opt_span<T>(out: &Option<Out<T>>) -> Span {
    out.as_ref().map_or(Span::EMPTY, Out::span)
}

/// A checked but not yet borrowed C buffer: overlap checks run on its [`span`](Self::span)
/// before any reference to it exists.
pub(crate) struct Buf<T> {
    ptr: *mut T,
    len: usize,
}

impl<T> Buf<T> {
    /// Checks an input buffer (NULL only with `len == 0`, aligned, size in range).
    pub(crate) fn input(ptr: *const T, len: usize) -> Res<Self> {
        check(ptr, len)?;
        Ok(Buf {
            ptr: ptr.cast_mut(),
            len,
        })
    }

    /// Checks an output buffer.
    pub(crate) fn output(ptr: *mut T, len: usize) -> Res<Self> {
        check(ptr.cast_const(), len)?;
        Ok(Buf { ptr, len })
    }

    /// The checked pointer (dangling-free only when `len > 0`).
    pub(crate) fn ptr(&self) -> *mut T {
        self.ptr
    }

    /// Elements.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bytes it occupies.
    pub(crate) fn span(&self) -> Span {
        Span::of(self.ptr.cast_const(), self.len)
    }

    /// The buffer as a shared slice.
    ///
    /// # Safety
    ///
    /// As [`slice`]; made from [`Buf::input`] or [`Buf::output`].
    pub(crate) unsafe fn get<'a>(&self) -> &'a [T] {
        // SAFETY: checked in the constructor; validity is the caller's obligation. `slice`
        // cannot fail on checked input, and an empty slice stands in just in case.
        unsafe { slice(self.ptr.cast_const(), self.len) }.unwrap_or(&[])
    }

    /// The buffer as an exclusive slice.
    ///
    /// # Safety
    ///
    /// As [`slice_mut`]; made from [`Buf::output`].
    pub(crate) unsafe fn get_mut<'a>(&self) -> &'a mut [T] {
        // SAFETY: as in `get`, plus exclusivity (caller).
        unsafe { slice_mut(self.ptr, self.len) }.unwrap_or(&mut [])
    }
}
