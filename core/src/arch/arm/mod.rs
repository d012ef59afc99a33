//! Cortex-M (`build.rs` sets the cfgs): the attention page loop with [`Arm`] as its [`Isa`].
//! With the DSP extension and no Helium (M4, M7, M33: `edgekv_arm_dsp`), int8 scores with `SMLAD`
//! (two 16 × 16 products added per instruction, exact in an `i32`, each key word decoded once
//! for every query head of its group) and int8 value rows four lanes at a time (a block's
//! accumulators stay in registers across the rows). With Helium (M55, M85: `edgekv_arm_mve`),
//! int8 scores by `VMLADAVA` (`mve.rs`; the DSP kernels there cost more than they save), and a
//! page's maxima and weights `exp(score − max)` four lanes per vector (`mve_weights.rs`). Whole
//! pages of int8 rows (`Strategy::int8_pages`: rows a stride apart, one `asm!` loop nest for a
//! page's scores, value accumulators kept across a page's rows) go, on DSP cores with an FPU,
//! for runs of one to four heads to `page_runs.rs` (`asm!` loop nests generic in the run length,
//! `dsp_runs.rs`, `dsp_values.rs`); with Helium, runs of one to four heads to `mve_runs.rs`
//! (`asm!` loop nests generic in the run length: `mve_scores.rs`, `mve_values.rs`); other pages
//! (windows) take the eight-row kernels here. On hard-float targets
//! (`edgekv_arm_f16cvt`), f16 scales and values converted by the FPU's `VCVTB`. Without Helium,
//! each attention weight's `exp` is taken alone, `libm::expf`'s steps inline (`exp::scalar`: its
//! branches cost a scalar FPU less than the eight-lane form's selects).
//! The quantizers take the portable paths.
//!
//! The portable kernels' bits: the integer sums are exact in any order, and every float step is
//! the portable kernels' own, in their order. Helium's vector floats run under Arm's standard
//! FPSCR value (subnormals flushed, default NaN) whatever the FPSCR says, so float code that LLVM
//! vectorizes for them must not form subnormals (see `format::fp8::e4m3_code`). `small-code`
//! builds have only the portable page loop, with the FPU's f16 conversion, so none of the rest.

/// `asm!` for a loop that uses the whole FPU register file: the template and operands given (each
/// followed by a comma), then `s0`–`s31` declared clobbered and `options(nostack)`: the one
/// clobber list of the kernels that take every register.
#[cfg(all(
    not(feature = "small-code"),
    any(edgekv_arm_mve, all(edgekv_arm_dsp, edgekv_arm_f16cvt))
))]
macro_rules! asm_all_fpu {
    ($($body:tt)*) => {
        core::arch::asm!(
            $($body)*
            out("s0") _, out("s1") _, out("s2") _, out("s3") _,
            out("s4") _, out("s5") _, out("s6") _, out("s7") _,
            out("s8") _, out("s9") _, out("s10") _, out("s11") _,
            out("s12") _, out("s13") _, out("s14") _, out("s15") _,
            out("s16") _, out("s17") _, out("s18") _, out("s19") _,
            out("s20") _, out("s21") _, out("s22") _, out("s23") _,
            out("s24") _, out("s25") _, out("s26") _, out("s27") _,
            out("s28") _, out("s29") _, out("s30") _, out("s31") _,
            options(nostack),
        )
    };
}

#[cfg(all(edgekv_arm_dsp, not(feature = "small-code")))]
mod dsp;
#[cfg(all(edgekv_arm_dsp, edgekv_arm_f16cvt, not(feature = "small-code")))]
mod dsp_runs;
#[cfg(all(edgekv_arm_dsp, edgekv_arm_f16cvt, not(feature = "small-code")))]
mod dsp_values;
#[cfg(edgekv_arm_f16cvt)]
mod f16;
#[cfg(all(edgekv_arm_f16cvt, not(edgekv_arm_mve), not(feature = "small-code")))]
mod fpu_weights;
#[cfg(all(edgekv_arm_mve, not(feature = "small-code")))]
mod mve;
#[cfg(all(edgekv_arm_mve, not(feature = "small-code")))]
mod mve_runs;
#[cfg(all(edgekv_arm_mve, not(feature = "small-code")))]
mod mve_scores;
#[cfg(all(edgekv_arm_mve, not(feature = "small-code")))]
mod mve_values;
#[cfg(all(edgekv_arm_mve, not(feature = "small-code")))]
mod mve_weights;
/// The page softmax's maxima, weights and sums: Helium's four lanes, or the scalar FPU's loops.
#[cfg(all(edgekv_arm_f16cvt, not(edgekv_arm_mve), not(feature = "small-code")))]
use fpu_weights as weights;
#[cfg(all(edgekv_arm_mve, not(feature = "small-code")))]
use mve_weights as weights;
#[cfg(all(edgekv_arm_dsp, edgekv_arm_f16cvt, not(feature = "small-code")))]
mod page_runs;

