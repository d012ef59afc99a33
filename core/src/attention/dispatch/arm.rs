//! Cortex-M with the DSP extension, Helium or an FPU (`arch::Arm`): a whole page of int8 rows
//! whose query heads run three at a time goes to its own loop (`fast::attend_whole_page`), other
//! pages to the general one, each out of line.

use super::super::page::{
    Heads, Keys, Layout, PageSlices, attend_page as portable_page, attend_whole_page,
    whole_page_rows,
};
use crate::arch::Arm;

/// The attention page loop with the DSP and Helium kernels: a whole page of int8 rows whose
/// query heads run three at a time goes to its own loop (`fast::attend_whole_page`), other pages
/// to the general one. Each loop out of line, as the portable build (see `none.rs`). (The M4
/// took the general loop for every page until its weights, weights × scales and scores from the
/// sums were `asm!`: then the whole-page loop cost 7,170,480 instructions a step against
/// 7,054,880; now 6,128,840 against 6,271,000.)
#[inline(always)]
pub(super) fn attend_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    // `None` unless `Strategy::int8_pages` (the DSP or Helium builds).
    let whole = whole_page_rows::<Arm, F, 3>(l, keys);
    match whole {
        Some(n) => whole_int8_page(l, keys.kv, heads, n),
        None => general_page(l, keys, heads),
    }
}

/// [`attend_whole_page`] with the Helium kernels.
#[inline(never)]
fn whole_int8_page(l: &Layout, kv: &PageSlices<'_>, heads: Heads<'_>, n: usize) {
    attend_whole_page::<Arm, 3>(l, kv, heads, n)
}

/// The general page loop with the DSP kernels.
#[inline(never)]
fn general_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    portable_page::<Arm, F>(l, keys, heads)
}
