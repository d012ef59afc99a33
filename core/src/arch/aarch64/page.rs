//! Whole pages of Q8_0 V rows (and int8 K rows) for a run of up to four query heads of one KV
//! head. Scores: each head's four rows in lanes ([`scores4`]; for Q8_0 groups, the page's whole
//! quads in one `asm!` block, [`dot_quads`] with `SDOT`, [`smlal_quads`] without). Then per
//! four rows the heads' weights (`exp::exp4`), and per row, heads in lanes, the sums and the
//! weights times the row's scale (one instruction for every head); the V pass keeps sixteen
//! output lanes of every head in registers across the page's rows. `attention::dispatch` runs
//! the step between (each head's rescale to its new maximum).
//!
//! Each score, weight, sum and output element takes the portable page loop's steps in its
//! order (`attention::fast`: the scores of `kernels::int8_scores`, `exp::exp_shifted_rows`' lanes,
//! the sums in row order, `kernels::int8_add_scaled_rows`), so the bits are its; the page maxima
//! may differ only in a zero's sign, which changes no result (see `numeric::exp::max_of`).

use core::arch::aarch64::{
    float32x4_t, uint32x4_t, vaddq_f32, vdupq_n_f32, vdupq_n_u32, vld1_u16, vld1q_f32, vmaxnmq_f32,
    vmaxnmvq_f32, vmaxvq_u32, vmulq_laneq_f32, vorrq_u32, vreinterpretq_f32_f64,
    vreinterpretq_f64_f32, vst1q_f32, vsubq_f32, vtrn1q_f32, vtrn1q_f64, vtrn2q_f32, vtrn2q_f64,
};
use core::arch::asm;

use super::Neon;
use super::dot_quads::{QuadRows, dot_quads};
use super::exp::{exp4, exp4_unchecked};
use super::int8::{page_fits, scores4};
use super::isa::{scores_take, widen4};
use super::smlal_quads::smlal_quads;
use super::values::{load_acc16, store_acc16, widen16};
use crate::arch::query::QueryCodes;
use crate::arch::rows::PageRows;

/// The most rows of a page this loop takes (larger pages take `attention::fast`'s).
const MAX_ROWS: usize = 64;

/// Q8_0's group: 32 codes per scale.
const Q8_GROUP: usize = 32;

/// One run's page of scores, then weights (written before they are read: no initialization).
pub(crate) struct RunRows {
    /// The scores of rows `4j..4j + 4` for head `h` in `quads[j][h]` (rows past the page's
    /// last repeat it).
    quads: [[float32x4_t; 4]; MAX_ROWS / 4],
    /// Row `r`'s weights for the run's heads in `rows[r]`'s lanes (lanes past the run: unused).
    rows: [float32x4_t; MAX_ROWS],
    /// Row `r`'s weights times its scale of the current group.
    scaled: [float32x4_t; MAX_ROWS],
}

impl<const DOT: bool> Neon<DOT> {
    /// Room for a run's page of [`q8_run_scores`](Self::q8_run_scores) and
    /// [`q8_run_values`](Self::q8_run_values).
    #[inline(always)]
    pub(crate) fn q8_run_rows() -> RunRows {
        // SAFETY: register-only NEON operations.
        let z = unsafe { vdupq_n_f32(0.0) };
        // Zeroed once per page (the runs write each part before they read it).
        RunRows {
            quads: [[z; 4]; MAX_ROWS / 4],
            rows: [z; MAX_ROWS],
            scaled: [z; MAX_ROWS],
        }
    }
}

/// `[x0, x1, x2, x3]` (four vectors of four) transposed: lane `j` of vector `i` to lane `i` of
/// vector `j`.
#[inline(always)]
fn transpose4(x: [float32x4_t; 4]) -> [float32x4_t; 4] {
    // SAFETY: register-only NEON operations.
    unsafe {
        let (t0, t1) = (vtrn1q_f32(x[0], x[1]), vtrn2q_f32(x[0], x[1]));
        let (t2, t3) = (vtrn1q_f32(x[2], x[3]), vtrn2q_f32(x[2], x[3]));
        let d = vreinterpretq_f64_f32;
        let f = vreinterpretq_f32_f64;
        [
            f(vtrn1q_f64(d(t0), d(t2))),
            f(vtrn1q_f64(d(t1), d(t3))),
            f(vtrn2q_f64(d(t0), d(t2))),
            f(vtrn2q_f64(d(t1), d(t3))),
        ]
    }
}

/// `x · w[i]` (`FMUL` by element: one product per lane).
#[inline(always)]
fn mul_lane(x: float32x4_t, w: float32x4_t, i: usize) -> float32x4_t {
    // SAFETY: register-only NEON operations.
    unsafe {
        match i {
            0 => vmulq_laneq_f32::<0>(x, w),
            1 => vmulq_laneq_f32::<1>(x, w),
            2 => vmulq_laneq_f32::<2>(x, w),
            _ => vmulq_laneq_f32::<3>(x, w),
        }
    }
}

