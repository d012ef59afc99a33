//! The page loop of attention: every query row of one sequence and layer over its pages, one
//! page of keys at a time (scores, one online-softmax rescale per page, weighted V rows), with
//! the kernels of `kernels` and, for each page, the best build `crate::arch` has for this CPU.

use super::Window;
use super::exp::exp_shifted;
use super::kernels::{Row, add_scaled, dot_lanes};
use super::query::{self, QueryCodes};
use crate::arch::{self, Isa};
use crate::error::Result;
use crate::format::{ElementFormat, LANES, Rotation};

/// Keys per segment of a query row: a row whose keys span more pages than a segment holds is
/// computed segment by segment, each with its own online-softmax state (maximum, sum and
/// accumulators per head), merged into the first in order. A split call (see
/// `KvCache::attention_threads`) computes the segments on several threads and merges them in the
/// same order: the same bits. Rows of at most this many keys are one segment.
pub(crate) const SEGMENT_KEYS: usize = 2048;

/// Pages per segment for pages of `p` tokens.
#[inline]
pub(crate) const fn segment_pages(p: usize) -> usize {
    if p >= SEGMENT_KEYS {
        1
    } else {
        SEGMENT_KEYS / p
    }
}

/// Segments of the query row at position `t`.
#[inline]
pub(crate) fn segments(l: &Layout, t: u32) -> usize {
    (t as usize / l.page_tokens + 1).div_ceil(segment_pages(l.page_tokens))
}

/// f32 slots of scratch the merge of segments takes: one more accumulator row, maximum and sum
/// per query head.
pub(crate) const fn merge_slots(q_heads: usize, head_dim: usize) -> usize {
    q_heads * (head_dim + 2)
}

/// The parts of attention's scratch (see [`attend`]).
pub(crate) struct Scratch<'s> {
    max: &'s mut [f32],
    sum: &'s mut [f32],
    scores: &'s mut [f32],
    /// A later segment's state, before it is merged.
    seg_out: &'s mut [f32],
    seg_max: &'s mut [f32],
    seg_sum: &'s mut [f32],
    q_rot: &'s mut [f32],
    codes: &'s mut [i16],
    qscales: &'s mut [f32],
}

impl<'s> Scratch<'s> {
    /// Cuts `scratch` (at least `scratch_len_for` long) into its parts.
    pub(crate) fn split(l: &Layout, scratch: &'s mut [f32]) -> Self {
        let (hd, p) = (l.head_dim, l.page_tokens);
        let q_heads = l.kv_heads * l.group;
        let row = q_heads * hd;
        let (max, rest) = scratch.split_at_mut(q_heads);
        let (sum, rest) = rest.split_at_mut(q_heads);
        let (scores, rest) = rest.split_at_mut(q_heads * p);
        let (seg_out, rest) = rest.split_at_mut(row);
        let (seg_max, rest) = rest.split_at_mut(q_heads);
        let (seg_sum, rest) = rest.split_at_mut(q_heads);
        let (q_rot, rest) = rest.split_at_mut(if k_rotated(l) { row } else { 0 });
        let (codes, qscales) = query::split(rest, row);
        Scratch {
            max,
            sum,
            scores,
            seg_out,
            seg_max,
            seg_sum,
            q_rot,
            codes,
            qscales,
        }
    }
}

/// One segment's online-softmax state, owned: what a split call's threads hand back.
#[cfg(feature = "std")]
pub(crate) struct SegmentState {
    pub(crate) out: std::vec::Vec<f32>,
    pub(crate) max: std::vec::Vec<f32>,
    pub(crate) sum: std::vec::Vec<f32>,
}

#[cfg(feature = "std")]
impl Scratch<'_> {
    /// The state [`segment`] left for a first segment: its `row` accumulators, maxima, sums.
    pub(crate) fn state(&self, row: usize) -> SegmentState {
        SegmentState {
            out: self.seg_out[..row].to_vec(),
            max: self.max.to_vec(),
            sum: self.sum.to_vec(),
        }
    }
}

/// Whether K rows are rotated (`rotation` left out: never; such configurations do not plan).
#[inline(always)]
fn k_rotated(l: &Layout) -> bool {
    cfg!(feature = "rotation") && l.k_rot.is_some()
}

