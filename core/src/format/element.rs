//! The element types callers write into and read from pages.

use half::{bf16, f16};

use super::ElementFormat;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// An element type callers write into and read from pages: `f32`, `half::f16` or `half::bf16`.
///
/// When the caller's type equals the page format, rows are copied byte for byte; otherwise they
/// are converted through `f32` (`half`'s round-to-nearest-even conversions).
pub trait Element: sealed::Sealed + bytemuck::Pod + Default {
    /// The page format that stores this type without conversion.
    const FORMAT: ElementFormat;
    /// Widen to f32 (exact for every supported type).
    fn to_f32(self) -> f32;
    /// Narrow from f32 (round to nearest even).
    fn from_f32(v: f32) -> Self;
}

impl Element for f32 {
    const FORMAT: ElementFormat = ElementFormat::F32;
    #[inline]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Element for f16 {
    const FORMAT: ElementFormat = ElementFormat::F16;
    #[inline]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Element for bf16 {
    const FORMAT: ElementFormat = ElementFormat::Bf16;
    #[inline]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}
