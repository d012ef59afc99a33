//! Q6_K weights × Q8_K activations in Helium: one weight row against one activation row, each
//! super-block's six-bit values unpacked to bytes, its integer lanes and their f32 sums by
//! [`Lanes`](super::k_lanes::Lanes).

use super::k_lanes::Lanes;
use crate::gguf::QK_K;
use crate::quant::q6_k::BYTES;
use crate::quant::{QuantRow, f16_le};

/// The super-block's values `q − 32` (−32..=31) in value order (the layout: `quant::q6_k`).
#[inline(always)]
fn values(b: &[u8], v: &mut [i8; QK_K]) {
    let (ql, qh) = (&b[..128], &b[128..192]);
    for ((v128, l64), h32) in v
        .chunks_exact_mut(128)
        .zip(ql.chunks_exact(64))
        .zip(qh.chunks_exact(32))
    {
        let (a, b) = l64.split_at(32);
        let (v0, rest) = v128.split_at_mut(32);
        let (v1, rest) = rest.split_at_mut(32);
        let (v2, v3) = rest.split_at_mut(32);
        for l in 0..32 {
            let (qa, qb, h) = (a[l], b[l], h32[l]);
            v0[l] = ((qa & 0x0f) | ((h & 3) << 4)) as i8 - 32;
            v1[l] = ((qb & 0x0f) | (((h >> 2) & 3) << 4)) as i8 - 32;
            v2[l] = ((qa >> 4) | (((h >> 4) & 3) << 4)) as i8 - 32;
            v3[l] = ((qb >> 4) | (((h >> 6) & 3) << 4)) as i8 - 32;
        }
    }
}

/// `dot_q6_k_q8_k` of the weight row `w` with the activation row `a`, the same bits: per
/// super-block the eight integer lanes in Helium (one i8 scale per 16 values),
/// `sums[l] += (d_w · d_a) · (f32)aux32[l]`; at the end the lanes added in order.
#[inline(never)]
pub(super) fn dot(w: &[u8], a: &QuantRow<'_>) -> f32 {
    let mut lanes = Lanes::new();
    let mut v = [0i8; QK_K];
    for ((wb, qa), &da) in w.chunks_exact(BYTES).zip(a.qs.chunks_exact(QK_K)).zip(a.d) {
        let Ok(qa) = <&[i8; QK_K]>::try_from(qa) else {
            continue;
        };
        values(wb, &mut v);
        let scales: [i8; 16] = core::array::from_fn(|g| wb[192 + g] as i8);
        lanes.block(&v, qa, &scales, f16_le(wb[208], wb[209]) * da);
    }
    lanes.total()
}
