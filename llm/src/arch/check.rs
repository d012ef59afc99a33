//! Every matmul kernel of this build against the portable dot products, bit for bit (NaNs
//! compare as NaNs), on random rows and edge values: the boards' `matmul-check` firmware runs
//! [`run`] (feature `matmul-check`), and so do the host tests.
//!
//! Each weight type with a kernel (Q4_1 × Q8_1, Q8_0 × Q8_0, and the types Gemma's and other
//! GGUF files carry: Q4_0, Q5_0 × Q8_0, Q5_1 × Q8_1, the K-quants Q4_K, Q5_K and Q6_K × Q8_K at
//! [`COLS_K`]) is tried at every shape of
//! [`COLS`] × [`ROWS`] × [`ACTS`] and every [`Case`]: through the matmul entry (the kernels'
//! tiles of weight rows × activation rows, and the rows left over) and through the one-row
//! entry. A kernel that declines
//! (the portable code runs) is counted, not compared.

/// The activation quantizers' check (`check_quantize`), for the boards' firmware.
#[cfg(feature = "matmul-check")]
pub use super::check_quantize::{CALLS as QUANTIZER_CALLS, QuantMismatch, run_quantizers};
use super::{Acts, dot, matmul};
use crate::gguf::QK_K;
use crate::gguf::TensorType;
use crate::quant::{
    ActivationType, BLOCK, QuantRow, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0, quantize_q8_0,
    quantize_q8_1, quantize_q8_k, sums_len,
};

/// Values per row tried (SmolLM2's 576 among them). Under Miri, where every kernel declines
/// (the portable code runs: `none.rs`), a few shapes only: the full sweep took 555 s there.
pub const COLS: &[usize] = if cfg!(miri) {
    &[32, 96]
} else {
    &[32, 96, 128, 160, 576]
};
/// Values per row tried for the K-quants (one and two 256-value super-blocks: their kernels
/// take one at a time).
pub const COLS_K: &[usize] = if cfg!(miri) { &[256] } else { &[256, 512] };
/// Weight rows tried (odd counts leave rows after the four-row runs).
pub const ROWS: &[usize] = if cfg!(miri) {
    &[1, 5]
} else {
    &[1, 3, 4, 5, 8, 9]
};
/// Activation rows tried: one, fewer than a tile of four (the rows left over only), one tile,
/// a tile and one row, two tiles and one row (the host's kernels take four activation rows at
/// a time; the board's one).
pub const ACTS: &[usize] = if cfg!(miri) {
    &[1, 5]
} else {
    &[1, 2, 3, 4, 5, 9]
};

const MAX_COLS: usize = 576;
const MAX_ROWS: usize = 9;
const MAX_ACTS: usize = 9;
const MAX_BLOCKS: usize = MAX_COLS / BLOCK;
/// Q8_0 has the widest block (34 bytes); two Q6_K super-blocks (420 bytes) fit too.
const MAX_ROW_BYTES: usize = MAX_BLOCKS * q8_0::BYTES;
const _: () = assert!(2 * q6_k::BYTES <= MAX_ROW_BYTES && 2 * q4_k::BYTES <= MAX_ROW_BYTES);

/// The inputs of one comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// Random scales, minimums and codes.
    Random,
    /// Scales and minimums at the ends of f16 (subnormals, ±65504, zero), activation scales
    /// down to f32 subnormals.
    ExtremeScales,
    /// Codes at their ends: weight nibbles 0 / 15 (five- and six-bit values 0 / 31, 0 / 63),
    /// codes −128 / 127, the K-quants' scales at their ends, activation codes −128 / 127.
    EdgeCodes,
    /// Every other block all zero (weights and activations).
    ZeroBlocks,
}

impl Case {
    /// Every case.
    pub const ALL: [Case; 4] = [
        Case::Random,
        Case::ExtremeScales,
        Case::EdgeCodes,
        Case::ZeroBlocks,
    ];

    /// The case's name.
    pub const fn name(self) -> &'static str {
        match self {
            Case::Random => "random",
            Case::ExtremeScales => "extreme-scales",
            Case::EdgeCodes => "edge-codes",
            Case::ZeroBlocks => "zero-blocks",
        }
    }
}