/// Every query row `q` (`[n][q_heads][head_dim]`, absolute positions from `start`) over the keys
/// `[0, t]` of its position `t` (or the window's subset), into `out` (same shape). `page(i)` gives
/// the K and V bytes of the sequence's `i`-th page; the caller checked that every page a query
/// needs is there (an error from `page` ends the call with `out` partly written). `scratch` holds
/// each query head's running max and sum, one page of scores per head, a segment's state
/// ([`SEGMENT_KEYS`]), the rotated query row (rotated K) and the quantized one (int8 K). With
/// rotated V rows, each output row is rotated back at the end.
///
/// `page` is a trait object, not a generic: the page loop and every kernel under it are then
/// compiled once, in this crate, instead of again in each crate that calls the (allocator-generic)
/// cache's attention — eleven copies in this workspace's test build.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend<'d>(
    l: &Layout,
    window: Option<Window>,
    start: u32,
    q: &[f32],
    out: &mut [f32],
    scratch: &mut [f32],
    page: &dyn Fn(usize) -> Result<PageSlices<'d>>,
) -> Result<()> {
    let row = l.kv_heads * l.group * l.head_dim;
    let mut s = Scratch::split(l, scratch);
    for (qi, (q_row, out_row)) in q
        .chunks_exact(row)
        .zip(out.chunks_exact_mut(row))
        .enumerate()
    {
        let t = start + qi as u32;
        for k in 0..segments(l, t) {
            if k == 0 {
                segment(l, window, t, q_row, 0, &mut s, page, None)?;
                out_row.copy_from_slice(&s.seg_out[..row]);
            } else {
                segment(l, window, t, q_row, k, &mut s, page, Some(&mut *out_row))?;
            }
        }
        finish_row(l, out_row, s.sum);
    }
    Ok(())
}

/// Segment `k` of the query row `q_row` at position `t`: its keys' online softmax from a fresh
/// state. Into `s.seg_out` / `s.max` / `s.sum` for the first segment (`merge_into` `None`), or
/// merged into the state so far (`merge_into`: its accumulators; its maxima and sums in `s`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn segment<'d>(
    l: &Layout,
    window: Option<Window>,
    t: u32,
    q_row: &[f32],
    k: usize,
    s: &mut Scratch<'_>,
    page: &dyn Fn(usize) -> Result<PageSlices<'d>>,
    merge_into: Option<&mut [f32]>,
) -> Result<()> {
    let (hd, p) = (l.head_dim, l.page_tokens);
    let q_rows = if k_rotated(l) {
        s.q_rot.copy_from_slice(q_row);
        for h in s.q_rot.chunks_exact_mut(hd) {
            l.k_rot.forward(h);
        }
        &*s.q_rot
    } else {
        q_row
    };
    if let Some(g) = query::int8_group(l.k_fmt) {
        query::quantize(q_rows, g, l.scale, s.codes, s.qscales);
    }
    let first = merge_into.is_none();
    let (max, sum) = if first {
        (&mut *s.max, &mut *s.sum)
    } else {
        (&mut *s.seg_max, &mut *s.seg_sum)
    };
    s.seg_out.fill(0.0);
    max.fill(f32::NEG_INFINITY);
    sum.fill(0.0);
    let per = segment_pages(p);
    let last = t as usize / p;
    for page_index in k * per..((k + 1) * per).min(last + 1) {
        let j0 = (page_index * p) as u32;
        let j1 = (j0 + p as u32).min(t + 1);
        let kept = |j: u32| window.is_none_or(|w| w.keeps(t, j));
        if !(j0..j1).any(kept) {
            continue;
        }
        let kv = page(page_index)?;
        let keys = Keys {
            kv: &kv,
            j0,
            j1,
            kept: &kept,
        };
        let heads = Heads {
            q: q_rows,
            qc: QueryCodes {
                codes: &*s.codes,
                scales: &*s.qscales,
            },
            out: &mut *s.seg_out,
            max: &mut *max,
            sum: &mut *sum,
            scores: &mut *s.scores,
        };
        arch::attend_page(l, &keys, heads);
    }
    if let Some(acc) = merge_into {
        merge(l, acc, s.max, s.sum, s.seg_out, s.seg_max, s.seg_sum);
    }
    Ok(())
}

