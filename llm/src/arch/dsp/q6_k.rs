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

/// The masks [`lane`] cuts with: nibbles `0x000f000f`, the two bits at 4–5 `0x00300030`, the
/// offset `0x00200020` (in registers: `AND`s with a shifted operand).
#[derive(Clone, Copy)]
struct Masks {
    nibble: u32,
    bits: u32,
    offset: u32,
}

/// One lane `l`'s four pairs of a slot into `acc`: `h`, `la`, `lb` hold in their halves' low
/// bytes the `qh`, `ql[i]`, `ql[32 + i]` bytes of the pair; `x` and `sc` start at the slot's
/// first group (the four values are two groups apart).
#[inline(always)]
fn lane(acc: &mut i32, (h, la, lb): (u32, u32, u32), x: &[u32], sc: &[i32], l: usize, m: Masks) {
    let values = [
        (la & m.nibble) | ((h << 4) & m.bits),
        (lb & m.nibble) | ((h << 2) & m.bits),
        ((la >> 4) & m.nibble) | (h & m.bits),
        ((lb >> 4) & m.nibble) | ((h >> 2) & m.bits),
    ];
    for (i, v) in values.into_iter().enumerate() {
        *acc += sc[2 * i] * smuad(ssub16(v, m.offset), x[16 * i + l]);
    }
}

/// The 16 pairs of bytes `4k..4k + 4` and `4k + 8..4k + 12` of a 128-value half (`ql` 64
/// bytes, `qh` 32) into lanes `4 (k mod 2)..`: `x` and `sc` start at its first group (`k / 4`).
#[inline(always)]
fn slot(aux: &mut [i32; 8], ql: &[u8], qh: &[u8], x: &[u32], sc: &[i32], k: usize, m: Masks) {
    let h = halves(word(qh, 4 * k), word(qh, 4 * k + 8));
    let la = halves(word(ql, 4 * k), word(ql, 4 * k + 8));
    let lb = halves(word(ql, 32 + 4 * k), word(ql, 32 + 4 * k + 8));
    let l = 4 * (k % 2);
    let [a0, a1, a2, a3] = &mut aux[l..l + 4] else {
        return;
    };
    lane(a0, (h[0], la[0], lb[0]), x, sc, l, m);
    lane(a1, (h[0] >> 8, la[0] >> 8, lb[0] >> 8), x, sc, l + 1, m);
    lane(a2, (h[1], la[1], lb[1]), x, sc, l + 2, m);
    lane(a3, (h[1] >> 8, la[1] >> 8, lb[1] >> 8), x, sc, l + 3, m);
}

/// One weight super-block `b` into `lanes`, against its expanded activation super-block `x`
/// (scale `da`): the eight integer lanes (one i8 scale per 16 values), then
/// `sums[l] += (d · d_a) · (f32)aux32[l]`; no minimum term.
#[inline(always)]
fn super_block(lanes: &mut Lanes, b: &[u8; BYTES], x: &[u32; WORDS], da: f32, _: &[i16]) {
    let m = Masks {
        nibble: in_register(0x000f_000f),
        bits: in_register(0x0030_0030),
        offset: in_register(0x0020_0020),
    };
    let sc: [i32; 16] = core::array::from_fn(|g| i32::from(b[192 + g] as i8));
    let mut aux = [0i32; 8];
    let (ql, rest) = b.split_at(128);
    for (((ql, qh), x), sc) in ql
        .chunks_exact(64)
        .zip(rest[..64].chunks_exact(32))
        .zip(x.chunks_exact(64))
        .zip(sc.chunks_exact(8))
    {
        // Bytes 0..16 (group 0 of the low nibbles), then 16..32 (group 1).
        slot(&mut aux, ql, qh, x, sc, 0, m);
        slot(&mut aux, ql, qh, x, sc, 1, m);
        slot(&mut aux, ql, qh, &x[8..], &sc[1..], 4, m);
        slot(&mut aux, ql, qh, &x[8..], &sc[1..], 5, m);
    }
    lanes.add(&aux, f16_to_f32(u16::from_le_bytes([b[208], b[209]])) * da);
}

/// `out[o] = dot_q6_k_q8_k(W[o], a)` for every row `o` of `w` (rows of `row_bytes` bytes, as
/// many as `out` holds, any alignment), the same bits. `false` (nothing written) when `w` does
/// not hold the rows.
pub(super) fn rows(w: &[u8], row_bytes: usize, a: &QuantRow<'_>, out: &mut [f32]) -> bool {
    k_lanes::rows::<BYTES>(w, row_bytes, a, out, false, super_block)
}
