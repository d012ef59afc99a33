//! ISA-specific kernels behind one dispatch point.
//!
//! Each kernel family has one entry here, called by its portable home: the int8 and FP8
//! quantizers ([`q8_f32`], [`q8_f16`], [`fp8_f32`], [`fp8_f16`], called by `format::int8` and
//! `format::fp8`) and the attention page loop ([`attend_page`], called by `attention`). An entry
//! forwards to `native`, the module of the ISA this build targets, chosen once below: `x86_64/`
//! (AVX2 and F16C, detected at run time), `arm/` (Cortex-M: the DSP extension's int8 kernels on
//! cores without Helium, the FPU's f16 conversion on hard-float targets; chosen at build time by
//! `build.rs`), otherwise `none.rs`, where every entry takes
//! the portable path (as does every build with the feature `portable`). The portable code is the reference (the ISA builds are tested against it
//! bit for bit) and is what Miri runs.
//!
//! Adding an ISA (e.g. Arm Helium for the Cortex-M55): a folder `arch/<isa>/` with the same
//! functions as `none.rs`, its own [`Isa`] for the page loop if it has better f16 decoding or lane
//! sums, and one more line in the selection below.

// `small-code` Arm builds take `arm::Arm` as their one `Isa`.
#[cfg(any(not(feature = "small-code"), not(edgekv_arm_kernels)))]
mod portable;

#[cfg(any(not(feature = "small-code"), not(edgekv_arm_kernels)))]
pub(crate) use portable::Portable;

// Which ISA module this build dispatches to: the build script names it (`edgekv_x86_kernels`,
// `edgekv_arm_kernels`; neither with the feature `portable` or under Miri).
#[cfg_attr(edgekv_x86_kernels, path = "x86_64/mod.rs")]
#[cfg_attr(edgekv_arm_kernels, path = "arm/mod.rs")]
#[cfg_attr(not(any(edgekv_x86_kernels, edgekv_arm_kernels)), path = "none.rs")]
// The only unsafe code of the kernels: intrinsics behind run-time detection.
#[allow(unsafe_code)]
mod native;

pub(crate) mod kernels;
pub(crate) mod query;
pub(crate) mod rows;

#[cfg(all(edgekv_arm_kernels, not(feature = "small-code")))]
pub(crate) use native::Arm;
#[cfg(feature = "small-code")]
pub(crate) use native::SmallCode;
#[cfg(all(edgekv_x86_kernels, not(feature = "small-code")))]
pub(crate) use native::{Avx2F16c, available};

/// This build's quantizer kernels (`format::QuantKernels`): none here, the reference loops run.
#[cfg(not(edgekv_x86_kernels))]
pub(crate) struct NativeQuant;

#[cfg(not(edgekv_x86_kernels))]
impl crate::format::QuantKernels for NativeQuant {}

/// This build's quantizer kernels (`format::QuantKernels`): AVX2 and F16C where the CPU has them.
#[cfg(edgekv_x86_kernels)]
pub(crate) use native::NativeQuant;

#[cfg(not(feature = "small-code"))]
use crate::arch::query::QueryCodes;
#[cfg(not(feature = "small-code"))]
use crate::arch::rows::PageRows;
#[cfg(not(feature = "small-code"))]
use crate::numeric::LANES;
use crate::numeric::Widen;
#[cfg(not(feature = "small-code"))]
use crate::numeric::exp;
#[cfg(not(feature = "small-code"))]
use kernels::Row;