/// Merges a later segment's state (`out2`, `max2`, `sum2`) into the state so far, head by head:
/// both rescaled to the larger maximum, `out = out · e^(m − M) + out2 · e^(m2 − M)`, the sums
/// alike. A segment that kept no key (maximum −∞) changes nothing.
#[allow(clippy::too_many_arguments)]
pub(crate) fn merge(
    l: &Layout,
    out: &mut [f32],
    max: &mut [f32],
    sum: &mut [f32],
    out2: &[f32],
    max2: &[f32],
    sum2: &[f32],
) {
    let hd = l.head_dim;
    for h in 0..l.kv_heads * l.group {
        let m2 = max2[h];
        if m2 == f32::NEG_INFINITY {
            continue;
        }
        let m = max[h].max(m2);
        let (a, b) = (libm::expf(max[h] - m), libm::expf(m2 - m));
        for (o, &o2) in out[h * hd..(h + 1) * hd].iter_mut().zip(&out2[h * hd..]) {
            *o = *o * a + o2 * b;
        }
        sum[h] = sum[h] * a + sum2[h] * b;
        max[h] = m;
    }
}

/// The end of a query row: each computed head's output divided by its sum, rotated back for
/// rotated V rows.
pub(crate) fn finish_row(l: &Layout, out_row: &mut [f32], sum: &[f32]) {
    let hd = l.head_dim;
    let v_rot = cfg!(feature = "rotation") && l.v_rot.is_some();
    for (h, oh) in out_row.chunks_exact_mut(hd).enumerate() {
        let inv = 1.0 / sum[h];
        for o in oh.iter_mut() {
            *o *= inv;
        }
        if v_rot {
            l.v_rot.inverse(oh);
        }
    }
}

/// Formats and byte geometry of the rows [`attend_page`] reads.
pub(crate) struct Layout {
    pub(crate) k_fmt: ElementFormat,
    pub(crate) v_fmt: ElementFormat,
    /// How K and V rows were rotated before they were stored.
    pub(crate) k_rot: Rotation,
    pub(crate) v_rot: Rotation,
    /// Value and scale bytes of one token (all heads) and of one head, for K and V.
    pub(crate) k_row: usize,
    pub(crate) v_row: usize,
    pub(crate) k_srow: usize,
    pub(crate) v_srow: usize,
    pub(crate) k_head: usize,
    pub(crate) v_head: usize,
    pub(crate) k_shead: usize,
    pub(crate) v_shead: usize,
    pub(crate) kv_heads: usize,
    /// Query heads per KV head.
    pub(crate) group: usize,
    pub(crate) head_dim: usize,
    pub(crate) page_tokens: usize,
    pub(crate) scale: f32,
}

impl Layout {
    /// The query heads of KV head `kh`: `[h0, end)`.
    #[inline(always)]
    fn run_of(&self, kh: usize) -> (usize, usize) {
        (kh * self.group, (kh + 1) * self.group)
    }

    /// KV head `kh` of token `r` of a K (`v == false`) or V page.
    #[inline(always)]
    fn row<'p>(&self, kv: &PageSlices<'p>, v: bool, r: usize, kh: usize) -> Row<'p> {
        let (vals, scales, row, srow, head, shead) = if v {
            (
                kv.v,
                kv.vs,
                self.v_row,
                self.v_srow,
                self.v_head,
                self.v_shead,
            )
        } else {
            (
                kv.k,
                kv.ks,
                self.k_row,
                self.k_srow,
                self.k_head,
                self.k_shead,
            )
        };
        Row {
            vals: &vals[r * row + kh * head..][..head],
            scales: &scales[(r * srow + kh * shead).min(scales.len())..],
        }
    }
}

/// Query heads of one KV head that share each decoded K and V row (more heads, more code: one
/// kernel instance per run length; `small-code` keeps only single heads, same bits).
const MAX_RUN: usize = if cfg!(feature = "small-code") { 1 } else { 4 };

/// The keys of one page one query row sees: positions `[j0, j1)` filtered by `kept`.
pub(crate) struct Keys<'k, F: Fn(u32) -> bool> {
    kv: &'k PageSlices<'k>,
    j0: u32,
    j1: u32,
    kept: &'k F,
}

