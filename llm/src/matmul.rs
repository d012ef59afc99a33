//! Matrix views over quantized weights in place, and the matmul as ggml's CPU reference computes
//! it: each weight type's dot product with its activation type ([`ActivationType::for_weights`])
//! lives in its own module of [`quant`] (`ggml_vec_dot_*_generic`):
//! - 32-value blocks, each output `Σ_blocks` in block order in one f32 `sumf` from 0:
//!   Q4_0 × Q8_0 `sumf += ((f32)sumi · d_w) · d_a`; Q4_1 × Q8_1 and Q5_1 × Q8_1
//!   `sumf += (d_w · d_a) · (f32)sumi + m_w · s_a`; Q5_0 × Q8_0 `sumf += (d_w · d_a) · (f32)sumi`;
//!   Q8_0 × Q8_0 `sumf += (f32)sumi · (d_w · d_a)`;
//! - 256-value K-quant super-blocks (Q4_K, Q5_K, Q6_K × Q8_K): eight f32 lanes
//!   `sums[l] += (d_w · d_a) · (f32)aux32[l]`, the minimums `sumf −= (dmin_w · d_a) · (f32)sumi`,
//!   then `sumf += sums[0] + …` one lane at a time.
//!
//! The integer sums are exact (any order gives the same i32, so the compiler may vectorize
//! them); the f32 operations run in exactly this order, with no fused multiply-add (Rust never
//! contracts), so every target gives the same bits.
//!
//! [`matmul_quant`] and [`dot_quant`] first offer the work to this build's ISA kernels
//! ([`kernels`] names them: Helium on the Cortex-M55 / M85, AVX2 on x86-64), which have the
//! portable code's bits (integer sums in any order, the scales combined per output row in
//! block order); the portable loops run for every type they decline.

#[path = "matmul_rows.rs"]
mod rows;
#[cfg(feature = "std")]
#[path = "matmul_threads.rs"]
mod threads;

use crate::arch;
use crate::gguf::{QK_K, Tensor, TensorType};
use crate::quant::{self, ActivationType, BLOCK, QuantRow};

pub use crate::quant::q4_1::dot_q4_1_q8_1;
pub use crate::quant::q8_0::dot_q8_0_q8_0;

/// Every matmul kernel of this build against the portable dot products (feature
/// `matmul-check`; the boards' `matmul-check` firmware runs it).
#[cfg(feature = "matmul-check")]
pub use crate::arch::check as kernel_check;
pub use crate::arch::{kernels, set_kernels, set_tiles};
#[cfg(feature = "std")]
pub(crate) use threads::with_team;
#[cfg(feature = "std")]
pub use threads::{set_threads, threads};

/// A 2-D weight in place: `rows` rows of `cols` values (ggml `ne[0] = cols`, `ne[1] = rows`).
#[derive(Debug, Clone, Copy)]
pub struct Matrix<'a> {
    /// Encoded rows, `row_bytes` each.
    pub data: &'a [u8],
    /// Block type.
    pub ty: TensorType,
    /// Values per row (input width).
    pub cols: usize,
    /// Rows (output width).
    pub rows: usize,
    /// Bytes per row.
    pub row_bytes: usize,
}

impl<'a> Matrix<'a> {
    /// A view of a 2-D tensor of shape `[cols, rows]`, if it has that shape (a 1-D tensor is one
    /// row) and its rows are whole blocks.
    pub fn new(t: &Tensor<'a>, cols: usize, rows: usize) -> Option<Self> {
        if t.dims != [cols, rows, 1, 1] {
            return None;
        }
        let row_bytes = t.ty.row_bytes(cols)?;
        (row_bytes.checked_mul(rows)? == t.data.len()).then_some(Matrix {
            data: t.data,
            ty: t.ty,
            cols,
            rows,
            row_bytes,
        })
    }

    /// Row `r`'s bytes.
    #[inline]
    pub fn row(&self, r: usize) -> &'a [u8] {
        &self.data[r * self.row_bytes..][..self.row_bytes]
    }

    /// The activation block type this matrix's dot product takes (`None` for F32).
    pub fn activation(&self) -> Option<ActivationType> {
        ActivationType::for_weights(self.ty)
    }
}

/// Dot product of one F32 weight row with an f32 activation row (in order; ggml would use f16
/// activations here — not used by the model, which keeps F32 tensors for norms only).
#[inline]
pub fn dot_f32(w: &[u8], x: &[f32]) -> f32 {
    let mut s = 0.0f32;
    for (b, &v) in w.chunks_exact(4).zip(x) {
        s += f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * v;
    }
    s
}

