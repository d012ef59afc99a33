//! Choosing the next token: greedy, or top-k with temperature from a seeded PRNG.

/// Index of the largest logit (the first on ties; NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best as u32
}

/// PCG32 (XSH-RR, 64-bit state): a small, seeded, portable generator, so a sampled run repeats
/// bit for bit on every target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pcg32 {
    state: u64,
    inc: u64,
}

impl Pcg32 {
    /// A generator from a seed and a stream id.
    pub const fn new(seed: u64, stream: u64) -> Self {
        let inc = (stream << 1) | 1;
        let mut g = Pcg32 { state: 0, inc };
        g.state = g
            .state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(inc);
        g.state = g.state.wrapping_add(seed);
        g.state = g
            .state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(inc);
        g
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        let old = self.state;
        self.state = old
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(self.inc);
        let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
        let rot = (old >> 59) as u32;
        xorshifted.rotate_right(rot)
    }

    /// A uniform f32 in `[0, 1)` (24 random bits).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 * (1.0 / 16_777_216.0)
    }
}

/// Largest `top_k` candidates kept by the sampler.
pub const MAX_TOP_K: usize = 64;

/// How to pick tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// The largest logit.
    Greedy,
    /// Among the `k` largest logits (at most [`MAX_TOP_K`]; ties by lower id), softmax at
    /// `temperature` (> 0) with `libm::expf`, one draw from `rng`.
    TopK {
        /// Candidates.
        k: usize,
        /// Temperature.
        temperature: f32,
        /// The generator (advanced by each draw).
        rng: Pcg32,
    },
}

impl Sampling {
    /// The next token from one row of logits. Greedy for `k ≤ 1`, a temperature ≤ 0 or not
    /// finite.
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        let (k, temperature, rng) = match self {
            Sampling::Greedy => return argmax(logits),
            Sampling::TopK {
                k,
                temperature,
                rng,
            } => (*k, *temperature, rng),
        };
        let k = k.min(MAX_TOP_K).min(logits.len());
        if k <= 1 || !(temperature > 0.0 && temperature.is_finite()) {
            return argmax(logits);
        }
        // Insertion into a sorted top-k list (descending; equal values keep the lower id first).
        let mut ids = [0u32; MAX_TOP_K];
        let mut vals = [f32::NEG_INFINITY; MAX_TOP_K];
        let mut len = 0usize;
        for (i, &v) in logits.iter().enumerate() {
            if v.is_nan() || (len == k && v <= vals[k - 1]) {
                continue;
            }
            let mut j = len.min(k - 1);
            while j > 0 && vals[j - 1] < v {
                vals[j] = vals[j - 1];
                ids[j] = ids[j - 1];
                j -= 1;
            }
            vals[j] = v;
            ids[j] = i as u32;
            len = (len + 1).min(k);
        }
        if len == 0 {
            return 0;
        }
        let mut weights = [0f32; MAX_TOP_K];
        let mut total = 0f32;
        for (w, &v) in weights.iter_mut().zip(&vals[..len]) {
            *w = libm::expf((v - vals[0]) / temperature);
            total += *w;
        }
        let mut r = rng.next_f32() * total;
        for (&w, &id) in weights[..len].iter().zip(&ids[..len]) {
            if r < w {
                return id;
            }
            r -= w;
        }
        ids[len - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_and_top_k() {
        let logits = [0.1, 3.0, 2.9, -1.0, 3.0];
        assert_eq!(argmax(&logits), 1);
        assert_eq!(Sampling::Greedy.pick(&logits), 1);
        let mut s = Sampling::TopK {
            k: 2,
            temperature: 1.0,
            rng: Pcg32::new(42, 54),
        };
        let mut seen = [0usize; 5];
        for _ in 0..1000 {
            seen[s.pick(&logits) as usize] += 1;
        }
        // Only the two largest (ids 1 and 4, equal) are ever drawn, both often.
        assert_eq!(seen[0] + seen[2] + seen[3], 0);
        assert!(seen[1] > 300 && seen[4] > 300, "{seen:?}");
        // Same seed, same draws.
        let mut a = Pcg32::new(7, 1);
        let mut b = Pcg32::new(7, 1);
        assert!((0..100).all(|_| a.next_u32() == b.next_u32()));
    }
}
