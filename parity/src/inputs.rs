//! Deterministic inputs: K/V rows, queries and prompts from integer arithmetic.

use super::*;

/// splitmix64's finalizer: a seed mixer.
pub(crate) const fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// xorshift64 (13, 7, 17).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) const fn new(seed: u64) -> Self {
        Rng(mix(seed) | 1)
    }

    pub(crate) const fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in [0, 1) on a 2^-24 grid (exact in f32).
    pub(crate) fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 * (1.0 / 16_777_216.0)
    }

    /// Uniform in [-1, 1) on a 2^-23 grid (exact in f32).
    pub(crate) fn signed(&mut self) -> f32 {
        2.0 * self.unit() - 1.0
    }
}

/// K channels (of each head) scaled by [`K_OUTLIER`], as LLM keys have a few large channels.
pub const K_OUTLIERS: [usize; 3] = [5, 22, 47];
/// Factor of the K outlier channels.
pub const K_OUTLIER: f32 = 8.0;
/// The V channel (of each head) scaled by [`V_OUTLIER`].
pub const V_OUTLIER_CHANNEL: usize = 11;
/// Factor of the V outlier channel.
pub const V_OUTLIER: f32 = 4.0;

/// Where a sequence's rows and queries come from.
#[derive(Clone, Copy)]
pub(crate) enum Src {
    /// A numbered stream of pseudo-random rows.
    Stream(u64),
    /// Rows and queries as functions of the token prefix `tokens[..=pos]` (FNV-1a hash).
    Tokens(&'static [u32]),
    /// As `Stream`, queries × [`SHARP`]: scores hundreds apart, so that many weights are
    /// subnormal or zero (`exp` of less than −87).
    Sharp(u64),
    /// The `tiny` rows and queries (module `tiny`): values at and around the subnormal range.
    Tiny(u64),
}

/// Factor of the queries of [`Case::PagedQ8_0Sharp`].
pub const SHARP: f32 = 24.0;

impl Src {
    /// Position `pos`'s K and V rows of `layer`.
    pub(crate) fn kv_rows(self, layer: u16, pos: u32, k: &mut [f32], v: &mut [f32]) {
        let seed = self.seed(layer, pos, KIND_KV);
        match self {
            Src::Tiny(_) => tiny_kv_rows(seed, k, v),
            _ => kv_rows(seed, k, v),
        }
    }

    /// Position `pos`'s query row of `layer`.
    pub(crate) fn query_row(self, layer: u16, pos: u32, q: &mut [f32]) {
        let seed = self.seed(layer, pos, KIND_Q);
        match self {
            Src::Tiny(_) => tiny_query_row(seed, q),
            Src::Sharp(_) => {
                query_row(seed, q);
                q.iter_mut().for_each(|x| *x *= SHARP);
            }
            _ => query_row(seed, q),
        }
    }
}

pub(crate) const KIND_KV: u64 = 1;
pub(crate) const KIND_Q: u64 = 2;

impl Src {
    pub(crate) fn seed(self, layer: u16, pos: u32, kind: u64) -> u64 {
        let word = match self {
            Src::Stream(s) | Src::Sharp(s) | Src::Tiny(s) => mix(s),
            Src::Tokens(tokens) => tokens
                .iter()
                .take(pos as usize + 1)
                .fold(0xcbf2_9ce4_8422_2325u64, |h, &t| {
                    (h ^ t as u64).wrapping_mul(0x0100_0000_01b3)
                }),
        };
        mix(mix(word ^ layer as u64) ^ ((pos as u64) << 8 | kind))
    }
}

/// One token's K and V rows: per head a row scale in [0.25, 2), values uniform in ±scale, K
/// channels [`K_OUTLIERS`] × [`K_OUTLIER`], V channel [`V_OUTLIER_CHANNEL`] × [`V_OUTLIER`].
pub(crate) fn kv_rows(seed: u64, k: &mut [f32], v: &mut [f32]) {
    kv_rows_of(seed, SHAPE.head_dim as usize, k, v)
}

/// [`kv_rows`] for heads of `hd` dimensions.
pub(crate) fn kv_rows_of(seed: u64, hd: usize, k: &mut [f32], v: &mut [f32]) {
    let mut r = Rng::new(seed);
    for (kh, vh) in k.chunks_exact_mut(hd).zip(v.chunks_exact_mut(hd)) {
        let sk = 0.25 + 1.75 * r.unit();
        let sv = 0.25 + 1.75 * r.unit();
        for (i, (x, y)) in kh.iter_mut().zip(vh.iter_mut()).enumerate() {
            *x = r.signed() * sk;
            if K_OUTLIERS.contains(&i) {
                *x *= K_OUTLIER;
            }
            *y = r.signed() * sv;
            if i == V_OUTLIER_CHANNEL {
                *y *= V_OUTLIER;
            }
        }
    }
}

/// One query row: uniform in [-2, 2).
pub(crate) fn query_row(seed: u64, q: &mut [f32]) {
    let mut r = Rng::new(seed);
    for x in q {
        *x = 2.0 * r.signed();
    }
}

pub(crate) const fn tokens<const N: usize>(seed: u64, prefix: &[u32]) -> [u32; N] {
    let mut out = [0u32; N];
    let mut r = Rng::new(seed);
    let mut i = 0;
    while i < N {
        out[i] = if i < prefix.len() {
            prefix[i]
        } else {
            (r.next() >> 40) as u32 % 49_152
        };
        i += 1;
    }
    out
}

/// Prompt length of sequence B in the prefix cases.
pub const PROMPT_B: usize = 150;
/// Tokens of sequence B (prompt and 8 decoded tokens).
pub const TOKENS_B: [u32; 158] = tokens(0xB, &[]);
/// Leading tokens A shares with B.
pub const SHARED: usize = 100;
/// Sequence A's prompt: B's first [`SHARED`] tokens, then 20 others.
pub const TOKENS_A: [u32; 120] = tokens(0xA, TOKENS_B.split_at(SHARED).0);
/// Positions of B reused from A (whole chunks of published pages, below B's prompt length).
pub const REUSED: u32 = 96;
