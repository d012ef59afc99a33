//! Q4_0 weights (ggml type 2): blocks of 32 values in 18 bytes — `d` (f16), then 16 bytes whose
//! byte `j` holds value `j` (low nibble) and value `j + 16` (high nibble); a value is
//! `(q − 8) · d`. Dot product partner: Q8_0.

use super::{BLOCK, QuantRow, f16_le};

/// Bytes per block.
pub const BYTES: usize = 18;

/// The block's integer values `q − 8` (−8..=7), in value order.
#[inline(always)]
fn values(b: &[u8; BYTES]) -> [i8; BLOCK] {
    let mut v = [0i8; BLOCK];
    let (lo, hi) = v.split_at_mut(BLOCK / 2);
    for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b[2..]) {
        *l = (q & 0x0f) as i8 - 8;
        *h = (q >> 4) as i8 - 8;
    }
    v
}

/// Dequantizes one block as `dequantize_row_q4_0`: `(f32)(q − 8) · d`.
pub fn dequantize(b: &[u8; BYTES], out: &mut [f32; BLOCK]) {
    let d = f16_le(b[0], b[1]);
    for (o, q) in out.iter_mut().zip(values(b)) {
        *o = q as f32 * d;
    }
}

/// Dot product of a Q4_0 weight row with a Q8_0 activation row, as
/// `ggml_vec_dot_q4_0_q8_0_generic`: per block the exact integer sum `Σ (q − 8) · q_a`, then
/// `sumf += ((f32)sumi · d_w) · d_a` in block order.
// Not inlined: the matmul's frame stays as small as its Q4_1 / Q8_0 loops need (a board's
// deepest stack path may run through it).
#[inline(never)]
pub fn dot_q4_0_q8_0(w: &[u8], a: &QuantRow<'_>) -> f32 {
    let mut sumf = 0.0f32;
    for ((wb, qa), &da) in w.chunks_exact(BYTES).zip(a.qs.chunks_exact(BLOCK)).zip(a.d) {
        let (Ok(wb), Ok(qa)) = (<&[u8; BYTES]>::try_from(wb), <&[i8; BLOCK]>::try_from(qa)) else {
            continue;
        };
        let sumi: i32 = values(wb)
            .iter()
            .zip(qa)
            .map(|(&q, &x)| q as i32 * x as i32)
            .sum();
        sumf += (sumi as f32 * f16_le(wb[0], wb[1])) * da;
    }
    sumf
}
