//! The [`Isa`] of the page loop, split by concern: f16 widening ([`Widen`], in `numeric`), the
//! softmax steps and lane sums ([`Softmax`]), the per-format row and page kernels
//! ([`PageKernels`]), and the choices of loop as data ([`Strategy`]). Every implementation gives
//! the portable code's bits: f16 widening those of `half::f16::to_f32` (NaNs made quiet), lane
//! sums the fixed tree of [`Portable::reduce8`](super::Portable), int8 scores those of the
//! portable integer dot products. [`Portable`](super::Portable) runs on every target.

#[cfg(not(feature = "small-code"))]
use super::kernels::{self, Row};
#[cfg(not(feature = "small-code"))]
use super::query::QueryCodes;
#[cfg(not(feature = "small-code"))]
use super::rows::PageRows;
#[cfg(not(feature = "small-code"))]
use crate::numeric::LANES;
use crate::numeric::Widen;
#[cfg(not(feature = "small-code"))]
use crate::numeric::exp;

/// How an ISA's build of the page loop runs its pages: choices of loop, as data (the same bits
/// whichever is taken).
#[cfg(not(feature = "small-code"))]
#[derive(Clone, Copy)]
pub(crate) struct Strategy {
    /// Whether the page kernel splits a block of query rows' heads (see `attention::block`) into
    /// each row's own run of heads (a group of at most four), rather than into runs of four
    /// across rows: for kernels that are best at the model's own group (the Arm `asm!` loops
    /// for three heads).
    pub(crate) runs_by_row: bool,
    /// Whether the page kernel takes each weight's `exp` one at a time (`exp::scalar`:
    /// `libm::expf`'s steps inline) rather than eight lanes at a time (`numeric::exp`, the same
    /// bits): for cores without vector floats, where the lanes' selects cost more than `libm`'s
    /// branches.
    pub(crate) scalar_exp: bool,
    /// Whether the page kernel hands a whole page's int8 rows to
    /// [`PageKernels::int8_page_scores`] and [`PageKernels::int8_page_values`] (one call per KV
    /// head and run of query heads) rather than eight rows at a time to
    /// [`PageKernels::int8_scores`] and [`PageKernels::int8_add_rows`].
    pub(crate) int8_pages: bool,
    /// Whether the page kernel hands a whole page of f16 K and V rows to its own loop, with
    /// [`PageKernels::f16_page_scores`] and [`PageKernels::f16_page_values`], rather than to the
    /// general one.
    pub(crate) f16_pages: bool,
    /// The run lengths (bit `G` for runs of `G` query heads, 1 to 4) whose whole pages go to the
    /// page kernels where [`int8_pages`](Self::int8_pages) or [`f16_pages`](Self::f16_pages);
    /// other runs take the general loop. (Read by the dispatch of ISAs whose page kernels are
    /// not best at every run length: Arm.)
    #[cfg_attr(not(edgekv_arm_kernels), allow(dead_code))]
    pub(crate) page_runs: u8,
}

#[cfg(not(feature = "small-code"))]
impl Strategy {
    /// The general loop for every page: runs of four heads across rows, eight-lane `exp`, no
    /// whole-page kernels (were they enabled, for runs of every length).
    pub(crate) const GENERAL: Strategy = Strategy {
        runs_by_row: false,
        scalar_exp: false,
        int8_pages: false,
        f16_pages: false,
        page_runs: 0b1_1110,
    };
}

/// The page loop's ISA: its f16 widening, softmax steps, kernels and [`Strategy`].
#[cfg(not(feature = "small-code"))]
pub(crate) trait Isa: Widen + Softmax + PageKernels {
    /// Which loops this ISA's build takes.
    const STRATEGY: Strategy = Strategy::GENERAL;
}

/// The page loop's ISA in `small-code` builds: its f16 widening only (one rolled loop).
#[cfg(feature = "small-code")]
pub(crate) trait Isa: Widen {}

