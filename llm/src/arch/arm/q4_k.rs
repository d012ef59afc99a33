//! Q4_K weights × Q8_K activations in Helium: one weight row against one activation row, each
//! super-block's nibbles unpacked to bytes, its integer lanes and their f32 sums by
//! [`Lanes`](super::k_lanes::Lanes).

use super::k_lanes::{Lanes, nibbles};
use crate::gguf::QK_K;
use crate::quant::q4_k::{BYTES, packed_scales, scale_min};
use crate::quant::{QuantRow, f16_le};

/// `dot_q4_k_q8_k` of the weight row `w` with the activation row `a`, the same bits: per
/// super-block the eight integer lanes in Helium (scale `sc[j]` for the 32 values of chunk `j`),
/// `sums[l] += (d_w · d_a) · (f32)aux32[l]`, the minimums `Σ bsums[j] · m[j / 2]` and
/// `sumf −= (dmin_w · d_a) · (f32)sumi`; at the end `sumf` plus the lanes in order.
#[inline(never)]
pub(super) fn dot(w: &[u8], a: &QuantRow<'_>) -> f32 {
    let mut lanes = Lanes::new();
    let mut v = [0i8; QK_K];
    for (((wb, qa), &da), bs) in w
        .chunks_exact(BYTES)
        .zip(a.qs.chunks_exact(QK_K))
        .zip(a.d)
        .zip(a.bsums.chunks_exact(QK_K / 16))
    {
        let Ok(qa) = <&[i8; QK_K]>::try_from(qa) else {
            continue;
        };
        for (v64, q32) in v.chunks_exact_mut(64).zip(wb[16..].chunks_exact(32)) {
            nibbles(q32, v64);
        }
        let sc = packed_scales(wb);
        let pairs: [(u8, u8); 8] = core::array::from_fn(|j| scale_min(j, &sc));
        // 6-bit scales: at most 63, an i8.
        let scales: [i8; 16] = core::array::from_fn(|g| pairs[g / 2].0 as i8);
        lanes.block(&v, qa, &scales, f16_le(wb[0], wb[1]) * da);
        let sumi: i32 = bs
            .iter()
            .enumerate()
            .map(|(j, &s)| s as i32 * pairs[j / 2].1 as i32)
            .sum();
        lanes.minus(f16_le(wb[2], wb[3]) * da, sumi);
    }
    lanes.total()
}
