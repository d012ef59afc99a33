//! Activation quantization (`quant::q8_act`'s Q8_0 and Q8_1, `quant::q8_k`'s Q8_K) in Helium,
//! each block in two `asm!` passes (Rust has no Helium intrinsics) around the portable scalar
//! steps.
//!
//! - The largest `|x|` from the values' bits, in integer lanes (exact): Q8_0 and Q8_1 as the
//!   largest of the bits shifted left by one (`VSHL`, `VMAXV.U32`: the sign dropped); Q8_K as the
//!   largest bits unsigned (`VMAXV.U32`: the negative value of largest magnitude, if any) and
//!   signed (`VMAXV.S32`: the positive value of largest magnitude, if any), which also give the
//!   sign of the first value of largest magnitude unless both signs hold it (then a scalar
//!   search finds the first).
//! - The scale and its inverse (`amax / 127`, `1 / d`; `−127 / max`, `1 / iscale`) and the f16
//!   roundings on the scalar FPU, as the portable code computes them (the f16 roundings by
//!   `VCVTB`, which keeps subnormals there: the software conversion's values).
//! - The codes four lanes at a time: `VMUL.F32` by the inverse scale (the portable product),
//!   then `VCVTA.S32.F32` (nearest, ties away from zero: `roundf`) for Q8_0 and Q8_1,
//!   `VCVTN.S32.F32` (nearest, ties to even: ggml's `nearest_int`, which adds 1.5·2²³ and reads
//!   the mantissa, for every product below 2²² in magnitude) for Q8_K; stored as bytes
//!   (`VSTRB.32`: every code is within ±127, see below), their sums by `VADDVA.S32` (exact).
//!
//! Helium's vector floats flush subnormal inputs and results to zero (`lanes`). That changes no
//! code when the block's largest magnitude is at least 2⁻¹¹⁷: the inverse
//! scale is then below 127 · 2¹¹⁷ · (1 + 2⁻²³) < 2¹²⁴ (and normal: at least 127 / 2¹²⁸), so a
//! subnormal value's product is below 2⁻¹²⁶ · 2¹²⁴ = 1/4 in magnitude, and a subnormal product
//! is below 2⁻¹²⁶: both round to the code 0 in the portable code, as their flushed zeros do in
//! the lanes. Normal values give normal products (or the exact zero), which the lanes round as
//! the scalar FPU. The codes stay within ±127: `|x| ≤ amax`, so `|x · id|` is at most
//! `127 · (1 + 2⁻²⁴)²` < 127.5. A block of all zeros is exact too (its inverse scale is 0, or it
//! has no codes to round). The portable code reads inputs below 2⁻¹⁰⁰ as zeros, which changes no
//! code of a block whose largest magnitude is at least 2⁻⁹² ([`LANES_EXACT`]). Blocks below
//! 2⁻⁹² (not zero), and blocks holding an infinity or a
//! NaN, take the portable code (one block, the rest of the row stays in Helium).

use core::arch::asm;

use crate::arch::quantize_rows::{q8_k_rows, q8_rows};
use crate::gguf::QK_K;
use crate::quant::{BLOCK, floor};

/// The smallest largest-magnitude of a block (not all zero) whose codes the lanes compute
/// exactly: 2⁻⁹², the portable code's input floor's bound ([`floor::UNFLOORED_BLOCK_MAX`]),
/// above the 2⁻¹¹⁷ that Helium's flushing alone needs.
const LANES_EXACT: u32 = floor::UNFLOORED_BLOCK_MAX.to_bits();

/// The largest finite magnitude's bits.
const FINITE: u32 = 0x7f7f_ffff;

/// Quantizes `x` to Q8_0 (`s` `None`) or Q8_1 (`s` the block sums) with the portable code's
/// bits, over as many blocks as every buffer holds (the portable `zip`).
pub(super) fn q8(x: &[f32], qs: &mut [i8], d: &mut [f32], s: Option<&mut [f32]>) {
    q8_rows(x, qs, d, s, block, through_f16)
}