/// A page's softmax steps and lane sums with an ISA's instructions (each defaults to the
/// portable code).
#[cfg(not(feature = "small-code"))]
pub(crate) trait Softmax {
    /// The largest of `s` not NaN (−∞ if none), as `exp::max_of` (which see for the zero's
    /// sign).
    #[inline(always)]
    fn max_of(s: &[f32]) -> f32 {
        exp::max_of(s)
    }
    /// `xs[i] = floor::weight(libm::expf(xs[i] − shifts[i / row]))` for rows of `row` values (a
    /// multiple of eight) where every `xs[i] ≤ shifts[i / row]` or one of them is NaN (each
    /// shift is its row's maximum): [`exp::exp_shifted_rows`]'s bits.
    #[inline(always)]
    fn exp_rows(xs: &mut [f32], row: usize, shifts: &[f32]) {
        exp::exp_shifted_rows(xs, row, shifts)
    }
    /// `s + w[0] + w[1] + …`, in that order: a head's sum of weights.
    #[inline(always)]
    fn sum(s: f32, w: &[f32]) -> f32 {
        w.iter().fold(s, |s, w| s + w)
    }
    /// `sums[h] = Self::sum(sums[h], &w[h·row..h·row + n])` for every head `h` of `sums` (`w`: a
    /// row of `row` values per head, its first `n` the head's weights of a page) with heads
    /// side by side. `false`, nothing written, where this ISA has no such kernel (the default)
    /// or not for these rows: the page loop then takes [`Softmax::sum`] head by head.
    #[inline(always)]
    fn sums(_sums: &mut [f32], _w: &[f32], _row: usize, _n: usize) -> bool {
        false
    }
    /// `[reduce(x[0]), …, reduce(x[7])]`: eight rows' lanes, each summed in the fixed tree.
    fn reduce8(x: &[[f32; LANES]; LANES]) -> [f32; LANES];
}

/// An ISA's kernels for a page's rows, per format: eight rows at a time, or a whole page
/// (each defaults to the portable kernel, or to `false`: no page kernel).
#[cfg(not(feature = "small-code"))]
pub(crate) trait PageKernels {
    /// The scores of up to eight int8 K rows for `G` query heads from their quantized query:
    /// [`kernels::int8_scores`]'s bits.
    #[inline(always)]
    fn int8_scores<const G: usize>(
        q: QueryCodes<'_>,
        rows: &[Row<'_>],
        g: usize,
    ) -> [[f32; LANES]; G]
    where
        Self: Sized + Isa,
    {
        kernels::int8_scores::<Self, G>(q, rows, g)
    }
    /// `acc[h·d + i] += p[ρ][h] · rows[ρ][i]` for up to eight int8 V rows of group `g` in order
    /// and `G` heads: [`kernels::int8_add_scaled_rows`]'s bits.
    #[inline(always)]
    fn int8_add_rows<const G: usize>(acc: &mut [f32], p: &[[f32; G]], rows: &[Row<'_>], g: usize)
    where
        Self: Sized + Isa,
    {
        kernels::int8_add_scaled_rows::<Self, G>(acc, p, rows, g)
    }
    /// `scores[h·p + r]` for every row `r` of `rows` (int8 K rows of group `g`, a whole page)
    /// and `G` query heads: [`kernels::int8_scores`]'s bits. `false`, nothing written, where this
    /// ISA has no page kernel for them (only asked where [`Strategy::int8_pages`]).
    #[inline(always)]
    fn int8_page_scores<const G: usize>(
        _q: QueryCodes<'_>,
        _rows: &PageRows<'_>,
        _g: usize,
        _scores: &mut [f32],
        _p: usize,
    ) -> bool
    where
        Self: Sized,
    {
        false
    }
    /// `acc[h·d + i] += w[h·p + r] · rows[r][i]` for every row `r` of `rows` (int8 V rows of
    /// group `g`, a whole page) in order and `G` heads: [`kernels::int8_add_scaled_rows`]'s
    /// bits. `false`, nothing written, where this ISA has no page kernel for them (only asked
    /// where [`Strategy::int8_pages`]).
    #[inline(always)]
    fn int8_page_values<const G: usize>(
        _acc: &mut [f32],
        _w: &[f32],
        _p: usize,
        _rows: &PageRows<'_>,
        _g: usize,
    ) -> bool
    where
        Self: Sized,
    {
        false
    }
    /// `scores[h·p + r] = scale · q[h] · rows[r]` for every row `r` of `rows` (f16 K rows, a
    /// whole page) and `G` query heads (`q` holds `G` query rows side by side):
    /// [`kernels::dot_lanes`]'s lanes summed by [`Softmax::reduce8`], times the scale, as the general
    /// page loop. `false`, nothing written, where this ISA has no page kernel for them.
    #[inline(always)]
    fn f16_page_scores<const G: usize>(
        _q: &[f32],
        _rows: &PageRows<'_>,
        _scores: &mut [f32],
        _p: usize,
        _scale: f32,
    ) -> bool
    where
        Self: Sized,
    {
        false
    }
    /// `acc[h·d + i] += w[h·p + r] · rows[r][i]` for every row `r` of `rows` (f16 V rows, a
    /// whole page) in order and `G` heads: [`kernels::add_scaled`]'s bits. `false`, nothing
    /// written, where this ISA has no page kernel for them.
    #[inline(always)]
    fn f16_page_values<const G: usize>(
        _acc: &mut [f32],
        _w: &[f32],
        _p: usize,
        _rows: &PageRows<'_>,
    ) -> bool
    where
        Self: Sized,
    {
        false
    }
}
