//! The kernels' operands and the row loop they share: activation rows as
//! [`matmul_quant`](crate::matmul::matmul_quant) lays them out ([`Acts`]), and [`tiles`], which
//! runs a kernel over tiles of weight rows × activation rows (each weight row read once per
//! call, each of its blocks decoded once per tile), with the kernel's smaller entries on the
//! rows left over.

use crate::gguf::QK_K;
use crate::quant::{ActivationType, BLOCK, QuantRow, sums_len};

/// `n` activation rows of `cols` values in 32-value blocks (Q8_0 or Q8_1), token-major: codes
/// in `qs`, one scale per block in `d`, Q8_1's block sums in `s` (one per block). The same
/// buffers hold Q8_K rows (the K-quants' activations: [`holds_k`](Self::holds_k),
/// [`row_k`](Self::row_k)): one scale per 256 values in `d`, the 16-value sums as i16 in `s`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acts<'s> {
    /// Codes, `cols` per row.
    pub qs: &'s [i8],
    /// Scales, `cols / 32` per row.
    pub d: &'s [f32],
    /// Sums, `cols / 32` per row (unused for Q8_0).
    pub s: &'s [f32],
    /// Values per row.
    pub cols: usize,
}

impl<'s> Acts<'s> {
    /// Whether the buffers hold `n` rows.
    pub(crate) fn holds(&self, n: usize) -> bool {
        let blocks = self.cols / BLOCK;
        n.checked_mul(self.cols).is_some_and(|c| c <= self.qs.len())
            && n.checked_mul(blocks)
                .is_some_and(|b| b <= self.d.len() && b <= self.s.len())
    }

    /// Row `t` (within [`holds`](Self::holds)'s `n`).
    #[inline(always)]
    pub(crate) fn row(&self, t: usize) -> QuantRow<'s> {
        let (cols, blocks) = (self.cols, self.cols / BLOCK);
        QuantRow {
            qs: &self.qs[t * cols..][..cols],
            d: &self.d[t * blocks..][..blocks],
            s: &self.s[t * blocks..][..blocks],
            bsums: &[],
        }
    }
}

// The K-quant kernels' rows.
impl<'s> Acts<'s> {
    /// Whether the buffers hold `n` Q8_K rows.
    pub(crate) fn holds_k(&self, n: usize) -> bool {
        n.checked_mul(self.cols).is_some_and(|c| c <= self.qs.len())
            && n.checked_mul(self.cols / QK_K)
                .is_some_and(|b| b <= self.d.len())
            && n.checked_mul(sums_len(self.cols))
                .is_some_and(|b| b <= self.s.len())
    }

    /// Q8_K row `t` (within [`holds_k`](Self::holds_k)'s `n`), its 16-value sums in `bsums`.
    #[inline(always)]
    pub(crate) fn row_k(&self, t: usize) -> QuantRow<'s> {
        let (cols, blocks, sums) = (self.cols, self.cols / QK_K, sums_len(self.cols));
        QuantRow::of(
            ActivationType::Q8_K,
            &self.qs[t * cols..][..cols],
            &self.d[t * blocks..][..blocks],
            &self.s[t * sums..][..sums],
        )
    }
}

/// [`tiles`] over Q8_K activation rows ([`Acts::row_k`]): the K-quants' kernels.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn tiles_k<const W: usize, const A: usize>(
    w: &[u8],
    row_bytes: usize,
    rows: usize,
    a: &Acts<'_>,
    n: usize,
    out: &mut [f32],
    many: impl Fn([&[u8]; W], &[QuantRow<'_>; A]) -> [[f32; A]; W],
    few: impl Fn([&[u8]; W], &QuantRow<'_>) -> [f32; W],
    one: impl Fn(&[u8], &QuantRow<'_>) -> f32,
) -> bool {
    a.holds_k(n) && tiles_of(w, row_bytes, rows, a, n, out, Acts::row_k, many, few, one)
}

/// `out[t · rows + o] = W[o] · a[t]` by tiles: `many` on each tile of `W` weight rows × `A`
/// activation rows (each weight block decoded once for the tile), `few` on the `W` weight rows
/// against each activation row after the last full tile of `A`, `one` (a dot product with the
/// portable bits) on the weight rows after the last run of `W`. Weight rows are the outer loop
/// (each read once per call). `false` (nothing written) when the buffers do not hold `rows`
/// weight rows, `n` activation rows or `n · rows` outputs (the portable loops then run, as they
/// would have).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn tiles<const W: usize, const A: usize>(
    w: &[u8],
    row_bytes: usize,
    rows: usize,
    a: &Acts<'_>,
    n: usize,
    out: &mut [f32],
    many: impl Fn([&[u8]; W], &[QuantRow<'_>; A]) -> [[f32; A]; W],
    few: impl Fn([&[u8]; W], &QuantRow<'_>) -> [f32; W],
    one: impl Fn(&[u8], &QuantRow<'_>) -> f32,
) -> bool {
    a.holds(n) && tiles_of(w, row_bytes, rows, a, n, out, Acts::row, many, few, one)
}

/// [`tiles`] with activation row `t` read by `act_row` (the caller checked that `a` holds `n`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn tiles_of<'s, const W: usize, const A: usize>(
    w: &[u8],
    row_bytes: usize,
    rows: usize,
    a: &Acts<'s>,
    n: usize,
    out: &mut [f32],
    act_row: impl Fn(&Acts<'s>, usize) -> QuantRow<'s>,
    many: impl Fn([&[u8]; W], &[QuantRow<'_>; A]) -> [[f32; A]; W],
    few: impl Fn([&[u8]; W], &QuantRow<'_>) -> [f32; W],
    one: impl Fn(&[u8], &QuantRow<'_>) -> f32,
) -> bool {
    let fits = rows.checked_mul(row_bytes).is_some_and(|b| b <= w.len())
        && n.checked_mul(rows).is_some_and(|o| o <= out.len());
    if !fits || W == 0 || A == 0 {
        return false;
    }
    let row = |o: usize| &w[o * row_bytes..][..row_bytes];
    let tiled = A > 1 && super::tiles_on();
    let mut o = 0;
    while o + W <= rows {
        let ws: [&[u8]; W] = core::array::from_fn(|k| row(o + k));
        let mut t = 0;
        while tiled && t + A <= n {
            let acts: [QuantRow<'_>; A] = core::array::from_fn(|k| act_row(a, t + k));
            for (k, r) in many(ws, &acts).iter().enumerate() {
                for (j, &v) in r.iter().enumerate() {
                    out[(t + j) * rows + o + k] = v;
                }
            }
            t += A;
        }
        for t in t..n {
            out[t * rows + o..][..W].copy_from_slice(&few(ws, &act_row(a, t)));
        }
        o += W;
    }
    for o in o..rows {
        for t in 0..n {
            out[t * rows + o] = one(row(o), &act_row(a, t));
        }
    }
    true
}
