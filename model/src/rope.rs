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

#[cfg(test)]
mod tests {
    use super::Rope;

    #[test]
    fn position_zero_is_identity_and_pairs_keep_their_norm() {
        let rope = Rope::new(8, 10_000.0, 64);
        assert_eq!(rope.positions(), 64);
        let row: Vec<f32> = (0..16).map(|i| i as f32 * 0.25 - 1.0).collect();
        let mut r0 = row.clone();
        rope.apply(&mut r0, 0);
        assert_eq!(r0, row);
        let mut r = row.clone();
        rope.apply(&mut r, 37);
        for (a, b) in r.chunks(2).zip(row.chunks(2)) {
            let (na, nb) = (a[0].hypot(a[1]), b[0].hypot(b[1]));
            assert!((na - nb).abs() <= 1e-6 * nb.max(1.0));
        }
        // First pair of each head turns by the position itself (theta_0 = 1).
        let (c, s) = (37f32.cos(), 37f32.sin());
        assert_eq!(r[0], row[0] * c - row[1] * s);
        assert_eq!(r[8 + 1], row[8] * s + row[8 + 1] * c);
    }
}