/// A kernel whose result differs from the portable dot product's.
#[derive(Debug, Clone, Copy)]
pub struct Mismatch {
    /// `"matmul"` (the tiled entry) or `"dot"` (one row).
    pub entry: &'static str,
    /// The weight type (`"q4_1"`, `"q8_0"`, `"q4_0"`, `"q5_0"`, `"q5_1"`, `"q4_k"`, `"q5_k"`,
    /// `"q6_k"`).
    pub ty: &'static str,
    /// The inputs.
    pub case: Case,
    /// Values per row.
    pub cols: u16,
    /// Weight rows.
    pub rows: u16,
    /// Activation rows.
    pub acts: u16,
    /// The first differing output (`t · rows + o`).
    pub at: u16,
}

/// What [`run`] compared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Calls compared with the portable code.
    pub compared: u32,
    /// Calls a kernel declined (the portable code ran).
    pub declined: u32,
    /// Calls with a different result.
    pub mismatches: u32,
}

/// The buffers of [`run`] (about 32 KB: a static on a board).
#[derive(Debug)]
pub struct Work {
    pub(crate) w: [u8; MAX_ROWS * MAX_ROW_BYTES],
    pub(crate) x: [f32; MAX_ACTS * MAX_COLS],
    pub(crate) qs: [i8; MAX_ACTS * MAX_COLS],
    pub(crate) d: [f32; MAX_ACTS * MAX_BLOCKS],
    pub(crate) s: [f32; MAX_ACTS * MAX_BLOCKS],
    pub(crate) got: [f32; MAX_ACTS * MAX_ROWS],
}

impl Work {
    /// Zeroed buffers.
    pub const fn new() -> Self {
        Work {
            w: [0; MAX_ROWS * MAX_ROW_BYTES],
            x: [0.0; MAX_ACTS * MAX_COLS],
            qs: [0; MAX_ACTS * MAX_COLS],
            d: [0.0; MAX_ACTS * MAX_BLOCKS],
            s: [0.0; MAX_ACTS * MAX_BLOCKS],
            got: [0.0; MAX_ACTS * MAX_ROWS],
        }
    }
}

impl Default for Work {
    fn default() -> Self {
        Self::new()
    }
}

/// A small deterministic generator (SplitMix64).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in [-1, 1).
    pub(crate) fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// f16 bit patterns at the ends of the range: zero, the smallest subnormal, the largest
/// subnormal, the smallest normal, ±65504, one, a negative zero.
const EDGE_F16: [u16; 8] = [
    0x0000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0x8000,
];

/// An f16 scale for `case`: a random one in ±[2^-10, 2^2) (or positive), or an edge pattern.
fn scale(rng: &mut Rng, case: Case, positive: bool) -> u16 {
    if case == Case::ExtremeScales {
        return EDGE_F16[rng.below(EDGE_F16.len() as u64) as usize];
    }
    let exp = 5 + rng.below(12) as u16; // 2^-10 … 2^1
    let sign = if positive || rng.below(2) == 0 {
        0
    } else {
        0x8000
    };
    sign | (exp << 10) | rng.below(1024) as u16
}

/// Fills `rows` weight rows of `ty` (`cols` values each) for `case`.
pub(crate) fn weights(rng: &mut Rng, ty: TensorType, case: Case, w: &mut [u8], cols: usize) {
    if !matches!(ty, TensorType::Q4_1 | TensorType::Q8_0) {
        return weights_more(rng, ty, case, w, cols);
    }
    let (bytes, codes_at) = match ty {
        TensorType::Q4_1 => (q4_1::BYTES, 4),
        _ => (q8_0::BYTES, 2),
    };
    for (i, b) in w.chunks_exact_mut(bytes).enumerate() {
        if case == Case::ZeroBlocks && (i + i / (cols / BLOCK)) % 2 == 0 {
            b.fill(0);
            continue;
        }
        b[0..2].copy_from_slice(&scale(rng, case, ty == TensorType::Q4_1).to_le_bytes());
        if ty == TensorType::Q4_1 {
            b[2..4].copy_from_slice(&scale(rng, case, false).to_le_bytes());
        }
        for c in &mut b[codes_at..] {
            *c = match (case, ty) {
                (Case::EdgeCodes, TensorType::Q4_1) => {
                    [0x00, 0xff, 0x0f, 0xf0][rng.below(4) as usize]
                }
                (Case::EdgeCodes, _) => [0x80, 0x7f][rng.below(2) as usize],
                _ => rng.next() as u8,
            };
        }
    }
}

