//! Attention's floors: no subnormal number is formed or read by the softmax state, so vector
//! floats that flush subnormals to zero give the same bits as IEEE scalar floats.
//!
//! Helium (MVE) floating point on Cortex-M55/M85 always flushes subnormal inputs and results to
//! a signed zero, whatever FPSCR says, and LLVM vectorizes attention's element-wise loops (the
//! weighted V rows of every format, the rescale of the accumulators) with it; x86-64 and scalar
//! FPUs keep subnormals. Two floors make the difference vanish, on every target alike:
//!
//! - a **weight** `exp(score − max)` below [`WEIGHT_FLOOR`] (2^-60, a score more than 41.6 below
//!   the row's maximum) is zero: each weight is zero or in [2^-60, 1];
//! - an element of the **state** (accumulators rescaled by a weight, merged segments, the final
//!   division by the sum) below [`STATE_FLOOR`] (2^-125) in magnitude is a zero of its sign.
//!
//! Then, for values whose nonzero magnitudes are at least 2^-24 (f16, and the f16-scaled int8,
//! Q8_0 and Q4 codes), every product of a weight and a value is zero or at least 2^-84, and an
//! accumulator plus such a product is zero or at least 2^-108 (if the two nearly cancel, both are
//! at least 2^-85 and so multiples of 2^-108): nothing subnormal arises. A state product rounded
//! by IEEE rules and the same product flushed when it is tiny before rounding agree once results
//! below 2^-125 (not 2^-126) become zero. For int8 keys, query groups below 2^-60 quantize to
//! zero (`query`), so query scale × key scale is normal. f32 and bf16 values (and FP8 tails)
//! below [`VALUE_FLOOR`] (2^-42) read as zero, and FP8 tiles whose `max|x|` is below 2^-24 are
//! stored as zero tiles (`format::fp8`), so a weight times a value is zero or at least 2^-102,
//! rounded to a multiple of 2^-125; an accumulator plus such a product that nearly cancels is
//! a multiple of 2^-126, hence zero or normal. The rotation (`Rotation`) floors its input and
//! every butterfly's result as the state is floored. Tiny scores (query elements that small
//! against float keys) may differ, but only where every score of the row is below 2^-100, and
//! then every weight `exp(score − max)` is 1 either way.
//!
//! What it costs: terms below 2^-60 of the largest, at most 2^-47 of the sum at 8,192 keys, well
//! under f32's rounding of the sum itself.

/// Weights below this (2^-60) are zero.
pub(crate) const WEIGHT_FLOOR: f32 = f32::from_bits(0x2180_0000);

/// State elements smaller than this (2^-125) in magnitude are a zero of their sign.
pub(crate) const STATE_FLOOR: f32 = f32::from_bits(0x0100_0000);

/// Decoded f32 and bf16 values (and FP8 tails) smaller than this (2^-42) in magnitude are a
/// zero of their sign: with weights of at least [`WEIGHT_FLOOR`], a product of a weight and a
/// value is then zero or at least 2^-102 (see the module doc).
pub(crate) const VALUE_FLOOR: f32 = f32::from_bits(0x2a80_0000);

/// `x`, or a zero of its sign if its magnitude is below [`VALUE_FLOOR`] (NaN and infinities
/// stay): how the f32 and bf16 decoders read a stored value. Integer steps only (vectorizes).
#[inline(always)]
pub(crate) fn value(x: f32) -> f32 {
    let b = x.to_bits();
    let small = b & 0x7fff_ffff < VALUE_FLOOR.to_bits();
    f32::from_bits(if small { b & 0x8000_0000 } else { b })
}

/// The block quantizers (int8 groups, Q4_0, Q4_1) read inputs smaller than this (2^-100) in
/// magnitude as zeros: their f16 scale would round to zero anyway (the decoded values are
/// ggml's), and every scale, inverse and product they form is then zero or normal, so vector
/// floats that flush subnormals write the same codes.
pub(crate) const QUANT_FLOOR: f32 = f32::from_bits(0x0d80_0000);

/// `x`, or a zero of its sign if its magnitude is below [`QUANT_FLOOR`] (NaN and infinities
/// stay). Integer steps only.
#[inline(always)]
pub(crate) fn quant_input(x: f32) -> f32 {
    let b = x.to_bits();
    let small = b & 0x7fff_ffff < QUANT_FLOOR.to_bits();
    f32::from_bits(if small { b & 0x8000_0000 } else { b })
}

/// `w`, or zero if it is below [`WEIGHT_FLOOR`] (NaN stays NaN).
#[inline(always)]
pub(crate) fn weight(w: f32) -> f32 {
    if w < WEIGHT_FLOOR { 0.0 } else { w }
}