/// What a build of the attention page loop does with instructions of its own: f16 values (f16
/// pages, int8 scales) to f32, and lane sums. Every implementation gives the same bits: f16
/// decoding those of `half::f16::to_f32` (NaNs made quiet), lane sums the fixed tree of
/// [`Portable::reduce8`], int8 scores those of the portable integer dot products. [`Portable`]
/// runs on every target.
pub(crate) trait Isa: Widen {
    /// Whether the page kernel splits a block of query rows' heads (see `attention::block`) into
    /// each row's own run of heads (a group of at most four), rather than into runs of four
    /// across rows: for kernels that are best at the model's own group (the Arm `asm!` loops
    /// for three heads). The same bits either way.
    #[cfg(not(feature = "small-code"))]
    const RUNS_BY_ROW: bool = false;
    /// Whether the page kernel takes each weight's `exp` one at a time (`exp::scalar`:
    /// `libm::expf`'s steps inline) rather than eight lanes at a time (`numeric::exp`, the
    /// same bits): for cores without vector floats, where the lanes' selects cost more than
    /// `libm`'s branches.
    #[cfg(not(feature = "small-code"))]
    const SCALAR_EXP: bool = false;
    /// Whether the page kernel hands a whole page's int8 rows to [`Isa::int8_page_scores`] and
    /// [`Isa::int8_page_values`] (one call per KV head and run of query heads) rather than eight
    /// rows at a time to [`Isa::int8_scores`] and [`Isa::int8_add_rows`]. The same bits either
    /// way.
    #[cfg(not(feature = "small-code"))]
    const PAGE_ROWS: bool = false;
    /// Whether the page kernel hands a whole page of f16 K and V rows to its own loop, with
    /// [`Isa::f16_page_scores`] and [`Isa::f16_page_values`], rather than to the general one. The
    /// same bits either way.
    #[cfg(not(feature = "small-code"))]
    const F16_PAGE_ROWS: bool = false;
    /// The largest of `s` not NaN (−∞ if none), as `exp::max_of` (which see for the zero's
    /// sign).
    #[cfg(not(feature = "small-code"))]
    #[inline(always)]
    fn max_of(s: &[f32]) -> f32 {
        exp::max_of(s)
    }
    /// `xs[i] = floor::weight(libm::expf(xs[i] − shifts[i / row]))` for rows of `row` values (a
    /// multiple of eight) where every `xs[i] ≤ shifts[i / row]` or one of them is NaN (each
    /// shift is its row's maximum): [`exp::exp_shifted_rows`]'s bits.
    #[cfg(not(feature = "small-code"))]
    #[inline(always)]
    fn exp_rows(xs: &mut [f32], row: usize, shifts: &[f32]) {
        exp::exp_shifted_rows(xs, row, shifts)
    }
    /// `s + w[0] + w[1] + …`, in that order: a head's sum of weights.
    #[cfg(not(feature = "small-code"))]
    #[inline(always)]
    fn sum(s: f32, w: &[f32]) -> f32 {
        w.iter().fold(s, |s, w| s + w)
    }
    /// `[reduce(x[0]), …, reduce(x[7])]`: eight rows' lanes, each summed in the fixed tree.
    #[cfg(not(feature = "small-code"))]
    fn reduce8(x: &[[f32; LANES]; LANES]) -> [f32; LANES];
    /// The scores of up to eight int8 K rows for `G` query heads from their quantized query:
    /// [`kernels::int8_scores`]'s bits.
    #[cfg(not(feature = "small-code"))]
    #[inline(always)]
    fn int8_scores<const G: usize>(
        q: QueryCodes<'_>,
        rows: &[Row<'_>],
        g: usize,
    ) -> [[f32; LANES]; G]
    where
        Self: Sized,
    {
        kernels::int8_scores::<Self, G>(q, rows, g)
    }
    /// `acc[h·d + i] += p[ρ][h] · rows[ρ][i]` for up to eight int8 V rows of group `g` in order
    /// and `G` heads: [`kernels::int8_add_scaled_rows`]'s bits.
    #[cfg(not(feature = "small-code"))]
    #[inline(always)]
    fn int8_add_rows<const G: usize>(acc: &mut [f32], p: &[[f32; G]], rows: &[Row<'_>], g: usize)
    where
        Self: Sized,
    {
        kernels::int8_add_scaled_rows::<Self, G>(acc, p, rows, g)
    }
    /// `scores[h·p + r]` for every row `r` of `rows` (int8 K rows of group `g`, a whole page)
    /// and `G` query heads: [`kernels::int8_scores`]'s bits. `false`, nothing written, where this
    /// ISA has no page kernel for them (only asked where [`Isa::PAGE_ROWS`]).
    #[cfg(not(feature = "small-code"))]
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
    /// where [`Isa::PAGE_ROWS`]).
    #[cfg(not(feature = "small-code"))]
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
    /// [`kernels::dot_lanes`]'s lanes summed by [`Isa::reduce8`], times the scale, as the general
    /// page loop. `false`, nothing written, where this ISA has no page kernel for them.
    #[cfg(not(feature = "small-code"))]
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
    #[cfg(not(feature = "small-code"))]
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

/// Lays a quantized query's codes (groups of `g`) out as this build's int8 score kernels read
/// them: on cores with the DSP extension, each quad in the order `SXTB16` gives a key word's
/// codes (`query::interleave_quads`); elsewhere as they are.
#[inline]
pub(crate) fn arrange_query(codes: &mut [i16], g: usize) {
    native::arrange_query(codes, g)
}
