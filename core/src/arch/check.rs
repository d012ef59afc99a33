//! The kernel check (feature `kernel-check`): every kernel of this build's ISA against the
//! portable one, bit for bit, on pseudo-random inputs of every supported shape — runs of 1 to 4
//! query heads, head_dim 32 to 256 in steps of 32, key groups of 32 and 64 and of a whole head,
//! 1 to 16 rows — naming each kernel and shape that differs. The boards' `kernel-check` firmware
//! runs it (CI compares on both Cortex-M boards); a whole-digest mismatch says only that some
//! kernel is wrong, this says which.
//!
//! Inputs: key codes are random bytes; key scales random normal f16 (every eighth a subnormal or
//! zero); query codes random `i16` within ±32767 with random f32 scales; weights in [0, 1);
//! softmax scores random with NaN-free maxima. Page kernels that decline a shape (`false`) are
//! counted, not compared.

use super::kernels::{self, Row};
use super::query::QueryCodes;
use super::rows::PageRows;
use super::{Isa, Portable, Softmax};
use crate::numeric::LANES;
use crate::numeric::Widen;

/// A kernel and shape whose output differs from the portable kernel's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// The kernel (`int8_scores`, `int8_add_rows`, `int8_page_scores`, `int8_page_values`,
    /// `max_of`, `exp_rows`, `sum`, `reduce8`, `widen_one`, `widen_block`).
    pub kernel: &'static str,
    /// Query heads of the run (0 where the kernel has none).
    pub run: u8,
    /// Values of a head (0 where none).
    pub head_dim: u16,
    /// Values per key group (0 where none).
    pub group: u16,
    /// Rows (or values) the call took.
    pub rows: u16,
}

/// What a check compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Kernel calls compared with the portable kernel.
    pub compared: u32,
    /// Whole-page kernel calls this ISA declined (no page kernel for the shape).
    pub declined: u32,
    /// Comparisons that differed (each reported).
    pub mismatches: u32,
}

/// `u64` words of workspace [`run`] needs.
pub const WORK_WORDS: usize = 4096;

/// Largest head_dim, run and page the check takes.
const MAX_HD: usize = 256;
const MAX_RUN: usize = 4;
const PAGE: usize = 16;

/// The ISA [`run`] checks: the Cortex-M kernels (DSP, Helium, FPU); on AArch64 both NEON
/// builds (see `run`); elsewhere the portable kernels against themselves (x86-64's AVX2
/// kernels run only behind run-time detection and have their own host tests).
#[cfg(all(edgekv_arm_kernels, not(feature = "small-code")))]
type Native = super::Arm;
#[cfg(not(all(
    any(edgekv_arm_kernels, edgekv_aarch64_kernels),
    not(feature = "small-code")
)))]
#[cfg_attr(not(feature = "kernel-check"), allow(dead_code))]
type Native = Portable;

/// Runs every kernel of this build's ISA against the portable one (see the module docs),
/// calling `report` for each mismatch. `work` holds at least [`WORK_WORDS`] words (its
/// contents are overwritten); `None` if shorter.
#[cfg(not(edgekv_aarch64_kernels))]
#[cfg_attr(not(feature = "kernel-check"), allow(dead_code))]
pub fn run(work: &mut [u64], report: &mut dyn FnMut(Mismatch)) -> Option<Summary> {
    run_isa::<Native>(work, super::arrange_query, report)
}

/// Runs every kernel of this build's ISA against the portable one (see the module docs),
/// calling `report` for each mismatch: on AArch64 the NEON kernels without `SDOT`, then, where
/// the CPU has it, with (query codes split for it), the two summaries added. `work` holds at
/// least [`WORK_WORDS`] words (its contents are overwritten); `None` if shorter.
#[cfg(edgekv_aarch64_kernels)]
pub fn run(work: &mut [u64], report: &mut dyn FnMut(Mismatch)) -> Option<Summary> {
    fn as_is(_: &mut [i16], _: usize) {}
    fn split(codes: &mut [i16], g: usize) {
        super::native::arrange_for_dot(codes, g)
    }
    let mut sum = run_isa::<super::Neon<false>>(work, as_is, report)?;
    if super::aarch64_dotprod() {
        let dot = run_isa::<super::Neon<true>>(work, split, report)?;
        sum.compared += dot.compared;
        sum.declined += dot.declined;
        sum.mismatches += dot.mismatches;
    }
    Some(sum)
}

