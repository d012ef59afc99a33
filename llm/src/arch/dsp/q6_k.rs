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
//! `aux32[l]` (one `asm!` block per two lanes). (A scale multiplied into the packed pair first would carry a borrow from a
//! negative low half into the high one.) Exact integers; the f32 steps as the portable code.

use core::arch::asm;

use super::insn::f16_to_f32;
use super::k_lanes::{self, Lanes, WORDS};
use crate::quant::QuantRow;
use crate::quant::q6_k::BYTES;

/// `PKHBT $dst`: bytes `(0, 1)` of the words at byte offsets `$a`, `$b` of the super-block (r3)
/// in the two halves (through r0, r1).
#[rustfmt::skip]
macro_rules! pkbt {
    ($dst:literal, $a:literal, $b:literal) => {
        concat!("ldr r0, [r3, #", $a, "]\n", "ldr r1, [r3, #", $b, "]\n",
            "pkhbt ", $dst, ", r0, r1, lsl #16\n")
    };
}

/// `PKHTB $dst`: bytes `(2, 3)` of the words at byte offsets `$a`, `$b` (as [`pkbt`]).
#[rustfmt::skip]
macro_rules! pktb {
    ($dst:literal, $a:literal, $b:literal) => {
        concat!("ldr r0, [r3, #", $a, "]\n", "ldr r1, [r3, #", $b, "]\n",
            "pkhtb ", $dst, ", r1, r0, asr #16\n")
    };
}

/// One value pair of a lane into `$acc`: the nibbles (`$nib`: r5 or r8 and its shift) `AND`
/// `0x000f000f` (r9), the two bits (r4 shifted by `$bits`) `AND` `0x00300030` (r11), `ORR`,
/// `SSUB16` by `0x00200020` (r12), `SMUAD` with the activation pair at byte `$x` of r10, `MLA`
/// by the i8 scale at byte `$sc` of the super-block (r3).
#[rustfmt::skip]
macro_rules! value {
    ($nib:literal, $bits:literal, $x:literal, $sc:literal, $acc:literal) => {
        concat!(
            "and r0, r9, ", $nib, "\n", "and r1, r11, r4", $bits, "\n", "orr r0, r0, r1\n",
            "ssub16 r0, r0, r12\n", "ldr r1, [r10, #", $x, "]\n", "smuad r0, r0, r1\n",
            "ldrsb r1, [r3, #", $sc, "]\n", "mla ", $acc, ", r0, r1, ", $acc, "\n",
        )
    };
}

/// Lanes `l`, `l + 1` (`l` = 0, 2, 4, 6) of one super-block's integer sums, in one `asm!` block
/// over its two 128-value halves, two slots each (`qh` / `ql` bytes `4k..` with `4k + 8..`, `k`
/// = `l / 4` and `4 + l / 4`), unrolled. Per slot: three `PKHBT` (`l` mod 4 = 0) or `PKHTB` of
/// two words (`qh`, `ql`, `ql + 32`) into r4, r5, r8; per lane and value one [`value`].
macro_rules! lane_pair {
    ($name:ident, $($t:tt)*) => {
        /// `(aux32[l], aux32[l + 1])` (see the rule `lane_pair` above).
        #[inline(always)]
        fn $name(b: &[u8; BYTES], x: &[u32; WORDS]) -> (i32, i32) {
            let (a, c): (i32, i32);
            // SAFETY: reads of `b` at constant offsets below 210 (its length: words at ≤ 180,
            // `LDR`s that ARMv7-M and ARMv8-M Mainline allow unaligned; the scales' bytes at
            // 192..208) and of `x` at constant word offsets below 128 (aligned: a `u32` array).
            // Only the registers declared here and the flags are written.
            unsafe {
                asm!(
                    "movs r2, #0",
                    "movs lr, #0",
                    "mov.w r9, #0x000f000f",
                    "mov.w r11, #0x00300030",
                    "mov.w r12, #0x00200020",
                    $($t)*
                    in("r3") b.as_ptr(),
                    in("r10") x.as_ptr(),
                    out("r2") a, out("lr") c,
                    out("r0") _, out("r1") _, out("r4") _, out("r5") _,
                    out("r8") _, out("r9") _, out("r11") _, out("r12") _,
                    options(readonly, nostack),
                );
            }
            (a, c)
        }
    };
}