/// The state of one query row, all query heads: query rows, output accumulators, running maxima
/// and sums, and one page of scores each (`head_dim` and `page_tokens` apart).
pub(crate) struct Heads<'h> {
    q: &'h [f32],
    /// `q` quantized for int8 keys (see `attention::query`; stale otherwise).
    qc: QueryCodes<'h>,
    out: &'h mut [f32],
    max: &'h mut [f32],
    sum: &'h mut [f32],
    scores: &'h mut [f32],
}

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
    let (hd, p) = (l.head_dim, l.page_tokens);
    let n = (keys.j1 - keys.j0) as usize;
    // Most pages are whole (no window, or inside it): `kept` is then not asked again, and page
    // maxima vectorize.
    let whole = (keys.j0..keys.j1).all(keys.kept);
    let rows = || (0..n).filter(move |&r| whole || (keys.kept)(keys.j0 + r as u32));
    // Scores, KV head by KV head (each score is its own dot product: any order gives the same
    // bits).
    for kh in 0..l.kv_heads {
        let (mut h0, end) = l.run_of(kh);
        while h0 < end {
            let g = (end - h0).min(MAX_RUN);
            match g {
                #[cfg(not(feature = "small-code"))]
                2 => score_rows::<D, 2>(l, keys.kv, kh, (q, qc), scores, h0, rows()),
                #[cfg(not(feature = "small-code"))]
                3 => score_rows::<D, 3>(l, keys.kv, kh, (q, qc), scores, h0, rows()),
                #[cfg(not(feature = "small-code"))]
                4 => score_rows::<D, 4>(l, keys.kv, kh, (q, qc), scores, h0, rows()),
                _ => score_rows::<D, 1>(l, keys.kv, kh, (q, qc), scores, h0, rows()),
            }
            h0 += g;
        }
    }
    for (h, oh) in out.chunks_exact_mut(hd).enumerate() {
        let page_max = if whole {
            max_of(&scores[h * p..h * p + n])
        } else {
            rows().fold(f32::NEG_INFINITY, |m, r| m.max(scores[h * p + r]))
        };
        let new_max = max[h].max(page_max);
        // An unchanged finite maximum rescales by exp(0) = 1: skipping it changes no bit.
        if new_max != max[h] || !new_max.is_finite() {
            let keep = libm::expf(max[h] - new_max);
            sum[h] *= keep;
            for o in oh {
                *o *= keep;
            }
            max[h] = new_max;
        }
        // Scores become weights exp(score − max), all of the page's rows at once (rows the
        // window drops too: they are never read).
        exp_shifted(&mut scores[h * p..h * p + n], new_max);
    }
    // Each head's sum takes its weights in row order, in a register.
    for (h, s) in sum.iter_mut().enumerate() {
        let weights = &scores[h * p..h * p + n];
        *s = if whole {
            weights.iter().fold(*s, |s, w| s + w)
        } else {
            rows().fold(*s, |s, r| s + weights[r])
        };
    }
    let mut st = Accum {
        out,
        weights: scores,
    };
    // Q8_0 rows up to eight at a time, other quantized rows two at a time (the last alone): each
    // output element still gets the rows' terms in row order, with fewer loads and stores of
    // the accumulators. f32/f16/bf16 rows stay single: paired, they measured slower, and their
    // decode is cheap anyway. (Eight rows only for Q8_0, in its own small kernel: eight-row
    // copies of the general kernel, unrolled, multiplied the build time of the page loop.)
    let mut kept = rows();
    #[cfg(not(feature = "small-code"))]
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
            #[cfg(not(feature = "small-code"))]
            Some(r1) => accumulate_rows::<D, 2>(l, keys.kv, &mut st, [r0, r1]),
            #[cfg(feature = "small-code")]
            Some(r1) => {
                accumulate_rows::<D, 1>(l, keys.kv, &mut st, [r0]);
                accumulate_rows::<D, 1>(l, keys.kv, &mut st, [r1]);
            }
            None => accumulate_rows::<D, 1>(l, keys.kv, &mut st, [r0]),
        }
    }
}