/// [`weights`] of Q4_0, Q5_0, Q5_1 and the K-quants: f16 scales as [`scale`] gives them, random
/// (or edge) codes, the K-quants' packed scales random (edge: 63, or i8 −128 / 127).
fn weights_more(rng: &mut Rng, ty: TensorType, case: Case, w: &mut [u8], cols: usize) {
    let (bytes, values) = match ty {
        TensorType::Q4_0 => (q4_0::BYTES, BLOCK),
        TensorType::Q5_0 => (q5_0::BYTES, BLOCK),
        TensorType::Q5_1 => (q5_1::BYTES, BLOCK),
        TensorType::Q4_K => (q4_k::BYTES, QK_K),
        TensorType::Q5_K => (q5_k::BYTES, QK_K),
        _ => (q6_k::BYTES, QK_K),
    };
    let edge = case == Case::EdgeCodes;
    for (i, b) in w.chunks_exact_mut(bytes).enumerate() {
        if case == Case::ZeroBlocks && (i + i / (cols / values)) % 2 == 0 {
            b.fill(0);
            continue;
        }
        for c in b.iter_mut() {
            *c = if edge {
                [0x00, 0xff, 0x0f, 0xf0][rng.below(4) as usize]
            } else {
                rng.next() as u8
            };
        }
        let mut put = |at: usize, positive| {
            b[at..at + 2].copy_from_slice(&scale(rng, case, positive).to_le_bytes());
        };
        match ty {
            TensorType::Q4_0 | TensorType::Q5_0 => put(0, false),
            TensorType::Q5_1 => {
                put(0, true);
                put(2, false);
            }
            TensorType::Q4_K | TensorType::Q5_K => {
                put(0, true);
                put(2, true);
                if edge {
                    b[4..16].fill(0xff);
                }
            }
            _ => {
                put(208, false);
                if edge {
                    for s in &mut b[192..208] {
                        *s = [0x80, 0x7f][rng.below(2) as usize];
                    }
                }
            }
        }
    }
}

/// Quantizes `n` random activation rows of `cols` values for `ty` with the reference
/// quantizers, then applies `case`.
pub(crate) fn activations(
    rng: &mut Rng,
    ty: TensorType,
    case: Case,
    work: &mut Work,
    cols: usize,
    n: usize,
) {
    let blocks = cols / BLOCK;
    let x = &mut work.x[..n * cols];
    for v in x.iter_mut() {
        *v = rng.unit() * 8.0;
    }
    let (qs, d, s) = (
        &mut work.qs[..n * cols],
        &mut work.d[..n * blocks],
        &mut work.s[..n * blocks],
    );
    if ActivationType::for_weights(ty) == Some(ActivationType::Q8_K) {
        return activations_k(rng, case, work, cols, n);
    }
    if ActivationType::for_weights(ty) == Some(ActivationType::Q8_1) {
        quantize_q8_1(x, qs, d, s);
    } else {
        quantize_q8_0(x, qs, d);
    }
    for b in 0..n * blocks {
        let codes = &mut qs[b * BLOCK..][..BLOCK];
        match case {
            Case::Random => {}
            Case::ExtremeScales => {
                const EDGE_F32: [f32; 6] = [0.0, 1e-40, 5.96e-8, 65504.0, -65504.0, 1.0];
                d[b] = EDGE_F32[rng.below(6) as usize];
                s[b] = EDGE_F32[rng.below(6) as usize];
            }
            Case::EdgeCodes => {
                for c in codes.iter_mut() {
                    *c = if rng.below(2) == 0 { -128 } else { 127 };
                }
            }
            Case::ZeroBlocks => {
                if b % 3 == 1 {
                    codes.fill(0);
                    d[b] = 0.0;
                    s[b] = 0.0;
                }
            }
        }
    }
}

