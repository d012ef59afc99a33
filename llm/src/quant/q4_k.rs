//! Q4_K weights (ggml type 12): super-blocks of 256 values in 144 bytes — `d` and `dmin`
//! (f16), 12 bytes of eight 6-bit scales and eight 6-bit minimums (one pair per 32 values,
//! packed as ggml's `get_scale_min_k4` reads them), then 128 bytes of nibbles: for each 64
//! values, 32 bytes whose low nibbles are the first 32 values and high nibbles the next 32. A
//! value is `(d · sc) · q − (dmin · m)`. Dot product partner: Q8_K.

use super::k_lanes::Lanes;
use super::{QuantRow, f16_le};
use crate::gguf::QK_K;

/// Bytes per super-block.
pub const BYTES: usize = 144;

/// Sub-block `j`'s (0..8) 6-bit scale and minimum from the 12 packed bytes `q` (ggml's
/// `get_scale_min_k4`): for `j < 4` the low six bits of `q[j]` and `q[j + 4]`; otherwise the
/// nibbles of `q[j + 4]` with the top two bits of `q[j − 4]` and `q[j]` above them.
#[inline(always)]
pub(crate) fn scale_min(j: usize, q: &[u8; 12]) -> (u8, u8) {
    match j {
        0..4 => (q[j] & 63, q[j + 4] & 63),
        4..8 => (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        ),
        _ => (0, 0),
    }
}

/// The 12 packed scale bytes of a Q4_K or Q5_K super-block (bytes 4..16).
#[inline(always)]
pub(crate) fn packed_scales(b: &[u8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    if let Some(src) = b.get(4..16) {
        s.copy_from_slice(src);
    }
    s
}

/// The super-block's unsigned 4-bit values in value order.
#[inline(always)]
fn values(b: &[u8; BYTES]) -> [i8; QK_K] {
    let mut v = [0i8; QK_K];
    for (v64, q32) in v.chunks_exact_mut(64).zip(b[16..].chunks_exact(32)) {
        let (lo, hi) = v64.split_at_mut(32);
        for ((l, h), &q) in lo.iter_mut().zip(hi).zip(q32) {
            *l = (q & 0x0f) as i8;
            *h = (q >> 4) as i8;
        }
    }
    v
}

/// Dequantizes a super-block of `values` as `dequantize_row_q4_K` and `_q5_K` do: per 32
/// values `d1 = d · sc`, `m1 = dmin · m`, `y = d1 · (f32)q − m1`.
#[inline(always)]
pub(crate) fn dequantize_with(b: &[u8], v: &[i8; QK_K], out: &mut [f32; QK_K]) {
    let (d, dmin) = (f16_le(b[0], b[1]), f16_le(b[2], b[3]));
    let sc = packed_scales(b);
    for (j, (o32, v32)) in out.chunks_exact_mut(32).zip(v.chunks_exact(32)).enumerate() {
        let (s, m) = scale_min(j, &sc);
        let (d1, m1) = (d * s as f32, dmin * m as f32);
        for (o, &q) in o32.iter_mut().zip(v32) {
            *o = d1 * q as f32 - m1;
        }
    }
}

/// Dequantizes one super-block as `dequantize_row_q4_K`.
pub fn dequantize(b: &[u8; BYTES], out: &mut [f32; QK_K]) {
    dequantize_with(b, &values(b), out);
}

/// One Q4_K or Q5_K super-block into `lanes`, as the generic dot products do: the integer
/// scales (one per 32 values, repeated for each 16), `d = d_w · d_a`, then the minimums
/// `sumi = Σ_j bsums[j] · m[j / 2]` with `dmin = dmin_w · d_a`.
#[inline(always)]
pub(crate) fn dot_block(
    lanes: &mut Lanes,
    b: &[u8],
    v: &[i8; QK_K],
    q8: &[i8; QK_K],
    da: f32,
    bsums: &[i16],
) {
    let sc = packed_scales(b);
    let pairs: [(u8, u8); 8] = core::array::from_fn(|j| scale_min(j, &sc));
    let scales: [i32; 16] = core::array::from_fn(|g| pairs[g / 2].0 as i32);
    lanes.block(v, q8, &scales, f16_le(b[0], b[1]) * da);
    let sumi: i32 = bsums
        .iter()
        .enumerate()
        .map(|(j, &s)| s as i32 * pairs[j / 2].1 as i32)
        .sum();
    lanes.minus(f16_le(b[2], b[3]) * da, sumi);
}

/// Dot product of a Q4_K weight row with a Q8_K activation row, as
/// `ggml_vec_dot_q4_K_q8_K_generic` (order: see the K-quant lanes in this module's parent).
// Not inlined: its 256-value arrays stay out of the caller's frame (the matmul's, on a board's
// deepest stack path, whatever the weight type).
#[inline(never)]
pub fn dot_q4_k_q8_k(w: &[u8], a: &QuantRow<'_>) -> f32 {
    let mut lanes = Lanes::new();
    for (((wb, qa), &da), bs) in w
        .chunks_exact(BYTES)
        .zip(a.qs.chunks_exact(QK_K))
        .zip(a.d)
        .zip(a.bsums.chunks_exact(QK_K / 16))
    {
        let (Ok(wb), Ok(qa)) = (<&[u8; BYTES]>::try_from(wb), <&[i8; QK_K]>::try_from(qa)) else {
            continue;
        };
        dot_block(&mut lanes, wb, &values(wb), qa, da, bs);
    }
    lanes.total()
}
