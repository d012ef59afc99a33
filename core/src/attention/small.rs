//! The page kernel of `small-code` builds: one page of keys for every query head of one query
//! row, head by head, row by row, one rolled loop per step. Each head's arithmetic is the default
//! build's (`attention::fast`), in the same order, so the results have its bits:
//!
//! - a score is its own dot product: int8 keys from the quantized query, groups in order from
//!   0.0 (as `kernels::int8_scores` for one row); other keys in eight lanes (`dot_lanes`, rolled
//!   in these builds) summed in the fixed tree, then times the scale (as the eight-row sums);
//! - the page maximum is the fold of `f32::max` over the kept rows (the fast path's eight-lane
//!   maximum may differ only in the sign of a zero, which changes no result);
//! - each weight is `floor::exp_weight(score − max)`, whose bits the eight-lane `exp`
//!   reproduces; the rescale is the default build's (`page::rescale`);
//! - the sum takes the weights in row order, then each output element takes its rows' terms in
//!   row order (`add_scaled`, one row and one head at a time).
//!
//! Only the kept rows of a page are scored and weighted: the others are never read.

use super::page::{Heads, Keys, Layout, rescale};
use crate::arch::Isa;
use crate::arch::kernels::{Row, add_scaled, dot_lanes, int_dot};
use crate::arch::query::{self, QueryCodes};
use crate::format::u16_at;
use crate::numeric::floor::exp_weight;
use crate::numeric::larger;
use crate::numeric::reduce;

/// One page of keys for every query head of one query row: per head its scores, its
/// online-softmax rescale, its weights and sum, then its weighted V rows.
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
    let kept = |r: usize| (keys.kept)(keys.j0 + r as u32);
    let int8 = query::int8_group(l.k_fmt);
    for (h, oh) in out.chunks_exact_mut(hd).enumerate() {
        let kh = h / l.group;
        let weights = &mut scores[h * p..h * p + n];
        let mut page_max = f32::NEG_INFINITY;
        for (r, s) in weights.iter_mut().enumerate() {
            if kept(r) {
                let row = l.row(keys.kv, false, r, kh);
                *s = match int8 {
                    Some(g) => int8_score::<D>(qc, h, hd, row, g),
                    None => {
                        let qh = &q[h * hd..(h + 1) * hd];
                        reduce(dot_lanes::<D, 1>(l.k_fmt, qh, row)[0]) * l.scale
                    }
                };
                page_max = larger(page_max, *s);
            }
        }
        let new_max = larger(max[h], page_max);
        rescale(oh, &mut max[h], &mut sum[h], new_max);
        // Each weight goes into the sum and the outputs at once: each still takes the rows in
        // order.
        for (r, &s) in weights.iter().enumerate() {
            if kept(r) {
                let w = exp_weight(s - new_max);
                sum[h] += w;
                add_scaled::<D, 1, 1>(l.v_fmt, oh, [[w]], [l.row(keys.kv, true, r, kh)]);
            }
        }
    }
}

/// The score of int8 K row `row` (group `g`) for query head `h` from its quantized query:
/// `Σ_b (qs[b] · ks[b]) · Σ_{i ∈ b} qc[i] · kc[i]`, the groups in order from 0.0.
#[inline(always)]
fn int8_score<D: Isa>(qc: QueryCodes<'_>, h: usize, hd: usize, row: Row<'_>, g: usize) -> f32 {
    let nb = hd / g;
    let codes = qc.codes[h * hd..(h + 1) * hd].chunks_exact(g);
    let qs = &qc.scales[h * nb..(h + 1) * nb];
    let mut s = 0.0;
    for (b, (c, k)) in codes.zip(row.vals.chunks_exact(g)).enumerate() {
        let ks = D::one(u16_at(row.scales, b));
        s += (qs[b] * ks) * int_dot(c, k);
    }
    s
}
