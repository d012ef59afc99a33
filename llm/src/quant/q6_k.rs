//! Q6_K weights (ggml type 14): super-blocks of 256 values in 210 bytes — 128 bytes `ql` (low
//! nibbles), 64 bytes `qh` (top two bits), 16 i8 scales (one per 16 values), then `d` (f16).
//! Per 128 values (`ql` 64 bytes, `qh` 32 bytes): value `l` (0..32) is `ql[l]`'s low nibble
//! with bits 0–1 of `qh[l]`, `l + 32` is `ql[l + 32]`'s low nibble with bits 2–3, `l + 64`
//! `ql[l]`'s high nibble with bits 4–5, `l + 96` `ql[l + 32]`'s high nibble with bits 6–7.
//! A value is `(d · sc) · (q − 32)`. Dot product partner: Q8_K.

use super::k_lanes::Lanes;
use super::{QuantRow, f16_le};
use crate::gguf::QK_K;

/// Bytes per super-block.
pub const BYTES: usize = 210;

/// The super-block's values `q − 32` (−32..=31) in value order.
#[inline(always)]
fn values(b: &[u8; BYTES]) -> [i8; QK_K] {
    let (ql, rest) = b.split_at(128);
    let qh = &rest[..64];
    let mut v = [0i8; QK_K];
    for ((v128, l64), h32) in v
        .chunks_exact_mut(128)
        .zip(ql.chunks_exact(64))
        .zip(qh.chunks_exact(32))
    {
        let (a, b) = l64.split_at(32);
        for (l, ((&qa, &qb), &h)) in a.iter().zip(b).zip(h32).enumerate() {
            v128[l] = ((qa & 0x0f) | ((h & 3) << 4)) as i8 - 32;
            v128[l + 32] = ((qb & 0x0f) | (((h >> 2) & 3) << 4)) as i8 - 32;
            v128[l + 64] = ((qa >> 4) | (((h >> 4) & 3) << 4)) as i8 - 32;
            v128[l + 96] = ((qb >> 4) | (((h >> 6) & 3) << 4)) as i8 - 32;
        }
    }
    v
}

/// The sixteen i8 scales.
#[inline(always)]
fn scales(b: &[u8; BYTES]) -> [i8; 16] {
    core::array::from_fn(|g| b[192 + g] as i8)
}

/// Dequantizes one super-block as `dequantize_row_q6_K`: `(d · (f32)sc) · (f32)(q − 32)`.
pub fn dequantize(b: &[u8; BYTES], out: &mut [f32; QK_K]) {
    let d = f16_le(b[208], b[209]);
    let v = values(b);
    for ((o16, v16), sc) in out
        .chunks_exact_mut(16)
        .zip(v.chunks_exact(16))
        .zip(scales(b))
    {
        let ds = d * sc as f32;
        for (o, &q) in o16.iter_mut().zip(v16) {
            *o = ds * q as f32;
        }
    }
}

/// Dot product of a Q6_K weight row with a Q8_K activation row, as
/// `ggml_vec_dot_q6_K_q8_K_generic`: the K-quant lanes with one i8 scale per 16 values and
/// `d = d_w · d_a`; no minimum term.
// Not inlined: its 256-value arrays stay out of the caller's frame (the matmul's, on a board's
// deepest stack path, whatever the weight type).
#[inline(never)]
pub fn dot_q6_k_q8_k(w: &[u8], a: &QuantRow<'_>) -> f32 {
    let mut lanes = Lanes::new();
    for ((wb, qa), &da) in w.chunks_exact(BYTES).zip(a.qs.chunks_exact(QK_K)).zip(a.d) {
        let (Ok(wb), Ok(qa)) = (<&[u8; BYTES]>::try_from(wb), <&[i8; QK_K]>::try_from(qa)) else {
            continue;
        };
        let sc: [i32; 16] = scales(wb).map(|s| s as i32);
        lanes.block(&values(wb), qa, &sc, f16_le(wb[208], wb[209]) * da);
    }
    lanes.total()
}
