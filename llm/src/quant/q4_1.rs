//! Q4_1 weights (ggml type 3): blocks of 32 values in 20 bytes — `d` and `m` (f16), then 16
//! bytes whose byte `j` holds value `j` (low nibble) and value `j + 16` (high nibble); a value
//! is `q · d + m`. Dot product partner: Q8_1.

use super::{BLOCK, QuantRow, f16_le};

/// Bytes per block.
pub const BYTES: usize = 20;

#[inline(always)]
fn scale(b: &[u8], at: usize) -> f32 {
    f16_le(b[at], b[at + 1])
}

/// Dequantizes one block as `dequantize_row_q4_1`: `(f32)q · d + m` (no fused multiply-add).
pub fn dequantize(b: &[u8; BYTES], out: &mut [f32; BLOCK]) {
    let (d, m) = (f16_le(b[0], b[1]), f16_le(b[2], b[3]));
    let (lo, hi) = out.split_at_mut(BLOCK / 2);
    for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b[4..]) {
        *l = (q & 0x0f) as f32 * d + m;
        *h = (q >> 4) as f32 * d + m;
    }
}

/// Dot product of one Q4_1 weight row with a Q8_1 activation row, as
/// `ggml_vec_dot_q4_1_q8_1_generic`: `sumf += (d_w · d_a) · (f32)Σ q_w·q_a + m_w · s_a` in block
/// order.
#[inline]
pub fn dot_q4_1_q8_1(w: &[u8], a: &QuantRow<'_>) -> f32 {
    let mut sumf = 0.0f32;
    for (((wb, qa), &da), &sa) in w
        .chunks_exact(20)
        .zip(a.qs.chunks_exact(BLOCK))
        .zip(a.d)
        .zip(a.s)
    {
        let (dw, mw) = (scale(wb, 0), scale(wb, 2));
        let qs: &[u8; 16] = wb[4..20].try_into().unwrap_or(&[0; 16]);
        let qa: &[i8; 32] = qa.try_into().unwrap_or(&[0; 32]);
        let mut lo = 0i32;
        let mut hi = 0i32;
        for j in 0..16 {
            lo += (qs[j] & 0x0f) as i32 * qa[j] as i32;
            hi += (qs[j] >> 4) as i32 * qa[j + 16] as i32;
        }
        sumf += (dw * da) * (lo + hi) as f32 + mw * sa;
    }
    sumf
}
