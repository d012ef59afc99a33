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

use core::arch::asm;

use super::insn::f16_to_f32;
use super::k_lanes::{self, Lanes, WORDS};
use crate::quant::QuantRow;
use crate::quant::q4_k::{BYTES, packed_scales, scale_min};

/// Lanes `l`, `l + 1` (`l` = 0, 2, 4, 6) of one super-block's integer sums, in one `asm!` loop
/// over its four 64-value chunks. Per chunk: the nibble words of bytes `(i, i + 8)` and
/// `(16 + i, 24 + i)` paired by `PKHBT` (`l` mod 4 = 0: bytes `i`, `i + 1`) or `PKHTB` (bytes
/// `i + 2`, `i + 3`) into r8, r9; per lane and sub-block two pairs (`AND` with `0x000f000f` in
/// r12, after a shift of 0 / 8 for the two lanes and 4 more for the high nibbles), `SMUAD` and
/// `SMLAD` with the activation pairs (`LDR`), then `MLA` by the sub-block's 6-bit scale (`LDRB`).
macro_rules! lane_pair {
    ($name:ident, $($line:literal,)*) => {
        /// `(aux32[l], aux32[l + 1])` (see the rule `lane_pair` above).
        #[inline(always)]
        fn $name(q: &[u8; 128], x: &[u32; WORDS], scales: &[u8; 8]) -> (i32, i32) {
            let (a, b): (i32, i32);
            // SAFETY: four passes, each reading 32 bytes of `q` (offsets ≤ 28 + 4 from the
            // pass's start, `LDR`s that ARMv7-M and ARMv8-M Mainline allow unaligned), 8 words
            // of `x` (offsets ≤ 124 bytes from the pass's start, aligned: a `u32` array) and 2
            // bytes of `scales`, advancing by 32 bytes, 32 words and 2 bytes: 128, 128, 8 in
            // all, the arrays' lengths. Only the registers declared here and the flags are
            // written.
            unsafe {
                asm!(
                    "mov.w r12, #0x000f000f",
                    "movs r4, #0",
                    "movs r5, #0",
                    "movs lr, #4",
                    $($line,)*
                    inout("r3") q.as_ptr() => _,
                    inout("r10") x.as_ptr() => _,
                    inout("r11") scales.as_ptr() => _,
                    out("r4") a, out("r5") b,
                    out("r0") _, out("r1") _, out("r2") _,
                    out("r8") _, out("r9") _, out("r12") _, out("lr") _,
                    options(readonly, nostack),
                );
            }
            (a, b)
        }
    };
}

lane_pair!(
    lanes_0,
    "2:",
    "ldr r0, [r3, #0]",
    "ldr r1, [r3, #8]",
    "pkhbt r8, r0, r1, lsl #16",
    "ldr r0, [r3, #16]",
    "ldr r1, [r3, #24]",
    "pkhbt r9, r0, r1, lsl #16",
    "ldr r2, [r10, #0]",
    "and r0, r12, r8",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #32]",
    "and r0, r12, r9",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11]",
    "mla r4, r1, r0, r4",
    "ldr r2, [r10, #64]",
    "and r0, r12, r8, lsr #4",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #96]",
    "and r0, r12, r9, lsr #4",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11, #1]",
    "mla r4, r1, r0, r4",
    "ldr r2, [r10, #4]",
    "and r0, r12, r8, lsr #8",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #36]",
    "and r0, r12, r9, lsr #8",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11]",
    "mla r5, r1, r0, r5",
    "ldr r2, [r10, #68]",
    "and r0, r12, r8, lsr #12",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #100]",
    "and r0, r12, r9, lsr #12",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11, #1]",
    "mla r5, r1, r0, r5",
    "adds r3, r3, #32",
    "adds r10, r10, #128",
    "adds r11, r11, #2",
    "subs lr, lr, #1",
    "bne 2b",
);

lane_pair!(
    lanes_2,
    "2:",
    "ldr r0, [r3, #0]",
    "ldr r1, [r3, #8]",
    "pkhtb r8, r1, r0, asr #16",
    "ldr r0, [r3, #16]",
    "ldr r1, [r3, #24]",
    "pkhtb r9, r1, r0, asr #16",
    "ldr r2, [r10, #8]",
    "and r0, r12, r8",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #40]",
    "and r0, r12, r9",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11]",
    "mla r4, r1, r0, r4",
    "ldr r2, [r10, #72]",
    "and r0, r12, r8, lsr #4",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #104]",
    "and r0, r12, r9, lsr #4",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11, #1]",
    "mla r4, r1, r0, r4",
    "ldr r2, [r10, #12]",
    "and r0, r12, r8, lsr #8",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #44]",
    "and r0, r12, r9, lsr #8",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11]",
    "mla r5, r1, r0, r5",
    "ldr r2, [r10, #76]",
    "and r0, r12, r8, lsr #12",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #108]",
    "and r0, r12, r9, lsr #12",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11, #1]",
    "mla r5, r1, r0, r5",
    "adds r3, r3, #32",
    "adds r10, r10, #128",
    "adds r11, r11, #2",
    "subs lr, lr, #1",
    "bne 2b",
);

