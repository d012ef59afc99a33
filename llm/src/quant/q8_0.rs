//! Q8_0 weights (ggml type 8): blocks of 32 values in 34 bytes — `d` (f16), then 32 i8 codes;
//! a value is `q · d`. Dot product partner: Q8_0.

use super::{BLOCK, QuantRow, f16_le};

/// Bytes per block.
pub const BYTES: usize = 34;

#[inline(always)]
fn scale(b: &[u8], at: usize) -> f32 {
    f16_le(b[at], b[at + 1])
}

/// Dequantizes one block as `dequantize_row_q8_0`: `(f32)q · d`.
pub fn dequantize(b: &[u8; BYTES], out: &mut [f32; BLOCK]) {
    let d = f16_le(b[0], b[1]);
    for (o, &q) in out.iter_mut().zip(&b[2..]) {
        *o = q as i8 as f32 * d;
    }
}

/// Dot product of one Q8_0 weight row with a Q8_0 activation row, as
/// `ggml_vec_dot_q8_0_q8_0_generic`: `sumf += (f32)Σ q_w·q_a · (d_w · d_a)` in block order.
#[inline]
pub fn dot_q8_0_q8_0(w: &[u8], a: &QuantRow<'_>) -> f32 {
    let mut sumf = 0.0f32;
    for ((wb, qa), &da) in w.chunks_exact(34).zip(a.qs.chunks_exact(BLOCK)).zip(a.d) {
        let dw = scale(wb, 0);
        let qs: &[u8; 32] = wb[2..34].try_into().unwrap_or(&[0; 32]);
        let qa: &[i8; 32] = qa.try_into().unwrap_or(&[0; 32]);
        let mut sumi = 0i32;
        for j in 0..32 {
            sumi += qs[j] as i8 as i32 * qa[j] as i32;
        }
        sumf += sumi as f32 * (dw * da);
    }
    sumf
}
