//! The score passes of the page loops over rows that no whole-page kernel takes: eight rows at
//! a time, int8 rows from the quantized query (the ISA's eight-row kernels), other formats from
//! each row's lanes, summed eight rows at once.

use super::page::{Layout, PageSlices};
use crate::arch::Isa;
use crate::arch::kernels::{Row, dot_lanes};
use crate::arch::query::{self, QueryCodes};
use crate::arch::rows::PageRows;
use crate::format::{ElementFormat, LANES};

/// `scores[h][r] = scale · q[h] · krow(r)` for heads `h0..h0 + G` of KV head `kh` and tokens
/// `rows` of the page: int8 rows from the quantized query (`q.1`; a whole page `page` to the
/// ISA's page kernel first), others from the f32 query (`q.0`; f32/f16/bf16/fp8 rows).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn score_rows<D: Isa, const G: usize>(
    l: &Layout,
    kv: &PageSlices<'_>,
    kh: usize,
    q: (&[f32], QueryCodes<'_>),
    scores: &mut [f32],
    h0: usize,
    rows: impl Iterator<Item = usize>,
    page: Option<&PageRows<'_>>,
) {
    // Before the eight-row path, not inside it: the same query slicing there, but in
    // `score_rows_int8` this call cost 0.17 M instructions per M55 decode step (code layout).
    if let (Some(g), Some(pr)) = (query::int8_group(l.k_fmt), page) {
        let (hd, p) = (l.head_dim, l.page_tokens);
        let nb = hd / g;
        let qc = QueryCodes {
            codes: &q.1.codes[h0 * hd..(h0 + G) * hd],
            scales: &q.1.scales[h0 * nb..(h0 + G) * nb],
        };
        if D::int8_page_scores::<G>(qc, pr, g, &mut scores[h0 * p..(h0 + G) * p], p) {
            return;
        }
    }
    match query::int8_group(l.k_fmt) {
        Some(32) => score_rows_int8::<D, G>(l, kv, kh, q.1, scores, h0, rows, 32),
        Some(g) => score_rows_int8::<D, G>(l, kv, kh, q.1, scores, h0, rows, g),
        None => score_rows_of::<D, G>(l, l.k_fmt, kv, kh, q.0, scores, h0, rows),
    }
}

/// [`score_rows`] for int8 K rows of group `g`: eight rows at a time.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn score_rows_int8<D: Isa, const G: usize>(
    l: &Layout,
    kv: &PageSlices<'_>,
    kh: usize,
    qc: QueryCodes<'_>,
    scores: &mut [f32],
    h0: usize,
    rows: impl Iterator<Item = usize>,
    g: usize,
) {
    let (hd, p) = (l.head_dim, l.page_tokens);
    let nb = hd / g;
    let q = QueryCodes {
        codes: &qc.codes[h0 * hd..(h0 + G) * hd],
        scales: &qc.scales[h0 * nb..(h0 + G) * nb],
    };
    let mut batch = [Row {
        vals: &[],
        scales: &[],
    }; LANES];
    let mut at = [0usize; LANES];
    let mut n = 0;
    for r in rows {
        batch[n] = l.row(kv, false, r, kh);
        at[n] = r;
        n += 1;
        if n == LANES {
            store_scores(D::int8_scores::<G>(q, &batch, g), &at, n, scores, h0, p);
            n = 0;
        }
    }
    if n > 0 {
        store_scores(
            D::int8_scores::<G>(q, &batch[..n], g),
            &at,
            n,
            scores,
            h0,
            p,
        );
    }
}

/// `scores[(h0 + h)·p + at[j]] = s[h][j]` for `j < n`.
#[inline(always)]
fn store_scores<const G: usize>(
    s: [[f32; LANES]; G],
    at: &[usize; LANES],
    n: usize,
    scores: &mut [f32],
    h0: usize,
    p: usize,
) {
    for (h, s) in s.iter().enumerate() {
        let row = &mut scores[(h0 + h) * p..][..p];
        for (&r, &d) in at[..n].iter().zip(s) {
            row[r] = d;
        }
    }
}

/// [`score_rows`] for K rows of `fmt`: each row's lanes, then eight rows' lane sums at once.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn score_rows_of<D: Isa, const G: usize>(
    l: &Layout,
    fmt: ElementFormat,
    kv: &PageSlices<'_>,
    kh: usize,
    q: &[f32],
    scores: &mut [f32],
    h0: usize,
    rows: impl Iterator<Item = usize>,
) {
    let (hd, p) = (l.head_dim, l.page_tokens);
    let q = &q[h0 * hd..(h0 + G) * hd];
    // Lanes of up to eight rows per head (slots past `n` hold stale lanes, never stored).
    let mut lanes = [[[0f32; LANES]; LANES]; G];
    let mut at = [0usize; LANES];
    let mut n = 0;
    for r in rows {
        let d = dot_lanes::<D, G>(fmt, q, l.row(kv, false, r, kh));
        for (lanes, d) in lanes.iter_mut().zip(d) {
            lanes[n] = d;
        }
        at[n] = r;
        n += 1;
        if n == LANES {
            flush_lanes::<D, G>(&lanes, &at, n, scores, h0, p, l.scale);
            n = 0;
        }
    }
    if n > 0 {
        flush_lanes::<D, G>(&lanes, &at, n, scores, h0, p, l.scale);
    }
}

/// `scores[(h0 + h)·p + at[j]] = scale · Σ lanes[h][j]` for `j < n` (eight rows' lane sums at
/// once). A function, not a closure: closures do not take the AVX2 build's target features, and
/// the intrinsics of `reduce8` would then be calls.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn flush_lanes<D: Isa, const G: usize>(
    lanes: &[[[f32; LANES]; LANES]; G],
    at: &[usize; LANES],
    n: usize,
    scores: &mut [f32],
    h0: usize,
    p: usize,
    scale: f32,
) {
    for (h, lanes) in lanes.iter().enumerate() {
        let d = D::reduce8(lanes);
        let row = &mut scores[(h0 + h) * p..][..p];
        for (&r, d) in at[..n].iter().zip(d) {
            row[r] = d * scale;
        }
    }
}