/// [`activations`] in Q8_K (the K-quants' partner): the 16-value sums as i16 in `s`, kept the
/// codes' sums when a case changes the codes.
fn activations_k(rng: &mut Rng, case: Case, work: &mut Work, cols: usize, n: usize) {
    let (blocks, sums) = (n * cols / QK_K, n * sums_len(cols));
    let (qs, d) = (&mut work.qs[..n * cols], &mut work.d[..blocks]);
    let bsums: &mut [i16] = bytemuck::cast_slice_mut(&mut work.s[..sums]);
    quantize_q8_k(&work.x[..n * cols], qs, d, bsums);
    for b in 0..blocks {
        let codes = &mut qs[b * QK_K..][..QK_K];
        match case {
            Case::Random => {}
            Case::ExtremeScales => {
                const EDGE_F32: [f32; 6] = [0.0, 1e-40, 5.96e-8, 65504.0, -65504.0, 3.4e38];
                d[b] = EDGE_F32[rng.below(6) as usize];
            }
            Case::EdgeCodes => {
                for c in codes.iter_mut() {
                    *c = if rng.below(2) == 0 { -128 } else { 127 };
                }
            }
            Case::ZeroBlocks => {
                if b % 3 == 1 {
                    codes.fill(0);
                    d[b] = 0.0;
                }
            }
        }
        for (s, c16) in bsums[b * 16..][..16].iter_mut().zip(codes.chunks_exact(16)) {
            *s = c16.iter().map(|&c| c as i16).sum();
        }
    }
}

/// The weight types compared (those with a kernel on some target) and their names.
pub(crate) const TYPES: [(TensorType, &str); 8] = [
    (TensorType::Q4_1, "q4_1"),
    (TensorType::Q8_0, "q8_0"),
    (TensorType::Q4_0, "q4_0"),
    (TensorType::Q5_0, "q5_0"),
    (TensorType::Q5_1, "q5_1"),
    (TensorType::Q4_K, "q4_k"),
    (TensorType::Q5_K, "q5_k"),
    (TensorType::Q6_K, "q6_k"),
];

