//! No ISA-specific kernels in this build (another target, or Miri, which does not model the
//! intrinsics): every kernel family takes the portable reference.

use half::f16;

#[cfg(not(feature = "small-code"))]
use super::Portable;
#[cfg(not(feature = "small-code"))]
use crate::attention::page::{Heads, Keys, Layout, attend_page as portable_page};

/// Always `false` (nothing written): the portable int8 loop runs.
#[inline]
pub(super) fn q8_f32(_: &[f32], _: usize, _: &mut [i8], _: &mut [f16]) -> bool {
    false
}

/// Always `false` (nothing written): the portable int8 loop runs.
#[inline]
pub(super) fn q8_f16(_: &[f16], _: usize, _: &mut [i8], _: &mut [f16]) -> bool {
    false
}

/// Always `false` (nothing written): the portable FP8 loop runs.
#[inline]
pub(super) fn fp8_f32(_: &[f32], _: usize, _: &mut [u8], _: &mut [u8]) -> bool {
    false
}

/// Always `false` (nothing written): the portable FP8 loop runs.
#[inline]
pub(super) fn fp8_f16(_: &[f16], _: usize, _: &mut [u8], _: &mut [u8]) -> bool {
    false
}

/// The portable build of the attention page loop. Out of line: inlined into the query-row loop,
/// LLVM unswitches that loop on the window and copies the whole page loop (+85 KB on Cortex-M0,
/// +170 KB on the an386 firmware); one call per page costs nothing beside a page's work.
#[cfg(not(feature = "small-code"))]
#[inline(never)]
pub(super) fn attend_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    portable_page::<Portable, F>(l, keys, heads)
}
