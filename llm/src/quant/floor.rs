//! Floors on the f32 inputs of the activation quantizers and of the f32-activation dot product,
//! so that vector floats which flush subnormals (Helium's, on Cortex-M55 / M85, where LLVM
//! vectorizes these loops) give IEEE's bits: the same results on every target.
//!
//! - **Quantizer inputs** below [`INPUT_FLOOR`] (2^-100) in magnitude read as zeros of their
//!   sign. A block's largest `|x|` is then zero or at least 2^-100, its scale `amax / 127` (or
//!   `max / -127`) and inverse are normal, and a product `x · id` that underflows rounds to a
//!   zero code whether flushed or not. Their f16 scale would round to zero anyway.
//! - **f32 operands** of `dot_dequantized` below [`OPERAND_FLOOR`] (2^-42) read as zeros (the
//!   core's floor on decoded f32 values): the block types' dequantized values are multiples of
//!   2^-24 (f16 scales times small integers), so every product is zero or at least 2^-84, a
//!   multiple of 2^-107, and so is every lane sum.

/// Quantizer inputs smaller than this (2^-100) in magnitude are zeros.
pub const INPUT_FLOOR: f32 = f32::from_bits(0x0d80_0000);

/// A block whose largest magnitude is at least this (2^-92) gets the same codes whether its
/// inputs are floored at [`INPUT_FLOOR`] or not: a value below 2^-100 times the inverse scale
/// (at most `127 / 2^-92`, rounded) is below one half, so it rounds to the code 0 either way.
/// Kernels that do not floor take the portable code for smaller blocks that are not all zero.
pub const UNFLOORED_BLOCK_MAX: f32 = f32::from_bits(0x1180_0000);

/// f32 operands of the f32-activation dot product smaller than this (2^-42) are zeros.
pub const OPERAND_FLOOR: f32 = f32::from_bits(0x2a80_0000);

/// `x`, or a zero of its sign if its magnitude is below `floor` (NaN and infinities stay).
/// Integer steps only (vectorizes).
#[inline(always)]
fn below(x: f32, floor: f32) -> f32 {
    let b = x.to_bits();
    f32::from_bits(if b & 0x7fff_ffff < floor.to_bits() {
        b & 0x8000_0000
    } else {
        b
    })
}

/// A quantizer input, floored at [`INPUT_FLOOR`].
#[inline(always)]
pub fn input(x: f32) -> f32 {
    below(x, INPUT_FLOOR)
}

/// An f32 operand of the f32-activation dot product, floored at [`OPERAND_FLOOR`].
#[inline(always)]
pub fn operand(x: f32) -> f32 {
    below(x, OPERAND_FLOOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_are_powers_of_two_and_keep_signs() {
        assert_eq!(INPUT_FLOOR, libm::exp2f(-100.0));
        assert_eq!(OPERAND_FLOOR, libm::exp2f(-42.0));
        assert_eq!(UNFLOORED_BLOCK_MAX, libm::exp2f(-92.0));
        // The largest code a floored-away value could take in an unfloored block is below 1/2.
        let under = f32::from_bits(INPUT_FLOOR.to_bits() - 1);
        let id = 1.0 / (UNFLOORED_BLOCK_MAX / 127.0);
        assert!(libm::fabsf(under * id) < 0.5);
        assert!(libm::fabsf(under * (-127.0 / UNFLOORED_BLOCK_MAX)) < 0.5);
        for floor in [INPUT_FLOOR, OPERAND_FLOOR] {
            let under = f32::from_bits(floor.to_bits() - 1);
            assert_eq!(below(under, floor).to_bits(), 0);
            assert_eq!(below(-under, floor).to_bits(), 0x8000_0000);
            assert_eq!(below(f32::from_bits(1), floor).to_bits(), 0);
            assert_eq!(below(floor, floor), floor);
            assert_eq!(below(-floor, floor), -floor);
        }
        for x in [1.5f32, -3.0, f32::MAX, f32::INFINITY, f32::NEG_INFINITY] {
            assert_eq!(input(x).to_bits(), x.to_bits());
            assert_eq!(operand(x).to_bits(), x.to_bits());
        }
        assert!(input(f32::NAN).is_nan());
    }
}
