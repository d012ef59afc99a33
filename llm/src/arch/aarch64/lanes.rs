//! What the weight types' kernels share: the byte dot products (`SDOT`, or `SMULL` and
//! `SADALP`), four rows' sums side by side, and four rows' f16 scales widened.

use core::arch::aarch64::{
    float32x4_t, int8x16_t, int32x4_t, uint16x4_t, vget_low_s8, vld1_u16, vmull_high_s8, vmull_s8,
    vpadalq_s16, vpaddq_s32,
};
use core::arch::asm;

/// `acc + Σ a·b` over each lane's four byte products: `SDOT` where `DOT` (exact), else `SMULL`
/// into 16 bits (a product of two `i8` fits) and `SADALP` into the lanes (exact).
#[inline(always)]
pub(super) fn dot16<const DOT: bool>(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if DOT {
        // SAFETY: register-only; `DOT` only where the CPU has the dot-product extension (the
        // caller's `dot_ext()`).
        unsafe {
            asm!(
                ".arch_extension dotprod",
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        acc
    } else {
        // SAFETY: register-only NEON operations.
        unsafe {
            let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
            let hi = vmull_high_s8(a, b);
            vpadalq_s16(vpadalq_s16(acc, lo), hi)
        }
    }
}

/// `[Σ x0, Σ x1, Σ x2, Σ x3]`: four vectors' lanes summed each (exact, wrapping `i32`).
#[inline(always)]
pub(super) fn sums4(x: [int32x4_t; 4]) -> int32x4_t {
    // SAFETY: register-only NEON operations.
    unsafe { vpaddq_s32(vpaddq_s32(x[0], x[1]), vpaddq_s32(x[2], x[3])) }
}

/// The four f16 values at `p[0..4]` (each two readable bytes, any alignment) widened by `FCVTL`
/// (exact: the portable conversion's bits, NaNs made quiet).
///
/// # Safety
///
/// Each `p[i]` points at two readable bytes.
#[inline(always)]
pub(super) unsafe fn f16x4(p: [*const u8; 4]) -> float32x4_t {
    // SAFETY: the caller's obligation: two bytes read at each `p[i]` (as bytes: any alignment);
    // the vector load reads the 8 bytes of `v`.
    unsafe {
        let v: [u16; 4] = p.map(|p| u16::from_le_bytes(p.cast::<[u8; 2]>().read()));
        let h: uint16x4_t = vld1_u16(v.as_ptr());
        let x: float32x4_t;
        asm!(
            "fcvtl {x:v}.4s, {h:v}.4h",
            h = in(vreg) h,
            x = out(vreg) x,
            options(pure, nomem, nostack, preserves_flags),
        );
        x
    }
}
