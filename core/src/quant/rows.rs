//! The cache's row codec: each page format's rows encoded with this build's quantizer kernels.

use crate::arch::NativeQuant;
use crate::error::Result;
use crate::format::{Element, ElementFormat, Rotation};

pub(crate) use crate::format::decode_rotated;

/// `format::encode_rotated` with this build's quantizer kernels (the same bits as the reference
/// loops): token rows `src` into value bytes `vals` and scale bytes `scales` of format `fmt`.
#[inline]
pub(crate) fn encode_rotated<T: Element>(
    fmt: ElementFormat,
    rot: Rotation,
    head_dim: usize,
    src: &[T],
    vals: &mut [u8],
    scales: &mut [u8],
) -> Result<()> {
    crate::format::encode_rotated::<NativeQuant, T>(fmt, rot, head_dim, src, vals, scales)
}
