//! [`Neon`]: the [`Isa`] of the page loop's AArch64 build (`attention::dispatch` takes
//! `Neon<true>` where the CPU has the dot-product extension, `Neon<false>` elsewhere).
//!
//! NEON is part of every AArch64 core, so the portable build is already compiled for it (LLVM
//! vectorizes its fixed eight lanes into two 128-bit registers); the differences here are
//! explicit: f16 widening with `FCVTL` (exact; NaNs made quiet with their payload, as the
//! portable decoder: every one of the 65,536 codes tested), eight rows' lane sums with `FADDP`,
//! whose adds are exactly those of the portable tree, and the Q8_0 and f16 page kernels of
//! `int8` and `f16` (tested against the portable kernels). No fused multiply-add anywhere: every
//! product is an `FMUL`, every sum an `FADD`, in the portable order.

use core::arch::aarch64::{
    float32x4_t, uint16x4_t, uint16x8_t, vdupq_n_u16, vgetq_lane_f32, vld1q_f32, vld1q_u8,
    vpaddq_f32, vreinterpretq_u16_u8, vsetq_lane_u16, vst1q_f32,
};
use core::arch::asm;

use super::{f16, int8, values};
use crate::arch::kernels::{self, Row};
use crate::arch::query::QueryCodes;
use crate::arch::rows::PageRows;
use crate::arch::{Isa, PageKernels, Softmax, Strategy};
use crate::numeric::{LANES, Widen};

/// [`Isa`] with NEON; `DOT`: the int8 scores with `SDOT` (only where
/// [`dotprod`](super::dotprod) said so: `attention::dispatch` picks the type per page, and
/// query codes are laid out for it by [`arrange_query`](super::arrange_query)).
pub(crate) struct Neon<const DOT: bool>;

