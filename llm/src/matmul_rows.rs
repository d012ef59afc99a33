//! The row loops of [`matmul_quant`](super::matmul_quant) on one thread: this build's ISA
//! kernels first ([`arch::matmul`]: AVX2 by tiles of four tokens, Helium by four weight rows),
//! then the portable dot products one weight row and one activation row at a time. (Portable
//! tiles of four tokens, each block unpacked once for the four, were tried: on x86-64 the
//! compiler vectorized them worse than the one-row loops, 5.0 against 12.7 prefill tokens/s.)

use super::{Matrix, dot_q4_1_q8_1, dot_q8_0_q8_0};
use crate::arch::{self, Acts};
use crate::gguf::{QK_K, TensorType};
use crate::quant::{self, ActivationType, BLOCK, QuantRow, sums_len};

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