use super::Isa;
#[cfg(not(feature = "small-code"))]
use super::Portable;
#[cfg(not(feature = "small-code"))]
use super::{PageKernels, Softmax, Strategy};
#[cfg(all(any(edgekv_arm_dsp, edgekv_arm_mve), not(feature = "small-code")))]
use crate::arch::kernels::{self, Row};
#[cfg(all(edgekv_arm_dsp, not(feature = "small-code")))]
use crate::arch::query;
#[cfg(all(any(edgekv_arm_dsp, edgekv_arm_mve), not(feature = "small-code")))]
use crate::arch::query::QueryCodes;
#[cfg(all(any(edgekv_arm_dsp, edgekv_arm_mve), not(feature = "small-code")))]
use crate::arch::rows::PageRows;
#[cfg(all(any(edgekv_arm_dsp, edgekv_arm_mve), not(feature = "small-code")))]
use crate::format::u16_at;
use crate::numeric::{LANES, Widen};

/// With the DSP extension, groups of a multiple of 4 codes up to 256 (those the `SMLAD` kernels
/// take: `Arm::int8_scores`, `page_runs::scores`) interleaved quad by quad
/// (`query::interleave_quads`), so that a key word's `SXTB16` halves pair with the query's words
/// as they are. Every other group, and every other build, keeps its order.
#[cfg(all(edgekv_arm_dsp, not(feature = "small-code")))]
#[inline(always)]
pub(crate) fn arrange_query(codes: &mut [i16], g: usize) {
    if dsp_takes(g) {
        query::interleave_quads(codes);
    }
}

/// Without the DSP loops (Helium, or only the FPU's f16 conversion; `small-code`): the
/// quantized query as it is.
#[cfg(not(all(edgekv_arm_dsp, not(feature = "small-code"))))]
#[inline(always)]
pub(crate) fn arrange_query(_codes: &mut [i16], _g: usize) {}

/// Whether the DSP score kernels take groups of `g` codes (and so read the query interleaved).
#[cfg(all(edgekv_arm_dsp, not(feature = "small-code")))]
#[inline(always)]
fn dsp_takes(g: usize) -> bool {
    g % 4 == 0 && g <= 256
}

/// The `Isa` of `small-code` builds' one page loop (`attention::small`): [`Arm`], for its f16
/// conversion.
#[cfg(feature = "small-code")]
pub(crate) type SmallCode = Arm;

/// [`Isa`] of Cortex-M cores.
pub(crate) struct Arm;

/// An f16 to f32: the FPU's `VCVTB` where it has one (hard-float targets), else the portable
/// decoder. Both builds' [`Arm::one`].
#[inline(always)]
fn f16_one(h: u16) -> f32 {
    #[cfg(edgekv_arm_f16cvt)]
    return f16::to_f32(h);
    #[cfg(not(edgekv_arm_f16cvt))]
    return crate::numeric::widen::Soft::one(h);
}

/// Eight little-endian f16s to f32, each by `D::one`. Both builds' [`Arm::block`].
#[inline(always)]
fn f16_block<D: Widen>(b: &[u8; 2 * LANES]) -> [f32; LANES] {
    core::array::from_fn(|i| D::one(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])))
}

/// `small-code` builds: [`f16_one`] out of line (on a Cortex-M4, 24 bytes of code against the
/// portable decoder's 116).
#[cfg(feature = "small-code")]
impl Widen for Arm {
    #[inline(never)]
    fn one(h: u16) -> f32 {
        f16_one(h)
    }

    #[inline(always)]
    fn block(b: &[u8; 2 * LANES]) -> [f32; LANES] {
        f16_block::<Self>(b)
    }
}

#[cfg(feature = "small-code")]
impl Isa for Arm {}

