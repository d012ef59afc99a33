//! The page kernel of attention's default builds: one page of keys for every query head of one
//! query row (scores, one online-softmax rescale per head, weighted V rows), with each K and V
//! row decoded once per run of query heads sharing it, eight-row K lane sums, eight-row Q8_0 V
//! kernels and eight-lane `exp`. `small-code` builds take `attention::small` instead (same
//! bits).

use super::page::{Heads, Keys, Layout, PageSlices, rescale};
use super::scores::{score_rows, score_rows_int8, score_rows_of};
use crate::arch::Isa;
use crate::arch::kernels::{Row, add_scaled};
use crate::arch::query::{self, QueryCodes};
use crate::arch::rows::PageRows;
use crate::format::ElementFormat;
use crate::numeric::exp::exp_shifted;
use crate::numeric::floor::exp_weight;
use crate::numeric::larger;

impl Layout {
    /// The query heads of KV head `kh`: `[h0, end)`.
    #[inline(always)]
    fn run_of(&self, kh: usize) -> (usize, usize) {
        (kh * self.group, (kh + 1) * self.group)
    }

    /// The longest run of query heads sharing each decoded row: [`MAX_RUN`], or one row's group
    /// where `D` asks for it (see `Strategy::runs_by_row`).
    #[inline(always)]
    fn max_run<D: Isa>(&self) -> usize {
        if D::STRATEGY.runs_by_row && self.row_group <= MAX_RUN {
            self.row_group
        } else {
            MAX_RUN
        }
    }
}

/// Query heads of one KV head that share each decoded K and V row (more heads, more code: one
/// kernel instance per run length).
const MAX_RUN: usize = 4;

/// One page of keys for every query head of one query row: the scores, one online-softmax
/// rescale per head, then the weighted V rows. Each K and V row is decoded once per run of query
/// heads. Each head's arithmetic, in order, is what it would be alone.
#[inline(always)]
pub(crate) fn attend_page<D: Isa, F: Fn(u32) -> bool>(
    l: &Layout,
    keys: &Keys<'_, F>,
    heads: Heads<'_>,
) {
    let Heads {
        q,
        qc,
        out,
        max,
        sum,
        scores,
    } = heads;
    let n = (keys.j1 - keys.j0) as usize;
    // Most pages are whole (no window, or inside it): `kept` is then not asked again, and page
    // maxima vectorize.
    let whole = (keys.j0..keys.j1).all(keys.kept);
    let rows = || (0..n).filter(move |&r| whole || (keys.kept)(keys.j0 + r as u32));
    // A whole page of int8 rows goes to the ISA's page kernels where it has them.
    let page_rows = D::STRATEGY.int8_pages && whole && n > 0;
    let page_k = page_rows && query::int8_group(l.k_fmt).is_some();
    page_scores::<D, _>(l, keys.kv, (q, qc), scores, rows, page_k.then_some(n));
    page_softmax::<D, _>(l, out, max, sum, scores, n, whole, rows);
    let mut st = Accum {
        out,
        weights: scores,
    };
    // Q8_0 rows up to eight at a time, other quantized rows two at a time (the last alone): each
    // output element still gets the rows' terms in row order, with fewer loads and stores of
    // the accumulators. f32/f16/bf16 rows stay single: paired, they measured slower, and their
    // decode is cheap anyway. (Eight rows only for Q8_0, in its own small kernel: eight-row
    // copies of the general kernel, unrolled, multiplied the build time of the page loop.)
    if let (ElementFormat::Int8 { group }, true) = (l.v_fmt, page_rows) {
        page_values_all::<D>(l, keys.kv, &mut st, n, group as usize);
        return;
    }
    let mut kept = rows();
    if let ElementFormat::Int8 { group: 32 } = l.v_fmt {
        let mut batch = [0usize; 8];
        let mut b = 0;
        loop {
            let r = kept.next();
            if let Some(r) = r {
                batch[b] = r;
                b += 1;
            }
            if b > 0 && (b == batch.len() || r.is_none()) {
                accumulate_q8::<D>(l, keys.kv, &mut st, &batch[..b]);
                b = 0;
            }
            if r.is_none() {
                return;
            }
        }
    }
    let pairs = matches!(
        l.v_fmt,
        ElementFormat::Int8 { .. } | ElementFormat::Fp8Tile { .. } | ElementFormat::Int4 { .. }
    );
    while let Some(r0) = kept.next() {
        match if pairs { kept.next() } else { None } {
            Some(r1) => accumulate_rows::<D, 2>(l, keys.kv, &mut st, [r0, r1]),
            None => accumulate_rows::<D, 1>(l, keys.kv, &mut st, [r0]),
        }
    }
}

