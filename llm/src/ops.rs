//! Row operations in ggml's CPU order: RMSNorm, RoPE (type NORM), SiLU-gated FFN, residual add,
//! embedding lookup. Transcendentals come from `libm`, so every target gives the same bits.

use crate::matmul::Matrix;
use crate::model::Norm;
use crate::quant::{BLOCK, f16_to_f32};

/// RMSNorm as `ggml_compute_forward_rms_norm_f32` then `ggml_mul`: the sum of `x²` (each square
/// in f32) accumulated in f64, `mean = (f32)(sum / n)`, `scale = 1 / sqrtf(mean + eps)`,
/// `y = (x · scale) · w`.
pub fn rms_norm(x: &[f32], w: &Norm<'_>, eps: f32, out: &mut [f32]) {
    let mut sum = 0.0f64;
    for &v in x {
        sum += (v * v) as f64;
    }
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / libm::sqrtf(mean + eps);
    for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
        *o = (v * scale) * w.get(i);
    }
}

/// RoPE angles of one position as ggml's `ggml_rope_cache_init` computes them (no frequency
/// factors, no YaRN, `freq_scale = 1`): `theta_scale = powf(base, -2 / n_dims)`, `theta` starts
/// at the position and is multiplied by `theta_scale` after each pair; `cos`/`sin` by `libm`.
pub fn rope_angles(position: u32, base: f32, n_dims: usize, cos: &mut [f32], sin: &mut [f32]) {
    let theta_scale = libm::powf(base, -2.0 / n_dims as f32);
    let mut theta = position as f32;
    for (c, s) in cos.iter_mut().zip(sin.iter_mut()) {
        *c = libm::cosf(theta);
        *s = libm::sinf(theta);
        theta *= theta_scale;
    }
}

/// Rotates each head of `row` (type NORM: adjacent pairs `(2i, 2i + 1)`) by the angles of
/// [`rope_angles`]: `x0·cos − x1·sin`, `x0·sin + x1·cos`.
pub fn rope(row: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    for head in row.chunks_exact_mut(head_dim) {
        for ((pair, &c), &s) in head.chunks_exact_mut(2).zip(cos).zip(sin) {
            let (x0, x1) = (pair[0], pair[1]);
            pair[0] = x0 * c - x1 * s;
            pair[1] = x0 * s + x1 * c;
        }
    }
}

/// `g ← silu(g) · u` with `silu(x) = x / (1 + expf(−x))` (ggml's `ggml_silu_f32`, scalar path).
pub fn swiglu(g: &mut [f32], u: &[f32]) {
    for (g, &u) in g.iter_mut().zip(u) {
        let x = *g;
        *g = (x / (1.0 + libm::expf(-x))) * u;
    }
}

/// `x ← x + y`.
pub fn add(x: &mut [f32], y: &[f32]) {
    for (x, &y) in x.iter_mut().zip(y) {
        *x += y;
    }
}

/// Row `token` of a Q8_0 embedding, dequantized as ggml's `dequantize_row_q8_0`: `q · d`.
pub fn embed_q8_0(m: &Matrix<'_>, token: usize, out: &mut [f32]) {
    let row = m.row(token);
    for (b, o) in row.chunks_exact(34).zip(out.chunks_exact_mut(BLOCK)) {
        let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
        for (o, &q) in o.iter_mut().zip(&b[2..]) {
            *o = (q as i8) as f32 * d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_position_zero_is_identity() {
        let (mut c, mut s) = ([0f32; 4], [0f32; 4]);
        rope_angles(0, 10_000.0, 8, &mut c, &mut s);
        let row: [f32; 16] = core::array::from_fn(|i| i as f32 - 3.0);
        let mut r = row;
        rope(&mut r, 8, &c, &s);
        assert_eq!(r, row);
        rope_angles(5, 10_000.0, 8, &mut c, &mut s);
        // The first pair turns by the position itself.
        assert_eq!(c[0], libm::cosf(5.0));
        let ts = libm::powf(10_000.0, -0.25);
        assert_eq!(s[1], libm::sinf(5.0 * ts));
    }

    #[test]
    fn swiglu_and_add() {
        let mut g = [0.0, 1.0, -2.0];
        swiglu(&mut g, &[3.0, 2.0, 1.0]);
        assert_eq!(g[0], 0.0);
        assert_eq!(g[1], (1.0 / (1.0 + libm::expf(-1.0))) * 2.0);
        let mut x = [1.0, 2.0];
        add(&mut x, &[0.5, 0.25]);
        assert_eq!(x, [1.5, 2.25]);
    }
}
