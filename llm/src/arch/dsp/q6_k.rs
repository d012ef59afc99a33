//! Q6_K weights × Q8_K activations with the DSP extension: every weight row against one
//! activation row, expanded once per call (`k_lanes`).
//!
//! Per 128 values (`ql` 64 bytes, `qh` 32): byte `i` (0..32) of `qh` gives the top two bits of
//! values `i` (bits 0–1, with `ql[i]`'s low nibble), `32 + i` (bits 2–3, `ql[32 + i]`'s low
//! nibble), `64 + i` (bits 4–5, `ql[i]`'s high nibble), `96 + i` (bits 6–7, `ql[32 + i]`'s
//! high nibble), all in lane `i mod 8`. Bytes `i` and `i + 8` make one lane's pair of a group:
//! `PKHBT` / `PKHTB` of two words of `ql` and of `qh`, then per pair one `AND` of the nibbles
//! and one of the two bits (each after a shift), an `ORR`: the unsigned six-bit pair
//! `(q0, q1)`; `SSUB16` makes it `(q0 − 32, q1 − 32)`, `SMUAD` multiplies it with the
//! activation pair (at most 2 · 32 · 128), and `MLA` adds it times the group's scale into lane
//! `aux32[l]`. (A scale multiplied into the packed pair first would carry a borrow from a
//! negative low half into the high one.) Exact integers; the f32 steps as the portable code.

use super::insn::{f16_to_f32, halves, in_register, smuad, ssub16, word};
use super::k_lanes::{self, Lanes, WORDS};
use crate::quant::QuantRow;
use crate::quant::q6_k::BYTES;

/// One weight super-block `b` into `lanes`, against its expanded activation super-block `x`
/// (scale `da`): the eight integer lanes (one i8 scale per 16 values), then
/// `sums[l] += (d · d_a) · (f32)aux32[l]`; no minimum term.
#[inline(always)]
fn super_block(lanes: &mut Lanes, b: &[u8; BYTES], x: &[u32; WORDS], da: f32, _: &[i16]) {
    let nibble = in_register(0x000f_000f);
    let bits = in_register(0x0030_0030);
    let offset = in_register(0x0020_0020);
    let sc: [i32; 16] = core::array::from_fn(|g| i32::from(b[192 + g] as i8));
    let mut aux = [0i32; 8];
    for half in 0..2 {
        let ql = &b[64 * half..][..64];
        let qh = &b[128 + 32 * half..][..32];
        // Bytes 4k..4k + 4 and 4k + 8..4k + 12: lanes 4 (k mod 2).., group k / 4 (0 or 1) of
        // the low nibbles.
        for k in [0, 1, 4, 5] {
            let h = halves(word(qh, 4 * k), word(qh, 4 * k + 8));
            let la = halves(word(ql, 4 * k), word(ql, 4 * k + 8));
            let lb = halves(word(ql, 32 + 4 * k), word(ql, 32 + 4 * k + 8));
            let g0 = 8 * half + k / 4;
            for p in 0..2 {
                for s in 0..2 {
                    let (l, sh) = (4 * (k % 2) + 2 * p + s, 8 * s);
                    let (h, la, lb) = (h[p] >> sh, la[p] >> sh, lb[p] >> sh);
                    let values = [
                        (la & nibble) | ((h << 4) & bits),
                        (lb & nibble) | ((h << 2) & bits),
                        ((la >> 4) & nibble) | (h & bits),
                        ((lb >> 4) & nibble) | ((h >> 2) & bits),
                    ];
                    for (i, v) in values.into_iter().enumerate() {
                        let g = g0 + 2 * i;
                        aux[l] += sc[g] * smuad(ssub16(v, offset), x[8 * g + l]);
                    }
                }
            }
        }
    }
    lanes.add(&aux, f16_to_f32(u16::from_le_bytes([b[208], b[209]])) * da);
}

/// `out[o] = dot_q6_k_q8_k(W[o], a)` for every row `o` of `w` (rows of `row_bytes` bytes, as
/// many as `out` holds, any alignment), the same bits. `false` (nothing written) when `w` does
/// not hold the rows.
pub(super) fn rows(w: &[u8], row_bytes: usize, a: &QuantRow<'_>, out: &mut [f32]) -> bool {
    k_lanes::rows::<BYTES>(w, row_bytes, a, out, false, super_block)
}
