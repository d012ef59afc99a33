//! Row operations in ggml's CPU order: RMSNorm, RoPE (types NORM and NEOX), SiLU- and
//! GELU-gated FFN, scaling, residual add, embedding lookup. Transcendentals come from `libm`, so
//! every target gives the same bits.

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

/// [`rms_norm`] of `x` in place (the same operations: the scale from the row as it was, then
/// `y = (x · scale) · w`), for each head of a row as well when `w` has `head_dim` values.
pub fn rms_norm_in_place(x: &mut [f32], w: &Norm<'_>, eps: f32) {
    let mut sum = 0.0f64;
    for &v in x.iter() {
        sum += (v * v) as f64;
    }
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / libm::sqrtf(mean + eps);
    for (i, v) in x.iter_mut().enumerate() {
        *v = (*v * scale) * w.get(i);
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

/// Rotates each head of `row` as RoPE type NEOX does (ggml's `rotate_pairs` with offset
/// `head_dim / 2`): pair `i` is `(i, i + head_dim / 2)`, turned by angle `i` of [`rope_angles`]:
/// `x0·cos − x1·sin`, `x0·sin + x1·cos`.
pub fn rope_neox(row: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    let half = head_dim / 2;
    for head in row.chunks_exact_mut(head_dim) {
        let (lo, hi) = head.split_at_mut(half);
        for (((x0, x1), &c), &s) in lo.iter_mut().zip(hi.iter_mut()).zip(cos).zip(sin) {
            let (a, b) = (*x0, *x1);
            *x0 = a * c - b * s;
            *x1 = a * s + b * c;
        }
    }
}

/// `x ← x · s` (ggml's `ggml_scale`: one f32 product per value).
pub fn scale(x: &mut [f32], s: f32) {
    for v in x {
        *v *= s;
    }
}

/// GELU as ggml's CPU backend evaluates it for f32 rows (`GGML_GELU_FP16`): the input rounded
/// to f16, the tanh approximation `0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))` of that f16
/// value in f32 (its lookup table's entry, computed here per call instead of stored), rounded to
/// f16. Inputs ≤ −10 give 0 and inputs ≥ 10 give `x` itself, as ggml's `geglu` does.
pub fn gelu(x: f32) -> f32 {
    const COEF_A: f32 = 0.044715;
    const SQRT_2_OVER_PI: f32 = 0.797_884_560_802_865_4_f64 as f32;
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    let h = half::f16::from_f32(x).to_f32();
    let t = libm::tanhf(SQRT_2_OVER_PI * h * (1.0 + COEF_A * h * h));
    half::f16::from_f32(0.5 * h * (1.0 + t)).to_f32()
}

/// `g ← gelu(g) · u` ([`gelu`]; ggml's `ggml_vec_geglu_f32`: `x ≥ 10` gives `x · u`).
pub fn geglu(g: &mut [f32], u: &[f32]) {
    for (g, &u) in g.iter_mut().zip(u) {
        // ggml writes 0 itself below −10 (not `0 · u`, which may be −0).
        *g = if *g <= -10.0 { 0.0 } else { gelu(*g) * u };
    }
}

/// `g ← silu(g) · u` with `silu(x) = x / (1 + expf(−x))` (ggml's `ggml_silu_f32`, scalar path),
/// the `expf`s 64 at a time by [`edgekv::exp_in_place`] (`libm::expf`'s bits in vector lanes).
pub fn swiglu(g: &mut [f32], u: &[f32]) {
    let mut e = [0f32; 64];
    for (g, u) in g.chunks_mut(64).zip(u.chunks(64)) {
        let len = g.len().min(u.len());
        let (g, u, e) = (&mut g[..len], &u[..len], &mut e[..len]);
        for (e, &x) in e.iter_mut().zip(g.iter()) {
            *e = -x;
        }
        edgekv::exp_in_place(e);
        for ((g, &u), &e) in g.iter_mut().zip(u).zip(e.iter()) {
            *g = (*g / (1.0 + e)) * u;
        }
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

    #[test]
    fn neox_rope_turns_half_split_pairs() {
        let (mut c, mut s) = ([0f32; 2], [0f32; 2]);
        rope_angles(3, 10_000.0, 4, &mut c, &mut s);
        let mut r = [1.0, 2.0, 3.0, 4.0];
        rope_neox(&mut r, 4, &c, &s);
        // Pair 0 is (x0, x2), pair 1 is (x1, x3).
        assert_eq!(r[0], 1.0 * c[0] - 3.0 * s[0]);
        assert_eq!(r[2], 1.0 * s[0] + 3.0 * c[0]);
        assert_eq!(r[1], 2.0 * c[1] - 4.0 * s[1]);
        assert_eq!(r[3], 2.0 * s[1] + 4.0 * c[1]);
    }

    #[test]
    fn gelu_is_ggml_f16_table_entry() {
        let table = |x: f32| {
            let h = half::f16::from_f32(x).to_f32();
            let y = 0.5 * h * (1.0 + libm::tanhf(0.797_884_6 * h * (1.0 + 0.044_715 * h * h)));
            half::f16::from_f32(y).to_f32()
        };
        for x in [-9.9f32, -3.0, -0.5, 0.0, 0.3, 1.0, 2.5, 9.99] {
            assert_eq!(gelu(x), table(x), "{x}");
        }
        // The input is rounded to f16 first: 1 + 2^-13 is 1 in f16.
        assert_eq!(gelu(1.0 + 1.0 / 8192.0), gelu(1.0));
        assert_eq!(half::f16::from_f32(gelu(1.0)).to_f32(), gelu(1.0));
        assert_eq!((gelu(10.0), gelu(12.5), gelu(-10.0)), (10.0, 12.5, 0.0));
        let mut g = [-20.0, 12.0, 1.0];
        geglu(&mut g, &[-1.0, 2.0, 3.0]);
        assert_eq!(g[0].to_bits(), 0f32.to_bits());
        assert_eq!(g[1], 24.0);
        assert_eq!(g[2], gelu(1.0) * 3.0);
    }

    #[test]
    fn in_place_norm_equals_rms_norm() {
        let bytes: Vec<u8> = (0..8)
            .flat_map(|i| (0.5 + i as f32 * 0.25).to_le_bytes())
            .collect();
        let w = Norm::from_bytes(&bytes);
        let x: [f32; 8] = core::array::from_fn(|i| (i as f32 - 3.5) * 0.7);
        let mut want = [0f32; 8];
        rms_norm(&x, &w, 1e-6, &mut want);
        let mut got = x;
        rms_norm_in_place(&mut got, &w, 1e-6);
        assert_eq!(got, want);
    }
}
