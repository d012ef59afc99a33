//! `native` on every target without matmul kernels (and under Miri, and with the feature
//! `portable`): every entry declines, the portable code runs.

use super::Acts;
use crate::gguf::TensorType;
use crate::quant::QuantRow;

/// No kernels in this build.
pub(super) fn name() -> Option<&'static str> {
    None
}

/// Declines: the portable loops run.
#[inline(always)]
pub(super) fn matmul(
    _: TensorType,
    _: &[u8],
    _: usize,
    _: usize,
    _: &Acts<'_>,
    _: usize,
    _: &mut [f32],
) -> bool {
    false
}

/// Declines: the portable dot product runs.
#[inline(always)]
pub(super) fn dot(_: TensorType, _: &[u8], _: &QuantRow<'_>) -> Option<f32> {
    None
}

/// Declines: the portable activation quantizer runs.
#[inline(always)]
pub(super) fn quantize(
    _: crate::quant::ActivationType,
    _: &[f32],
    _: &mut [i8],
    _: &mut [f32],
    _: &mut [f32],
) -> bool {
    false
}