/// Lanes of the value kernel's accumulators (three heads' worth stay in the FPU's registers).
#[cfg(all(edgekv_arm_dsp, not(feature = "small-code")))]
const V_LANES: usize = 4;

#[cfg(not(feature = "small-code"))]
impl Widen for Arm {
    /// [`f16_one`], inline.
    #[inline(always)]
    fn one(h: u16) -> f32 {
        f16_one(h)
    }

    #[inline(always)]
    fn block(b: &[u8; 2 * LANES]) -> [f32; LANES] {
        f16_block::<Self>(b)
    }
}

#[cfg(not(feature = "small-code"))]
impl Softmax for Arm {
    #[inline(always)]
    fn reduce8(x: &[[f32; LANES]; LANES]) -> [f32; LANES] {
        Portable::reduce8(x)
    }

    /// Helium: `VMAXNMV` over four lanes at a time (`mve_weights::max_of`); a scalar FPU:
    /// four loaded at a time (`fpu_weights::max_of`).
    #[cfg(any(edgekv_arm_mve, edgekv_arm_f16cvt))]
    #[inline(always)]
    fn max_of(s: &[f32]) -> f32 {
        let n = s.len() & !3;
        if n == 0 {
            return crate::numeric::exp::max_of(s);
        }
        // SAFETY: `n` is a nonzero multiple of 4 within `s`.
        let m = unsafe { weights::max_of(s.as_ptr(), n) };
        s[n..].iter().copied().fold(m, crate::numeric::larger)
    }

    /// Hard-float builds: `weights::sum` over whole blocks of four, the rest in order after them.
    #[cfg(any(edgekv_arm_mve, edgekv_arm_f16cvt))]
    #[inline(always)]
    fn sum(s: f32, w: &[f32]) -> f32 {
        let n = w.len() & !3;
        let s = if n == 0 {
            s
        } else {
            // SAFETY: `n` is a nonzero multiple of 4 within `w`.
            unsafe { weights::sum(s, w.as_ptr(), n) }
        };
        Portable::sum(s, &w[n..])
    }

    /// Hard-float builds: `weights::exp_rows` (Helium: four lanes at a time).
    #[cfg(any(edgekv_arm_mve, edgekv_arm_f16cvt))]
    #[inline(always)]
    fn exp_rows(xs: &mut [f32], row: usize, shifts: &[f32]) {
        let heads = shifts.len().min(xs.len().checked_div(row).unwrap_or(0));
        if row % 4 != 0 || heads == 0 {
            return crate::numeric::exp::exp_shifted_rows(xs, row, shifts);
        }
        // SAFETY: `row` is a nonzero multiple of 4 (a zero `row` gives no heads), and `xs` holds
        // `heads · row` floats, `shifts` `heads`.
        unsafe { weights::exp_rows(xs.as_mut_ptr(), row, shifts.as_ptr(), heads) }
    }
}