lane_pair!(
    lanes_4,
    "2:",
    "ldr r0, [r3, #4]",
    "ldr r1, [r3, #12]",
    "pkhbt r8, r0, r1, lsl #16",
    "ldr r0, [r3, #20]",
    "ldr r1, [r3, #28]",
    "pkhbt r9, r0, r1, lsl #16",
    "ldr r2, [r10, #16]",
    "and r0, r12, r8",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #48]",
    "and r0, r12, r9",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11]",
    "mla r4, r1, r0, r4",
    "ldr r2, [r10, #80]",
    "and r0, r12, r8, lsr #4",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #112]",
    "and r0, r12, r9, lsr #4",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11, #1]",
    "mla r4, r1, r0, r4",
    "ldr r2, [r10, #20]",
    "and r0, r12, r8, lsr #8",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #52]",
    "and r0, r12, r9, lsr #8",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11]",
    "mla r5, r1, r0, r5",
    "ldr r2, [r10, #84]",
    "and r0, r12, r8, lsr #12",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #116]",
    "and r0, r12, r9, lsr #12",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11, #1]",
    "mla r5, r1, r0, r5",
    "adds r3, r3, #32",
    "adds r10, r10, #128",
    "adds r11, r11, #2",
    "subs lr, lr, #1",
    "bne 2b",
);

lane_pair!(
    lanes_6,
    "2:",
    "ldr r0, [r3, #4]",
    "ldr r1, [r3, #12]",
    "pkhtb r8, r1, r0, asr #16",
    "ldr r0, [r3, #20]",
    "ldr r1, [r3, #28]",
    "pkhtb r9, r1, r0, asr #16",
    "ldr r2, [r10, #24]",
    "and r0, r12, r8",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #56]",
    "and r0, r12, r9",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11]",
    "mla r4, r1, r0, r4",
    "ldr r2, [r10, #88]",
    "and r0, r12, r8, lsr #4",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #120]",
    "and r0, r12, r9, lsr #4",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11, #1]",
    "mla r4, r1, r0, r4",
    "ldr r2, [r10, #28]",
    "and r0, r12, r8, lsr #8",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #60]",
    "and r0, r12, r9, lsr #8",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11]",
    "mla r5, r1, r0, r5",
    "ldr r2, [r10, #92]",
    "and r0, r12, r8, lsr #12",
    "smuad r1, r0, r2",
    "ldr r2, [r10, #124]",
    "and r0, r12, r9, lsr #12",
    "smlad r1, r0, r2, r1",
    "ldrb r0, [r11, #1]",
    "mla r5, r1, r0, r5",
    "adds r3, r3, #32",
    "adds r10, r10, #128",
    "adds r11, r11, #2",
    "subs lr, lr, #1",
    "bne 2b",
);

/// One weight super-block `b` into `lanes`, against its expanded activation super-block `x`
/// (scale `da`, 16-value sums `bsums`): the eight integer lanes, `sums[l] += (d · d_a) ·
/// (f32)aux32[l]`, then the minimums `Σ bsums[j] · m[j / 2]` and `sumf −= (dmin · d_a) ·
/// (f32)sumi`.
// Out of line: one copy for the matmul and the one-row entry (its unrolled `asm!` blocks
// are several KB); the call costs a few instructions per super-block.
#[inline(never)]
fn super_block(lanes: &mut Lanes, b: &[u8; BYTES], x: &[u32; WORDS], da: f32, bsums: &[i16]) {
    let sc = packed_scales(b);
    let pairs: [(u8, u8); 8] = core::array::from_fn(|j| scale_min(j, &sc));
    let scales: [u8; 8] = core::array::from_fn(|j| pairs[j].0);
    let Ok(q) = <&[u8; 128]>::try_from(&b[16..]) else {
        return;
    };
    let (a0, a1) = lanes_0(q, x, &scales);
    let (a2, a3) = lanes_2(q, x, &scales);
    let (a4, a5) = lanes_4(q, x, &scales);
    let (a6, a7) = lanes_6(q, x, &scales);
    let aux = [a0, a1, a2, a3, a4, a5, a6, a7];
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
