//! Numerics below every format and kernel: the lane width, fixed-tree lane sums, f16 widening
//! (`widen`), the exponential with `libm::expf`'s bits (`exp`) and the softmax floors (`floor`).
//! Nothing here knows a page format, an ISA or attention; every layer above may use it.

#[cfg(any(test, not(feature = "small-code")))]
pub(crate) mod exp;
pub(crate) mod floor;
pub(crate) mod widen;

pub(crate) use widen::Widen;

#[cfg(any(test, not(feature = "small-code")))]
pub use exp::exp_in_place;

/// `xs[i] = libm::expf(xs[i])` for every element: with the feature `small-code` (no vector
/// lanes in the build) one `libm` call each, the same bits as the lanes of the other builds.
#[cfg(all(not(test), feature = "small-code"))]
pub fn exp_in_place(xs: &mut [f32]) {
    for x in xs {
        *x = libm::expf(*x);
    }
}

/// Values per block of every decoder and kernel (one AVX2 register of f32).
pub(crate) const LANES: usize = 8;

/// Sums eight lanes in a fixed tree.
#[inline(always)]
pub(crate) fn reduce(a: [f32; LANES]) -> f32 {
    ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}

/// The larger of a running maximum `m` and `x`, by one compare: `x` only where it is larger (a
/// NaN never is). The page loops' maxima, rather than `f32::max` (a call of `fmaxf` on cores
/// without `VMAXNM`). Where both are zeros the sign may differ from `f32::max`'s, which changes
/// no weight: a maximum only enters `exp(score − max)` with `max ≥ score`, where `±0 − max` is
/// `−max` for a nonzero `max` and `±0` (whose `exp` is 1) for a zero one.
#[inline(always)]
pub(crate) fn larger(m: f32, x: f32) -> f32 {
    if x > m { x } else { m }
}