/// `a[j] + x[j] · w[H]` for the four vectors (`FMUL` by element, then `FADD`: the portable
/// kernel's two roundings), in one `asm!` block: as intrinsics, LLVM took every product of a
/// row first and spilled the sixteen accumulators of four heads.
#[inline(always)]
fn add_lane<const H: u32>(a: &mut [float32x4_t; 4], x: &[float32x4_t; 4], w: float32x4_t) {
    // SAFETY: register-only NEON operations; the temporaries are `out` registers (none shares
    // an input's).
    unsafe {
        asm!(
            "fmul {t0:v}.4s, {x0:v}.4s, {w:v}.s[{h}]",
            "fmul {t1:v}.4s, {x1:v}.4s, {w:v}.s[{h}]",
            "fadd {a0:v}.4s, {a0:v}.4s, {t0:v}.4s",
            "fadd {a1:v}.4s, {a1:v}.4s, {t1:v}.4s",
            "fmul {t0:v}.4s, {x2:v}.4s, {w:v}.s[{h}]",
            "fmul {t1:v}.4s, {x3:v}.4s, {w:v}.s[{h}]",
            "fadd {a2:v}.4s, {a2:v}.4s, {t0:v}.4s",
            "fadd {a3:v}.4s, {a3:v}.4s, {t1:v}.4s",
            h = const H,
            a0 = inout(vreg) a[0],
            a1 = inout(vreg) a[1],
            a2 = inout(vreg) a[2],
            a3 = inout(vreg) a[3],
            x0 = in(vreg) x[0],
            x1 = in(vreg) x[1],
            x2 = in(vreg) x[2],
            x3 = in(vreg) x[3],
            w = in(vreg) w,
            t0 = out(vreg) _,
            t1 = out(vreg) _,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
}

/// The four f16 scales of group `k` of rows `r0..r0 + 4` (rows from `n` on repeat row `n − 1`),
/// widened (`FCVTL`: exact).
///
/// # Safety
///
/// Rows `< n` lie within the checked page, with group `k`'s scale bytes; `r0 < n`.
#[inline(always)]
unsafe fn scales4(rows: &PageRows<'_>, k: usize, r0: usize, n: usize) -> float32x4_t {
    let s = rows.scales.as_ptr();
    let mut sc = [0u16; 4];
    for (i, sc) in sc.iter_mut().enumerate() {
        let r = (r0 + i).min(n - 1);
        // SAFETY: the caller's obligation: 2 of row `r`'s scale bytes.
        let b = unsafe { s.add(r * rows.sstride + 2 * k).cast::<[u8; 2]>().read() };
        *sc = u16::from_le_bytes(b);
    }
    // SAFETY: reads the 8 bytes of `sc`.
    widen4(unsafe { vld1_u16(sc.as_ptr()) })
}

/// The run's weights of rows `0..n` into `w.rows` (heads in lanes) from its scores less each
/// head's `shift`, and `s` plus them in row order; `CHECKED`: by [`exp4`]; otherwise by
/// [`exp4_unchecked`], with the mask of the lanes it left wrong (then redo with `CHECKED`).
#[inline(always)]
fn weights<const G: usize, const CHECKED: bool>(
    w: &mut RunRows,
    shift: &[float32x4_t; 4],
    n: usize,
    mut s: float32x4_t,
) -> (float32x4_t, uint32x4_t) {
    // SAFETY: register-only NEON operations.
    unsafe {
        let z = vdupq_n_f32(0.0);
        let mut edge = vdupq_n_u32(0);
        for (j, r0) in (0..n).step_by(4).enumerate() {
            // Each head's four weights, then the rows' (heads in lanes).
            let mut e = [z; 4];
            for h in 0..G {
                let x = vsubq_f32(w.quads[j][h], shift[h]);
                if CHECKED {
                    e[h] = exp4(x);
                } else {
                    let (eh, at) = exp4_unchecked(x);
                    e[h] = eh;
                    edge = vorrq_u32(edge, at);
                }
            }
            let e = transpose4(e);
            if r0 + 4 <= n {
                for (i, &e) in e.iter().enumerate() {
                    w.rows[r0 + i] = e;
                    s = vaddq_f32(s, e);
                }
            } else {
                for (i, &e) in e.iter().enumerate().take(n - r0) {
                    w.rows[r0 + i] = e;
                    s = vaddq_f32(s, e);
                }
            }
        }
        (s, edge)
    }
}

/// [`weights`] by [`exp4`], out of line: for the runs whose scores meet lanes at or past 87.3
/// in magnitude (or NaN), which attention seldom does.
#[cold]
#[inline(never)]
fn weights_at_edges<const G: usize>(
    w: &mut RunRows,
    shift: &[float32x4_t; 4],
    n: usize,
    s: float32x4_t,
) -> float32x4_t {
    weights::<G, true>(w, shift, n, s).0
}

impl<const DOT: bool> Neon<DOT> {
    /// Whether [`q8_run_scores`](Self::q8_run_scores) and
    /// [`q8_run_values`](Self::q8_run_values) take runs of `G` heads of `hd` over pages of these
    /// K and V rows (int8 K groups of `g`, Q8_0 V): whole chunks of 16 codes, at most
    /// [`MAX_ROWS`] rows. Every KV head's rows of one page share this geometry.
    #[inline(always)]
    pub(crate) fn q8_run_takes<const G: usize>(
        hd: usize,
        g: usize,
        k: &PageRows<'_>,
        v: &PageRows<'_>,
    ) -> bool {
        (1..=4).contains(&G)
            && scores_take(g)
            && k.n == v.n
            && k.n <= MAX_ROWS
            && page_fits(k, hd, g)
            && page_fits(v, hd, Q8_GROUP)
    }

    /// The scores of every row of `rows` for the `G` heads of `q` (their codes and scales) into
    /// `out`, and each head's page maximum (past `G`: zero). `None`, nothing written, unless
    /// [`q8_run_takes`](Self::q8_run_takes)' lengths fit.
    #[inline(always)]
    pub(crate) fn q8_run_scores<const G: usize>(
        q: QueryCodes<'_>,
        rows: &PageRows<'_>,
        g: usize,
        out: &mut RunRows,
    ) -> Option<[f32; 4]> {
        let hd = q.codes.len() / G.max(1);
        let n = rows.n;
        if !(1..=4).contains(&G)
            || !scores_take(g)
            || !page_fits(rows, hd, g)
            || n > MAX_ROWS
            || q.codes.len() != G * hd
            || q.scales.len() < G * (hd / g)
        {
            return None;
        }
        // SAFETY: register-only NEON operations.
        let mut max = [unsafe { vdupq_n_f32(f32::NEG_INFINITY) }; 4];
        let (k, s) = (rows.vals.as_ptr(), rows.scales.as_ptr());
        // Whole quads in one `asm!` block for Q8_0's groups.
        let full = n / 4 * 4;
        let mut first = 0;
        if g == Q8_GROUP && full > 0 {
            let quads = QuadRows {
                k: k.cast::<i8>(),
                stride: rows.stride,
                s,
                sstride: rows.sstride,
                quads: full / 4,
            };
            // SAFETY: rows `< full ≤ n` lie within the checked page (`hd` codes, `hd/16` scale
            // bytes each; `hd` a multiple of 32); the query holds `G·hd` codes and `G·hd/32`
            // scales, `out.quads` `MAX_ROWS/4 ≥ full/4` quads (checked above); `1 ≤ G ≤ 4`;
            // `DOT` only where the CPU has `SDOT` (the type's contract); the maxima are
            // register-only NEON operations.
            unsafe {
                let (qc, qs, at) = (q.codes.as_ptr(), q.scales.as_ptr(), out.quads.as_mut_ptr());
                if DOT {
                    dot_quads::<G>(qc, qs, hd, quads, at, &mut max);
                } else {
                    smlal_quads::<G>(qc, qs, hd, quads, at);
                    for quad in &out.quads[..full / 4] {
                        for h in 0..G {
                            // As `quad` below.
                            max[h] = vmaxnmq_f32(max[h], quad[h]);
                        }
                    }
                }
            }
            first = full;
        }
        // The scores of rows `r0..r0 + 4`, the last of them `r0 + last` (rows past it repeat it:
        // their lanes are not stored), into `out.quads[r0 / 4]`.
        let mut quad = |r0: usize, last: usize| {
            // SAFETY: rows `< n` lie within the checked page (`hd` codes, `2·hd/g` scale bytes
            // each; `r0 + last < n`); the query's lengths are checked above; `DOT` only where
            // the CPU has `SDOT` (the type's contract).
            let acc = unsafe {
                let kr =
                    core::array::from_fn(|i| k.add((r0 + i.min(last)) * rows.stride).cast::<i8>());
                let sr = core::array::from_fn(|i| s.add((r0 + i.min(last)) * rows.sstride));
                let mut acc = [vdupq_n_f32(0.0); 4];
                if g == Q8_GROUP {
                    acc[..G].copy_from_slice(&scores4::<DOT, G, 2>(q, hd, g, kr, sr));
                } else {
                    acc[..G].copy_from_slice(&scores4::<DOT, G, 0>(q, hd, g, kr, sr));
                }
                acc
            };
            for h in 0..G {
                out.quads[r0 / 4][h] = acc[h];
                // Not NaN: `FMAXNM` keeps the number (the scores' NaNs are quiet); a repeated
                // last row changes no maximum.
                // SAFETY: register-only NEON operations.
                max[h] = unsafe { vmaxnmq_f32(max[h], acc[h]) };
            }
        };
        // Whole quads left (`i.min(3)` folds away), then the tail's.
        for r0 in (first..full).step_by(4) {
            quad(r0, 3);
        }
        if full < n {
            quad(full, n - 1 - full);
        }
        let mut m = [0f32; 4];
        for (m, &x) in m.iter_mut().zip(&max).take(G) {
            // SAFETY: register-only NEON operations.
            *m = unsafe { vmaxnmvq_f32(x) };
        }
        Some(m)
    }

    /// A run's weights and V pass over a page of Q8_0 rows `rows` (the rows
    /// [`q8_run_scores`](Self::q8_run_scores) scored): each score minus its head's maximum
    /// `shifts[h]` into its weight, each head's sum `sum[h]` plus its weights in row order, then
    /// `out[h·d + i] += (w[h][r] · scale(r, i / 32)) · code(r, i)` row by row in order, `out`
    /// holding the `G` heads' accumulators (`w`: the run's scores; its weights after).
    /// `false`, nothing written, unless the lengths fit.
    #[inline(always)]
    pub(crate) fn q8_run_values<const G: usize>(
        w: &mut RunRows,
        shifts: [f32; 4],
        sum: &mut [f32],
        out: &mut [f32],
        rows: &PageRows<'_>,
    ) -> bool {
        let d = out.len() / G.max(1);
        let n = rows.n;
        if !(1..=4).contains(&G)
            || out.len() != G * d
            || sum.len() < G
            || n > MAX_ROWS
            || !page_fits(rows, d, Q8_GROUP)
        {
            return false;
        }
        let mut s4 = [0f32; 4];
        s4[..G].copy_from_slice(&sum[..G]);
        // SAFETY: register-only NEON operations; the load and store cover the 16 bytes of
        // `s4`.
        unsafe {
            let shift = shifts.map(|x| vdupq_n_f32(x));
            let s0 = vld1q_f32(s4.as_ptr());
            let (mut s, edge) = weights::<G, false>(w, &shift, n, s0);
            if vmaxvq_u32(edge) != 0 {
                s = weights_at_edges::<G>(w, &shift, n, s0);
            }
            vst1q_f32(s4.as_mut_ptr(), s);
        }
        sum[..G].copy_from_slice(&s4[..G]);
        let v = rows.vals.as_ptr();
        for k in 0..d / Q8_GROUP {
            let full = n / 4 * 4;
            for r0 in (0..full).step_by(4) {
                // SAFETY: rows `< n` lie within the checked page (group `k`'s scale bytes).
                let sc = unsafe { scales4(rows, k, r0, r0 + 4) };
                for i in 0..4 {
                    w.scaled[r0 + i] = mul_lane(w.rows[r0 + i], sc, i);
                }
            }
            if full < n {
                // SAFETY: as above.
                let sc = unsafe { scales4(rows, k, full, n) };
                for i in 0..n - full {
                    w.scaled[full + i] = mul_lane(w.rows[full + i], sc, i);
                }
            }
            for half in 0..2 {
                let at = k * Q8_GROUP + half * 16;
                // SAFETY: `at + 16 ≤ d`, `out` holds `G·d` (checked above); rows `< n` lie
                // within the checked page (`d` codes each).
                unsafe {
                    let mut a = load_acc16::<G>(out, d, at);
                    let mut c = v.add(at).cast::<i8>();
                    // Rows in order; up to three heads two per step (one loop test for two
                    // rows; four heads' accumulators leave no room for a second row's codes).
                    let mut row = |p: float32x4_t| {
                        let x = widen16(c);
                        for (h, a) in a.iter_mut().enumerate() {
                            match h {
                                0 => add_lane::<0>(a, &x, p),
                                1 => add_lane::<1>(a, &x, p),
                                2 => add_lane::<2>(a, &x, p),
                                _ => add_lane::<3>(a, &x, p),
                            }
                        }
                        c = c.add(rows.stride);
                    };
                    if G < 4 {
                        let pairs = w.scaled[..n].chunks_exact(2);
                        let last = pairs.remainder();
                        for p in pairs {
                            row(p[0]);
                            row(p[1]);
                        }
                        if let Some(&p) = last.first() {
                            row(p);
                        }
                    } else {
                        for &p in &w.scaled[..n] {
                            row(p);
                        }
                    }
                    store_acc16::<G>(out, d, at, &a);
                }
            }
        }
        true
    }
}
