//! Activation quantization to Q8_0 and Q8_1 (`quant::q8_act`'s steps) on the Cortex-M4's scalar
//! FPU (FPv4: no vector floats, no `VCVTA`, no `VRINT`): the same operations as the portable
//! code but `roundf`'s truncation by the FPU's `VCVT.S32.F32` (round toward zero) instead of
//! `libm`'s bit manipulation. `libm::roundf(p)` is `trunc(p + copysign(0.5 − 2⁻²⁵, p))`; here
//! `|p| + (0.5 − 2⁻²⁵)` (the same f32 addition up to the sign, which round to nearest even
//! mirrors), truncated by `VCVT` (the same as `trunc` for every value below 2³¹: codes are
//! within ±127.5), then the sign put back, so every code is the portable one. The block's
//! largest `|x|` as the largest of the magnitudes' bits (for finite values the bits order as
//! the values: the portable `MAX`'s result), its scale and inverse the portable scalar steps,
//! the f16 roundings the FPU's `VCVTB` (the software conversion's values).
//! A block holding an infinity or NaN, or not all zero with its largest magnitude below 2⁻⁹²
//! (where the portable code's input floor could change a code), or whose scale's inverse
//! overflows, takes the portable code. Q8_K declines (its `nearest_int` is already an add and a bit read).

use core::arch::asm;

use crate::arch::quantize_rows::q8_rows;
use crate::quant::{BLOCK, floor};

/// `0.5 − 2⁻²⁵`: `libm::roundf`'s addend.
const HALF_BELOW: f32 = 0.5 - 0.25 * f32::EPSILON;

/// Quantizes `x` to Q8_0 (`s` `None`) or Q8_1 (`s` the block sums) with the portable code's
/// bits, over as many blocks as every buffer holds (the portable `zip`).
pub(super) fn q8(x: &[f32], qs: &mut [i8], d: &mut [f32], s: Option<&mut [f32]>) {
    q8_rows(x, qs, d, s, block, through_f16)
}

/// One block's codes into `q`: its unrounded scale `amax / 127` and the sum of its codes, or
/// `None` (nothing written) when it holds an infinity or NaN, is not all zero with its largest
/// magnitude below 2⁻⁹², or its scale's inverse overflows.
#[inline(always)]
fn block(x: &[f32; BLOCK], q: &mut [i8; BLOCK]) -> Option<(f32, i32)> {
    let bits = x.iter().fold(0u32, |m, v| m.max(v.to_bits() & 0x7fff_ffff));
    // Infinity or NaN; or a block the portable code's input floor could change (not all zero,
    // largest magnitude below `floor::UNFLOORED_BLOCK_MAX`).
    if bits > 0x7f7f_ffff || (bits != 0 && bits < floor::UNFLOORED_BLOCK_MAX.to_bits()) {
        return None;
    }
    let scale = f32::from_bits(bits) / 127.0;
    let id = if scale != 0.0 { 1.0 / scale } else { 0.0 };
    if id.is_infinite() {
        return None;
    }
    let mut sum = 0i32;
    for (c, &v) in q.iter_mut().zip(x) {
        let p = v * id;
        // `VCVT.S32.F32` truncates (the sum is finite and below 128).
        let t = (libm::fabsf(p) + HALF_BELOW) as i32;
        let code = if p.is_sign_negative() { -t } else { t };
        *c = code as i8;
        sum += code;
    }
    Some((scale, sum))
}

/// `x` rounded through f16 by the scalar FPU's `VCVTB.F16.F32` (nearest even, IEEE half,
/// subnormals kept: the FPU's default `FPSCR`) and back (`VCVTB.F32.F16`, exact): what
/// [`through_f16`](crate::quant::q8_act::through_f16)'s software conversion gives for every finite `x`.
#[inline(always)]
fn through_f16(x: f32) -> f32 {
    let y: u32;
    // SAFETY: register-only moves and conversions on the FPU (s0 declared clobbered).
    unsafe {
        asm!(
            "vmov s0, {x}",
            "vcvtb.f16.f32 s0, s0",
            "vcvtb.f32.f16 s0, s0",
            "vmov {y}, s0",
            x = in(reg) x.to_bits(),
            y = lateout(reg) y,
            out("s0") _,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    f32::from_bits(y)
}
