//! The activation quantizers' row loops, shared by the ISA modules (x86 takes the Q8_K one; its
//! Q8_0 / Q8_1 block kernels need F16C for the scales' rounding, so it keeps its own loop): a row split into blocks (or
//! Q8_K super-blocks) as the portable `zip` splits it, each block to the ISA's block kernel,
//! and a block the kernel declines (an infinity or NaN, a block near the input floor, …) to the
//! portable code, so the row has the portable bits whichever blocks the kernel takes.

use crate::gguf::QK_K;
use crate::quant::{BLOCK, q8_act, quantize_q8_k};

/// Quantizes `x` to Q8_0 (`s` `None`) or Q8_1 (`s` the block sums) over as many blocks as every
/// buffer holds. `block` writes one block's codes and returns its unrounded scale `amax / 127`
/// and the sum of its codes, or `None` (nothing written) to decline it; `through_f16` rounds a
/// value through f16 as `q8_act::through_f16` does.
#[inline(always)]
pub(super) fn q8_rows(
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    mut s: Option<&mut [f32]>,
    block: impl Fn(&[f32; BLOCK], &mut [i8; BLOCK]) -> Option<(f32, i32)>,
    through_f16: impl Fn(f32) -> f32,
) {
    let mut blocks = (x.len() / BLOCK).min(qs.len() / BLOCK).min(d.len());
    if let Some(s) = &s {
        blocks = blocks.min(s.len());
    }
    for b in 0..blocks {
        let (Some(xb), Some(qb)) = (
            x[b * BLOCK..].first_chunk::<BLOCK>(),
            qs[b * BLOCK..].first_chunk_mut::<BLOCK>(),
        ) else {
            return;
        };
        match block(xb, qb) {
            Some((scale, sum)) => {
                d[b] = through_f16(scale);
                if let Some(s) = s.as_deref_mut() {
                    s[b] = through_f16(sum as f32 * scale);
                }
            }
            None => match s.as_deref_mut() {
                Some(s) => q8_act::quantize_q8_1(xb, qb, &mut d[b..=b], &mut s[b..=b]),
                None => q8_act::quantize_q8_0(xb, qb, &mut d[b..=b]),
            },
        }
    }
}

/// Quantizes `x` to Q8_K over as many super-blocks as every buffer holds: codes into `qs`,
/// scales into `d`, the 16-value sums into `bsums`. `block` writes one super-block's codes and
/// sums and returns its scale, or `None` (nothing written) to decline it.
#[cfg_attr(edgekv_llm_dsp, allow(dead_code))] // The DSP kernels leave Q8_K to the portable code.
#[inline(always)]
pub(super) fn q8_k_rows(
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    bsums: &mut [i16],
    block: impl Fn(&[f32; QK_K], &mut [i8; QK_K], &mut [i16; 16]) -> Option<f32>,
) {
    let blocks = (x.len() / QK_K)
        .min(qs.len() / QK_K)
        .min(d.len())
        .min(bsums.len() / 16);
    for b in 0..blocks {
        let (Some(xb), Some(qb), Some(sb)) = (
            x[b * QK_K..].first_chunk::<QK_K>(),
            qs[b * QK_K..].first_chunk_mut::<QK_K>(),
            bsums[b * 16..].first_chunk_mut::<16>(),
        ) else {
            return;
        };
        match block(xb, qb, sb) {
            Some(scale) => d[b] = scale,
            None => quantize_q8_k(xb, qb, &mut d[b..=b], sb),
        }
    }
}