/// A portable dot product.
type Dot = fn(&[u8], &QuantRow<'_>) -> f32;

pub(crate) fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Runs every comparison, calling `report` for each mismatch.
pub fn run(work: &mut Work, report: &mut dyn FnMut(&Mismatch)) -> Summary {
    let mut sum = Summary::default();
    let mut rng = Rng(0x5eed_0046);
    for (ty, name) in TYPES {
        let (bytes, portable): (usize, Dot) = match ty {
            TensorType::Q4_1 => (q4_1::BYTES, q4_1::dot_q4_1_q8_1),
            TensorType::Q4_0 => (q4_0::BYTES, q4_0::dot_q4_0_q8_0),
            TensorType::Q5_0 => (q5_0::BYTES, q5_0::dot_q5_0_q8_0),
            TensorType::Q5_1 => (q5_1::BYTES, q5_1::dot_q5_1_q8_1),
            TensorType::Q4_K => (q4_k::BYTES, q4_k::dot_q4_k_q8_k),
            TensorType::Q5_K => (q5_k::BYTES, q5_k::dot_q5_k_q8_k),
            TensorType::Q6_K => (q6_k::BYTES, q6_k::dot_q6_k_q8_k),
            _ => (q8_0::BYTES, q8_0::dot_q8_0_q8_0),
        };
        let act = ActivationType::for_weights(ty).unwrap_or(ActivationType::Q8_0);
        let (values, all_cols) = match act {
            ActivationType::Q8_K => (QK_K, COLS_K),
            _ => (BLOCK, COLS),
        };
        for case in Case::ALL {
            for &cols in all_cols {
                let (blocks, row_bytes) = (cols / values, cols / values * bytes);
                let sums = if values == QK_K {
                    sums_len(cols)
                } else {
                    blocks
                };
                for &rows in ROWS {
                    for &n in ACTS {
                        weights(&mut rng, ty, case, &mut work.w[..rows * row_bytes], cols);
                        activations(&mut rng, ty, case, work, cols, n);
                        let w = &work.w[..rows * row_bytes];
                        let acts = Acts {
                            qs: &work.qs[..n * cols],
                            d: &work.d[..n * blocks],
                            s: &work.s[..n * sums],
                            cols,
                        };
                        let row = |t: usize| {
                            QuantRow::of(
                                act,
                                &acts.qs[t * cols..][..cols],
                                &acts.d[t * blocks..][..blocks],
                                &acts.s[t * sums..][..sums],
                            )
                        };
                        let want = |o: usize, t: usize| {
                            portable(&w[o * row_bytes..][..row_bytes], &row(t))
                        };
                        let mut mismatch = |entry, at: usize, sum: &mut Summary| {
                            sum.mismatches += 1;
                            report(&Mismatch {
                                entry,
                                ty: name,
                                case,
                                cols: cols as u16,
                                rows: rows as u16,
                                acts: n as u16,
                                at: at as u16,
                            });
                        };
                        let got = &mut work.got[..n * rows];
                        got.fill(f32::from_bits(0x7fc0_1234));
                        if matmul(ty, w, row_bytes, rows, &acts, n, got) {
                            sum.compared += 1;
                            let bad =
                                (0..n * rows).find(|&i| !same(got[i], want(i % rows, i / rows)));
                            if let Some(at) = bad {
                                mismatch("matmul", at, &mut sum);
                            }
                        } else {
                            sum.declined += 1;
                        }
                        // The one-row entry on the first row against each activation row.
                        let mut declined = false;
                        let mut bad = None;
                        for t in 0..n {
                            match dot(ty, &w[..row_bytes], &row(t)) {
                                Some(v) if !same(v, want(0, t)) => bad = bad.or(Some(t * rows)),
                                Some(_) => {}
                                None => declined = true,
                            }
                        }
                        if declined {
                            sum.declined += 1;
                        } else {
                            sum.compared += 1;
                            if let Some(at) = bad {
                                mismatch("dot", at, &mut sum);
                            }
                        }
                    }
                }
            }
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the host (AVX2 where the CPU has it; the portable code, trivially, elsewhere and under
    /// Miri).
    #[test]
    fn every_kernel_equals_the_portable_dot_products() {
        let mut work = Box::new(Work::new());
        let mut bad = Vec::new();
        let sum = run(&mut work, &mut |m| bad.push(*m));
        assert!(bad.is_empty(), "{bad:#?}");
        // Every type, case and shape, through the matmul entry and the one-row `dot`: five
        // types at `COLS`, three K-quants at `COLS_K`.
        let widths = 5 * COLS.len() + 3 * COLS_K.len();
        let calls = (widths * Case::ALL.len() * ROWS.len() * ACTS.len() * 2) as u32;
        assert_eq!(sum.compared + sum.declined, calls);
        // x86-64's AVX2 has a kernel for every type; elsewhere Q4_1 and Q8_0 at least.
        if super::super::kernels().is_some() && cfg!(target_arch = "x86_64") {
            assert_eq!(sum.compared, calls, "{sum:?}");
        } else if super::super::kernels().is_some() && cfg!(target_arch = "aarch64") {
            // NEON: Q4_1, Q8_0, Q5_0; Q4_K, Q6_K.
            let neon = 3 * COLS.len() + 2 * COLS_K.len();
            let want = (neon * Case::ALL.len() * ROWS.len() * ACTS.len() * 2) as u32;
            assert_eq!(sum.compared, want, "{sum:?}");
        } else if super::super::kernels().is_some() {
            let old = (2 * COLS.len() * Case::ALL.len() * ROWS.len() * ACTS.len() * 2) as u32;
            assert!(sum.compared >= old, "{sum:?}");
        }
    }
}