/// The rows of a whole page (no window drops any) whose query heads run `G` at a time, where
/// `D` has page kernels for its formats: int8 K and V rows ([`Strategy::int8_pages`](crate::arch::Strategy::int8_pages)) or f16 K and V
/// rows ([`Strategy::f16_pages`](crate::arch::Strategy::f16_pages)). What [`attend_whole_page`] takes.
// Only the ISA modules with page kernels (x86-64, Arm with DSP or f16 conversion) call it.
#[cfg_attr(not(any(edgekv_x86_kernels, edgekv_arm_kernels)), allow(dead_code))]
#[inline(always)]
pub(crate) fn whole_page_rows<D: Isa, F: Fn(u32) -> bool, const G: usize>(
    l: &Layout,
    keys: &Keys<'_, F>,
) -> Option<usize> {
    let n = (keys.j1 - keys.j0) as usize;
    let int8 = D::STRATEGY.int8_pages
        && query::int8_group(l.k_fmt).is_some()
        && matches!(l.v_fmt, ElementFormat::Int8 { .. });
    let f16 =
        D::STRATEGY.f16_pages && l.k_fmt == ElementFormat::F16 && l.v_fmt == ElementFormat::F16;
    // Runs of `G` heads need not be the general loop's runs: each head's arithmetic is the same
    // in any run, so any `G` up to the ISA's longest run that divides the group will do.
    let runs = G <= l.max_run::<D>() && l.group % G == 0;
    ((int8 || f16) && runs && n > 0 && (keys.j0..keys.j1).all(keys.kept)).then_some(n)
}

/// [`attend_page`] for a page of `n` rows that [`whole_page_rows`] takes: the same steps in the
/// same order (the same bits), without the general loop's other formats, windows, run lengths
/// and row batches. The ISAs call it out of line: inlined with the general loop, whose set-up
/// (row offsets of every path, spilled) runs for every page, it cost a sixth of a Cortex-M
/// decode step.
// Only the Arm ISA modules with page kernels (DSP or f16 conversion; aarch64) call it; x86-64
// calls `attend_whole_page_with`.
#[cfg_attr(not(any(edgekv_arm_kernels, edgekv_aarch64_kernels)), allow(dead_code))]
#[inline(always)]
pub(crate) fn attend_whole_page<D: Isa, const G: usize>(
    l: &Layout,
    kv: &PageSlices<'_>,
    heads: Heads<'_>,
    n: usize,
) {
    attend_whole_page_with::<D, Inline, G>(l, kv, heads, n)
}

/// Where [`attend_whole_page_with`] takes a run of heads whose page kernel declined the page:
/// the general kernels, eight rows at a time. Each default is that code inline ([`Inline`]). An
/// ISA whose page kernels take nearly every page may put them out of line instead (x86-64):
/// inline, the loop set-up of these rarely taken paths (row offsets and bounds of every path,
/// hoisted and spilled) ran for every page.
pub(crate) trait Declined<D: Isa> {
    /// Scores of heads `h0..h0 + G` over the page's `n` int8 K rows of group `g`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn int8_scores<const G: usize>(
        l: &Layout,
        kv: &PageSlices<'_>,
        kh: usize,
        qc: QueryCodes<'_>,
        scores: &mut [f32],
        h0: usize,
        n: usize,
        g: usize,
    ) {
        score_rows_int8::<D, G>(l, kv, kh, qc, scores, h0, 0..n, g);
    }
    /// Scores of heads `h0..h0 + G` over the page's `n` K rows of another format (f16).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn other_scores<const G: usize>(
        l: &Layout,
        kv: &PageSlices<'_>,
        kh: usize,
        q: &[f32],
        scores: &mut [f32],
        h0: usize,
        n: usize,
    ) {
        score_rows_of::<D, G>(l, l.k_fmt, kv, kh, q, scores, h0, 0..n);
    }
    /// `acc += w · vrow` for `G` heads (`acc` and `w` theirs alone) and every int8 row of group
    /// `g` of `pr`, in order.
    #[inline(always)]
    fn int8_values<const G: usize>(
        l: &Layout,
        pr: &PageRows<'_>,
        acc: &mut [f32],
        w: &[f32],
        g: usize,
    ) {
        let (hd, p) = (l.head_dim, l.page_tokens);
        for r0 in (0..pr.n).step_by(8) {
            let m = (pr.n - r0).min(8);
            let vrows: [Row<'_>; 8] = core::array::from_fn(|j| pr.row((r0 + j).min(pr.n - 1), hd));
            let ws: [[f32; G]; 8] = core::array::from_fn(|j| {
                core::array::from_fn(|h| w[h * p + (r0 + j).min(pr.n - 1)])
            });
            D::int8_add_rows::<G>(acc, &ws[..m], &vrows[..m], g);
        }
    }
    /// `acc += w · vrow` for `G` heads (`acc` and `w` theirs alone) and every f16 row of `pr`,
    /// in order.
    #[inline(always)]
    fn f16_values<const G: usize>(l: &Layout, pr: &PageRows<'_>, acc: &mut [f32], w: &[f32]) {
        let mut st = Accum {
            out: acc,
            weights: w,
        };
        for r in 0..pr.n {
            accumulate::<D, G, 1>(l, [pr.row(r, 2 * l.head_dim)], &mut st, 0, [r]);
        }
    }
}

