//! The kernels' operands and the row loop they share: activation rows as
//! [`matmul_quant`](crate::matmul::matmul_quant) lays them out ([`Acts`]), and [`by_four`], which
//! runs a four-row kernel over a matrix (each weight row read once per call) and the portable dot
//! product over the rows left over.

use crate::quant::{BLOCK, QuantRow};

/// `n` activation rows of `cols` values in 32-value blocks (Q8_0 or Q8_1), token-major: codes
/// in `qs`, one scale per block in `d`, Q8_1's block sums in `s` (one per block).
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
    fn holds(&self, n: usize) -> bool {
        let blocks = self.cols / BLOCK;
        n.checked_mul(self.cols).is_some_and(|c| c <= self.qs.len())
            && n.checked_mul(blocks)
                .is_some_and(|b| b <= self.d.len() && b <= self.s.len())
    }

    /// Row `t` (within [`holds`](Self::holds)'s `n`).
    #[inline(always)]
    fn row(&self, t: usize) -> QuantRow<'s> {
        let (cols, blocks) = (self.cols, self.cols / BLOCK);
        QuantRow {
            qs: &self.qs[t * cols..][..cols],
            d: &self.d[t * blocks..][..blocks],
            s: &self.s[t * blocks..][..blocks],
            bsums: &[],
        }
    }
}

/// `out[t · rows + o] = W[o] · a[t]`: `four` on each run of four weight rows against every
/// activation row, `one` (the portable dot product) on the rows after the last run. `false`
/// (nothing written) when the buffers do not hold `rows` weight rows, `n` activation rows or
/// `n · rows` outputs (the portable loops then run, as they would have).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn by_four(
    w: &[u8],
    row_bytes: usize,
    rows: usize,
    a: &Acts<'_>,
    n: usize,
    out: &mut [f32],
    four: impl Fn([&[u8]; 4], &QuantRow<'_>) -> [f32; 4],
    one: impl Fn(&[u8], &QuantRow<'_>) -> f32,
) -> bool {
    let fits = rows.checked_mul(row_bytes).is_some_and(|b| b <= w.len())
        && n.checked_mul(rows).is_some_and(|o| o <= out.len())
        && a.holds(n);
    if !fits {
        return false;
    }
    let row = |o: usize| &w[o * row_bytes..][..row_bytes];
    let mut o = 0;
    while o + 4 <= rows {
        let ws = [row(o), row(o + 1), row(o + 2), row(o + 3)];
        for t in 0..n {
            let r = four(ws, &a.row(t));
            out[t * rows + o..][..4].copy_from_slice(&r);
        }
        o += 4;
    }
    for o in o..rows {
        for t in 0..n {
            out[t * rows + o] = one(row(o), &a.row(t));
        }
    }
    true
}