/// Adds `v · x` into eight fixed lanes (lane `l` takes values `l`, `l + 8`, …), the
/// activations `x` floored ([`floor::operand`](quant::floor::operand)).
#[inline(always)]
fn add_lanes(lanes: &mut [f32; 8], v: &[f32], x: &[f32]) {
    for (vk, xk) in v.chunks_exact(8).zip(x.chunks_exact(8)) {
        for l in 0..8 {
            lanes[l] += vk[l] * quant::floor::operand(xk[l]);
        }
    }
}

/// Dequantizes each block of `w` with `f` and adds it into the lanes (not inlined: the
/// super-block arrays stay out of [`dot_dequantized`]'s frame).
#[inline(never)]
fn lanes_of<const B: usize, const N: usize>(
    lanes: &mut [f32; 8],
    w: &[u8],
    x: &[f32],
    f: fn(&[u8; B], &mut [f32; N]),
) {
    let mut v = [0f32; N];
    for (wb, xb) in w.chunks_exact(B).zip(x.chunks_exact(N)) {
        if let Ok(wb) = wb.try_into() {
            f(wb, &mut v);
            add_lanes(lanes, &v, xb);
        }
    }
}

/// Dot product of one weight row (any [`TensorType`]) with an f32 activation row, without
/// quantizing the activations: each weight block dequantized in f32 as its `dequantize_row_*`
/// does (Q4_1 `q · d + m`, Q8_0 `q · d`, …), its products added into eight fixed lanes (lane `l`
/// takes values `l`, `l + 8`, …), the lanes summed in a fixed tree. Activations and F32
/// weights below 2^-42 in magnitude count as zeros ([`floor`](quant::floor)), so that the bits are the same
/// on every target, vector floats that flush subnormals included.
#[inline]
pub fn dot_dequantized(w: &[u8], ty: TensorType, x: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    match ty {
        TensorType::Q4_1 => {
            for (wb, xb) in w.chunks_exact(20).zip(x.chunks_exact(BLOCK)) {
                let (d, m) = (scale(wb, 0), scale(wb, 2));
                let mut v = [0f32; BLOCK];
                for j in 0..16 {
                    v[j] = (wb[4 + j] & 0x0f) as f32 * d + m;
                    v[j + 16] = (wb[4 + j] >> 4) as f32 * d + m;
                }
                add_lanes(&mut lanes, &v, xb);
            }
        }
        TensorType::Q8_0 => {
            for (wb, xb) in w.chunks_exact(34).zip(x.chunks_exact(BLOCK)) {
                let d = scale(wb, 0);
                let v: [f32; BLOCK] = core::array::from_fn(|j| wb[2 + j] as i8 as f32 * d);
                add_lanes(&mut lanes, &v, xb);
            }
        }
        TensorType::F32 => {
            for (wb, xb) in w.chunks_exact(4 * BLOCK).zip(x.chunks_exact(BLOCK)) {
                let v: [f32; BLOCK] = core::array::from_fn(|j| {
                    quant::floor::operand(f32::from_le_bytes([
                        wb[4 * j],
                        wb[4 * j + 1],
                        wb[4 * j + 2],
                        wb[4 * j + 3],
                    ]))
                });
                add_lanes(&mut lanes, &v, xb);
            }
        }
        TensorType::Q4_0 => lanes_of(&mut lanes, w, x, quant::q4_0::dequantize),
        TensorType::Q5_0 => lanes_of(&mut lanes, w, x, quant::q5_0::dequantize),
        TensorType::Q5_1 => lanes_of(&mut lanes, w, x, quant::q5_1::dequantize),
        TensorType::Q4_K => lanes_of::<144, QK_K>(&mut lanes, w, x, quant::q4_k::dequantize),
        TensorType::Q5_K => lanes_of::<176, QK_K>(&mut lanes, w, x, quant::q5_k::dequantize),
        TensorType::Q6_K => lanes_of::<210, QK_K>(&mut lanes, w, x, quant::q6_k::dequantize),
    }
    ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
        + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
}

