//! Q4_K weights × Q8_K activations with the DSP extension: every weight row against one
//! activation row, expanded once per call (`k_lanes`).
//!
//! A super-block's 64-value chunk `c` is 32 nibble bytes: byte `i`'s low nibble is value
//! `64c + i` (sub-block `2c`, group `4c + i / 16`), its high nibble value `64c + 32 + i`
//! (sub-block `2c + 1`), both in lane `i mod 8`. Bytes `i` and `i + 8` (two words apart) make
//! one lane's pair of a group: `PKHBT` / `PKHTB` put bytes `(i, i + 1)` and `(i + 8, i + 9)` of
//! two words in the two halves, and an `AND` with `0x000f000f` after a shift of 0, 8, 4 or 12
//! cuts out the pair of low nibbles of lane `i`, of lane `i + 1`, then the high nibbles. A
//! lane's two pairs of one sub-block (groups `2j`, `2j + 1`, one scale) by `SMUAD` and
//! `SMLAD` (at most 4 · 15 · 128), then `aux32[l] += sc_j · sum` (`MLA`). Exact integers; the
//! f32 steps as the portable code.

use super::insn::{f16_to_f32, halves, in_register, smlad, smuad, word};
use super::k_lanes::{self, Lanes, WORDS};
use crate::quant::QuantRow;
use crate::quant::q4_k::{BYTES, packed_scales, scale_min};

/// One weight super-block `b` into `lanes`, against its expanded activation super-block `x`
/// (scale `da`, 16-value sums `bsums`): the eight integer lanes, `sums[l] += (d · d_a) ·
/// (f32)aux32[l]`, then the minimums `Σ bsums[j] · m[j / 2]` and `sumf −= (dmin · d_a) ·
/// (f32)sumi`.
#[inline(always)]
fn super_block(lanes: &mut Lanes, b: &[u8; BYTES], x: &[u32; WORDS], da: f32, bsums: &[i16]) {
    let sc = packed_scales(b);
    let pairs: [(u8, u8); 8] = core::array::from_fn(|j| scale_min(j, &sc));
    let nibble = in_register(0x000f_000f);
    let mut aux = [0i32; 8];
    for c in 0..4 {
        let q = &b[16 + 32 * c..][..32];
        let (s_lo, s_hi) = (i32::from(pairs[2 * c].0), i32::from(pairs[2 * c + 1].0));
        let xg = |g: usize, l: usize| x[8 * g + l];
        for h in 0..2 {
            // Group 4c (bytes 0..16) and 4c + 1 (bytes 16..32), lanes 4h..4h + 4.
            let first = halves(word(q, 4 * h), word(q, 4 * h + 8));
            let second = halves(word(q, 4 * h + 16), word(q, 4 * h + 24));
            for p in 0..2 {
                for s in 0..2 {
                    let (l, sh) = (4 * h + 2 * p + s, 8 * s);
                    let lo = smuad((first[p] >> sh) & nibble, xg(4 * c, l));
                    let lo = smlad((second[p] >> sh) & nibble, xg(4 * c + 1, l), lo);
                    let hi = smuad((first[p] >> (sh + 4)) & nibble, xg(4 * c + 2, l));
                    let hi = smlad((second[p] >> (sh + 4)) & nibble, xg(4 * c + 3, l), hi);
                    aux[l] += s_lo * lo + s_hi * hi;
                }
            }
        }
    }
    lanes.add(&aux, f16_to_f32(u16::from_le_bytes([b[0], b[1]])) * da);
    let sumi: i32 = bsums
        .iter()
        .enumerate()
        .map(|(j, &s)| i32::from(s) * i32::from(pairs[j / 2].1))
        .sum();
    lanes.minus(f16_to_f32(u16::from_le_bytes([b[2], b[3]])) * da, sumi);
}

/// `out[o] = dot_q4_k_q8_k(W[o], a)` for every row `o` of `w` (rows of `row_bytes` bytes, as
/// many as `out` holds, any alignment), the same bits. `false` (nothing written) when `w` does
/// not hold the rows.
pub(super) fn rows(w: &[u8], row_bytes: usize, a: &QuantRow<'_>, out: &mut [f32]) -> bool {
    k_lanes::rows::<BYTES>(w, row_bytes, a, out, true, super_block)
}
