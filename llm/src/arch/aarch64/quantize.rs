//! Activation quantization to Q8_0 and Q8_1 (`quant::q8_act`'s steps) with NEON: each 32-value
//! block's largest `|x|` as the largest of the magnitudes' bits (`UMAXV`: for finite values the
//! bits order as the values, so this is the portable `MAX`'s result), the codes `roundf(x · id)`
//! four lanes at a time (the product is the portable one; `FCVTAS` rounds to nearest with ties
//! away from zero, which is `roundf`), narrowed with saturation (`SQXTN`, as Rust's `as i8`),
//! the Q8_1 block sum exact in i32 lanes. The block's scale and its inverse are the portable
//! scalar steps, the f16 roundings `FCVT` (nearest even, subnormals kept: the same values as
//! the portable software conversion for every finite value). A block holding an infinity or
//! NaN, or a nonzero value below the inputs' floor (`quant::floor`), or whose scale's inverse
//! overflows, takes the portable code (its `MAX` order and `as
//! i8` of NaN and infinities decide there).
//!
//! Q8_K (`quant::q8_k`'s steps) by 256-value super-blocks: the largest `|x|` as the largest of
//! the magnitudes' bits (`UMAXV`), the first value holding it found by compares (its sign sets
//! the scale's), `iscale = −127 / max` and `d = 1 / iscale` the portable scalar steps, the codes
//! `nearest_int(iscale · x)` four lanes at a time (`FMUL` then `FADD` of 1.5·2²³, never fused,
//! then the mantissa bits: the portable operations), the 16-value sums exact (`ADDV`). A
//! super-block holding an infinity or NaN, or a nonzero value below the inputs' floor, or whose
//! `iscale` overflows, takes the portable code.

use core::arch::aarch64::{
    int32x4_t, vaddq_s32, vaddvq_s32, vandq_u32, vcombine_s8, vcombine_s16, vcvtaq_s32_f32,
    vdupq_n_f32, vdupq_n_u32, vld1q_f32, vmaxq_u32, vmaxvq_u32, vminq_u32, vminvq_u32, vmulq_f32,
    vqmovn_s16, vqmovn_s32, vreinterpretq_u32_f32, vst1q_s8, vsubq_u32,
};
use core::arch::asm;

use core::arch::aarch64::{
    vaddq_f32, vandq_s32, vceqq_u32, vdupq_n_s32, vminq_s32, vreinterpretq_s32_f32, vsubq_s32,
};

use crate::arch::quantize_rows::{q8_k_rows, q8_rows};
use crate::gguf::QK_K;
use crate::quant::{BLOCK, floor};

/// Quantizes `x` to Q8_0 (`s` `None`) or Q8_1 (`s` the block sums) with the portable code's
/// bits, over as many blocks as every buffer holds (the portable `zip`).
pub(super) fn q8(x: &[f32], qs: &mut [i8], d: &mut [f32], s: Option<&mut [f32]>) {
    q8_rows(x, qs, d, s, block, through_f16)
}

/// One block's codes into `q`: its unrounded scale `amax / 127` and the sum of its codes, or
/// `None` (nothing written) when it holds an infinity or NaN, or its scale is so small that its
/// inverse overflows.
#[inline(always)]
fn block(x: &[f32; BLOCK], q: &mut [i8; BLOCK]) -> Option<(f32, i32)> {
    // SAFETY: the eight loads read exactly the 32 floats of `x`, the two stores exactly the 32
    // bytes of `q`; the rest is register-only.
    unsafe {
        let v: [_; 8] = core::array::from_fn(|i| vld1q_f32(x.as_ptr().add(4 * i)));
        let abs = vdupq_n_u32(0x7fff_ffff);
        let m = v.map(|v| vandq_u32(vreinterpretq_u32_f32(v), abs));
        let m01 = vmaxq_u32(vmaxq_u32(m[0], m[1]), vmaxq_u32(m[2], m[3]));
        let m23 = vmaxq_u32(vmaxq_u32(m[4], m[5]), vmaxq_u32(m[6], m[7]));
        let bits = vmaxvq_u32(vmaxq_u32(m01, m23));
        // A nonzero |x| below the inputs' floor (the portable code reads it as zero): the
        // smallest of the magnitudes' bits minus one (zeros wrap to the largest).
        let one = vdupq_n_u32(1);
        let n = m.map(|m| vsubq_u32(m, one));
        let n01 = vminq_u32(vminq_u32(n[0], n[1]), vminq_u32(n[2], n[3]));
        let n23 = vminq_u32(vminq_u32(n[4], n[5]), vminq_u32(n[6], n[7]));
        let tiny = vminvq_u32(vminq_u32(n01, n23)) < floor::INPUT_FLOOR.to_bits() - 1;
        // Infinity or NaN: |x|'s bits above the largest finite value's.
        if bits > 0x7f7f_ffff || tiny {
            return None;
        }
        let amax = f32::from_bits(bits);
        let scale = amax / 127.0;
        let id = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        if id.is_infinite() {
            // A subnormal scale: the products overflow and `as i8` saturates them.
            return None;
        }
        let idv = vdupq_n_f32(id);
        let c: [int32x4_t; 8] = v.map(|v| vcvtaq_s32_f32(vmulq_f32(v, idv)));
        let sum = vaddq_s32(
            vaddq_s32(vaddq_s32(c[0], c[1]), vaddq_s32(c[2], c[3])),
            vaddq_s32(vaddq_s32(c[4], c[5]), vaddq_s32(c[6], c[7])),
        );
        for h in 0..2 {
            let k = 4 * h;
            let lo = vcombine_s16(vqmovn_s32(c[k]), vqmovn_s32(c[k + 1]));
            let hi = vcombine_s16(vqmovn_s32(c[k + 2]), vqmovn_s32(c[k + 3]));
            vst1q_s8(
                q.as_mut_ptr().add(16 * h),
                vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi)),
            );
        }
        Some((scale, vaddvq_s32(sum)))
    }
}

