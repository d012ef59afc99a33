//! Q5_0 weights × Q8_0 activations with the DSP extension: every weight row against one
//! activation row, expanded once per call ([`expand`]).
//!
//! A block's value is `q − 16` with `q = nibble + 16 · h` (`h` the block's `qh` bit), so
//! `Σ (q − 16) · x = Σ nibble · x − Σ 16 · (1 − h) · x`: the nibbles by pairs as the Q4_1
//! kernel takes them (one `AND` with `0x000f000f` and a shift per pair, then `SMLAD`), and the
//! fifth bits by pairs `(j, j + 16)`, whose `qh` bits are 16 apart as two halves are: one `AND`
//! of `¬qh` (shifted) with `0x00100010` gives the pair `(16 · (1 − h_j), 16 · (1 − h_{j+16}))`,
//! multiplied by `SMLAD` with the expanded `(x_j, x_{j+16})` into a second sum, subtracted at
//! the end. Exact in an `i32` (at most 32 · 16 · 128 each), then
//! `sumf += (d_w · d_a) · (f32)sumi` in block order, as the portable code.

use super::insn::{
    code_word, f16_to_f32, halves, in_register, smlad, smuad, sxtb16, sxtb16_ror8, word,
};
use crate::quant::q5_0::BYTES;
use crate::quant::{BLOCK, QuantRow};

/// Words per expanded block: `d_a` (f32 bits), the 16 fifth-bit pairs, the 16 nibble pairs.
const WORDS: usize = 33;

/// Blocks expanded at a time (Gemma 3's 640-value rows in two chunks, 16 and 4; the kernel
/// check's 576-value rows too): 16 × 33 words (2,112 bytes) of stack.
const CHUNK: usize = 16;

/// Blocks `from..from + out.len() / 33` of `a` as [`block`] reads them: `d_a`; for `j` in 0..16
/// the pair `(x_j, x_{j+16})`; then for each of the block's four nibble words `k` the pairs its
/// four `AND`s give (`(4k, 4k+2)`, `(4k+1, 4k+3)` of the low nibbles, `(4k+16, 4k+18)`,
/// `(4k+17, 4k+19)` of the high ones), each by `SXTB16` (of a `PKHBT` / `PKHTB` of two code
/// words for the first ones). The caller keeps the blocks within `a`.
fn expand(a: &QuantRow<'_>, from: usize, out: &mut [u32]) {
    for (b, x) in (from..).zip(out.chunks_exact_mut(WORDS)) {
        x[0] = a.d[b].to_bits();
        let q = &a.qs[b * BLOCK..][..BLOCK];
        for k in 0..4 {
            let (lo, hi) = (code_word(q, 4 * k), code_word(q, 16 + 4 * k));
            let [p, r] = halves(lo, hi);
            let bits = &mut x[1 + 4 * k..][..4];
            bits[0] = sxtb16(p);
            bits[1] = sxtb16_ror8(p);
            bits[2] = sxtb16(r);
            bits[3] = sxtb16_ror8(r);
            let nibbles = &mut x[17 + 4 * k..][..4];
            nibbles[0] = sxtb16(lo);
            nibbles[1] = sxtb16_ror8(lo);
            nibbles[2] = sxtb16(hi);
            nibbles[3] = sxtb16_ror8(hi);
        }
    }
}

/// One weight block `b` against its expanded activation block `x`: the exact `Σ (q − 16) · x`.
#[inline(always)]
fn block(b: &[u8; BYTES], x: &[u32; WORDS]) -> i32 {
    let sixteen = in_register(0x0010_0010);
    let nibble = in_register(0x000f_000f);
    let not_qh = !word(b, 2);
    // Bit j of ¬qh to bit 4 (and bit j + 16 to bit 20).
    let mut ones = smuad((not_qh << 4) & sixteen, x[1]);
    for j in 1..16 {
        let at4 = if j < 4 {
            not_qh << (4 - j)
        } else {
            not_qh >> (j - 4)
        };
        ones = smlad(at4 & sixteen, x[1 + j], ones);
    }
    let mut sum = 0;
    for k in 0..4 {
        let w = word(b, 6 + 4 * k);
        let p = &x[17 + 4 * k..][..4];
        sum = smlad(w & nibble, p[0], sum);
        sum = smlad((w >> 8) & nibble, p[1], sum);
        sum = smlad((w >> 4) & nibble, p[2], sum);
        sum = smlad((w >> 12) & nibble, p[3], sum);
    }
    sum - ones
}

/// `out[o] = dot_q5_0_q8_0(W[o], a)` for every row `o` of `w` (rows of `row_bytes` bytes, as
/// many as `out` holds, any alignment), the same bits: the blocks of `a` expanded [`CHUNK`] at
/// a time, each row's sum carried from chunk to chunk in block order. `false` (nothing
/// written) when `w` does not hold the rows.
pub(super) fn rows(w: &[u8], row_bytes: usize, a: &QuantRow<'_>, out: &mut [f32]) -> bool {
    let fits = out
        .len()
        .checked_mul(row_bytes)
        .is_some_and(|b| b <= w.len());
    if !fits {
        return false;
    }
    let blocks = (row_bytes / BYTES).min(a.qs.len() / BLOCK).min(a.d.len());
    // +0.0, as the portable `sumf` starts.
    out.fill(0.0);
    let mut x = [0u32; CHUNK * WORDS];
    let mut from = 0;
    while from < blocks {
        let nb = (blocks - from).min(CHUNK);
        let x = &mut x[..nb * WORDS];
        expand(a, from, x);
        for (o, sumf) in out.iter_mut().enumerate() {
            let row = &w[o * row_bytes + from * BYTES..][..nb * BYTES];
            let mut s = *sumf;
            for (wb, xb) in row.chunks_exact(BYTES).zip(x.chunks_exact(WORDS)) {
                let (Ok(wb), Ok(xb)) =
                    (<&[u8; BYTES]>::try_from(wb), <&[u32; WORDS]>::try_from(xb))
                else {
                    continue;
                };
                let sumi = block(wb, xb);
                let d = f16_to_f32(u16::from_le_bytes([wb[0], wb[1]]));
                s += (d * f32::from_bits(xb[0])) * sumi as f32;
            }
            *sumf = s;
        }
        from += nb;
    }
    true
}
