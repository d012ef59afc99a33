//! The row loops of [`matmul_quant`](super::matmul_quant) on one thread: this build's ISA
//! kernels first ([`arch::matmul`]), then the portable dot products, Q4_1 and Q8_0 by tiles of
//! [`TILE`] activation rows ([`arch::tiles`]: each weight block decoded once for the tile, each
//! row's sum in block order as the one-row dot product has it), the other types one row after
//! the other.

use super::{Matrix, dot_q4_1_q8_1, dot_q8_0_q8_0};
use crate::arch::{self, Acts};
use crate::gguf::{QK_K, TensorType};
use crate::quant::{self, ActivationType, BLOCK, QuantRow, sums_len};

/// Activation rows per tile of the portable Q4_1 and Q8_0 loops.
const TILE: usize = 4;

/// [`matmul_quant`](super::matmul_quant) over `m`'s rows on this thread.
pub(super) fn matmul_quant(
    m: &Matrix<'_>,
    qs: &[i8],
    d: &[f32],
    s: &[f32],
    n: usize,
    out: &mut [f32],
) {
    let acts = Acts {
        qs,
        d,
        s,
        cols: m.cols,
    };
    if arch::matmul(m.ty, m.data, m.row_bytes, m.rows, &acts, n, out) {
        return;
    }
    let (w, row_bytes, count) = (m.data, m.row_bytes, m.rows);
    let tiled = match m.ty {
        TensorType::Q4_1 => arch::tiles::<1, TILE>(
            w,
            row_bytes,
            count,
            &acts,
            n,
            out,
            |w, a| [quant::q4_1::dot_rows_q4_1_q8_1(w[0], a)],
            |w, a| [dot_q4_1_q8_1(w[0], a)],
            dot_q4_1_q8_1,
        ),
        TensorType::Q8_0 => arch::tiles::<1, TILE>(
            w,
            row_bytes,
            count,
            &acts,
            n,
            out,
            |w, a| [quant::q8_0::dot_rows_q8_0_q8_0(w[0], a)],
            |w, a| [dot_q8_0_q8_0(w[0], a)],
            dot_q8_0_q8_0,
        ),
        _ => false,
    };
    if tiled {
        return;
    }
    let a = Rows {
        qs,
        d,
        s,
        cols: m.cols,
    };
    // One loop per type (the dispatch is outside the row loops).
    match m.ty {
        TensorType::Q4_0 => rows(m, &a, BLOCK, n, out, quant::q4_0::dot_q4_0_q8_0),
        TensorType::Q4_1 => rows(m, &a, BLOCK, n, out, dot_q4_1_q8_1),
        TensorType::Q5_0 => rows(m, &a, BLOCK, n, out, quant::q5_0::dot_q5_0_q8_0),
        TensorType::Q5_1 => rows(m, &a, BLOCK, n, out, quant::q5_1::dot_q5_1_q8_1),
        TensorType::Q8_0 => rows(m, &a, BLOCK, n, out, dot_q8_0_q8_0),
        TensorType::Q4_K => rows(m, &a, QK_K, n, out, quant::q4_k::dot_q4_k_q8_k),
        TensorType::Q5_K => rows(m, &a, QK_K, n, out, quant::q5_k::dot_q5_k_q8_k),
        TensorType::Q6_K => rows(m, &a, QK_K, n, out, quant::q6_k::dot_q6_k_q8_k),
        TensorType::F32 => out[..n * m.rows].fill(0.0),
    }
}

/// `n` quantized activation rows of `cols` values, laid out as
/// [`matmul_quant`](super::matmul_quant) takes them.
struct Rows<'s> {
    qs: &'s [i8],
    d: &'s [f32],
    s: &'s [f32],
    cols: usize,
}

impl<'s> Rows<'s> {
    /// Row `t` with `block` values per scale (Q8_K's sums as i16 in `s`).
    #[inline(always)]
    fn row(&self, t: usize, block: usize) -> QuantRow<'s> {
        let (cols, blocks, sums) = (self.cols, self.cols / block, sums_len(self.cols));
        let (qs, d, s) = (
            &self.qs[t * cols..][..cols],
            &self.d[t * blocks..][..blocks],
            &self.s[t * sums..][..sums],
        );
        if block == QK_K {
            QuantRow::of(ActivationType::Q8_K, qs, d, s)
        } else {
            QuantRow {
                qs,
                d,
                s,
                bsums: &[],
            }
        }
    }
}

/// The row loops of [`matmul_quant`] for one weight type's dot product `dot`.
#[inline(always)]
fn rows<F: Fn(&[u8], &QuantRow<'_>) -> f32>(
    m: &Matrix<'_>,
    a: &Rows<'_>,
    block: usize,
    n: usize,
    out: &mut [f32],
    dot: F,
) {
    for o in 0..m.rows {
        let w = m.row(o);
        for t in 0..n {
            out[t * m.rows + o] = dot(w, &a.row(t, block));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{q4_1, q8_0, quantize_q8_0, quantize_q8_1};

    /// The portable tiles (Q4_1 and Q8_0 rows against four activation rows at once) against the
    /// one-row dot products, bit for bit, with activation rows left over after the tiles.
    #[test]
    fn portable_tiles_have_the_one_row_bits() {
        let (cols, rows) = (160, 5);
        let blocks = cols / BLOCK;
        let mut seed = 0x2545_f491u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for ty in [TensorType::Q4_1, TensorType::Q8_0] {
            let bytes = if ty == TensorType::Q4_1 {
                q4_1::BYTES
            } else {
                q8_0::BYTES
            };
            let mut w: Vec<u8> = (0..rows * blocks * bytes).map(|_| next() as u8).collect();
            for b in w.chunks_exact_mut(bytes) {
                b[1] &= 0xbb;
                b[3] &= 0xbb;
            }
            for n in [1, 3, 4, 6, 9] {
                let x: Vec<f32> = (0..n * cols)
                    .map(|_| (next() % 2001) as f32 / 100.0 - 10.0)
                    .collect();
                let (mut qs, mut d, mut s) = (
                    vec![0i8; n * cols],
                    vec![0f32; n * blocks],
                    vec![0f32; n * blocks],
                );
                if ty == TensorType::Q4_1 {
                    quantize_q8_1(&x, &mut qs, &mut d, &mut s);
                } else {
                    quantize_q8_0(&x, &mut qs, &mut d);
                }
                let acts = Acts {
                    qs: &qs,
                    d: &d,
                    s: &s,
                    cols,
                };
                let dot: fn(&[u8], &QuantRow<'_>) -> f32 = if ty == TensorType::Q4_1 {
                    dot_q4_1_q8_1
                } else {
                    dot_q8_0_q8_0
                };
                let mut out = vec![f32::NAN; n * rows];
                let row_bytes = blocks * bytes;
                assert!(arch::tiles::<1, TILE>(
                    &w,
                    row_bytes,
                    rows,
                    &acts,
                    n,
                    &mut out,
                    |w, a| match ty {
                        TensorType::Q4_1 => [quant::q4_1::dot_rows_q4_1_q8_1(w[0], a)],
                        _ => [quant::q8_0::dot_rows_q8_0_q8_0(w[0], a)],
                    },
                    |w, a| [dot(w[0], a)],
                    dot,
                ));
                for t in 0..n {
                    for o in 0..rows {
                        let want = dot(&w[o * row_bytes..][..row_bytes], &acts.row(t));
                        let got = out[t * rows + o];
                        assert_eq!(got.to_bits(), want.to_bits(), "{ty:?} n {n} t {t} o {o}");
                    }
                }
            }
        }
    }
}
