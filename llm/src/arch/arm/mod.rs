//! Helium (the M-profile vector extension: Cortex-M55, M85), chosen at build time (`build.rs`
//! reads the target and `-C target-cpu`): four weight rows at a time against one activation
//! row, each block's integer sum by `VMLADAV.S8` (sixteen products a step, exact in an `i32`),
//! its scales combined in the portable order (`VCVTB` for the f16 scales, exact): Q4_1 and
//! Q8_0 combine the four rows in the four lanes of a vector where that is exact (`lanes`:
//! Helium's vector floats flush subnormals, which these combinations never meet when the
//! activation scales are f16 values), Q5_0 and the K-quants on the scalar FPU, which keeps
//! subnormals. One file per weight type, each one `asm!` loop (Rust has no Helium
//! intrinsics). The K-quants (Q4_K, Q6_K × Q8_K) take one weight row at a time: their per-lane
//! integer sums (`k_lanes`) need two accumulators per row, and the f32 lane sums of the
//! portable order another two registers.

mod k_lanes;
mod lanes;
mod q4_1;
mod q4_k;
mod q5_0;
mod q6_k;
mod q8_0;
mod quantize;

use super::Acts;
use super::rows::{tiles, tiles_k};
use crate::gguf::TensorType;
use crate::quant::{self, QuantRow};
use lanes::exact_acts;

/// This build's kernels.
pub(super) fn name() -> Option<&'static str> {
    Some("helium")
}

/// Q4_1 weights by tiles of four weight rows × two activation rows (a prefill's; four rows
/// against one for the rest), Q5_0 and Q8_0 by four weight rows at a time against one activation
/// row ([`tiles`] with tiles of 4 × 1), Q4_K and Q6_K one row at a time ([`tiles_k`] with tiles
/// of 1 × 1); other types decline. Q4_1 and Q8_0 decline too (the portable code runs) when an
/// activation row's scales would not combine exactly in vector lanes ([`exact_acts`], checked
/// once here rather than in each call of the kernels).
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
        TensorType::Q4_1 => {
            exact_acts(a, n, true)
                && tiles::<4, 2>(
                    w,
                    row_bytes,
                    rows,
                    a,
                    n,
                    out,
                    q4_1::dot4x2,
                    q4_1::dot4,
                    quant::q4_1::dot_q4_1_q8_1,
                )
        }
        TensorType::Q8_0 => {
            exact_acts(a, n, false)
                && tiles::<4, 1>(
                    w,
                    row_bytes,
                    rows,
                    a,
                    n,
                    out,
                    |w, a| q8_0::dot4(w, &a[0]).map(|v| [v]),
                    q8_0::dot4,
                    quant::q8_0::dot_q8_0_q8_0,
                )
        }
        TensorType::Q5_0 => tiles::<4, 1>(
            w,
            row_bytes,
            rows,
            a,
            n,
            out,
            |w, a| q5_0::dot4(w, &a[0]).map(|v| [v]),
            q5_0::dot4,
            quant::q5_0::dot_q5_0_q8_0,
        ),
        TensorType::Q4_K => tiles_k::<1, 1>(
            w,
            row_bytes,
            rows,
            a,
            n,
            out,
            |w, a| [[q4_k::dot(w[0], &a[0])]],
            |w, a| [q4_k::dot(w[0], a)],
            q4_k::dot,
        ),
        TensorType::Q6_K => tiles_k::<1, 1>(
            w,
            row_bytes,
            rows,
            a,
            n,
            out,
            |w, a| [[q6_k::dot(w[0], &a[0])]],
            |w, a| [q6_k::dot(w[0], a)],
            q6_k::dot,
        ),
        _ => false,
    }
}

/// Q4_K and Q6_K (their kernels take one row); the others decline (one row at a time is the
/// portable dot product's job: their kernels take four).
#[inline(always)]
pub(super) fn dot(ty: TensorType, w: &[u8], a: &QuantRow<'_>) -> Option<f32> {
    match ty {
        TensorType::Q4_K => Some(q4_k::dot(w, a)),
        TensorType::Q6_K => Some(q6_k::dot(w, a)),
        _ => None,
    }
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

/// Every activation type (Q8_0, Q8_1, Q8_K: `quantize`; a block Helium's flushing lanes would
/// not quantize exactly takes the portable code there).
#[inline]
pub(super) fn quantize(
    act: crate::quant::ActivationType,
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
) -> bool {
    use crate::quant::ActivationType;
    match act {
        ActivationType::Q8_0 => quantize::q8(x, qs, d, None),
        ActivationType::Q8_1 => quantize::q8(x, qs, d, Some(s)),
        ActivationType::Q8_K => {
            // Q8_K's 16-value sums travel as i16 in `s` (`QuantRow::of`).
            let bsums: &mut [i16] = bytemuck::try_cast_slice_mut(s).unwrap_or(&mut []);
            quantize::q8_k(x, qs, d, bsums)
        }
    }
    true
}