/// `x` rounded through f16 by `FCVT` (nearest even under the default FPCR, subnormals kept:
/// what [`through_f16`](crate::quant::q8_act::through_f16)'s software conversion gives for every finite `x`).
#[inline(always)]
fn through_f16(x: f32) -> f32 {
    let y: f32;
    // SAFETY: register-only conversions (FP is part of every AArch64 core).
    unsafe {
        asm!(
            "fcvt {h:h}, {x:s}",
            "fcvt {y:s}, {h:h}",
            x = in(vreg) x,
            h = out(vreg) _,
            y = lateout(vreg) y,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    y
}

/// Quantizes `x` to Q8_K with the portable code's bits, over as many super-blocks as every
/// buffer holds (the portable `zip`): codes into `qs`, scales into `d`, the 16-value sums into
/// `bsums`.
pub(super) fn q8_k(x: &[f32], qs: &mut [i8], d: &mut [f32], bsums: &mut [i16]) {
    q8_k_rows(x, qs, d, bsums, block_k)
}

/// One super-block's codes into `q` and 16-value sums into `sums`: its scale `1 / iscale` (0 for
/// an all-zero block), or `None` (nothing written) when it holds an infinity or NaN or its
/// `iscale` overflows.
#[inline(always)]
fn block_k(x: &[f32; QK_K], q: &mut [i8; QK_K], sums: &mut [i16; 16]) -> Option<f32> {
    // SAFETY: every load reads four of the 256 floats of `x` (`i < 64`), every store 16 of the
    // 256 bytes of `q`; the rest is register-only.
    unsafe {
        let load = |i: usize| vreinterpretq_u32_f32(vld1q_f32(x.as_ptr().add(4 * i)));
        let abs = vdupq_n_u32(0x7fff_ffff);
        let one = vdupq_n_u32(1);
        let (mut m, mut n) = (vdupq_n_u32(0), vdupq_n_u32(u32::MAX));
        for i in 0..QK_K / 4 {
            let a = vandq_u32(load(i), abs);
            m = vmaxq_u32(m, a);
            // The magnitudes' bits minus one: zeros wrap to the largest.
            n = vminq_u32(n, vsubq_u32(a, one));
        }
        let bits = vmaxvq_u32(m);
        // Infinity or NaN: |x|'s bits above the largest finite value's; a nonzero |x| below the
        // inputs' floor (the portable code reads it as zero).
        if bits > 0x7f7f_ffff || vminvq_u32(n) < floor::INPUT_FLOOR.to_bits() - 1 {
            return None;
        }
        if bits == 0 {
            q.fill(0);
            sums.fill(0);
            return Some(0.0);
        }
        // The first value of largest magnitude (finite magnitudes order as their bits).
        let hv = vdupq_n_u32(bits);
        let mut at = QK_K;
        for i in 0..QK_K / 4 {
            if vmaxvq_u32(vceqq_u32(vandq_u32(load(i), abs), hv)) != 0 {
                let lanes = &x[4 * i..4 * i + 4];
                at = 4 * i
                    + lanes
                        .iter()
                        .position(|v| v.to_bits() & 0x7fff_ffff == bits)?;
                break;
            }
        }
        let max = *x.get(at)?;
        let iscale = -127.0 / max;
        if iscale.is_infinite() {
            return None;
        }
        let iv = vdupq_n_f32(iscale);
        let magic = vdupq_n_f32(12_582_912.0);
        let mantissa = vdupq_n_s32(0x007f_ffff);
        let bias = vdupq_n_s32(0x0040_0000);
        let top = vdupq_n_s32(127);
        for (g, sum) in sums.iter_mut().enumerate() {
            let c: [int32x4_t; 4] = core::array::from_fn(|i| {
                let v = vld1q_f32(x.as_ptr().add(16 * g + 4 * i));
                // `nearest_int(iscale · v)`: the product, then the add (two roundings, as the
                // portable code), then the low mantissa bits less 2²².
                let r = vreinterpretq_s32_f32(vaddq_f32(vmulq_f32(v, iv), magic));
                vminq_s32(vsubq_s32(vandq_s32(r, mantissa), bias), top)
            });
            let lo = vcombine_s16(vqmovn_s32(c[0]), vqmovn_s32(c[1]));
            let hi = vcombine_s16(vqmovn_s32(c[2]), vqmovn_s32(c[3]));
            vst1q_s8(
                q.as_mut_ptr().add(16 * g),
                vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi)),
            );
            *sum = vaddvq_s32(vaddq_s32(vaddq_s32(c[0], c[1]), vaddq_s32(c[2], c[3]))) as i16;
        }
        Some(1.0 / iscale)
    }
}