/// [`Declined`]'s general kernels inline.
pub(crate) struct Inline;

impl<D: Isa> Declined<D> for Inline {}

/// [`attend_whole_page`], with `C` for the runs whose page kernel declines the page.
#[cfg_attr(
    not(any(edgekv_x86_kernels, edgekv_arm_kernels, edgekv_aarch64_kernels)),
    allow(dead_code)
)]
#[inline(always)]
pub(crate) fn attend_whole_page_with<D: Isa, C: Declined<D>, const G: usize>(
    l: &Layout,
    kv: &PageSlices<'_>,
    heads: Heads<'_>,
    n: usize,
) {
    let Heads {
        q,
        qc,
        out,
        max,
        sum,
        scores,
    } = heads;
    let (hd, p) = (l.head_dim, l.page_tokens);
    let int8_k = query::int8_group(l.k_fmt);
    for kh in 0..l.kv_heads {
        let pr = l.page_rows(kv, false, kh, n);
        let (h0, end) = l.run_of(kh);
        for h0 in (h0..end).step_by(G) {
            let s = &mut scores[h0 * p..(h0 + G) * p];
            if let Some(g) = int8_k {
                let nb = hd / g;
                let qh = QueryCodes {
                    codes: &qc.codes[h0 * hd..(h0 + G) * hd],
                    scales: &qc.scales[h0 * nb..(h0 + G) * nb],
                };
                if !D::int8_page_scores::<G>(qh, &pr, g, s, p) {
                    C::int8_scores::<G>(l, kv, kh, qc, scores, h0, n, g);
                }
            } else if D::STRATEGY.f16_pages
                && !D::f16_page_scores::<G>(&q[h0 * hd..(h0 + G) * hd], &pr, s, p, l.scale)
            {
                // (A constant test first: ISAs without f16 pages build no f16 branch here.)
                C::other_scores::<G>(l, kv, kh, q, scores, h0, n);
            }
        }
    }
    page_softmax::<D, _>(l, out, max, sum, scores, n, true, || 0..n);
    let mut st = Accum {
        out,
        weights: scores,
    };
    for kh in 0..l.kv_heads {
        let pr = l.page_rows(kv, true, kh, n);
        let (h0, end) = l.run_of(kh);
        for h0 in (h0..end).step_by(G) {
            match l.v_fmt {
                ElementFormat::Int8 { group } => {
                    page_values::<D, C, G>(l, &pr, &mut st, h0, group as usize)
                }
                _ if D::STRATEGY.f16_pages => page_values_f16::<D, C, G>(l, &pr, &mut st, h0),
                _ => {}
            }
        }
    }
}

