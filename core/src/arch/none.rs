//! No ISA-specific kernels in this build (another target, or Miri, which does not model the
//! intrinsics): every kernel family takes the portable reference.

use super::Portable;
#[cfg(not(feature = "small-code"))]
use crate::attention::page::{Heads, Keys, Layout, attend_page as portable_page};

/// The portable build of the attention page loop. Out of line: inlined into the query-row loop,
/// LLVM unswitches that loop on the window and copies the whole page loop (+85 KB on Cortex-M0,
/// +170 KB on the an386 firmware); one call per page costs nothing beside a page's work.
#[cfg(not(feature = "small-code"))]
#[inline(never)]
pub(super) fn attend_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    portable_page::<Portable, F>(l, keys, heads)
}

/// The `Isa` of `small-code` builds' one page loop (`attention::small`): the portable one.
#[cfg(feature = "small-code")]
pub(super) type SmallCode = Portable;

/// The quantized query as it is (no ISA score kernel here reads it in another order).
#[inline(always)]
pub(super) fn arrange_query(_codes: &mut [i16], _g: usize) {}
