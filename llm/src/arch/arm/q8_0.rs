//! Q8_0 weights × Q8_0 activations in Helium: four weight rows against one activation row, the
//! four rows' block combinations in the four lanes of a vector ([`lanes`](super::lanes) says
//! when that has the scalar FPU's bits; otherwise the portable code runs).

use core::arch::asm;

use super::common_blocks;
use crate::quant::QuantRow;
use crate::quant::q8_0::{BYTES, dot_q8_0_q8_0};

/// One weight row's block (its base in `$w`, a low register): the 32 codes (two `VLDRB`)
/// dotted with the activation's halves `q6`, `q7` into `r0` (`VMLADAV.S8`, then `VMLADAVA`:
/// exact), moved to the row's lane `$sum` of `q3`; the row's f16 `d` into the low half of lane
/// `$d` of `q4`.
#[rustfmt::skip]
macro_rules! row_block {
    ($w:literal, $sum:literal, $d:literal) => {
        concat!(
            "vldrb.u8 q0, [", $w, ", #2]\n",
            "vldrb.u8 q1, [", $w, ", #18]\n",
            "vmladav.s8 r0, q0, q6\n",
            "vmladava.s8 r0, q1, q7\n",
            "vmov ", $sum, ", r0\n",
            "vldr.16 ", $d, ", [", $w, "]\n",
            "adds ", $w, ", #34\n",
        )
    };
}

/// `dot_q8_0_q8_0` of four weight rows with the activation row `a`, the same bits: each block's
/// integer sum in Helium, `sumf += (f32)sumi · (d_w · d_a)` in block order, the four rows in the
/// four lanes of `q2` (`VCVTB` widens the f16 scales exactly). The caller checked that the
/// lanes combine the activation's scales exactly ([`exact_acts`](super::lanes::exact_acts)).
/// Rows of different lengths or at odd addresses take the portable code.
#[inline]
pub(super) fn dot4(w: [&[u8]; 4], a: &QuantRow<'_>) -> [f32; 4] {
    let Some(blocks) = common_blocks(&w, BYTES, a, false) else {
        return w.map(|r| dot_q8_0_q8_0(r, a));
    };
    if blocks == 0 {
        return [0.0; 4];
    }
    let (s0, s1, s2, s3): (f32, f32, f32, f32);
    // SAFETY: the loop runs `blocks` ≥ 1 times; each pass reads one 34-byte block of each
    // weight row (`blocks · 34` ≤ every row's length; the f16 loads at even addresses, as
    // `common_blocks` checked: rows start even and blocks are 34 bytes), 32 activation codes
    // (`blocks · 32` ≤ `a.qs.len()`) and one f32 of `a.d` (`blocks` ≤ its length; f32 slices
    // are word-aligned). Only the registers declared here and the flags are written (the vector
    // registers q0–q7 are s0–s31; `VMLADAV` needs the even r0; the four sums are q2 = s8–s11,
    // cleared by `VMOV.I32`, +0.0 as the portable `sumf` starts).
    unsafe {
        asm!(
            "vmov.i32 q2, #0",
            "2:",
            "vldrb.u8 q6, [r5]",
            "vldrb.u8 q7, [r5, #16]",
            "adds r5, #32",
            row_block!("r1", "s12", "s16"),
            row_block!("r2", "s13", "s17"),
            row_block!("r3", "s14", "s18"),
            row_block!("r4", "s15", "s19"),
            // sumi · (d_w · d_a), four rows at once, into the rows' sums.
            "vcvt.f32.s32 q3, q3",
            "vcvtb.f32.f16 q4, q4",
            "ldr r0, [r8], #4",
            "vmul.f32 q4, q4, r0",
            "vmul.f32 q3, q3, q4",
            "vadd.f32 q2, q2, q3",
            "subs r12, r12, #1",
            "bne 2b",
            inout("r1") w[0].as_ptr() => _,
            inout("r2") w[1].as_ptr() => _,
            inout("r3") w[2].as_ptr() => _,
            inout("r4") w[3].as_ptr() => _,
            inout("r5") a.qs.as_ptr() => _,
            inout("r8") a.d.as_ptr() => _,
            inout("r12") blocks => _,
            out("r0") _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            out("s8") s0, out("s9") s1, out("s10") s2, out("s11") s3,
            out("s12") _, out("s13") _, out("s14") _, out("s15") _,
            out("s16") _, out("s17") _, out("s18") _, out("s19") _,
            out("s24") _, out("s25") _, out("s26") _, out("s27") _,
            out("s28") _, out("s29") _, out("s30") _, out("s31") _,
            options(readonly, nostack),
        );
    }
    [s0, s1, s2, s3]
}
