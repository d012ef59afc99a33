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

use core::arch::aarch64::{
    int32x4_t, vaddq_s32, vaddvq_s32, vandq_u32, vcombine_s8, vcombine_s16, vcvtaq_s32_f32,
    vdupq_n_f32, vdupq_n_u32, vld1q_f32, vmaxq_u32, vmaxvq_u32, vminq_u32, vminvq_u32, vmulq_f32,
    vqmovn_s16, vqmovn_s32, vreinterpretq_u32_f32, vst1q_s8, vsubq_u32,
};
use core::arch::asm;

use crate::quant::{BLOCK, floor, q8_act};

/// Quantizes `x` to Q8_0 (`s` `None`) or Q8_1 (`s` the block sums) with the portable code's
/// bits, over as many blocks as every buffer holds (the portable `zip`).
pub(super) fn q8(x: &[f32], qs: &mut [i8], d: &mut [f32], mut s: Option<&mut [f32]>) {
    let mut blocks = (x.len() / BLOCK).min(qs.len() / BLOCK).min(d.len());
    if let Some(s) = &s {
        blocks = blocks.min(s.len());
    }
    for b in 0..blocks {
        let (Some(xb), Some(qb)) = (
            x[b * BLOCK..].first_chunk::<BLOCK>(),
            qs[b * BLOCK..].first_chunk_mut::<BLOCK>(),
        ) else {
            return;
        };
        match block(xb, qb) {
            Some((scale, sum)) => {
                d[b] = through_f16(scale);
                if let Some(s) = s.as_deref_mut() {
                    s[b] = through_f16(sum as f32 * scale);
                }
            }
            None => match s.as_deref_mut() {
                Some(s) => q8_act::quantize_q8_1(xb, qb, &mut d[b..=b], &mut s[b..=b]),
                None => q8_act::quantize_q8_0(xb, qb, &mut d[b..=b]),
            },
        }
    }
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
/// what [`q8_act::through_f16`]'s software conversion gives for every finite `x`).
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
