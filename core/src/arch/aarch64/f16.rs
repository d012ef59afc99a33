//! Whole pages of f16 rows with NEON: the kernels behind `PageKernels::f16_page_scores` and
//! `PageKernels::f16_page_values`.
//!
//! One check of the page's extent, then every row is a pointer step. A K row's blocks of eight
//! are widened once (`FCVTL`) for all `G` query heads into each head's eight lanes (two
//! registers), eight rows' lanes are summed at once (`Softmax::reduce8`); the value
//! accumulators of sixteen output elements stay in registers across all of the page's rows.
//! Each lane, score and output element takes its terms in the portable kernels' order
//! (`kernels::dot_lanes`, `kernels::add_scaled`): an `FMUL` then an `FADD`, never fused.

use core::arch::aarch64::{
    float32x4_t, vaddq_f32, vdupq_n_f32, vld1q_f32, vld1q_u8, vmulq_n_f32, vreinterpretq_u16_u8,
    vst1q_f32,
};
use core::arch::asm;

use super::isa::widen8;
use crate::arch::Isa;
use crate::arch::rows::PageRows;

/// Elements per lane block.
const LANES: usize = 8;

/// `a + q · x` (`FMUL`, then `FADD`: two roundings, as `kernels::dot_lanes`), in one `asm!`
/// block that keeps `a` in its register: as intrinsics, LLVM copied the three heads' six
/// accumulators of SmolLM2's score loop between registers every block (4 more instructions per
/// iteration, 0.9 % of its f16 step).
#[inline(always)]
fn mul_add(a: &mut float32x4_t, q: float32x4_t, x: float32x4_t) {
    // SAFETY: register-only NEON operations; the temporary is an `out` register (none shares
    // an input's).
    unsafe {
        asm!(
            "fmul {t:v}.4s, {q:v}.4s, {x:v}.4s",
            "fadd {a:v}.4s, {a:v}.4s, {t:v}.4s",
            a = inout(vreg) *a,
            q = in(vreg) q,
            x = in(vreg) x,
            t = out(vreg) _,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
}

/// Whether the page's rows hold `d` f16 values each (`d` whole blocks of `block`; the view
/// checked the rows against its slices when it was built).
#[inline(always)]
fn page_fits(rows: &PageRows<'_>, d: usize, block: usize) -> bool {
    d > 0 && d % block == 0 && rows.stride >= 2 * d && rows.row_bytes >= 2 * d
}

/// `PageKernels::f16_page_scores`: `scores[h·p + r] = reduce(lanes) · scale` for every row `r`
/// of the page and `G` heads of `q` (`G` query rows side by side), where lane `l` of a head sums
/// `q[8k + l] · x[8k + l]` over blocks `k` in order from zero, as `kernels::dot_lanes`; the
/// lanes of up to eight rows then go to `D::reduce8` at once, as the general loop's. `false`,
/// nothing written, unless every length fits.
#[inline(always)]
pub(super) fn page_scores<D: Isa, const G: usize>(
    q: &[f32],
    rows: &PageRows<'_>,
    scores: &mut [f32],
    p: usize,
    scale: f32,
) -> bool {
    let hd = q.len() / G.max(1);
    let n = rows.n;
    if G == 0 || !page_fits(rows, hd, LANES) || q.len() != G * hd || n > p || scores.len() < G * p {
        return false;
    }
    let k = rows.vals.as_ptr();
    for r0 in (0..n).step_by(LANES) {
        let m = (n - r0).min(LANES);
        // Lanes of up to eight rows per head (slots past `m` stay zero, never stored).
        let mut lanes = [[[0f32; LANES]; LANES]; G];
        for i in 0..m {
            // SAFETY: row `r0 + i < n` is within the page `page_fits` checked: each key load
            // reads 16 of its `2·hd` bytes; query loads read four of a head's `hd` values;
            // stores write four of one lane array's eight.
            unsafe {
                let row = k.add((r0 + i) * rows.stride);
                let mut a = [[vdupq_n_f32(0.0); 2]; G];
                for b in 0..hd / LANES {
                    let x = widen8(vreinterpretq_u16_u8(vld1q_u8(row.add(16 * b))));
                    for (h, a) in a.iter_mut().enumerate() {
                        let qp = q.as_ptr().add(h * hd + b * LANES);
                        for (j, (a, x)) in a.iter_mut().zip(x).enumerate() {
                            mul_add(a, vld1q_f32(qp.add(4 * j)), x);
                        }
                    }
                }
                for (lanes, a) in lanes.iter_mut().zip(a) {
                    vst1q_f32(lanes[i].as_mut_ptr(), a[0]);
                    vst1q_f32(lanes[i].as_mut_ptr().add(4), a[1]);
                }
            }
        }
        for (h, lanes) in lanes.iter().enumerate() {
            let d = D::reduce8(lanes);
            for (s, d) in scores[h * p + r0..][..m].iter_mut().zip(d) {
                *s = d * scale;
            }
        }
    }
    true
}

/// `PageKernels::f16_page_values`: `acc[h·d + i] += w[h·p + r] · x_r[i]` for every row `r` of
/// the page in order and `G ≤ 4` heads, sixteen output elements at a time in registers
/// (`kernels::add_scaled`'s `acc + p · x`, an `FMUL` then an `FADD`). `false`, nothing written,
/// unless every length fits.
#[inline(always)]
pub(super) fn page_values<const G: usize>(
    acc: &mut [f32],
    w: &[f32],
    p: usize,
    rows: &PageRows<'_>,
) -> bool {
    let d = acc.len() / G.max(1);
    let n = rows.n;
    if G == 0
        || G > 4
        || !page_fits(rows, d, 2 * LANES)
        || acc.len() != G * d
        || n > p
        || w.len() < G * p
    {
        return false;
    }
    let v = rows.vals.as_ptr();
    for at in (0..d).step_by(2 * LANES) {
        // SAFETY: `at + 16 ≤ d` (`d` a multiple of 16) and `acc` holds `G·d` (checked above):
        // accumulator loads and stores cover 4 of a head's `d`; rows `< n` lie within the
        // checked page, each code load reads 16 of a row's `2·d` bytes; weights `h·p + r` are
        // within `w` (`r < n ≤ p`).
        unsafe {
            let mut a = [[vdupq_n_f32(0.0); 4]; G];
            for (h, a) in a.iter_mut().enumerate() {
                for (j, a) in a.iter_mut().enumerate() {
                    *a = vld1q_f32(acc.as_ptr().add(h * d + at + 4 * j));
                }
            }
            for r in 0..n {
                let c = v.add(r * rows.stride + 2 * at);
                let [x0, x1] = widen8(vreinterpretq_u16_u8(vld1q_u8(c)));
                let [x2, x3] = widen8(vreinterpretq_u16_u8(vld1q_u8(c.add(2 * LANES))));
                let x = [x0, x1, x2, x3];
                for (h, a) in a.iter_mut().enumerate() {
                    let wv = *w.get_unchecked(h * p + r);
                    for (a, x) in a.iter_mut().zip(x) {
                        *a = vaddq_f32(*a, vmulq_n_f32(x, wv));
                    }
                }
            }
            for (h, a) in a.iter().enumerate() {
                for (j, a) in a.iter().enumerate() {
                    vst1q_f32(acc.as_mut_ptr().add(h * d + at + 4 * j), *a);
                }
            }
        }
    }
    true
}
