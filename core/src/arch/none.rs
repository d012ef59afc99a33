//! No ISA-specific kernels in this build (another target, or Miri, which does not model the
//! intrinsics): every kernel family takes the portable reference.

/// The `Isa` of `small-code` builds' one page loop (`attention::small`): the portable one.
#[cfg(feature = "small-code")]
pub(crate) type SmallCode = super::Portable;

/// The quantized query as it is (no ISA score kernel here reads it in another order).
#[inline(always)]
pub(crate) fn arrange_query(_codes: &mut [i16], _g: usize) {}