/// [`run`] for ISA `D`, whose int8 score kernels read query codes laid out by `arrange`.
pub(crate) fn run_isa<D: Isa>(
    work: &mut [u64],
    arrange: fn(&mut [i16], usize),
    report: &mut dyn FnMut(Mismatch),
) -> Option<Summary> {
    let work: &mut [u8] = bytemuck::cast_slice_mut(work.get_mut(..WORK_WORDS)?);
    // Two heads of 256 codes per token, 16 tokens; scales likewise (f16 per group of ≥ 32).
    let (vals, rest) = work.split_at_mut(2 * MAX_HD * PAGE);
    let (scales, rest) = rest.split_at_mut(2 * (MAX_HD / 32) * 2 * PAGE);
    let (codes, rest) = rest.split_at_mut(2 * MAX_RUN * MAX_HD);
    let (arranged, rest) = rest.split_at_mut(2 * MAX_RUN * MAX_HD);
    let (qscales, rest) = rest.split_at_mut(4 * MAX_RUN * (MAX_HD / 32));
    let (acc, rest) = rest.split_at_mut(4 * MAX_RUN * MAX_HD);
    let (acc_ref, rest) = rest.split_at_mut(4 * MAX_RUN * MAX_HD);
    let (weights, _) = rest.split_at_mut(4 * MAX_RUN * PAGE);
    let mut c = Check {
        rng: 0x9E37_79B9_7F4A_7C15,
        sum: Summary::default(),
        report,
    };
    c.fill_bytes(vals);
    for (i, s) in scales.chunks_exact_mut(2).enumerate() {
        s.copy_from_slice(&c.f16_scale(i).to_le_bytes());
    }
    let codes: &mut [i16] = bytemuck::cast_slice_mut(codes);
    let arranged: &mut [i16] = bytemuck::cast_slice_mut(arranged);
    let qscales: &mut [f32] = bytemuck::cast_slice_mut(qscales);
    let (acc, acc_ref): (&mut [f32], &mut [f32]) = (
        bytemuck::cast_slice_mut(acc),
        bytemuck::cast_slice_mut(acc_ref),
    );
    let weights: &mut [f32] = bytemuck::cast_slice_mut(weights);
    for x in codes.iter_mut() {
        *x = ((c.next() % 65_535) as i32 - 32_767) as i16;
    }
    for s in qscales.iter_mut() {
        *s = c.unit() * 1e-3 + 1e-6;
    }
    for w in weights.iter_mut() {
        *w = c.unit();
    }
    for hd in (32..=MAX_HD).step_by(32) {
        // Groups of 32 and 64 where they divide the head, and one group of the whole head.
        let whole = if hd > 64 { hd } else { 0 };
        for g in [32, 64, whole] {
            if g == 0 || hd % g != 0 {
                continue;
            }
            let page = Page {
                vals,
                scales,
                hd,
                g,
            };
            c.int8::<D, 1>(
                &page, codes, arranged, qscales, acc, acc_ref, weights, arrange,
            );
            c.int8::<D, 2>(
                &page, codes, arranged, qscales, acc, acc_ref, weights, arrange,
            );
            c.int8::<D, 3>(
                &page, codes, arranged, qscales, acc, acc_ref, weights, arrange,
            );
            c.int8::<D, 4>(
                &page, codes, arranged, qscales, acc, acc_ref, weights, arrange,
            );
        }
    }
    c.softmax::<D>(acc, acc_ref, weights);
    c.widen::<D>();
    Some(c.sum)
}

/// A page of two KV heads' int8 rows of `hd` codes in groups of `g` (the check reads head 1, a
/// head's width past each token's start).
struct Page<'a> {
    vals: &'a [u8],
    scales: &'a [u8],
    hd: usize,
    g: usize,
}

impl<'a> Page<'a> {
    /// Bytes from one token's values (scales) to the next's.
    fn strides(&self) -> (usize, usize) {
        (2 * self.hd, 2 * 2 * (self.hd / self.g))
    }

    /// Head 1 of token `r`.
    fn row(&self, r: usize) -> Row<'a> {
        let (s, ss) = self.strides();
        Row {
            vals: &self.vals[r * s + self.hd..][..self.hd],
            scales: &self.scales[r * ss + ss / 2..],
        }
    }

    /// Head 1 of tokens `0..n`.
    fn rows(&self, n: usize) -> Option<PageRows<'a>> {
        let (s, ss) = self.strides();
        PageRows::new(
            &self.vals[self.hd..],
            &self.scales[ss / 2..],
            s,
            ss,
            n,
            self.hd,
            ss / 2,
        )
    }
}