/// One Q8_0 / Q8_1 block's codes into `q`: its unrounded scale `amax / 127` and the sum of its
/// codes, or `None` (nothing written) when it holds an infinity or NaN, or its largest
/// magnitude is below [`LANES_EXACT`] and not zero.
#[inline(always)]
fn block(x: &[f32; BLOCK], q: &mut [i8; BLOCK]) -> Option<(f32, i32)> {
    let twice: u32;
    // SAFETY: eight `VLDRW` read the 32 floats of `x` (word-aligned: an f32 array); only the
    // declared registers (q0 = s0–s3) and the flags are written.
    unsafe {
        asm!(
            "vldrw.u32 q0, [r0], #16", "vshl.i32 q0, q0, #1", "vmaxv.u32 r2, q0",
            "vldrw.u32 q0, [r0], #16", "vshl.i32 q0, q0, #1", "vmaxv.u32 r2, q0",
            "vldrw.u32 q0, [r0], #16", "vshl.i32 q0, q0, #1", "vmaxv.u32 r2, q0",
            "vldrw.u32 q0, [r0], #16", "vshl.i32 q0, q0, #1", "vmaxv.u32 r2, q0",
            "vldrw.u32 q0, [r0], #16", "vshl.i32 q0, q0, #1", "vmaxv.u32 r2, q0",
            "vldrw.u32 q0, [r0], #16", "vshl.i32 q0, q0, #1", "vmaxv.u32 r2, q0",
            "vldrw.u32 q0, [r0], #16", "vshl.i32 q0, q0, #1", "vmaxv.u32 r2, q0",
            "vldrw.u32 q0, [r0], #16", "vshl.i32 q0, q0, #1", "vmaxv.u32 r2, q0",
            inout("r0") x.as_ptr() => _,
            inout("r2") 0u32 => twice,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            options(readonly, nostack),
        );
    }
    let bits = twice >> 1;
    if bits > FINITE || (bits != 0 && bits < LANES_EXACT) {
        return None;
    }
    let scale = f32::from_bits(bits) / 127.0;
    let id = if scale != 0.0 { 1.0 / scale } else { 0.0 };
    let sum: i32;
    // SAFETY: eight `VLDRW` read the 32 floats of `x`, eight `VSTRB.32` write the 32 bytes of
    // `q` (four each); only the declared registers and the flags are written. `VADDVA` needs
    // the even r4.
    unsafe {
        asm!(
            "vldrw.u32 q0, [r0], #16", "vmul.f32 q0, q0, r2", "vcvta.s32.f32 q0, q0",
            "vstrb.32 q0, [r1], #4", "vaddva.s32 r4, q0",
            "vldrw.u32 q0, [r0], #16", "vmul.f32 q0, q0, r2", "vcvta.s32.f32 q0, q0",
            "vstrb.32 q0, [r1], #4", "vaddva.s32 r4, q0",
            "vldrw.u32 q0, [r0], #16", "vmul.f32 q0, q0, r2", "vcvta.s32.f32 q0, q0",
            "vstrb.32 q0, [r1], #4", "vaddva.s32 r4, q0",
            "vldrw.u32 q0, [r0], #16", "vmul.f32 q0, q0, r2", "vcvta.s32.f32 q0, q0",
            "vstrb.32 q0, [r1], #4", "vaddva.s32 r4, q0",
            "vldrw.u32 q0, [r0], #16", "vmul.f32 q0, q0, r2", "vcvta.s32.f32 q0, q0",
            "vstrb.32 q0, [r1], #4", "vaddva.s32 r4, q0",
            "vldrw.u32 q0, [r0], #16", "vmul.f32 q0, q0, r2", "vcvta.s32.f32 q0, q0",
            "vstrb.32 q0, [r1], #4", "vaddva.s32 r4, q0",
            "vldrw.u32 q0, [r0], #16", "vmul.f32 q0, q0, r2", "vcvta.s32.f32 q0, q0",
            "vstrb.32 q0, [r1], #4", "vaddva.s32 r4, q0",
            "vldrw.u32 q0, [r0], #16", "vmul.f32 q0, q0, r2", "vcvta.s32.f32 q0, q0",
            "vstrb.32 q0, [r1], #4", "vaddva.s32 r4, q0",
            inout("r0") x.as_ptr() => _,
            inout("r1") q.as_mut_ptr() => _,
            in("r2") id.to_bits(),
            inout("r4") 0i32 => sum,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            options(nostack),
        );
    }
    Some((scale, sum))
}

/// Quantizes `x` to Q8_K with the portable code's bits, over as many super-blocks as every
/// buffer holds (the portable `zip`): codes into `qs`, scales into `d`, the 16-value sums into
/// `bsums`.
pub(super) fn q8_k(x: &[f32], qs: &mut [i8], d: &mut [f32], bsums: &mut [i16]) {
    q8_k_rows(x, qs, d, bsums, block_k)
}

