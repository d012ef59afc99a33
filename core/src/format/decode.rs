//! The interface between page formats and the attention kernels: each format's fused decoders
//! turn page bytes into f32 values in blocks of [`LANES`], which the kernels multiply into their
//! fixed lane sums.
//!
//! The kernels walk whole blocks of eight elements (`B` bytes each) as fixed-size arrays, so the
//! decoders index arrays by constants: no per-element bounds checks, and loops vectorize.
//! Elements past the last whole block (a `head_dim`, group or tail not a multiple of eight) go one
//! at a time into lanes 0.., exactly as a block would.

pub(crate) use crate::numeric::LANES;

/// How a kernel reads one kind of page element: blocks of eight from `B` bytes, and single
/// elements (`i`-th of `bytes`) past the last whole block. A trait rather than closures: its
/// methods can be forced inline into every build of the attention page loop.
pub(crate) trait Decode<const B: usize>: Copy {
    /// Eight elements.
    fn block(self, b: &[u8; B]) -> [f32; LANES];
    /// Element `i` of `bytes`.
    fn one(self, bytes: &[u8], i: usize) -> f32;
}

/// The little-endian f32 at element `i` of `b`.
#[inline(always)]
pub(crate) fn f32_at(b: &[u8], i: usize) -> f32 {
    // One bounds check for the four bytes, not one per byte.
    f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().expect("four bytes"))
}

/// The little-endian u16 at element `i` of `b`.
#[inline(always)]
pub(crate) fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes(b[2 * i..2 * i + 2].try_into().expect("two bytes"))
}