#[rustfmt::skip]
lane_pair!(lanes_0,
    pkbt!("r4", "128", "136"),
    pkbt!("r5", "0", "8"),
    pkbt!("r8", "32", "40"),
    value!("r5", ", lsl #4", "0", "192", "r2"),
    value!("r8", ", lsl #2", "64", "194", "r2"),
    value!("r5, lsr #4", "", "128", "196", "r2"),
    value!("r8, lsr #4", ", lsr #2", "192", "198", "r2"),
    value!("r5, lsr #8", ", lsr #4", "4", "192", "lr"),
    value!("r8, lsr #8", ", lsr #6", "68", "194", "lr"),
    value!("r5, lsr #12", ", lsr #8", "132", "196", "lr"),
    value!("r8, lsr #12", ", lsr #10", "196", "198", "lr"),
    pkbt!("r4", "144", "152"),
    pkbt!("r5", "16", "24"),
    pkbt!("r8", "48", "56"),
    value!("r5", ", lsl #4", "32", "193", "r2"),
    value!("r8", ", lsl #2", "96", "195", "r2"),
    value!("r5, lsr #4", "", "160", "197", "r2"),
    value!("r8, lsr #4", ", lsr #2", "224", "199", "r2"),
    value!("r5, lsr #8", ", lsr #4", "36", "193", "lr"),
    value!("r8, lsr #8", ", lsr #6", "100", "195", "lr"),
    value!("r5, lsr #12", ", lsr #8", "164", "197", "lr"),
    value!("r8, lsr #12", ", lsr #10", "228", "199", "lr"),
    pkbt!("r4", "160", "168"),
    pkbt!("r5", "64", "72"),
    pkbt!("r8", "96", "104"),
    value!("r5", ", lsl #4", "256", "200", "r2"),
    value!("r8", ", lsl #2", "320", "202", "r2"),
    value!("r5, lsr #4", "", "384", "204", "r2"),
    value!("r8, lsr #4", ", lsr #2", "448", "206", "r2"),
    value!("r5, lsr #8", ", lsr #4", "260", "200", "lr"),
    value!("r8, lsr #8", ", lsr #6", "324", "202", "lr"),
    value!("r5, lsr #12", ", lsr #8", "388", "204", "lr"),
    value!("r8, lsr #12", ", lsr #10", "452", "206", "lr"),
    pkbt!("r4", "176", "184"),
    pkbt!("r5", "80", "88"),
    pkbt!("r8", "112", "120"),
    value!("r5", ", lsl #4", "288", "201", "r2"),
    value!("r8", ", lsl #2", "352", "203", "r2"),
    value!("r5, lsr #4", "", "416", "205", "r2"),
    value!("r8, lsr #4", ", lsr #2", "480", "207", "r2"),
    value!("r5, lsr #8", ", lsr #4", "292", "201", "lr"),
    value!("r8, lsr #8", ", lsr #6", "356", "203", "lr"),
    value!("r5, lsr #12", ", lsr #8", "420", "205", "lr"),
    value!("r8, lsr #12", ", lsr #10", "484", "207", "lr"),
);

#[rustfmt::skip]
lane_pair!(lanes_2,
    pktb!("r4", "128", "136"),
    pktb!("r5", "0", "8"),
    pktb!("r8", "32", "40"),
    value!("r5", ", lsl #4", "8", "192", "r2"),
    value!("r8", ", lsl #2", "72", "194", "r2"),
    value!("r5, lsr #4", "", "136", "196", "r2"),
    value!("r8, lsr #4", ", lsr #2", "200", "198", "r2"),
    value!("r5, lsr #8", ", lsr #4", "12", "192", "lr"),
    value!("r8, lsr #8", ", lsr #6", "76", "194", "lr"),
    value!("r5, lsr #12", ", lsr #8", "140", "196", "lr"),
    value!("r8, lsr #12", ", lsr #10", "204", "198", "lr"),
    pktb!("r4", "144", "152"),
    pktb!("r5", "16", "24"),
    pktb!("r8", "48", "56"),
    value!("r5", ", lsl #4", "40", "193", "r2"),
    value!("r8", ", lsl #2", "104", "195", "r2"),
    value!("r5, lsr #4", "", "168", "197", "r2"),
    value!("r8, lsr #4", ", lsr #2", "232", "199", "r2"),
    value!("r5, lsr #8", ", lsr #4", "44", "193", "lr"),
    value!("r8, lsr #8", ", lsr #6", "108", "195", "lr"),
    value!("r5, lsr #12", ", lsr #8", "172", "197", "lr"),
    value!("r8, lsr #12", ", lsr #10", "236", "199", "lr"),
    pktb!("r4", "160", "168"),
    pktb!("r5", "64", "72"),
    pktb!("r8", "96", "104"),
    value!("r5", ", lsl #4", "264", "200", "r2"),
    value!("r8", ", lsl #2", "328", "202", "r2"),
    value!("r5, lsr #4", "", "392", "204", "r2"),
    value!("r8, lsr #4", ", lsr #2", "456", "206", "r2"),
    value!("r5, lsr #8", ", lsr #4", "268", "200", "lr"),
    value!("r8, lsr #8", ", lsr #6", "332", "202", "lr"),
    value!("r5, lsr #12", ", lsr #8", "396", "204", "lr"),
    value!("r8, lsr #12", ", lsr #10", "460", "206", "lr"),
    pktb!("r4", "176", "184"),
    pktb!("r5", "80", "88"),
    pktb!("r8", "112", "120"),
    value!("r5", ", lsl #4", "296", "201", "r2"),
    value!("r8", ", lsl #2", "360", "203", "r2"),
    value!("r5, lsr #4", "", "424", "205", "r2"),
    value!("r8, lsr #4", ", lsr #2", "488", "207", "r2"),
    value!("r5, lsr #8", ", lsr #4", "300", "201", "lr"),
    value!("r8, lsr #8", ", lsr #6", "364", "203", "lr"),
    value!("r5, lsr #12", ", lsr #8", "428", "205", "lr"),
    value!("r8, lsr #12", ", lsr #10", "492", "207", "lr"),
);