/// One super-block's codes into `q` and 16-value sums into `sums`: its scale `1 / iscale` (0 for
/// an all-zero block), or `None` (nothing written) when it holds an infinity or NaN, or its
/// largest magnitude is below [`LANES_EXACT`] and not zero.
#[inline(always)]
fn block_k(x: &[f32; QK_K], q: &mut [i8; QK_K], sums: &mut [i16; 16]) -> Option<f32> {
    let (unsigned, signed): (u32, i32);
    // SAFETY: sixteen passes of four `VLDRW` read the 256 floats of `x` (word-aligned); only
    // the declared registers (q0 = s0–s3) and the flags are written.
    unsafe {
        asm!(
            "2:",
            "vldrw.u32 q0, [r0], #16", "vmaxv.u32 r2, q0", "vmaxv.s32 r4, q0",
            "vldrw.u32 q0, [r0], #16", "vmaxv.u32 r2, q0", "vmaxv.s32 r4, q0",
            "vldrw.u32 q0, [r0], #16", "vmaxv.u32 r2, q0", "vmaxv.s32 r4, q0",
            "vldrw.u32 q0, [r0], #16", "vmaxv.u32 r2, q0", "vmaxv.s32 r4, q0",
            "subs r3, #1",
            "bne 2b",
            inout("r0") x.as_ptr() => _,
            inout("r2") 0u32 => unsigned,
            inout("r3") QK_K / 16 => _,
            inout("r4") i32::MIN => signed,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            options(readonly, nostack),
        );
    }
    // The negative value of largest magnitude (the largest bits unsigned, if negative) and the
    // positive one (the largest bits signed, if not negative).
    let negative = if unsigned >> 31 == 1 {
        unsigned & 0x7fff_ffff
    } else {
        0
    };
    let positive = if signed >= 0 { signed as u32 } else { 0 };
    let bits = negative.max(positive);
    if bits > FINITE || (bits != 0 && bits < LANES_EXACT) {
        return None;
    }
    if bits == 0 {
        q.fill(0);
        sums.fill(0);
        return Some(0.0);
    }
    let max = if positive > negative {
        f32::from_bits(positive)
    } else if negative > positive {
        -f32::from_bits(negative)
    } else {
        // Both signs: the first value of that magnitude.
        *x.iter().find(|v| v.to_bits() & 0x7fff_ffff == bits)?
    };
    let iscale = -127.0 / max;
    // SAFETY: sixteen passes each read 16 floats of `x` (four `VLDRW`), write 16 bytes of `q`
    // (four `VSTRB.32`) and one i16 of `sums` (halfword-aligned: an i16 array); only the
    // declared registers and the flags are written. `VADDV` needs the even r4.
    unsafe {
        asm!(
            "2:",
            "vldrw.u32 q0, [r0], #16", "vmul.f32 q0, q0, r3", "vcvtn.s32.f32 q0, q0",
            "vstrb.32 q0, [r1], #4", "vaddv.s32 r4, q0",
            "vldrw.u32 q0, [r0], #16", "vmul.f32 q0, q0, r3", "vcvtn.s32.f32 q0, q0",
            "vstrb.32 q0, [r1], #4", "vaddva.s32 r4, q0",
            "vldrw.u32 q0, [r0], #16", "vmul.f32 q0, q0, r3", "vcvtn.s32.f32 q0, q0",
            "vstrb.32 q0, [r1], #4", "vaddva.s32 r4, q0",
            "vldrw.u32 q0, [r0], #16", "vmul.f32 q0, q0, r3", "vcvtn.s32.f32 q0, q0",
            "vstrb.32 q0, [r1], #4", "vaddva.s32 r4, q0",
            "strh r4, [r2], #2",
            "subs r5, #1",
            "bne 2b",
            inout("r0") x.as_ptr() => _,
            inout("r1") q.as_mut_ptr() => _,
            inout("r2") sums.as_mut_ptr() => _,
            in("r3") iscale.to_bits(),
            out("r4") _,
            inout("r5") 16u32 => _,
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            options(nostack),
        );
    }
    Some(1.0 / iscale)
}

/// `x` rounded through f16 by the scalar FPU's `VCVTB.F16.F32` (nearest even, IEEE half,
/// subnormals kept: the FPU's default `FPSCR`) and back (`VCVTB.F32.F16`, exact): what
/// [`through_f16`](crate::quant::q8_act::through_f16)'s software conversion gives for every finite `x`.
#[inline(always)]
fn through_f16(x: f32) -> f32 {
    let y: f32;
    // SAFETY: register-only conversions on the FPU.
    unsafe {
        asm!(
            "vcvtb.f16.f32 {v}, {v}",
            "vcvtb.f32.f16 {v}, {v}",
            v = inout(sreg) x => y,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    y
}