/// `[lo, hi]`: the eight f16 values of `h` widened (`FCVTL`, `FCVTL2`: exact).
#[inline(always)]
pub(super) fn widen8(h: uint16x8_t) -> [float32x4_t; 2] {
    let (lo, hi): (float32x4_t, float32x4_t);
    // SAFETY: register-only conversions (FP and NEON are part of every AArch64 core); `out`
    // registers never share the input's, so `FCVTL2` still reads `h`.
    unsafe {
        asm!(
            "fcvtl {lo:v}.4s, {h:v}.4h",
            "fcvtl2 {hi:v}.4s, {h:v}.8h",
            h = in(vreg) h,
            lo = out(vreg) lo,
            hi = out(vreg) hi,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    [lo, hi]
}

/// The four f16 values of `h` widened (`FCVTL`: exact).
#[inline(always)]
pub(super) fn widen4(h: uint16x4_t) -> float32x4_t {
    let x: float32x4_t;
    // SAFETY: a register-only conversion.
    unsafe {
        asm!(
            "fcvtl {x:v}.4s, {h:v}.4h",
            h = in(vreg) h,
            x = out(vreg) x,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    x
}

impl<const DOT: bool> Widen for Neon<DOT> {
    #[inline(always)]
    fn one(h: u16) -> f32 {
        // SAFETY: register-only NEON operations.
        let v = unsafe { vsetq_lane_u16::<0>(h, vdupq_n_u16(0)) };
        // SAFETY: as above.
        unsafe { vgetq_lane_f32::<0>(widen8(v)[0]) }
    }

    #[inline(always)]
    fn block(b: &[u8; 2 * LANES]) -> [f32; LANES] {
        let mut out = [0f32; LANES];
        // SAFETY: the load reads exactly the 16 bytes of `b`, the stores write exactly the 32
        // bytes of `out` (NEON loads and stores need no alignment beyond the element's).
        unsafe {
            let [lo, hi] = widen8(vreinterpretq_u16_u8(vld1q_u8(b.as_ptr())));
            vst1q_f32(out.as_mut_ptr(), lo);
            vst1q_f32(out.as_mut_ptr().add(4), hi);
        }
        out
    }
}

impl<const DOT: bool> Softmax for Neon<DOT> {
    /// A page's weights in NEON intrinsics (`exp::exp_rows`), the portable lanes for rows that
    /// are not whole blocks of eight.
    #[inline(always)]
    fn exp_rows(xs: &mut [f32], row: usize, shifts: &[f32]) {
        if !super::exp::exp_rows(xs, row, shifts) {
            crate::numeric::exp::exp_shifted_rows(xs, row, shifts);
        }
    }

    #[inline(always)]
    fn reduce8(x: &[[f32; LANES]; LANES]) -> [f32; LANES] {
        let mut out = [0f32; LANES];
        // SAFETY: each load reads four of one `x[i]`'s eight floats, the stores write the 32
        // bytes of `out`.
        unsafe {
            // `FADDP(a, b)` = [a0+a1, a2+a3, b0+b1, b2+b3]: row i's low and high halves give
            // [x0+x1, x2+x3, x4+x5, x6+x7]; two rows of those give each row's
            // (x0+x1)+(x2+x3) and (x4+x5)+(x6+x7); two of those, the tree's last add.
            let pairs: [float32x4_t; LANES] = core::array::from_fn(|i| {
                vpaddq_f32(vld1q_f32(x[i].as_ptr()), vld1q_f32(x[i].as_ptr().add(4)))
            });
            let quads: [float32x4_t; 4] =
                core::array::from_fn(|i| vpaddq_f32(pairs[2 * i], pairs[2 * i + 1]));
            vst1q_f32(out.as_mut_ptr(), vpaddq_f32(quads[0], quads[1]));
            vst1q_f32(out.as_mut_ptr().add(4), vpaddq_f32(quads[2], quads[3]));
        }
        out
    }
}

/// Whether the int8 score kernels here take groups of `g` (and, with `SDOT`, query codes laid
/// out by [`arrange_query`](super::arrange_query)): whole chunks of 16 codes, sums exact in an
/// `i32`.
#[inline(always)]
pub(super) const fn scores_take(g: usize) -> bool {
    g % 16 == 0 && g > 0 && g <= 256
}

impl<const DOT: bool> PageKernels for Neon<DOT> {
    #[inline(always)]
    fn int8_scores<const G: usize>(
        q: QueryCodes<'_>,
        rows: &[Row<'_>],
        g: usize,
    ) -> [[f32; LANES]; G] {
        if scores_take(g) {
            if let Some(s) = int8::row_scores::<DOT, G>(q, rows, g) {
                return s;
            }
        }
        kernels::int8_scores::<Self, G>(q, rows, g)
    }

    #[inline(always)]
    fn int8_add_rows<const G: usize>(acc: &mut [f32], p: &[[f32; G]], rows: &[Row<'_>], g: usize) {
        if !(g == 32 && values::add_rows::<G>(acc, p, rows)) {
            kernels::int8_add_scaled_rows::<Self, G>(acc, p, rows, g)
        }
    }

    #[inline(always)]
    fn int8_page_scores<const G: usize>(
        q: QueryCodes<'_>,
        rows: &PageRows<'_>,
        g: usize,
        scores: &mut [f32],
        p: usize,
    ) -> bool {
        scores_take(g) && int8::page_scores::<DOT, G>(q, rows, g, scores, p)
    }

    #[inline(always)]
    fn int8_page_values<const G: usize>(
        acc: &mut [f32],
        w: &[f32],
        p: usize,
        rows: &PageRows<'_>,
        g: usize,
    ) -> bool {
        g == 32 && values::page_values::<G>(acc, w, p, rows)
    }

    #[inline(always)]
    fn f16_page_scores<const G: usize>(
        q: &[f32],
        rows: &PageRows<'_>,
        scores: &mut [f32],
        p: usize,
        scale: f32,
    ) -> bool {
        f16::page_scores::<Self, G>(q, rows, scores, p, scale)
    }

    #[inline(always)]
    fn f16_page_values<const G: usize>(
        acc: &mut [f32],
        w: &[f32],
        p: usize,
        rows: &PageRows<'_>,
    ) -> bool {
        f16::page_values::<G>(acc, w, p, rows)
    }
}

impl<const DOT: bool> Isa for Neon<DOT> {
    const STRATEGY: Strategy = Strategy {
        int8_pages: true,
        f16_pages: true,
        ..Strategy::GENERAL
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::Portable;

    /// Lane sums in the tree's order and every f16 code widened as the portable decoder.
    #[test]
    fn lane_sums_and_widening_give_the_portable_bits() {
        let x: [[f32; 8]; 8] = core::array::from_fn(|i| {
            core::array::from_fn(|l| 1e8 * (i as f32) + l as f32 * 0.37 - 1e7 * (l % 3) as f32)
        });
        let (a, b) = (Neon::<false>::reduce8(&x), Portable::reduce8(&x));
        assert!(a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()));
        for h in 0..=u16::MAX {
            assert_eq!(
                Neon::<false>::one(h).to_bits(),
                Portable::one(h).to_bits(),
                "{h:#x}"
            );
        }
    }
}
