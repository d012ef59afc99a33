//! The accumulation the K-quant dot products share, in the order of ggml's generic
//! `ggml_vec_dot_q{4,5,6}_K_q8_K_generic`.
//!
//! Per super-block: eight i32 lanes `aux32[l] = Σ scale(k / 16) · a[k] · q8[k]` over the values
//! `k ≡ l (mod 8)` (exact integers: any order gives the same sums), then in f32
//! `sums[l] += d · (f32)aux32[l]` with `d = d_w · d_a`; Q4_K and Q5_K also subtract their
//! minimums, `sumf −= dmin · (f32)sumi`. After the last super-block `sumf += sums[l]` for
//! `l = 0, 1, …, 7` in that order.

use crate::gguf::QK_K;

/// The f32 state of one K-quant dot product.
pub(crate) struct Lanes {
    sums: [f32; 8],
    sumf: f32,
}

impl Lanes {
    pub(crate) const fn new() -> Self {
        Lanes {
            sums: [0.0; 8],
            sumf: 0.0,
        }
    }

    /// Adds one super-block: weights `a`, activation codes `q8`, one integer scale per 16
    /// values, the combined f32 scale `d`.
    #[inline(always)]
    pub(crate) fn block(&mut self, a: &[i8; QK_K], q8: &[i8; QK_K], scales: &[i32; 16], d: f32) {
        let mut aux32 = [0i32; 8];
        for ((a16, q16), &sc) in a.chunks_exact(16).zip(q8.chunks_exact(16)).zip(scales) {
            for (a8, q8) in a16.chunks_exact(8).zip(q16.chunks_exact(8)) {
                for ((acc, &x), &y) in aux32.iter_mut().zip(a8).zip(q8) {
                    *acc += sc * (x as i32 * y as i32);
                }
            }
        }
        add_scaled(&mut self.sums, &aux32, d);
    }

    /// Subtracts one super-block's minimum term `dmin · (f32)sumi`.
    #[inline(always)]
    pub(crate) fn minus(&mut self, dmin: f32, sumi: i32) {
        self.sumf -= dmin * sumi as f32;
    }

    /// The dot product: `sumf` plus the lanes in order.
    #[inline(always)]
    pub(crate) fn total(self) -> f32 {
        let mut sumf = self.sumf;
        for s in self.sums {
            sumf += s;
        }
        sumf
    }
}

/// `sums[l] += d · (f32)aux32[l]` for the eight lanes, one lane at a time ([`lane_step`]). Out
/// of line, with the lanes in calls the compiler does not inline, so that the f32 steps stay
/// scalar: inlined, the Cortex-M55 build vectorized them into Helium's `VMUL.F32` / `VADD.F32`,
/// whose vector floats flush subnormals (the scalar FPU and the host do not), and the board's
/// portable dot products differed from the host's (and from the kernels) at subnormal scales.
/// The integer lanes before it stay free to vectorize (integers are exact).
#[inline(never)]
fn add_scaled(sums: &mut [f32; 8], aux32: &[i32; 8], d: f32) {
    for (s, &v) in sums.iter_mut().zip(aux32) {
        *s = lane_step(*s, d, v);
    }
}

/// One lane's `s + d · (f32)v` (see [`add_scaled`]).
#[inline(never)]
fn lane_step(s: f32, d: f32, v: i32) -> f32 {
    s + d * v as f32
}
