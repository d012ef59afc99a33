//! The portable [`Isa`] of the attention page loop: integer operations and scalar sums, on every
//! target.

use super::Isa;
#[cfg(not(feature = "small-code"))]
use super::{PageKernels, Softmax};
#[cfg(not(feature = "small-code"))]
use crate::numeric::reduce;
use crate::numeric::widen::{f16_block, f16_to_f32};
use crate::numeric::{LANES, Widen};

/// [`Isa`] with integer operations and scalar sums, on every target.
pub(crate) struct Portable;

impl Widen for Portable {
    // `small-code`: one out-of-line copy of the decoder (int8 scales of K and V rows).
    #[cfg_attr(not(feature = "small-code"), inline(always))]
    #[cfg_attr(feature = "small-code", inline(never))]
    fn one(h: u16) -> f32 {
        f16_to_f32(h)
    }

    #[inline(always)]
    fn block(b: &[u8; 2 * LANES]) -> [f32; LANES] {
        f16_block(b)
    }
}

#[cfg(not(feature = "small-code"))]
impl Softmax for Portable {
    #[inline(always)]
    fn reduce8(x: &[[f32; LANES]; LANES]) -> [f32; LANES] {
        // The barrier keeps LLVM's SLP vectorizer from permuting the lanes where they are
        // accumulated to suit the tree (it would shuffle every block); it changes no value.
        let x = core::hint::black_box(x);
        core::array::from_fn(|i| reduce(x[i]))
    }
}

#[cfg(not(feature = "small-code"))]
impl PageKernels for Portable {}

impl Isa for Portable {}
