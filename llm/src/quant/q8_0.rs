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

/// [`dot_q8_0_q8_0`] of one weight row with `R` activation rows at once, each row's bits
/// unchanged: each block's codes are read once for every row, and each row keeps its own `sumf`
/// in block order (the rows' shortest length bounds the blocks, as the `zip` does for one row,
/// when all have the same length as [`matmul_quant`](crate::matmul::matmul_quant)'s rows do).
#[inline]
pub fn dot_rows_q8_0_q8_0<const R: usize>(w: &[u8], a: &[QuantRow<'_>; R]) -> [f32; R] {
    let mut blocks = w.len() / BYTES;
    for r in a {
        blocks = blocks.min(r.qs.len() / BLOCK).min(r.d.len());
    }
    let mut sumf = [0.0f32; R];
    for (b, wb) in w.chunks_exact(BYTES).take(blocks).enumerate() {
        let dw = scale(wb, 0);
        let v: [i8; BLOCK] = core::array::from_fn(|j| wb[2 + j] as i8);
        for (r, sum) in a.iter().zip(&mut sumf) {
            let qa: &[i8; BLOCK] = r.qs[b * BLOCK..][..BLOCK].try_into().unwrap_or(&[0; BLOCK]);
            let mut sumi = 0i32;
            for j in 0..BLOCK {
                sumi += v[j] as i32 * qa[j] as i32;
            }
            *sum += sumi as f32 * (dw * r.d[b]);
        }
    }
    sumf
}
