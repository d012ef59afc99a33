//! Q5_K weights (ggml type 13): super-blocks of 256 values in 176 bytes — `d` and `dmin`
//! (f16), Q4_K's 12 packed scale bytes, 32 bytes `qh` (bit `i` of `qh[l]` is the fifth bit of
//! value `32 · i + l`), then Q4_K's 128 bytes of low nibbles. A value is
//! `(d · sc) · q − (dmin · m)`. Dot product partner: Q8_K.

use super::QuantRow;
use super::k_lanes::Lanes;
use super::q4_k::{dequantize_with, dot_block};
use crate::gguf::QK_K;

/// Bytes per super-block.
pub const BYTES: usize = 176;

/// The super-block's unsigned 5-bit values in value order.
#[inline(always)]
fn values(b: &[u8; BYTES]) -> [i8; QK_K] {
    let (qh, ql) = b[16..].split_at(32);
    let mut v = [0i8; QK_K];
    for (i, (v64, q32)) in v.chunks_exact_mut(64).zip(ql.chunks_exact(32)).enumerate() {
        let (lo, hi) = v64.split_at_mut(32);
        for (((l, h), &q), &h5) in lo.iter_mut().zip(hi).zip(q32).zip(qh) {
            *l = ((q & 0x0f) + ((h5 >> (2 * i)) & 1) * 16) as i8;
            *h = ((q >> 4) + ((h5 >> (2 * i + 1)) & 1) * 16) as i8;
        }
    }
    v
}

/// Dequantizes one super-block as `dequantize_row_q5_K`.
pub fn dequantize(b: &[u8; BYTES], out: &mut [f32; QK_K]) {
    dequantize_with(b, &values(b), out);
}

/// Dot product of a Q5_K weight row with a Q8_K activation row, as
/// `ggml_vec_dot_q5_K_q8_K_generic` (Q4_K's order with 5-bit values).
// Not inlined: its 256-value arrays stay out of the caller's frame (the matmul's, on a board's
// deepest stack path, whatever the weight type).
#[inline(never)]
pub fn dot_q5_k_q8_k(w: &[u8], a: &QuantRow<'_>) -> f32 {
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