/// Scores, KV head by KV head (each score is its own dot product: any order gives the same
/// bits): `page` `Some(n)` for a whole page of `n` int8 K rows (to the ISA's page kernel first).
#[inline(always)]
fn page_scores<D: Isa, R: Iterator<Item = usize>>(
    l: &Layout,
    kv: &PageSlices<'_>,
    q: (&[f32], QueryCodes<'_>),
    scores: &mut [f32],
    rows: impl Fn() -> R,
    page: Option<usize>,
) {
    for kh in 0..l.kv_heads {
        let (mut h0, end) = l.run_of(kh);
        let pr = page.map(|n| l.page_rows(kv, false, kh, n));
        let pr = pr.as_ref();
        while h0 < end {
            let g = (end - h0).min(l.max_run::<D>());
            match g {
                2 => score_rows::<D, 2>(l, kv, kh, q, scores, h0, rows(), pr),
                3 => score_rows::<D, 3>(l, kv, kh, q, scores, h0, rows(), pr),
                4 => score_rows::<D, 4>(l, kv, kh, q, scores, h0, rows(), pr),
                _ => score_rows::<D, 1>(l, kv, kh, q, scores, h0, rows(), pr),
            }
            h0 += g;
        }
    }
}

/// The online softmax of one page's scores (`n` rows; `whole`, or the rows `rows` gives), head
/// by head: the page maximum, the rescale of the head's state, scores into weights in place,
/// then the sum of the weights in row order.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn page_softmax<D: Isa, R: Iterator<Item = usize>>(
    l: &Layout,
    out: &mut [f32],
    max: &mut [f32],
    sum: &mut [f32],
    scores: &mut [f32],
    n: usize,
    whole: bool,
    rows: impl Fn() -> R,
) {
    let (hd, p) = (l.head_dim, l.page_tokens);
    let all_at_once = whole && n == p && p % 8 == 0 && !D::STRATEGY.scalar_exp;
    for (h, oh) in out.chunks_exact_mut(hd).enumerate() {
        let page_max = if whole {
            D::max_of(&scores[h * p..h * p + n])
        } else {
            rows().fold(f32::NEG_INFINITY, |m, r| m.max(scores[h * p + r]))
        };
        let new_max = larger(max[h], page_max);
        rescale(oh, &mut max[h], &mut sum[h], new_max);
        if D::STRATEGY.scalar_exp {
            // Scalar cores: `libm`'s branches cost less than eight lanes of selects.
            for s in &mut scores[h * p..h * p + n] {
                *s = exp_weight(*s - new_max);
            }
        } else if !all_at_once {
            // Scores become weights exp(score − max), all of the page's rows at once (rows the
            // window drops too: they are never read).
            exp_shifted(&mut scores[h * p..h * p + n], new_max);
        }
    }
    if all_at_once {
        // A whole page: every head's weights in one loop.
        D::exp_rows(&mut scores[..max.len() * p], p, max);
    }
    // Each head's sum takes its weights in row order: heads side by side where the ISA can, else
    // head by head, in a register.
    if whole && D::sums(sum, scores, p, n) {
        return;
    }
    for (h, s) in sum.iter_mut().enumerate() {
        let weights = &scores[h * p..h * p + n];
        *s = if whole {
            D::sum(*s, weights)
        } else {
            rows().fold(*s, |s, r| s + weights[r])
        };
    }
}

/// The V pass of a whole page of `n` int8 rows of group `group`: every KV head, every run of its
/// query heads, to the ISA's page kernel first.
#[inline(always)]
fn page_values_all<D: Isa>(
    l: &Layout,
    kv: &PageSlices<'_>,
    st: &mut Accum<'_>,
    n: usize,
    group: usize,
) {
    for kh in 0..l.kv_heads {
        let (mut h0, end) = l.run_of(kh);
        let pr = l.page_rows(kv, true, kh, n);
        while h0 < end {
            let g = (end - h0).min(l.max_run::<D>());
            match g {
                2 => page_values::<D, Inline, 2>(l, &pr, st, h0, group),
                3 => page_values::<D, Inline, 3>(l, &pr, st, h0, group),
                4 => page_values::<D, Inline, 4>(l, &pr, st, h0, group),
                _ => page_values::<D, Inline, 1>(l, &pr, st, h0, group),
            }
            h0 += g;
        }
    }
}

/// The V pass for tokens `rs` (in order) of the page: every KV head, every run of its query
/// heads.
#[inline(always)]
fn accumulate_rows<D: Isa, const R: usize>(
    l: &Layout,
    kv: &PageSlices<'_>,
    st: &mut Accum<'_>,
    rs: [usize; R],
) {
    for kh in 0..l.kv_heads {
        let (mut h0, end) = l.run_of(kh);
        let vrows = rs.map(|r| l.row(kv, true, r, kh));
        while h0 < end {
            let n = (end - h0).min(l.max_run::<D>());
            match n {
                2 => accumulate::<D, 2, R>(l, vrows, st, h0, rs),
                3 => accumulate::<D, 3, R>(l, vrows, st, h0, rs),
                4 => accumulate::<D, 4, R>(l, vrows, st, h0, rs),
                _ => accumulate::<D, 1, R>(l, vrows, st, h0, rs),
            }
            h0 += n;
        }
    }
}