#[cfg(not(feature = "small-code"))]
impl PageKernels for Arm {
    /// [`kernels::int8_scores`]'s bits: per group, each query head's integer dot product by
    /// `SMLAD`, each key word decoded once for all the heads. The groups these loops take
    /// ([`dsp_takes`]) arrive interleaved (`arrange_query`); others take the portable kernel.
    #[cfg(edgekv_arm_dsp)]
    #[inline(always)]
    fn int8_scores<const G: usize>(
        q: QueryCodes<'_>,
        rows: &[Row<'_>],
        g: usize,
    ) -> [[f32; LANES]; G] {
        let hd = q.codes.len() / G;
        if !dsp_takes(g) || hd % g != 0 {
            return kernels::int8_scores::<Self, G>(q, rows, g);
        }
        // Query codes two to a word, two words to four codes: word-aligned, as the scratch's
        // slots are (else each dot product by `query::dot_interleaved`).
        let quads: Option<&[[u32; 2]]> = bytemuck::try_cast_slice(q.codes).ok();
        let nb = hd / g;
        let n = g / 4;
        let mut out = [[0f32; LANES]; G];
        // Group by group (each score still takes its groups in order), the query's slices and
        // scales taken once per group for all the rows.
        for b in 0..nb {
            let qh: Option<[&[[u32; 2]]; G]> =
                quads.map(|quads| core::array::from_fn(|h| &quads[(h * hd + b * g) / 4..][..n]));
            let qs: [f32; G] = core::array::from_fn(|h| q.scales[h * nb + b]);
            for (j, row) in rows.iter().enumerate().take(LANES) {
                let ks = Self::one(u16_at(row.scales, b));
                let kb = &row.vals[b * g..][..g];
                let isum: [i32; G] = match qh {
                    // SmolLM2's (and many models') group: one loop for the three heads.
                    Some(qh) if G == 3 => {
                        let s = dsp::dot3([0, 1, 2].map(|h| qh[h].as_flattened()), kb);
                        core::array::from_fn(|h| s[h])
                    }
                    Some(qh) => {
                        let mut isum = [0i32; G];
                        let kw: &[[u8; 4]] = bytemuck::cast_slice(kb);
                        for (w, k) in kw.iter().enumerate() {
                            let (even, odd) = dsp::halves(u32::from_le_bytes(*k));
                            for (s, qh) in isum.iter_mut().zip(&qh) {
                                let [q0, q1] = qh[w];
                                *s = dsp::smlad(odd, q1, dsp::smlad(even, q0, *s));
                            }
                        }
                        isum
                    }
                    None => core::array::from_fn(|h| {
                        query::dot_interleaved(&q.codes[h * hd + b * g..][..g], kb)
                    }),
                };
                for ((out, qs), isum) in out.iter_mut().zip(qs).zip(isum) {
                    out[j] += (qs * ks) * isum as f32;
                }
            }
        }
        out
    }

    /// [`kernels::int8_scores`]'s bits with Helium: each group's integer dot product of a query
    /// head by `VMLADAVA` over eight codes at a time (groups not a multiple of 8, or over 256
    /// values, take the portable kernel).
    #[cfg(edgekv_arm_mve)]
    #[inline(always)]
    fn int8_scores<const G: usize>(
        q: QueryCodes<'_>,
        rows: &[Row<'_>],
        g: usize,
    ) -> [[f32; LANES]; G] {
        let hd = q.codes.len() / G;
        if g % 8 != 0 || g == 0 || g > 256 || hd % g != 0 {
            return kernels::int8_scores::<Self, G>(q, rows, g);
        }
        let nb = hd / g;
        let mut out = [[0f32; LANES]; G];
        // Group by group (each score still takes its groups in order), the query's slices and
        // scales taken once per group for all the rows.
        for b in 0..nb {
            let qh: [&[i16]; G] = core::array::from_fn(|h| &q.codes[h * hd + b * g..][..g]);
            let qs: [f32; G] = core::array::from_fn(|h| q.scales[h * nb + b]);
            for (j, row) in rows.iter().enumerate().take(LANES) {
                let ks = Self::one(u16_at(row.scales, b));
                let kc = &row.vals[b * g..][..g];
                // Three heads share each key step (SmolLM2's and many models' group).
                let isum: [i32; G] = if G == 3 {
                    let s = mve::dot3([qh[0], qh[1], qh[2]], kc);
                    core::array::from_fn(|h| s[h])
                } else {
                    core::array::from_fn(|h| mve::dot(qh[h], kc))
                };
                for ((out, qs), isum) in out.iter_mut().zip(qs).zip(isum) {
                    out[j] += (qs * ks) * isum as f32;
                }
            }
        }
        out
    }

    /// [`kernels::int8_add_scaled_rows`]'s bits, four lanes at a time: each element still gets
    /// its rows' terms in order, each `(p · s) · x` as there.
    #[cfg(edgekv_arm_dsp)]
    #[inline(always)]
    fn int8_add_rows<const G: usize>(acc: &mut [f32], p: &[[f32; G]], rows: &[Row<'_>], g: usize) {
        const MAX: usize = 8;
        if g % V_LANES != 0 {
            return kernels::int8_add_scaled_rows::<Self, G>(acc, p, rows, g);
        }
        let d = acc.len() / G;
        let m = p.len().min(rows.len()).min(MAX);
        let (p, rows) = (&p[..m], &rows[..m]);
        let (mut off, mut k) = (0, 0);
        while off + g <= d {
            let mut ps = [[0f32; G]; MAX];
            kernels::scale_weights::<Self, G>(&mut ps, p, rows, k);
            let ps = &ps[..m];
            // Each row's group as blocks of lanes, sliced once per group.
            let mut vs: [&[[u8; V_LANES]]; MAX] = [&[]; MAX];
            for (vs, row) in vs.iter_mut().zip(rows) {
                *vs = bytemuck::cast_slice(&row.vals[off..off + g]);
            }
            let vs = &vs[..m];
            for (i, at) in (off..off + g).step_by(V_LANES).enumerate() {
                let mut a = [[0f32; V_LANES]; G];
                for (h, a) in a.iter_mut().enumerate() {
                    *a = acc[h * d + at..][..V_LANES].try_into().expect("a block");
                }
                for (ps, vs) in ps.iter().zip(vs) {
                    let x = vs[i].map(|c| c as i8 as f32);
                    for (a, p) in a.iter_mut().zip(ps) {
                        for l in 0..V_LANES {
                            a[l] += p * x[l];
                        }
                    }
                }
                for (h, a) in a.iter().enumerate() {
                    acc[h * d + at..][..V_LANES].copy_from_slice(a);
                }
            }
            off += g;
            k += 1;
        }
    }

    /// On DSP cores with an FPU, runs of one to four heads: `page_runs::scores` (its `asm!` loop
    /// nest).
    #[cfg(edgekv_arm_dsp)]
    #[inline(always)]
    fn int8_page_scores<const G: usize>(
        q: QueryCodes<'_>,
        rows: &PageRows<'_>,
        g: usize,
        scores: &mut [f32],
        p: usize,
    ) -> bool {
        #[cfg(all(edgekv_arm_dsp, edgekv_arm_f16cvt))]
        return page_runs::scores::<G>(q, rows, g, scores, p);
        #[cfg(not(all(edgekv_arm_dsp, edgekv_arm_f16cvt)))]
        return false;
    }

    /// On DSP cores with an FPU, runs of one to four heads: `page_runs::values`.
    #[cfg(all(edgekv_arm_dsp, edgekv_arm_f16cvt))]
    #[inline(always)]
    fn int8_page_values<const G: usize>(
        acc: &mut [f32],
        w: &[f32],
        p: usize,
        rows: &PageRows<'_>,
        g: usize,
    ) -> bool {
        #[cfg(edgekv_arm_dsp)]
        return page_runs::values::<G>(acc, w, p, rows, g);
        #[cfg(not(edgekv_arm_dsp))]
        return false;
    }

    /// Helium, runs of one to four heads: `mve_runs::scores` (its `asm!` loop nests).
    #[cfg(edgekv_arm_mve)]
    #[inline(always)]
    fn int8_page_scores<const G: usize>(
        q: QueryCodes<'_>,
        rows: &PageRows<'_>,
        g: usize,
        scores: &mut [f32],
        p: usize,
    ) -> bool {
        mve_runs::scores::<G>(q, rows, g, scores, p)
    }

    /// Helium on hard-float targets, runs of one to four heads: `mve_runs::values`.
    #[cfg(all(edgekv_arm_mve, edgekv_arm_f16cvt))]
    #[inline(always)]
    fn int8_page_values<const G: usize>(
        acc: &mut [f32],
        w: &[f32],
        p: usize,
        rows: &PageRows<'_>,
        g: usize,
    ) -> bool {
        mve_runs::values::<G>(acc, w, p, rows, g)
    }
}

#[cfg(not(feature = "small-code"))]
impl Isa for Arm {
    const STRATEGY: Strategy = Strategy {
        // The DSP and Helium score loops are `asm!` for a group of three heads.
        runs_by_row: true,
        // Hard-float builds take a page's weights in `asm!`: four lanes per vector with Helium
        // (`mve_weights`), one at a time on a scalar FPU (`fpu_weights`). Soft-float builds take
        // them one at a time (`exp::scalar`).
        scalar_exp: cfg!(not(any(edgekv_arm_mve, edgekv_arm_f16cvt))),
        // Whole pages of int8 rows to `page_runs.rs` (DSP) or `mve_runs.rs` (Helium).
        int8_pages: cfg!(any(edgekv_arm_dsp, edgekv_arm_mve)),
        // Every run length takes whole pages: on DSP cores every run to `page_runs` (the `asm!`
        // loop nests of `dsp_runs` and `dsp_values`: SmolLM2-135M, SmolLM2-360M, Gemma 3 270M,
        // Qwen3-0.6B and Llama 3.2 1B take 5.25, 8.68, 7.19, 19.60 and 17.04 M instructions a
        // decode step at 2,048 keys); with Helium every run to `mve_runs`' `asm!` loop nests.
        ..Strategy::GENERAL
    };
}
