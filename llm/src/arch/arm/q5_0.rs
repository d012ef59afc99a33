//! Q5_0 weights × Q8_0 activations in Helium: four weight rows against one activation row.

use core::arch::asm;

use super::common_blocks;
use crate::quant::QuantRow;
use crate::quant::q5_0::{BYTES, dot_q5_0_q8_0};

// The block layout the `asm!` below reads: `d` (f16) at 0, `qh` (u32) at 2, the 16 nibble bytes
// at 6, 22 bytes in all.
const _: () = assert!(BYTES == 22);

/// One weight row's block (its base in `$w`, a low register; output lane `$acc`): the sixteen
/// nibble bytes (`VLDRB`), low nibbles (values 0..16) by `VAND` with `q5`, high ones (values
/// 16..32) by `VSHR`; the fifth bits `qh` (`LDR`, unaligned) set 16 in the bytes whose bit is
/// set (the predicate `P0` from `qh`'s low, then high half: `VMSR`, `VPST`, `VORRT` with `q4`).
/// The unsigned five-bit values dotted with the activation's halves `q6`, `q7` into `r0`
/// (`VMLADAV.S8`, `VMLADAVA`), minus `16 · Σx` (`r10`): the block's `Σ (q − 16) · x`, exact.
/// Then `d` (f16, `VLDR.16`, converted exactly by `VCVTB`) and the portable combination
/// `acc += (d · d_a) · (f32)sumi` on the scalar FPU (`d_a` in `s12`).
#[rustfmt::skip]
macro_rules! row_block {
    ($w:literal, $acc:literal) => {
        concat!(
            "vldrb.u8 q0, [", $w, ", #6]\n",
            "vand q1, q0, q5\n",
            "vshr.u8 q0, q0, #4\n",
            "ldr r0, [", $w, ", #2]\n",
            "vmsr p0, r0\n",
            "vpst\n",
            "vorrt q1, q1, q4\n",
            "lsrs r0, r0, #16\n",
            "vmsr p0, r0\n",
            "vpst\n",
            "vorrt q0, q0, q4\n",
            "vmladav.s8 r0, q1, q6\n",
            "vmladava.s8 r0, q0, q7\n",
            "sub.w r0, r0, r10, lsl #4\n",
            "vldr.16 s14, [", $w, "]\n",
            "adds ", $w, ", #22\n",
            "vcvtb.f32.f16 s14, s14\n",
            "vmul.f32 s14, s14, s12\n",
            "vmov s13, r0\n",
            "vcvt.f32.s32 s13, s13\n",
            "vmul.f32 s14, s14, s13\n",
            "vadd.f32 ", $acc, ", ", $acc, ", s14\n",
        )
    };
}

/// `dot_q5_0_q8_0` of four weight rows with the activation row `a`, the same bits: each block's
/// integer sum in Helium, `sumf += (d_w · d_a) · (f32)sumi` in block order on the scalar FPU.
/// Rows of different lengths or at odd addresses take the portable code.
#[inline]
pub(super) fn dot4(w: [&[u8]; 4], a: &QuantRow<'_>) -> [f32; 4] {
    let Some(blocks) = common_blocks(&w, BYTES, a, false) else {
        return w.map(|r| dot_q5_0_q8_0(r, a));
    };
    if blocks == 0 {
        return [0.0; 4];
    }
    let (s0, s1, s2, s3): (f32, f32, f32, f32);
    // SAFETY: the loop runs `blocks` ≥ 1 times; each pass reads one 22-byte block of each
    // weight row (`blocks · 22` ≤ every row's length; the f16 loads at even addresses, as
    // `common_blocks` checked: rows start even and blocks are 22 bytes; `LDR` of `qh` may be
    // unaligned, which the M-profile allows for normal memory), 32 activation codes
    // (`blocks · 32` ≤ `a.qs.len()`) and one f32 of `a.d` (`blocks` ≤ its length; f32 slices
    // are word-aligned). Only the registers declared here and the flags are written; the
    // predicate register `VPR` is saved in `lr` and restored (the vector registers q0–q7 are
    // s0–s31; `VMLADAV` and `VADDV` need the even r0, r10; the four sums are s8–s11, cleared by
    // `VMOV.I32 q2`, +0.0 as the portable `sumf` starts).
    unsafe {
        asm!(
            "vmrs lr, p0",
            "vmov.i8 q5, #0x0f",
            "vmov.i8 q4, #0x10",
            "vmov.i32 q2, #0",
            "2:",
            "vldrb.u8 q6, [r5]",
            "vldrb.u8 q7, [r5, #16]",
            "adds r5, #32",
            "vaddv.s8 r10, q6",
            "vaddva.s8 r10, q7",
            "vldmia r8!, {{s12}}",
            row_block!("r1", "s8"),
            row_block!("r2", "s9"),
            row_block!("r3", "s10"),
            row_block!("r4", "s11"),
            "subs r12, r12, #1",
            "bne 2b",
            "vmsr p0, lr",
            inout("r1") w[0].as_ptr() => _,
            inout("r2") w[1].as_ptr() => _,
            inout("r3") w[2].as_ptr() => _,
            inout("r4") w[3].as_ptr() => _,
            inout("r5") a.qs.as_ptr() => _,
            inout("r8") a.d.as_ptr() => _,
            inout("r12") blocks => _,
            out("r0") _,
            out("r10") _,
            out("lr") _,
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
