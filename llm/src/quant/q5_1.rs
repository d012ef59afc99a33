//! Q5_1 weights (ggml type 7): blocks of 32 values in 24 bytes — `d` and `m` (f16), `qh` (u32,
//! bit `j` the fifth bit of value `j`), then 16 bytes of low nibbles as Q4_1 (byte `j`: values
//! `j` and `j + 16`); a value is `q · d + m`. Dot product partner: Q8_1.

use super::{BLOCK, QuantRow, f16_le};

/// Bytes per block.
pub const BYTES: usize = 24;

/// The block's integer values `q` (0..=31), in value order.
#[inline(always)]
fn values(b: &[u8; BYTES]) -> [u8; BLOCK] {
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let mut v = [0u8; BLOCK];
    for (j, &q) in b[8..].iter().enumerate() {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        v[j] = (q & 0x0f) | (h0 << 4);
        v[j + 16] = (q >> 4) | (h1 << 4);
    }
    v
}

/// Dequantizes one block as `dequantize_row_q5_1`: `(f32)q · d + m` (no fused multiply-add).
pub fn dequantize(b: &[u8; BYTES], out: &mut [f32; BLOCK]) {
    let (d, m) = (f16_le(b[0], b[1]), f16_le(b[2], b[3]));
    for (o, q) in out.iter_mut().zip(values(b)) {
        *o = q as f32 * d + m;
    }
}

/// Dot product of a Q5_1 weight row with a Q8_1 activation row, as
/// `ggml_vec_dot_q5_1_q8_1_generic`: per block the exact integer sum, then
/// `sumf += (d_w · d_a) · (f32)sumi + m_w · s_a` in block order.
// Not inlined: the matmul's frame stays as small as its Q4_1 / Q8_0 loops need (a board's
// deepest stack path may run through it).
#[inline(never)]
pub fn dot_q5_1_q8_1(w: &[u8], a: &QuantRow<'_>) -> f32 {
    let mut sumf = 0.0f32;
    for (((wb, qa), &da), &sa) in w
        .chunks_exact(BYTES)
        .zip(a.qs.chunks_exact(BLOCK))
        .zip(a.d)
        .zip(a.s)
    {
        let (Ok(wb), Ok(qa)) = (<&[u8; BYTES]>::try_from(wb), <&[i8; BLOCK]>::try_from(qa)) else {
            continue;
        };
        let sumi: i32 = values(wb)
            .iter()
            .zip(qa)
            .map(|(&q, &x)| q as i32 * x as i32)
            .sum();
        let (dw, mw) = (f16_le(wb[0], wb[1]), f16_le(wb[2], wb[3]));
        sumf += (dw * da) * sumi as f32 + mw * sa;
    }
    sumf
}
