//! Q5_0 weights (ggml type 6): blocks of 32 values in 22 bytes — `d` (f16), `qh` (u32, bit `j`
//! the fifth bit of value `j`), then 16 bytes of low nibbles as Q4_0 (byte `j`: values `j` and
//! `j + 16`); a value is `(q − 16) · d`. Dot product partner: Q8_0.

use super::{BLOCK, QuantRow, f16_le};

/// Bytes per block.
pub const BYTES: usize = 22;

/// The block's integer values `q − 16` (−16..=15), in value order.
#[inline(always)]
fn values(b: &[u8; BYTES]) -> [i8; BLOCK] {
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let mut v = [0i8; BLOCK];
    for (j, &q) in b[6..].iter().enumerate() {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        v[j] = ((q & 0x0f) | (h0 << 4)) as i8 - 16;
        v[j + 16] = ((q >> 4) | (h1 << 4)) as i8 - 16;
    }
    v
}

/// Dequantizes one block as `dequantize_row_q5_0`: `(f32)(q − 16) · d`.
pub fn dequantize(b: &[u8; BYTES], out: &mut [f32; BLOCK]) {
    let d = f16_le(b[0], b[1]);
    for (o, q) in out.iter_mut().zip(values(b)) {
        *o = q as f32 * d;
    }
}

/// Dot product of a Q5_0 weight row with a Q8_0 activation row, as
/// `ggml_vec_dot_q5_0_q8_0_generic`: per block the exact integer sum, then
/// `sumf += (d_w · d_a) · (f32)sumi` in block order.
// Not inlined: the matmul's frame stays as small as its Q4_1 / Q8_0 loops need (a board's
// deepest stack path may run through it).
#[inline(never)]
pub fn dot_q5_0_q8_0(w: &[u8], a: &QuantRow<'_>) -> f32 {
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
        sumf += (f16_le(wb[0], wb[1]) * da) * sumi as f32;
    }
    sumf
}
