//! Helium (the M-profile vector extension: Cortex-M55, M85), chosen at build time (`build.rs`
//! reads the target and `-C target-cpu`): four weight rows at a time against one activation
//! row, each block's integer sum by `VMLADAV.S8` (sixteen products a step, exact in an `i32`),
//! its scales combined in the portable order (`VCVTB` for the f16 scales, exact): Q4_1 and
//! Q8_0 combine the four rows in the four lanes of a vector where that is exact (`lanes`:
//! Helium's vector floats flush subnormals, which these combinations never meet when the
//! activation scales are f16 values), otherwise on the scalar FPU. One file per weight type,
//! each one `asm!` loop (Rust has no Helium intrinsics).

mod lanes;
mod q4_1;
mod q8_0;

use super::Acts;
use super::rows::tiles;
use crate::gguf::TensorType;
use crate::quant::{self, QuantRow};

/// This build's kernels.
pub(super) fn name() -> Option<&'static str> {
    Some("helium")
}

/// Q4_1 and Q8_0 weights by four weight rows at a time against one activation row
/// ([`tiles`] with tiles of 4 × 1); other types decline.
#[inline]
pub(super) fn matmul(
    ty: TensorType,
    w: &[u8],
    row_bytes: usize,
    rows: usize,
    a: &Acts<'_>,
    n: usize,
    out: &mut [f32],
) -> bool {
    match ty {
        TensorType::Q4_1 => tiles::<4, 1>(
            w,
            row_bytes,
            rows,
            a,
            n,
            out,
            |w, a| q4_1::dot4(w, &a[0]).map(|v| [v]),
            q4_1::dot4,
            quant::q4_1::dot_q4_1_q8_1,
        ),
        TensorType::Q8_0 => tiles::<4, 1>(
            w,
            row_bytes,
            rows,
            a,
            n,
            out,
            |w, a| q8_0::dot4(w, &a[0]).map(|v| [v]),
            q8_0::dot4,
            quant::q8_0::dot_q8_0_q8_0,
        ),
        _ => false,
    }
}

/// Declines (one row at a time is the portable dot product's job: the kernels take four).
#[inline(always)]
pub(super) fn dot(_: TensorType, _: &[u8], _: &QuantRow<'_>) -> Option<f32> {
    None
}

/// Blocks the four rows `w` and the activation row `a` have in common (the portable dot
/// product's `zip`), when each row has the same length and starts at an even address (the
/// kernels read f16 scales with `VLDR.16`, which needs halfword alignment); `None` otherwise.
#[inline(always)]
fn common_blocks(
    w: &[&[u8]; 4],
    block_bytes: usize,
    a: &QuantRow<'_>,
    sums: bool,
) -> Option<usize> {
    let len = w[0].len();
    if w.iter()
        .any(|r| r.len() != len || r.as_ptr() as usize % 2 != 0)
    {
        return None;
    }
    let mut blocks = (len / block_bytes)
        .min(a.qs.len() / quant::BLOCK)
        .min(a.d.len());
    if sums {
        blocks = blocks.min(a.s.len());
    }
    Some(blocks)
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