/// The weight `exp(x)` of a score `x` below the maximum (or of two maxima's difference):
/// `libm::expf`, floored. The scalar form of `exp::exp_shifted`'s lanes, with their bits:
/// `exp::scalar` (libm's steps inline), or with `small-code` a call of `libm::expf`.
#[inline(always)]
pub(crate) fn exp_weight(x: f32) -> f32 {
    #[cfg(feature = "small-code")]
    return weight(libm::expf(x));
    #[cfg(not(feature = "small-code"))]
    return super::exp::scalar(x);
}

/// `x`, or a zero of its sign if its magnitude is below [`STATE_FLOOR`] (NaN and infinities
/// stay). Integer steps only: a select that vectorizes, and the same on every target.
#[inline(always)]
pub(crate) fn state(x: f32) -> f32 {
    let b = x.to_bits();
    let small = b & 0x7fff_ffff < STATE_FLOOR.to_bits();
    f32::from_bits(if small { b & 0x8000_0000 } else { b })
}

/// `o · k` with the product floored: the rescale of an accumulator by a weight.
#[inline(always)]
pub(crate) fn scaled(o: f32, k: f32) -> f32 {
    state(o * k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_are_the_powers_of_two() {
        assert_eq!(WEIGHT_FLOOR, libm::exp2f(-60.0));
        assert_eq!(STATE_FLOOR, libm::exp2f(-125.0));
    }

    #[test]
    fn values_below_the_floor_are_zero_of_their_sign() {
        assert_eq!(VALUE_FLOOR, libm::exp2f(-42.0));
        let below = f32::from_bits(VALUE_FLOOR.to_bits() - 1);
        assert_eq!(value(below).to_bits(), 0);
        assert_eq!(value(-below).to_bits(), 0x8000_0000);
        assert_eq!(value(f32::from_bits(1)).to_bits(), 0);
        assert_eq!(value(VALUE_FLOOR), VALUE_FLOOR);
        assert_eq!(value(-1.5), -1.5);
        assert!(value(f32::NAN).is_nan());
        assert_eq!(value(f32::NEG_INFINITY), f32::NEG_INFINITY);
    }

    #[test]
    fn quantizer_inputs_below_the_floor_are_zero() {
        assert_eq!(QUANT_FLOOR, libm::exp2f(-100.0));
        let below = f32::from_bits(QUANT_FLOOR.to_bits() - 1);
        assert_eq!(quant_input(-below).to_bits(), 0x8000_0000);
        assert_eq!(quant_input(QUANT_FLOOR), QUANT_FLOOR);
        assert_eq!(quant_input(f32::INFINITY), f32::INFINITY);
    }

    #[test]
    fn weights_below_the_floor_are_zero() {
        let below = f32::from_bits(WEIGHT_FLOOR.to_bits() - 1);
        assert_eq!(weight(below).to_bits(), 0);
        assert_eq!(weight(WEIGHT_FLOOR), WEIGHT_FLOOR);
        assert_eq!(weight(1.0), 1.0);
        assert_eq!(weight(f32::from_bits(1)).to_bits(), 0);
        assert_eq!(weight(0.0).to_bits(), 0);
        assert!(weight(f32::NAN).is_nan());
    }

    #[test]
    fn state_keeps_the_sign_of_what_it_flushes() {
        let below = f32::from_bits(STATE_FLOOR.to_bits() - 1);
        assert_eq!(state(below).to_bits(), 0);
        assert_eq!(state(-below).to_bits(), 0x8000_0000);
        assert_eq!(state(f32::from_bits(0x8000_0001)).to_bits(), 0x8000_0000);
        assert_eq!(state(STATE_FLOOR), STATE_FLOOR);
        assert_eq!(state(-STATE_FLOOR), -STATE_FLOOR);
        for x in [1.0f32, -3.5, f32::MAX, f32::INFINITY, f32::NEG_INFINITY] {
            assert_eq!(state(x).to_bits(), x.to_bits());
        }
        assert!(state(f32::NAN).is_nan());
    }

    /// A product flushed when tiny before rounding (as Helium does) and the IEEE product give
    /// the same floored result, also where rounding carries a product up to 2^-126.
    #[test]
    fn flushing_before_rounding_changes_no_floored_product() {
        let ftz = |o: f32, k: f32| {
            let exact = o as f64 * k as f64;
            if exact.abs() < f32::MIN_POSITIVE as f64 {
                0.0f32.copysign(exact as f32)
            } else {
                o * k
            }
        };
        let mut n = 0;
        for ob in (0x0080_0000u32..0x0200_0000).step_by(0x1_0003) {
            for kb in [
                0x3f7f_ffffu32,
                0x3f00_0001,
                0x2180_0000,
                0x3e80_0000,
                0x3f80_0000,
            ] {
                let (o, k) = (f32::from_bits(ob), f32::from_bits(kb));
                for o in [o, -o] {
                    assert_eq!(
                        scaled(o, k).to_bits(),
                        state(ftz(o, k)).to_bits(),
                        "{o:e}·{k:e}"
                    );
                    n += 1;
                }
            }
        }
        assert!(n > 1000);
    }
}
