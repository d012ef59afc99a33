//! Q4_1 weights × Q8_1 activations in Helium: four weight rows against one activation row, the
//! four rows' block combinations in the four lanes of a vector ([`lanes`](super::lanes) says
//! when that has the scalar FPU's bits; otherwise the portable code runs).

use core::arch::asm;

use super::common_blocks;
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
/// the four rows in the four lanes of `q2` (`VCVTB` widens the f16 scales exactly). The caller
/// checked that the lanes combine the activation's scales and sums exactly
/// ([`exact_acts`](super::lanes::exact_acts)). Rows of different lengths or at odd addresses
/// take the portable code.
#[inline]
pub(super) fn dot4(w: [&[u8]; 4], a: &QuantRow<'_>) -> [f32; 4] {
    let Some(blocks) = common_blocks(&w, BYTES, a, true) else {
        return w.map(|r| dot_q4_1_q8_1(r, a));
    };
    if blocks == 0 {
        return [0.0; 4];
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

/// One weight row's block against two activation rows (its qs in `$w`, a low register,
/// advanced to the next block's): the sixteen nibble bytes (`VLDRB`), high nibbles by `VSHR`,
/// low ones by two `VBIC`s (no register is left for a mask), dotted with token A's halves
/// `q4`, `q5` into `r0` and token B's `q6`, `q7` into `lr` (`VMLADAV.S8`, then `VMLADAVA`:
/// exact), moved to the row's lanes `$a` of `q2` and `$b` of `q3`.
#[rustfmt::skip]
macro_rules! row_block_x2 {
    ($w:literal, $a:literal, $b:literal) => {
        concat!(
            "vldrb.u8 q0, [", $w, "], #20\n",
            "vshr.u8 q1, q0, #4\n",
            "vbic.i16 q0, #0xf0\n",
            "vbic.i16 q0, #0xf000\n",
            "vmladav.s8 r0, q0, q4\n",
            "vmladava.s8 r0, q1, q5\n",
            "vmladav.s8 lr, q0, q6\n",
            "vmladava.s8 lr, q1, q7\n",
            "vmov ", $a, ", r0\n",
            "vmov ", $b, ", lr\n",
        )
    };
}

/// One token's combination: `(d_w · d_a) · (f32)sumi + m_w · s_a` for the four rows (`d_w` in
/// `q4`, `m_w` in `q5`, the integer sums in `$sum`), added into the four lanes kept at
/// `[sp, #$acc]`; `d_a` and `s_a` read at `$d` and `$s`.
#[rustfmt::skip]
macro_rules! combine_x2 {
    ($sum:literal, $d:literal, $s:literal, $acc:literal) => {
        concat!(
            "vcvt.f32.s32 ", $sum, ", ", $sum, "\n",
            "ldr r0, ", $d, "\n",
            "vmul.f32 q6, q4, r0\n",
            "vmul.f32 q6, q6, ", $sum, "\n",
            "ldr r0, ", $s, "\n",
            "vmul.f32 q7, q5, r0\n",
            "vadd.f32 q6, q6, q7\n",
            "vldrw.u32 q7, [sp, #", $acc, "]\n",
            "vadd.f32 q7, q7, q6\n",
            "vstrw.32 q7, [sp, #", $acc, "]\n",
        )
    };
}

/// [`dot4`] of four weight rows against two activation rows (a prefill's tile: each weight
/// block loaded and unpacked once for both), the same bits as `dot_q4_1_q8_1` of each pair: the
/// integer sums in Helium, each token's `sumf` in block order in the lanes. `out[row][token]`.
/// The caller checked the activations' scales as for [`dot4`]. Shapes [`dot4`] would not take,
/// and activation rows of different lengths or laid out other than as
/// [`Acts`](crate::arch::Acts) lays them out (their scales and sums the same distance apart),
/// take the portable code.
#[inline]
pub(super) fn dot4x2(w: [&[u8]; 4], a: &[QuantRow<'_>; 2]) -> [[f32; 2]; 4] {
    // The portable code, not `dot4` (which would then be compiled out of line: its one other
    // caller, decode's row loop, pays a call per four rows for it).
    let per_token = |w: [&[u8]; 4]| w.map(|r| [dot_q4_1_q8_1(r, &a[0]), dot_q4_1_q8_1(r, &a[1])]);
    let (Some(blocks), Some(b1)) = (
        common_blocks(&w, BYTES, &a[0], true),
        common_blocks(&w, BYTES, &a[1], true),
    ) else {
        return per_token(w);
    };
    let stride = (a[1].d.as_ptr() as usize).wrapping_sub(a[0].d.as_ptr() as usize);
    let same = stride == (a[1].s.as_ptr() as usize).wrapping_sub(a[0].s.as_ptr() as usize);
    // Each row's `d` and `m` are read as one word: rows at multiples of 4 (GGUF aligns its
    // tensors to 32, and Q4_1 rows are whole 20-byte blocks).
    let aligned = w.iter().all(|r| r.as_ptr() as usize % 4 == 0);
    if blocks == 0 || b1 != blocks || !same || !aligned {
        return per_token(w);
    }
    let (x0, x1, x2, x3, y0, y1, y2, y3): (f32, f32, f32, f32, f32, f32, f32, f32);
    // SAFETY: the loop runs `blocks` ≥ 1 times; each pass reads one 20-byte block of each
    // weight row (the pointers start at the first block's codes, 4 bytes in; `blocks · 20` ≤
    // every row's length; after the post-increment `d` and `m` are read back as one word at
    // −24, inside the block just read, word-aligned as checked above), 32 codes of each
    // activation row (`blocks · 32` ≤ both `qs` lengths) and one f32 of each row's `d` and `s`
    // (`blocks` ≤ those lengths; token B's `stride` bytes from token A's, as checked, read after
    // token A's post-increment at `stride − 4`; f32 slices are word-aligned). The four lanes of
    // each token's sums live in 32 bytes below the stack pointer, reserved by the block and
    // released before it ends (no `nostack`). Only the registers declared here and the flags
    // are written (q0–q7 are s0–s31; `VMLADAV` needs the even r0 and lr).
    unsafe {
        asm!(
            "sub sp, #32",
            "vmov.i32 q0, #0",
            "vstrw.32 q0, [sp]",
            "vstrw.32 q0, [sp, #16]",
            "2:",
            "vldrb.u8 q4, [r5], #16",
            "vldrb.u8 q5, [r5], #16",
            "vldrb.u8 q6, [r9], #16",
            "vldrb.u8 q7, [r9], #16",
            row_block_x2!("r1", "s8", "s12"),
            row_block_x2!("r2", "s9", "s13"),
            row_block_x2!("r3", "s10", "s14"),
            row_block_x2!("r4", "s11", "s15"),
            // The four rows' d_w (bottom halves) and m_w (top halves), one word a row, widened
            // exactly.
            "vldr s20, [r1, #-24]",
            "vldr s21, [r2, #-24]",
            "vldr s22, [r3, #-24]",
            "vldr s23, [r4, #-24]",
            "vcvtb.f32.f16 q4, q5",
            "vcvtt.f32.f16 q5, q5",
            // Token A's scale and sum advance the pointers; token B's are `r11` past the new
            // ones (its stride less the 4 bytes just stepped).
            combine_x2!("q2", "[r8], #4", "[r10], #4", "0"),
            combine_x2!("q3", "[r8, r11]", "[r10, r11]", "16"),
            "subs r12, r12, #1",
            "bne 2b",
            "vldrw.u32 q0, [sp]",
            "vldrw.u32 q1, [sp, #16]",
            "add sp, #32",
            inout("r1") w[0].as_ptr().wrapping_add(4) => _,
            inout("r2") w[1].as_ptr().wrapping_add(4) => _,
            inout("r3") w[2].as_ptr().wrapping_add(4) => _,
            inout("r4") w[3].as_ptr().wrapping_add(4) => _,
            inout("r5") a[0].qs.as_ptr() => _,
            inout("r9") a[1].qs.as_ptr() => _,
            inout("r8") a[0].d.as_ptr() => _,
            inout("r10") a[0].s.as_ptr() => _,
            in("r11") stride.wrapping_sub(4),
            inout("r12") blocks => _,
            out("r0") _,
            out("lr") _,
            out("s0") x0, out("s1") x1, out("s2") x2, out("s3") x3,
            out("s4") y0, out("s5") y1, out("s6") y2, out("s7") y3,
            out("s8") _, out("s9") _, out("s10") _, out("s11") _,
            out("s12") _, out("s13") _, out("s14") _, out("s15") _,
            out("s16") _, out("s17") _, out("s18") _, out("s19") _,
            out("s20") _, out("s21") _, out("s22") _, out("s23") _,
            out("s24") _, out("s25") _, out("s26") _, out("s27") _,
            out("s28") _, out("s29") _, out("s30") _, out("s31") _,
            options(readonly),
        );
    }
    [[x0, y0], [x1, y1], [x2, y2], [x3, y3]]
}
