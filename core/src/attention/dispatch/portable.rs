//! No ISA kernels for the page loop in this build (another target, the feature `portable`, or
//! Miri): the portable build.

use super::super::page::{Heads, Keys, Layout, attend_page as portable_page};
use crate::arch::Portable;

/// The portable build of the attention page loop. Out of line: inlined into the query-row loop,
/// LLVM unswitches that loop on the window and copies the whole page loop (+85 KB on Cortex-M0,
/// +170 KB on the an386 firmware); one call per page costs nothing beside a page's work.
#[inline(never)]
pub(super) fn attend_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    portable_page::<Portable, F>(l, keys, heads)
}