#[inline(always)]
fn scale(b: &[u8], at: usize) -> f32 {
    quant::f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// `out[t][o] = W[o] · x[t]` for `n` f32 activation rows of `m.cols` ([`dot_dequantized`]);
/// `out` is `n × m.rows`, token-major. With the feature `std`, the weight rows are shared by
/// `set_threads`' threads (the same bits).
pub fn matmul_f32(m: &Matrix<'_>, x: &[f32], n: usize, out: &mut [f32]) {
    #[cfg(feature = "std")]
    if threads::split(&[m], n, &mut [&mut *out], &|part, out| {
        matmul_f32_rows(part, x, n, out)
    }) {
        return;
    }
    matmul_f32_rows(m, x, n, out);
}

/// [`matmul_f32`] on one thread.
fn matmul_f32_rows(m: &Matrix<'_>, x: &[f32], n: usize, out: &mut [f32]) {
    for o in 0..m.rows {
        let w = m.row(o);
        for t in 0..n {
            out[t * m.rows + o] = dot_dequantized(w, m.ty, &x[t * m.cols..][..m.cols]);
        }
    }
}

/// `f` on every item of `items` (independent pieces of per-token work, e.g. one token's row):
/// with the feature `std`, more than one matmul thread and at least `MIN_SHARED_WORK` in all
/// (`work` per item, in multiply-accumulates or the like), shared between the threads;
/// otherwise in order on this thread. The same results either way.
#[cfg_attr(not(feature = "std"), allow(unused_variables))]
pub(crate) fn for_each<I: Send>(
    items: impl ExactSizeIterator<Item = I>,
    work: usize,
    f: impl Fn(I) + Sync,
) {
    #[cfg(feature = "std")]
    if items.len() > 1 && items.len().saturating_mul(work) >= MIN_SHARED_WORK && threads() > 1 {
        threads::each(items, &f);
        return;
    }
    items.for_each(f);
}

/// Work (see [`for_each`]) below which per-token steps stay on one thread: a handoff to the
/// team costs about a microsecond, some tens of thousands of simple operations.
#[cfg(feature = "std")]
const MIN_SHARED_WORK: usize = 1 << 14;

/// Dot product of one weight row of type `ty` with an activation row of its
/// [`ActivationType::for_weights`] (0 for F32, which has none).
#[inline]
pub fn dot_quant(ty: TensorType, w: &[u8], a: &QuantRow<'_>) -> f32 {
    if let Some(v) = arch::dot(ty, w, a) {
        return v;
    }
    match ty {
        TensorType::Q4_0 => quant::q4_0::dot_q4_0_q8_0(w, a),
        TensorType::Q4_1 => dot_q4_1_q8_1(w, a),
        TensorType::Q5_0 => quant::q5_0::dot_q5_0_q8_0(w, a),
        TensorType::Q5_1 => quant::q5_1::dot_q5_1_q8_1(w, a),
        TensorType::Q8_0 => dot_q8_0_q8_0(w, a),
        TensorType::Q4_K => quant::q4_k::dot_q4_k_q8_k(w, a),
        TensorType::Q5_K => quant::q5_k::dot_q5_k_q8_k(w, a),
        TensorType::Q6_K => quant::q6_k::dot_q6_k_q8_k(w, a),
        TensorType::F32 => 0.0,
    }
}

/// Quantizes the activation row `x` as `act` into `qs`, `d` and `s`: the bits of the portable
/// [`quant::quantize_activation`], by this build's kernel where it has one for `act` (AVX2,
/// NEON and Helium: Q8_0, Q8_1 and Q8_K; DSP: Q8_0 and Q8_1).
pub fn quantize_activation(
    act: ActivationType,
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
) {
    if !arch::quantize(act, x, qs, d, s) {
        quant::quantize_activation(act, x, qs, d, s);
    }
}

/// `out[t][o] = W[o] · a[t]` for `n` quantized activation rows, as
/// [`quantize_activation`](crate::quant::quantize_activation) wrote them for `m`'s activation
/// type: row `t` has `m.cols` codes in `qs`, one scale per block in `d` and
/// [`sums_len`](crate::quant::sums_len)`(m.cols)` f32s of sums in `s`; `out` is `n × m.rows`,
/// token-major. Weight rows are the outer loop (each read once per call; the AVX2 kernels
/// decode each Q4_1 and Q8_0 block once for a tile of four activation rows, [`set_tiles`]);
/// every output is the same function of one weight row and one activation row, whatever `n` is,
/// whatever the tiles, and (feature `std`) however many threads share the weight rows
/// (`set_threads`).
pub fn matmul_quant(m: &Matrix<'_>, qs: &[i8], d: &[f32], s: &[f32], n: usize, out: &mut [f32]) {
    matmul_quant_many([m], qs, d, s, n, [out]);
}

/// [`matmul_quant`] for several matrices of one activation type and width that share the
/// activation rows (q, k and v; gate and up): `outs[i] = ms[i] · a`, `outs[i]` being
/// `n × ms[i].rows`. The same bits as one [`matmul_quant`] per matrix; with the feature `std`
/// and several threads, one split of all their rows (one handoff to the team, not one per
/// matrix).
#[cfg_attr(not(feature = "std"), allow(unused_mut))]
pub(crate) fn matmul_quant_many<const M: usize>(
    ms: [&Matrix<'_>; M],
    qs: &[i8],
    d: &[f32],
    s: &[f32],
    n: usize,
    mut outs: [&mut [f32]; M],
) {
    #[cfg(feature = "std")]
    if threads::split(&ms, n, &mut outs, &|part, out| {
        rows::matmul_quant(part, qs, d, s, n, out)
    }) {
        return;
    }
    for (m, out) in ms.into_iter().zip(outs) {
        rows::matmul_quant(m, qs, d, s, n, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{quantize_q8_0, quantize_q8_1};
    use half::f16;

    fn q4_1_block(d: f32, m: f32, nibbles: &[u8; 32]) -> [u8; 20] {
        let mut b = [0u8; 20];
        b[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        b[2..4].copy_from_slice(&f16::from_f32(m).to_le_bytes());
        for j in 0..16 {
            b[4 + j] = nibbles[j] | (nibbles[j + 16] << 4);
        }
        b
    }

    #[test]
    fn q4_1_dot_is_the_reference_sum() {
        let nib: [u8; 32] = core::array::from_fn(|i| (i * 7 % 16) as u8);
        let mut w = [0u8; 40];
        w[..20].copy_from_slice(&q4_1_block(0.05, -0.4, &nib));
        w[20..].copy_from_slice(&q4_1_block(0.02, 0.1, &nib));
        let x: [f32; 64] = core::array::from_fn(|i| ((i * 13 % 29) as f32 - 14.0) * 0.1);
        let (mut qs, mut d, mut s) = ([0i8; 64], [0f32; 2], [0f32; 2]);
        quantize_q8_1(&x, &mut qs, &mut d, &mut s);
        let a = QuantRow {
            qs: &qs,
            d: &d,
            s: &s,
            bsums: &[],
        };
        let mut want = 0f32;
        for b in 0..2 {
            let (dw, mw) = if b == 0 { (0.05, -0.4) } else { (0.02, 0.1) };
            let (dw, mw) = (f16::from_f32(dw).to_f32(), f16::from_f32(mw).to_f32());
            let sumi: i32 = (0..32).map(|j| nib[j] as i32 * qs[b * 32 + j] as i32).sum();
            want += (dw * d[b]) * sumi as f32 + mw * s[b];
        }
        assert_eq!(dot_q4_1_q8_1(&w, &a).to_bits(), want.to_bits());
    }

    /// f32 activations: the dequantized weights' dot product (Q4_1 and Q8_0 rows) to f32
    /// rounding, and exactly zero against a zero row.
    #[test]
    fn dequantized_dot_is_the_f32_dot_product() {
        let nib: [u8; 32] = core::array::from_fn(|i| (i * 7 % 16) as u8);
        let mut w = [0u8; 40];
        w[..20].copy_from_slice(&q4_1_block(0.05, -0.4, &nib));
        w[20..].copy_from_slice(&q4_1_block(0.02, 0.1, &nib));
        let x: [f32; 64] = core::array::from_fn(|i| ((i * 13 % 29) as f32 - 14.0) * 0.1);
        let mut want = 0f64;
        for (i, &xi) in x.iter().enumerate() {
            let (b, j) = (i / 32, i % 32);
            let (dw, mw) = if b == 0 { (0.05, -0.4) } else { (0.02, 0.1) };
            let (dw, mw) = (f16::from_f32(dw).to_f32(), f16::from_f32(mw).to_f32());
            want += (nib[j] as f32 * dw + mw) as f64 * xi as f64;
        }
        let got = dot_dequantized(&w, TensorType::Q4_1, &x) as f64;
        assert!(
            (got - want).abs() < 1e-5 * want.abs().max(1.0),
            "{got} vs {want}"
        );
        let mut q8 = [0u8; 34];
        q8[..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        for j in 0..32 {
            q8[2 + j] = (j as i8 - 16) as u8;
        }
        let want: f64 = (0..32).map(|j| (j as f64 - 16.0) * 0.5 * x[j] as f64).sum();
        let got = dot_dequantized(&q8, TensorType::Q8_0, &x[..32]) as f64;
        assert!(
            (got - want).abs() < 1e-5 * want.abs().max(1.0),
            "{got} vs {want}"
        );
        assert_eq!(dot_dequantized(&w, TensorType::Q4_1, &[0.0; 64]), 0.0);
    }

    #[test]
    fn q8_0_dot_is_the_reference_sum() {
        let mut w = [0u8; 34];
        w[..2].copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
        for j in 0..32 {
            w[2 + j] = (j as i8 - 16) as u8;
        }
        let x: [f32; 32] = core::array::from_fn(|i| (i as f32).sin());
        let (mut qs, mut d) = ([0i8; 32], [0f32; 1]);
        quantize_q8_0(&x, &mut qs, &mut d);
        let a = QuantRow {
            qs: &qs,
            d: &d,
            s: &[0.0],
            bsums: &[],
        };
        let sumi: i32 = (0..32).map(|j| (j as i32 - 16) * qs[j] as i32).sum();
        let want = sumi as f32 * (f16::from_f32(0.01).to_f32() * d[0]);
        assert_eq!(dot_q8_0_q8_0(&w, &a).to_bits(), want.to_bits());
    }
}
