//! Cortex-M with the DSP extension, Helium or an FPU (`arch::Arm`): a whole page of int8 rows
//! (query heads in runs of four, three, two or one) goes to its own loop (`fast::attend_whole_page`), other
//! pages to the general one, each out of line.

use super::super::page::{
    Heads, Keys, Layout, PageSlices, attend_page as portable_page, attend_whole_page,
    whole_page_rows,
};
use crate::arch::{Arm, Isa};

/// The attention page loop with the DSP and Helium kernels: a whole page of int8 rows whose
/// query heads run in a length of `Strategy::page_runs` (three; on DSP cores also four, two or
/// one) goes to its own loop (`fast::attend_whole_page`), other pages to the general one. Each loop out of line, as the portable build (see `none.rs`). (The M4
/// took the general loop for every page until its weights, weights × scales and scores from the
/// sums were `asm!`: then the whole-page loop cost 7,170,480 instructions a step against
/// 7,054,880; now 6,128,840 against 6,271,000.)
#[inline(always)]
pub(super) fn attend_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    // Whole pages of int8 rows (`None` unless `Strategy::int8_pages`: the DSP or Helium
    // builds), query heads in runs of three (the `asm!` loops' length) where that divides the group,
    // else of the longest length up to four that does.
    let whole = match l.group {
        // Only the run lengths the ISA's page kernels serve best (`Strategy::page_runs`).
        g if !takes(g) => None,
        g if g % 3 == 0 => whole_page_rows::<Arm, F, 3>(l, keys).map(|n| (3, n)),
        g if g % 4 == 0 => whole_page_rows::<Arm, F, 4>(l, keys).map(|n| (4, n)),
        g if g % 2 == 0 => whole_page_rows::<Arm, F, 2>(l, keys).map(|n| (2, n)),
        _ => whole_page_rows::<Arm, F, 1>(l, keys).map(|n| (1, n)),
    };
    match whole {
        Some((4, n)) => whole_int8_page::<4>(l, keys.kv, heads, n),
        Some((3, n)) => whole_int8_page::<3>(l, keys.kv, heads, n),
        Some((2, n)) => whole_int8_page::<2>(l, keys.kv, heads, n),
        Some((_, n)) => whole_int8_page::<1>(l, keys.kv, heads, n),
        None => general_page(l, keys, heads),
    }
}

/// Whether groups of `g` query heads take whole pages: the run length [`attend_page`] picks for
/// them is one of `Strategy::page_runs`.
#[inline(always)]
fn takes(g: usize) -> bool {
    let run = [3, 4, 2].into_iter().find(|r| g % r == 0).unwrap_or(1);
    Arm::STRATEGY.page_runs & (1 << run) != 0
}

/// [`attend_whole_page`] with the Arm kernels, for runs of `G` query heads.
#[inline(never)]
fn whole_int8_page<const G: usize>(l: &Layout, kv: &PageSlices<'_>, heads: Heads<'_>, n: usize) {
    attend_whole_page::<Arm, G>(l, kv, heads, n)
}

/// The general page loop with the DSP kernels.
#[inline(never)]
fn general_page<F: Fn(u32) -> bool>(l: &Layout, keys: &Keys<'_, F>, heads: Heads<'_>) {
    portable_page::<Arm, F>(l, keys, heads)
}