struct Check<'r> {
    rng: u64,
    sum: Summary,
    report: &'r mut dyn FnMut(Mismatch),
}

/// Whether two float slices hold the same bits.
fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

impl Check<'_> {
    fn next(&mut self) -> u32 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 32) as u32
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 8) as f32 / (1u32 << 24) as f32
    }

    fn fill_bytes(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next() as u8;
        }
    }

    /// A key scale: a normal f16 in [2⁻¹⁰, 2) mostly; every eighth a subnormal or zero.
    fn f16_scale(&mut self, i: usize) -> u16 {
        let r = self.next();
        match i % 8 {
            7 if r & 1 == 0 => (r >> 1) as u16 & 0x03FF,
            7 => 0,
            _ => ((5 + (r % 11)) << 10) as u16 | (r >> 16) as u16 & 0x03FF,
        }
    }

    /// Counts one comparison, reporting it when `ok` is false.
    fn compared(&mut self, ok: bool, m: Mismatch) {
        self.sum.compared += 1;
        if !ok {
            self.sum.mismatches += 1;
            (self.report)(m);
        }
    }

    /// The int8 kernels for runs of `G` heads over `page`.
    #[allow(clippy::too_many_arguments)]
    fn int8<D: Isa, const G: usize>(
        &mut self,
        page: &Page<'_>,
        codes: &[i16],
        arranged: &mut [i16],
        qscales: &[f32],
        acc: &mut [f32],
        acc_ref: &mut [f32],
        weights: &[f32],
        arrange: fn(&mut [i16], usize),
    ) {
        let (hd, g) = (page.hd, page.g);
        let nb = hd / g;
        let plain = QueryCodes {
            codes: &codes[..G * hd],
            scales: &qscales[..G * nb],
        };
        arranged[..G * hd].copy_from_slice(plain.codes);
        arrange(&mut arranged[..G * hd], g);
        let q = QueryCodes {
            codes: &arranged[..G * hd],
            scales: plain.scales,
        };
        let shape = |kernel, rows: usize| Mismatch {
            kernel,
            run: G as u8,
            head_dim: hd as u16,
            group: g as u16,
            rows: rows as u16,
        };
        // Eight rows at a time (1, 5 and 8 of them).
        for n in [1, 5, LANES] {
            let rows: [Row<'_>; LANES] = core::array::from_fn(|r| page.row(r));
            let got = D::int8_scores::<G>(q, &rows[..n], g);
            let want = kernels::int8_scores::<Portable, G>(plain, &rows[..n], g);
            let ok = (0..G).all(|h| same(&got[h][..n], &want[h][..n]));
            self.compared(ok, shape("int8_scores", n));
            let p: [[f32; G]; LANES] =
                core::array::from_fn(|r| core::array::from_fn(|h| weights[h * PAGE + r]));
            let (a, b) = (&mut acc[..G * hd], &mut acc_ref[..G * hd]);
            for (i, (a, b)) in a.iter_mut().zip(b.iter_mut()).enumerate() {
                (*a, *b) = (i as f32 * 0.25 - 3.0, i as f32 * 0.25 - 3.0);
            }
            D::int8_add_rows::<G>(a, &p[..n], &rows[..n], g);
            kernels::int8_add_scaled_rows::<Portable, G>(b, &p[..n], &rows[..n], g);
            self.compared(same(a, b), shape("int8_add_rows", n));
        }
        // Whole pages (1, 7 and 16 rows).
        for n in [1, 7, PAGE] {
            let Some(pr) = page.rows(n) else { continue };
            let mut scores = [f32::NAN; MAX_RUN * PAGE];
            if D::int8_page_scores::<G>(q, &pr, g, &mut scores[..G * PAGE], PAGE) {
                let mut ok = true;
                for r0 in (0..n).step_by(LANES) {
                    let m = (n - r0).min(LANES);
                    let rows: [Row<'_>; LANES] =
                        core::array::from_fn(|r| page.row((r0 + r).min(n - 1)));
                    let want = kernels::int8_scores::<Portable, G>(plain, &rows[..m], g);
                    for (h, want) in want.iter().enumerate() {
                        ok &= same(&scores[h * PAGE + r0..][..m], &want[..m]);
                    }
                }
                self.compared(ok, shape("int8_page_scores", n));
            } else {
                self.sum.declined += 1;
            }
            let (a, b) = (&mut acc[..G * hd], &mut acc_ref[..G * hd]);
            for (i, (a, b)) in a.iter_mut().zip(b.iter_mut()).enumerate() {
                (*a, *b) = (i as f32 * 0.5 - 7.0, i as f32 * 0.5 - 7.0);
            }
            if D::int8_page_values::<G>(a, &weights[..G * PAGE], PAGE, &pr, g) {
                for r0 in (0..n).step_by(LANES) {
                    let m = (n - r0).min(LANES);
                    let rows: [Row<'_>; LANES] =
                        core::array::from_fn(|r| page.row((r0 + r).min(n - 1)));
                    let p: [[f32; G]; LANES] = core::array::from_fn(|r| {
                        core::array::from_fn(|h| weights[h * PAGE + (r0 + r).min(n - 1)])
                    });
                    kernels::int8_add_scaled_rows::<Portable, G>(b, &p[..m], &rows[..m], g);
                }
                self.compared(same(a, b), shape("int8_page_values", n));
            } else {
                self.sum.declined += 1;
            }
        }
    }

    /// The softmax steps and lane sums.
    fn softmax<D: Isa>(&mut self, a: &mut [f32], b: &mut [f32], w: &[f32]) {
        let shape = |kernel, rows: usize| Mismatch {
            kernel,
            run: 0,
            head_dim: 0,
            group: 0,
            rows: rows as u16,
        };
        for n in [1, 3, 4, 15, 16, 64] {
            for x in a[..n].iter_mut() {
                *x = (self.unit() - 0.5) * 40.0;
            }
            let (got, want) = (D::max_of(&a[..n]), Portable::max_of(&a[..n]));
            self.compared(got.to_bits() == want.to_bits(), shape("max_of", n));
            let (got, want) = (D::sum(0.5, &w[..n]), Portable::sum(0.5, &w[..n]));
            self.compared(got.to_bits() == want.to_bits(), shape("sum", n));
        }
        // Rows of 16 scores under their maxima (4 heads), as the page loop hands them.
        for heads in [1, 3, 4] {
            let n = heads * PAGE;
            let mut shifts = [0f32; 4];
            for (h, s) in shifts.iter_mut().enumerate().take(heads) {
                let row = &mut a[h * PAGE..][..PAGE];
                for x in row.iter_mut() {
                    *x = (self.unit() - 0.9) * 30.0;
                }
                *s = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            }
            b[..n].copy_from_slice(&a[..n]);
            D::exp_rows(&mut a[..n], PAGE, &shifts[..heads]);
            Portable::exp_rows(&mut b[..n], PAGE, &shifts[..heads]);
            self.compared(same(&a[..n], &b[..n]), shape("exp_rows", n));
        }
        let lanes: [[f32; LANES]; LANES] =
            core::array::from_fn(|_| core::array::from_fn(|_| (self.unit() - 0.5) * 1e3));
        let ok = same(&D::reduce8(&lanes), &Portable::reduce8(&lanes));
        self.compared(ok, shape("reduce8", LANES));
    }

    /// f16 widening, every one of the 65,536 values, one at a time and eight at a time.
    fn widen<D: Isa>(&mut self) {
        let mut ok = true;
        for h in 0..=u16::MAX {
            ok &= D::one(h).to_bits() == Portable::one(h).to_bits();
        }
        self.compared(ok, widen_shape("widen_one"));
        let mut ok = true;
        for h0 in (0..=u16::MAX).step_by(LANES) {
            let mut b = [0u8; 2 * LANES];
            for (i, c) in b.chunks_exact_mut(2).enumerate() {
                c.copy_from_slice(&(h0 + i as u16).to_le_bytes());
            }
            ok &= same(&D::block(&b), &Portable::block(&b));
        }
        self.compared(ok, widen_shape("widen_block"));
    }
}

fn widen_shape(kernel: &'static str) -> Mismatch {
    Mismatch {
        kernel,
        run: 0,
        head_dim: 0,
        group: 0,
        rows: 65_535,
    }
}

#[cfg(test)]
mod tests;