#[rustfmt::skip]
lane_pair!(lanes_4,
    pkbt!("r4", "132", "140"),
    pkbt!("r5", "4", "12"),
    pkbt!("r8", "36", "44"),
    value!("r5", ", lsl #4", "16", "192", "r2"),
    value!("r8", ", lsl #2", "80", "194", "r2"),
    value!("r5, lsr #4", "", "144", "196", "r2"),
    value!("r8, lsr #4", ", lsr #2", "208", "198", "r2"),
    value!("r5, lsr #8", ", lsr #4", "20", "192", "lr"),
    value!("r8, lsr #8", ", lsr #6", "84", "194", "lr"),
    value!("r5, lsr #12", ", lsr #8", "148", "196", "lr"),
    value!("r8, lsr #12", ", lsr #10", "212", "198", "lr"),
    pkbt!("r4", "148", "156"),
    pkbt!("r5", "20", "28"),
    pkbt!("r8", "52", "60"),
    value!("r5", ", lsl #4", "48", "193", "r2"),
    value!("r8", ", lsl #2", "112", "195", "r2"),
    value!("r5, lsr #4", "", "176", "197", "r2"),
    value!("r8, lsr #4", ", lsr #2", "240", "199", "r2"),
    value!("r5, lsr #8", ", lsr #4", "52", "193", "lr"),
    value!("r8, lsr #8", ", lsr #6", "116", "195", "lr"),
    value!("r5, lsr #12", ", lsr #8", "180", "197", "lr"),
    value!("r8, lsr #12", ", lsr #10", "244", "199", "lr"),
    pkbt!("r4", "164", "172"),
    pkbt!("r5", "68", "76"),
    pkbt!("r8", "100", "108"),
    value!("r5", ", lsl #4", "272", "200", "r2"),
    value!("r8", ", lsl #2", "336", "202", "r2"),
    value!("r5, lsr #4", "", "400", "204", "r2"),
    value!("r8, lsr #4", ", lsr #2", "464", "206", "r2"),
    value!("r5, lsr #8", ", lsr #4", "276", "200", "lr"),
    value!("r8, lsr #8", ", lsr #6", "340", "202", "lr"),
    value!("r5, lsr #12", ", lsr #8", "404", "204", "lr"),
    value!("r8, lsr #12", ", lsr #10", "468", "206", "lr"),
    pkbt!("r4", "180", "188"),
    pkbt!("r5", "84", "92"),
    pkbt!("r8", "116", "124"),
    value!("r5", ", lsl #4", "304", "201", "r2"),
    value!("r8", ", lsl #2", "368", "203", "r2"),
    value!("r5, lsr #4", "", "432", "205", "r2"),
    value!("r8, lsr #4", ", lsr #2", "496", "207", "r2"),
    value!("r5, lsr #8", ", lsr #4", "308", "201", "lr"),
    value!("r8, lsr #8", ", lsr #6", "372", "203", "lr"),
    value!("r5, lsr #12", ", lsr #8", "436", "205", "lr"),
    value!("r8, lsr #12", ", lsr #10", "500", "207", "lr"),
);

