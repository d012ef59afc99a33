//! When Helium's vector floats give the scalar FPU's bits for a block combination.
//!
//! Helium's floating-point lanes flush subnormal inputs and results to zero (and give the
//! default NaN), the scalar FPU does not. The Q4_1 and Q8_0 combinations
//! `(d_w · d_a) · sumi + m_w · s_a` and `sumi · (d_w · d_a)` never meet a subnormal when every
//! nonzero scale is at least 2⁻²⁴ in magnitude (the weights' f16 scales always are, and so are
//! activation scales rounded through f16, as the quantizers store them): each product of two
//! scales is then at least 2⁻⁴⁸, every value computed from them a multiple of 2⁻⁷¹ (a product's
//! rounding unit is at least 2⁻⁴⁸⁻²³, sums of multiples stay multiples), so every nonzero result
//! is far above the smallest normal 2⁻¹²⁶ and lanes and scalar FPU round identically. Rows whose
//! activation scales fail this (or are not finite) take the scalar combination.

use crate::arch::Acts;
use crate::quant::BLOCK;

/// 2⁻²⁴ as f32 bits: the smallest nonzero f16 magnitude.
const F16_TINIEST: u32 = 0x3380_0000;

/// Whether every value of `scales` is zero, or finite with magnitude at least 2⁻²⁴ (a fold
/// without early exit, which the compiler turns into vector compares).
#[inline]
fn exact_in_lanes(scales: &[f32]) -> bool {
    scales.iter().fold(true, |ok, v| {
        let m = v.to_bits() & 0x7fff_ffff;
        ok & ((m == 0) | (F16_TINIEST..0x7f80_0000).contains(&m))
    })
}

/// Whether [`exact_in_lanes`] holds for every activation row of a matmul over `n` rows (their
/// scales, and with `sums` their block sums): checked once per matmul, so that the kernels,
/// called once per four weight rows, need not check again. `false` when `a` does not hold `n`
/// rows (the matmul then declines, as its row loop would).
#[inline]
pub(super) fn exact_acts(a: &Acts<'_>, n: usize, sums: bool) -> bool {
    if !a.holds(n) {
        return false;
    }
    let len = n * (a.cols / BLOCK);
    exact_in_lanes(&a.d[..len]) & (!sums || exact_in_lanes(&a.s[..len]))
}
