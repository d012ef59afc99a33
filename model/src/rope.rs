//! Rotary position embedding, llama.cpp's type NORM: element pairs (2i, 2i + 1) of each head turn
//! by `position × base^(−2i / head_dim)`.

/// cos/sin per (position, pair), computed once for the context length.
#[derive(Debug, Clone)]
pub(crate) struct Rope {
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    /// Tables for positions `[0, positions)`. Angles in f32 as candle's quantized llama computes
    /// them (`1 / base^(2i/d)`, then position × that), cos/sin by the standard library.
    pub(crate) fn new(head_dim: usize, base: f32, positions: usize) -> Self {
        let half = head_dim / 2;
        let theta: Vec<f32> = (0..half)
            .map(|i| 1f32 / base.powf((2 * i) as f32 / head_dim as f32))
            .collect();
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        for p in 0..positions {
            for &t in &theta {
                let angle = p as f32 * t;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        Rope { half, cos, sin }
    }

    /// Positions the tables cover.
    pub(crate) fn positions(&self) -> usize {
        self.cos.len() / self.half.max(1)
    }

    /// Rotates every head of one token row (`heads × head_dim`) at `position` (< `positions()`).
    pub(crate) fn apply(&self, row: &mut [f32], position: usize) {
        let base = position * self.half;
        let (cos, sin) = (
            &self.cos[base..base + self.half],
            &self.sin[base..base + self.half],
        );
        for head in row.chunks_exact_mut(2 * self.half) {
            for ((pair, &c), &s) in head.chunks_exact_mut(2).zip(cos).zip(sin) {
                let (x0, x1) = (pair[0], pair[1]);
                pair[0] = x0 * c - x1 * s;
                pair[1] = x0 * s + x1 * c;
            }
        }
    }
}