/// The largest of `s` (not NaN; −∞ if none), as `s.iter().fold(−∞, f32::max)` but in eight
/// lanes. A zero maximum may come out with the other sign than the fold's (`f32::max` leaves it
/// open), which changes no result: it is only compared and subtracted from scores, and
/// `x − 0` and `x + 0` differ only at `x = −0`, whose exp is 1 either way.
#[inline(always)]
fn max_of(s: &[f32]) -> f32 {
    // Not NaN in, not NaN out: `m` only ever takes a larger, hence non-NaN, `x`.
    let step = |m: f32, x: f32| if x > m { x } else { m };
    let mut m = [f32::NEG_INFINITY; 8];
    let mut blocks = s.chunks_exact(8);
    for b in &mut blocks {
        for l in 0..8 {
            m[l] = step(m[l], b[l]);
        }
    }
    for (l, &x) in blocks.remainder().iter().enumerate() {
        m[l] = step(m[l], x);
    }
    step(
        step(step(m[0], m[1]), step(m[2], m[3])),
        step(step(m[4], m[5]), step(m[6], m[7])),
    )
}

/// `scores[h][r] = scale · q[h] · krow(r)` for heads `h0..h0 + G` of KV head `kh` and tokens
/// `rows` of the page: int8 rows from the quantized query (`q.1`), others from the f32 query
/// (`q.0`; f32/f16/bf16/fp8 rows).
#[inline(always)]
fn score_rows<D: Isa, const G: usize>(
    l: &Layout,
    kv: &PageSlices<'_>,
    kh: usize,
    q: (&[f32], QueryCodes<'_>),
    scores: &mut [f32],
    h0: usize,
    rows: impl Iterator<Item = usize>,
) {
    match query::int8_group(l.k_fmt) {
        #[cfg(not(feature = "small-code"))]
        Some(32) => score_rows_int8::<D, G>(l, kv, kh, q.1, scores, h0, rows, 32),
        Some(g) => score_rows_int8::<D, G>(l, kv, kh, q.1, scores, h0, rows, g),
        None => score_rows_of::<D, G>(l, l.k_fmt, kv, kh, q.0, scores, h0, rows),
    }
}

/// [`score_rows`] for int8 K rows of group `g`: eight rows at a time.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn score_rows_int8<D: Isa, const G: usize>(
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
fn score_rows_of<D: Isa, const G: usize>(
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
            let n = (end - h0).min(MAX_RUN);
            match n {
                #[cfg(not(feature = "small-code"))]
                2 => accumulate::<D, 2, R>(l, vrows, st, h0, rs),
                #[cfg(not(feature = "small-code"))]
                3 => accumulate::<D, 3, R>(l, vrows, st, h0, rs),
                #[cfg(not(feature = "small-code"))]
                4 => accumulate::<D, 4, R>(l, vrows, st, h0, rs),
                _ => accumulate::<D, 1, R>(l, vrows, st, h0, rs),
            }
            h0 += n;
        }
    }
}

/// The V pass for up to eight Q8_0 tokens `rs` (in order) of the page: every KV head, every run
/// of its query heads.
#[cfg(not(feature = "small-code"))]
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
            let n = (end - h0).min(MAX_RUN);
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
#[cfg(not(feature = "small-code"))]
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

/// The K and V value and scale bytes of one page in one layer.
pub(crate) struct PageSlices<'d> {
    pub(crate) k: &'d [u8],
    pub(crate) ks: &'d [u8],
    pub(crate) v: &'d [u8],
    pub(crate) vs: &'d [u8],
}

#[cfg(test)]
mod tests {
    use super::max_of;

    /// `max_of` equals the fold with `f32::max` (NaNs skipped, −∞ when nothing else).
    #[test]
    fn page_maximum_equals_the_fold() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let pool = [
            f32::NAN,
            f32::NEG_INFINITY,
            f32::INFINITY,
            -3.5,
            2.25,
            0.0,
            -1e-30,
        ];
        for len in 0..40 {
            for _ in 0..50 {
                let s: std::vec::Vec<f32> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        if x % 3 == 0 {
                            pool[(x >> 8) as usize % pool.len()]
                        } else {
                            (x >> 40) as f32 / 1e5 - 80.0
                        }
                    })
                    .collect();
                let want = s.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                assert_eq!(max_of(&s), want, "{s:?}");
            }
        }
    }
}
