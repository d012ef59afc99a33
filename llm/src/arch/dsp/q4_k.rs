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

/// Lane `l`'s two pairs of each of a chunk's sub-blocks into `acc`: `a` and `b` hold in their
/// halves' low bytes the nibble bytes `(i, i + 8)` and `(16 + i, 24 + i)`; `x` holds the
/// chunk's four groups (32 words); `scales` the two sub-blocks' scales.
#[inline(always)]
fn lane(acc: &mut i32, a: u32, b: u32, x: &[u32], l: usize, scales: (i32, i32), nibble: u32) {
    let lo = smlad(b & nibble, x[8 + l], smuad(a & nibble, x[l]));
    let hi = smlad(
        (b >> 4) & nibble,
        x[24 + l],
        smuad((a >> 4) & nibble, x[16 + l]),
    );
    *acc += scales.0 * lo + scales.1 * hi;
}

/// Lanes `l..l + 4` of a 64-value chunk `q` (32 bytes; `l` 0 or 4) into `aux`.
#[inline(always)]
fn quad(aux: &mut [i32; 8], q: &[u8], x: &[u32], l: usize, scales: (i32, i32), nibble: u32) {
    let first = halves(word(q, l), word(q, l + 8));
    let second = halves(word(q, l + 16), word(q, l + 24));
    let [a0, a1, a2, a3] = &mut aux[l..l + 4] else {
        return;
    };
    lane(a0, first[0], second[0], x, l, scales, nibble);
    lane(a1, first[0] >> 8, second[0] >> 8, x, l + 1, scales, nibble);
    lane(a2, first[1], second[1], x, l + 2, scales, nibble);
    lane(a3, first[1] >> 8, second[1] >> 8, x, l + 3, scales, nibble);
}

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
    for ((q, x), s) in b[16..]
        .chunks_exact(32)
        .zip(x.chunks_exact(32))
        .zip(pairs.chunks_exact(2))
    {
        let scales = (i32::from(s[0].0), i32::from(s[1].0));
        quad(&mut aux, q, x, 0, scales, nibble);
        quad(&mut aux, q, x, 4, scales, nibble);
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