#[rustfmt::skip]
lane_pair!(lanes_6,
    pktb!("r4", "132", "140"),
    pktb!("r5", "4", "12"),
    pktb!("r8", "36", "44"),
    value!("r5", ", lsl #4", "24", "192", "r2"),
    value!("r8", ", lsl #2", "88", "194", "r2"),
    value!("r5, lsr #4", "", "152", "196", "r2"),
    value!("r8, lsr #4", ", lsr #2", "216", "198", "r2"),
    value!("r5, lsr #8", ", lsr #4", "28", "192", "lr"),
    value!("r8, lsr #8", ", lsr #6", "92", "194", "lr"),
    value!("r5, lsr #12", ", lsr #8", "156", "196", "lr"),
    value!("r8, lsr #12", ", lsr #10", "220", "198", "lr"),
    pktb!("r4", "148", "156"),
    pktb!("r5", "20", "28"),
    pktb!("r8", "52", "60"),
    value!("r5", ", lsl #4", "56", "193", "r2"),
    value!("r8", ", lsl #2", "120", "195", "r2"),
    value!("r5, lsr #4", "", "184", "197", "r2"),
    value!("r8, lsr #4", ", lsr #2", "248", "199", "r2"),
    value!("r5, lsr #8", ", lsr #4", "60", "193", "lr"),
    value!("r8, lsr #8", ", lsr #6", "124", "195", "lr"),
    value!("r5, lsr #12", ", lsr #8", "188", "197", "lr"),
    value!("r8, lsr #12", ", lsr #10", "252", "199", "lr"),
    pktb!("r4", "164", "172"),
    pktb!("r5", "68", "76"),
    pktb!("r8", "100", "108"),
    value!("r5", ", lsl #4", "280", "200", "r2"),
    value!("r8", ", lsl #2", "344", "202", "r2"),
    value!("r5, lsr #4", "", "408", "204", "r2"),
    value!("r8, lsr #4", ", lsr #2", "472", "206", "r2"),
    value!("r5, lsr #8", ", lsr #4", "284", "200", "lr"),
    value!("r8, lsr #8", ", lsr #6", "348", "202", "lr"),
    value!("r5, lsr #12", ", lsr #8", "412", "204", "lr"),
    value!("r8, lsr #12", ", lsr #10", "476", "206", "lr"),
    pktb!("r4", "180", "188"),
    pktb!("r5", "84", "92"),
    pktb!("r8", "116", "124"),
    value!("r5", ", lsl #4", "312", "201", "r2"),
    value!("r8", ", lsl #2", "376", "203", "r2"),
    value!("r5, lsr #4", "", "440", "205", "r2"),
    value!("r8, lsr #4", ", lsr #2", "504", "207", "r2"),
    value!("r5, lsr #8", ", lsr #4", "316", "201", "lr"),
    value!("r8, lsr #8", ", lsr #6", "380", "203", "lr"),
    value!("r5, lsr #12", ", lsr #8", "444", "205", "lr"),
    value!("r8, lsr #12", ", lsr #10", "508", "207", "lr"),
);

// The super-block layout the `asm!` above reads: `ql` at 0, `qh` at 128, the scales at 192, `d`
// at 208, 210 bytes in all.
const _: () = assert!(BYTES == 210);

/// One weight super-block `b` into `lanes`, against its expanded activation super-block `x`
/// (scale `da`): the eight integer lanes (one i8 scale per 16 values), then
/// `sums[l] += (d · d_a) · (f32)aux32[l]`; no minimum term.
// Out of line: one copy for the matmul and the one-row entry (its unrolled `asm!` blocks
// are several KB); the call costs a few instructions per super-block.
#[inline(never)]
fn super_block(lanes: &mut Lanes, b: &[u8; BYTES], x: &[u32; WORDS], da: f32, _: &[i16]) {
    let (a0, a1) = lanes_0(b, x);
    let (a2, a3) = lanes_2(b, x);
    let (a4, a5) = lanes_4(b, x);
    let (a6, a7) = lanes_6(b, x);
    lanes.add(
        &[a0, a1, a2, a3, a4, a5, a6, a7],
        f16_to_f32(u16::from_le_bytes([b[208], b[209]])) * da,
    );
}

/// `out[o] = dot_q6_k_q8_k(W[o], a)` for every row `o` of `w` (rows of `row_bytes` bytes, as
/// many as `out` holds, any alignment), the same bits. `false` (nothing written) when `w` does
/// not hold the rows.
pub(super) fn rows(w: &[u8], row_bytes: usize, a: &QuantRow<'_>, out: &mut [f32]) -> bool {
    k_lanes::rows::<BYTES>(w, row_bytes, a, out, false, super_block)
}
