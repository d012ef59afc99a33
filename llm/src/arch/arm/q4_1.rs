//! Q4_1 weights × Q8_1 activations in Helium: four weight rows against one activation row, the
//! four rows' block combinations in the four lanes of a vector ([`lanes`](super::lanes) says
//! when that has the scalar FPU's bits; otherwise the portable code runs).

use core::arch::asm;

use super::common_blocks;
use super::lanes::exact_in_lanes;
use crate::quant::QuantRow;
use crate::quant::q4_1::{BYTES, dot_q4_1_q8_1};

/// One weight row's block (its base in `$w`, a low register): the sixteen nibble bytes
/// (`VLDRB`), low nibbles by `VAND` with `q5`, high ones by `VSHR`, both dotted with the
/// activation's halves `q6`, `q7` into `r0` (`VMLADAV.S8`, then `VMLADAVA`: exact), moved to
/// the row's lane `$sum` of `q3`; the row's f16 `d` into the low half of lane `$d` of `q4`.
#[rustfmt::skip]
macro_rules! row_block {
    ($w:literal, $sum:literal, $d:literal) => {
        concat!(
            "vldrb.u8 q0, [", $w, ", #4]\n",
            "vand q1, q0, q5\n",
            "vshr.u8 q0, q0, #4\n",
            "vmladav.s8 r0, q1, q6\n",
            "vmladava.s8 r0, q0, q7\n",
            "vmov ", $sum, ", r0\n",
            "vldr.16 ", $d, ", [", $w, "]\n",
            "adds ", $w, ", #20\n",
        )
    };
}

/// `dot_q4_1_q8_1` of four weight rows with the activation row `a`, the same bits: each
/// block's integer sum in Helium, `sumf += (d_w · d_a) · (f32)sumi + m_w · s_a` in block order,
/// the four rows in the four lanes of `q2` (`VCVTB` widens the f16 scales exactly). Rows of
/// different lengths or at odd addresses, and activation scales the lanes would not combine
/// exactly, take the portable code.
#[inline]
pub(super) fn dot4(w: [&[u8]; 4], a: &QuantRow<'_>) -> [f32; 4] {
    let Some(blocks) = common_blocks(&w, BYTES, a, true) else {
        return w.map(|r| dot_q4_1_q8_1(r, a));
    };
    if blocks == 0 {
        return [0.0; 4];
    }
    if !(exact_in_lanes(&a.d[..blocks]) & exact_in_lanes(&a.s[..blocks])) {
        return w.map(|r| dot_q4_1_q8_1(r, a));
    }
    let (s0, s1, s2, s3): (f32, f32, f32, f32);
    // SAFETY: the loop runs `blocks` ≥ 1 times; each pass reads one 20-byte block of each
    // weight row (`blocks · 20` ≤ every row's length; the f16 loads at even addresses, as
    // `common_blocks` checked: rows start even and blocks are 20 bytes; `m` is read back at
    // −18 from the advanced pointer, inside the block just read), 32 activation codes
    // (`blocks · 32` ≤ `a.qs.len()`) and one f32 of `a.d` and of `a.s` (`blocks` ≤ both
    // lengths; f32 slices are word-aligned). Only the registers declared here and the flags are
    // written (the vector registers q0–q7 are s0–s31; `VMLADAV` needs the even r0; the four
    // sums are q2 = s8–s11, cleared by `VMOV.I32`, +0.0 as the portable `sumf` starts).
    unsafe {
        asm!(
            "vmov.i8 q5, #0x0f",
            "vmov.i32 q2, #0",
            "2:",
            "vldrb.u8 q6, [r5]",
            "vldrb.u8 q7, [r5, #16]",
            "adds r5, #32",
            row_block!("r1", "s12", "s16"),
            row_block!("r2", "s13", "s17"),
            row_block!("r3", "s14", "s18"),
            row_block!("r4", "s15", "s19"),
            // (d_w · d_a) · sumi, four rows at once.
            "vcvt.f32.s32 q3, q3",
            "vcvtb.f32.f16 q4, q4",
            "ldr r0, [r8], #4",
            "vmul.f32 q4, q4, r0",
            "vmul.f32 q4, q4, q3",
            // + m_w · s_a, then into the rows' sums.
            "vldr.16 s12, [r1, #-18]",
            "vldr.16 s13, [r2, #-18]",
            "vldr.16 s14, [r3, #-18]",
            "vldr.16 s15, [r4, #-18]",
            "vcvtb.f32.f16 q3, q3",
            "ldr r0, [r10], #4",
            "vmul.f32 q3, q3, r0",
            "vadd.f32 q4, q4, q3",
            "vadd.f32 q2, q2, q4",
            "subs r12, r12, #1",
            "bne 2b",
            inout("r1") w[0].as_ptr() => _,
            inout("r2") w[1].as_ptr() => _,
            inout("r3") w[2].as_ptr() => _,
            inout("r4") w[3].as_ptr() => _,
            inout("r5") a.qs.as_ptr() => _,
            inout("r8") a.d.as_ptr() => _,
            inout("r10") a.s.as_ptr() => _,
            inout("r12") blocks => _,
            out("r0") _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            out("s8") s0, out("s9") s1, out("s10") s2, out("s11") s3,
            out("s12") _, out("s13") _, out("s14") _, out("s15") _,
            out("s16") _, out("s17") _, out("s18") _, out("s19") _,
            out("s20") _, out("s21") _, out("s22") _, out("s23") _,
            out("s24") _, out("s25") _, out("s26") _, out("s27") _,
            out("s28") _, out("s29") _, out("s30") _, out("s31") _,
            options(readonly, nostack),
        );
    }
    [s0, s1, s2, s3]
}