/// The V pass for up to eight Q8_0 tokens `rs` (in order) of the page: every KV head, every run
/// of its query heads.
#[inline(always)]
fn accumulate_q8<D: Isa>(l: &Layout, kv: &PageSlices<'_>, st: &mut Accum<'_>, rs: &[usize]) {
    let mut vrows = [Row {
        vals: &[],
        scales: &[],
    }; 8];
    for kh in 0..l.kv_heads {
        let (mut h0, end) = l.run_of(kh);
        for (v, &r) in vrows.iter_mut().zip(rs) {
            *v = l.row(kv, true, r, kh);
        }
        let vrows = &vrows[..rs.len()];
        while h0 < end {
            let n = (end - h0).min(l.max_run::<D>());
            match n {
                2 => accumulate_q8_heads::<D, 2>(l, vrows, st, h0, rs),
                3 => accumulate_q8_heads::<D, 3>(l, vrows, st, h0, rs),
                4 => accumulate_q8_heads::<D, 4>(l, vrows, st, h0, rs),
                _ => accumulate_q8_heads::<D, 1>(l, vrows, st, h0, rs),
            }
            h0 += n;
        }
    }
}

/// Heads `h0..h0 + G`: `out += w · vrow` for each Q8_0 token `rs[ρ]` in order, `w` its weight.
#[inline(always)]
fn accumulate_q8_heads<D: Isa, const G: usize>(
    l: &Layout,
    vrows: &[Row<'_>],
    st: &mut Accum<'_>,
    h0: usize,
    rs: &[usize],
) {
    let (hd, p) = (l.head_dim, l.page_tokens);
    let mut w = [[0f32; G]; 8];
    for (w, &r) in w.iter_mut().zip(rs) {
        for (i, w) in w.iter_mut().enumerate() {
            *w = st.weights[(h0 + i) * p + r];
        }
    }
    let acc = &mut st.out[h0 * hd..(h0 + G) * hd];
    D::int8_add_rows::<G>(acc, &w[..rs.len()], vrows, 32);
}

/// Heads `h0..h0 + G`: `out += w · vrow` for every int8 row of group `g` of a whole page `pr`,
/// in order: the ISA's page kernel, or `C`'s general one.
#[inline(always)]
fn page_values<D: Isa, C: Declined<D>, const G: usize>(
    l: &Layout,
    pr: &PageRows<'_>,
    st: &mut Accum<'_>,
    h0: usize,
    g: usize,
) {
    let (hd, p) = (l.head_dim, l.page_tokens);
    let acc = &mut st.out[h0 * hd..(h0 + G) * hd];
    let w = &st.weights[h0 * p..(h0 + G) * p];
    if !D::int8_page_values::<G>(acc, w, p, pr, g) {
        C::int8_values::<G>(l, pr, acc, w, g);
    }
}

/// Heads `h0..h0 + G`: `out += w · vrow` for every f16 row of a whole page `pr`, in order: the
/// ISA's page kernel, or `C`'s general one.
#[inline(always)]
fn page_values_f16<D: Isa, C: Declined<D>, const G: usize>(
    l: &Layout,
    pr: &PageRows<'_>,
    st: &mut Accum<'_>,
    h0: usize,
) {
    let (hd, p) = (l.head_dim, l.page_tokens);
    let acc = &mut st.out[h0 * hd..(h0 + G) * hd];
    let w = &st.weights[h0 * p..(h0 + G) * p];
    if !D::f16_page_values::<G>(acc, w, p, pr) {
        C::f16_values::<G>(l, pr, acc, w);
    }
}

/// What the V pass of [`attend_page`] updates: the outputs, from each head's page of weights.
struct Accum<'h> {
    out: &'h mut [f32],
    weights: &'h [f32],
}

/// Heads `h0..h0 + G`: `out += w · vrow` for each token `rs[ρ]` in order, `w` its weight.
#[inline(always)]
fn accumulate<D: Isa, const G: usize, const R: usize>(
    l: &Layout,
    vrows: [Row<'_>; R],
    st: &mut Accum<'_>,
    h0: usize,
    rs: [usize; R],
) {
    let (hd, p) = (l.head_dim, l.page_tokens);
    let mut w = [[0f32; G]; R];
    for (w, r) in w.iter_mut().zip(rs) {
        for (i, w) in w.iter_mut().enumerate() {
            *w = st.weights[(h0 + i) * p + r];
        }
    }
    add_scaled::<D, G, R>(l.v_fmt, &mut st.out[h0 * hd..(h0 + G) * hd], w, vrows);
}
