//! Every activation-quantizer kernel against the portable quantizers
//! ([`quantize_activation`]), bit for bit: one edge-case generator and one checker per
//! activation type, the kernel a function argument. The host's and AArch64's tests pass their
//! ISA's `quantize` entry; the boards' `matmul-check` firmware runs [`run_quantizers`] (this
//! build's dispatch, through [`check`](super::check)).
//!
//! Each activation type (Q8_0, Q8_1 at rows of [`ROW`] values, Q8_K at rows of [`ROW_K`]) is
//! tried on rows made of [`KINDS`] kinds of blocks, consecutive kinds side by side: random
//! mantissas and signs at every third exponent (subnormals at the first), mixed exponents
//! above each of those, exact halves (`±0.5`, `±2.5`, `±126.5` with a scale of 1, for `roundf`'s
//! half away from zero and `nearest_int`'s half to even), zeros of both signs, a block holding
//! an infinity or a NaN, the largest magnitude held by both signs (Q8_K keeps the first),
//! magnitudes around 2⁻¹¹⁷ with subnormals beside them (Helium's flushing lanes decline below
//! that), and values as the forward pass has them. Every row also with each output buffer one
//! block short (the blocks all of them hold). Outputs start equal, and every output byte is
//! compared. A kernel that declines (the portable code runs) is counted, not compared.

use super::check::{Rng, Summary, Work};
use crate::gguf::QK_K;
use crate::quant::{ActivationType, BLOCK, quantize_activation, sums_len};

/// An activation quantizer with the dispatch's signature: `false` (nothing written) when it
/// declines.
pub type Quantizer = fn(ActivationType, &[f32], &mut [i8], &mut [f32], &mut [f32]) -> bool;

/// Values per Q8_0 / Q8_1 row tried (SmolLM2's width: 18 blocks).
pub const ROW: usize = 576;
/// Values per Q8_K row tried (two super-blocks).
pub const ROW_K: usize = 2 * QK_K;

/// Block kinds of the exponent sweep: random values at every third exponent (0, 3, …, 252),
/// then mixed exponents above each.
const EXPONENT_KINDS: usize = 2 * 85;
/// Every block kind ([`fill`]).
pub const KINDS: usize = EXPONENT_KINDS + 12;

/// The activation types compared and their names.
pub const ACTS: [(ActivationType, &str); 3] = [
    (ActivationType::Q8_0, "q8_0"),
    (ActivationType::Q8_1, "q8_1"),
    (ActivationType::Q8_K, "q8_k"),
];

/// Output buffers one block short tried with each row: none, the codes, the scales, the sums.
const SHORTS: usize = 4;

/// Rows tried per activation type of `values`-value blocks in `row`-value rows (every kind at
/// least once; under Miri every eighth row).
const fn rows(values: usize, row: usize) -> usize {
    let per_row = row / values;
    let all = KINDS.div_ceil(per_row);
    if cfg!(miri) { all.div_ceil(8) } else { all }
}

/// Quantizer calls [`quantizers`] makes (each compared or declined).
pub const CALLS: u32 = ((2 * rows(BLOCK, ROW) + rows(QK_K, ROW_K)) * SHORTS) as u32;

/// A quantizer kernel whose output differs from the portable quantizer's.
#[derive(Debug, Clone, Copy)]
pub struct QuantMismatch {
    /// `"q8_0"`, `"q8_1"` or `"q8_k"`.
    pub act: &'static str,
    /// The row's first block kind.
    pub kind: u16,
    /// The short output buffer (0 none, 1 codes, 2 scales, 3 sums).
    pub short: u8,
    /// The first differing block (codes), or `u16::MAX` for the scales or sums only.
    pub block: u16,
}

/// Fills one block `xb` of kind `kind` (below [`KINDS`]).
fn fill(kind: usize, xb: &mut [f32], rng: &mut Rng) {
    let n = xb.len();
    let random = |rng: &mut Rng| rng.unit() * 8.0;
    if kind < EXPONENT_KINDS {
        let (e, mixed) = (3 * (kind / 2) as u32, kind % 2 == 1);
        for v in xb.iter_mut() {
            let r = rng.next() as u32;
            let ee = if mixed { (e + (r >> 28)).min(254) } else { e };
            *v = f32::from_bits((r & 0x8000_0000) | (ee << 23) | (r & 0x007f_ffff));
        }
        return;
    }
    match kind - EXPONENT_KINDS {
        // Halves and whole numbers up to 126.5 under a scale of 1: ±127 first (Q8_K's
        // `iscale` is then ∓1).
        k @ (0 | 1) => {
            for v in xb.iter_mut() {
                *v = (rng.below(507) as f32 - 253.0) * 0.5;
            }
            xb[0] = if k == 0 { 127.0 } else { -127.0 };
            xb[1..8].copy_from_slice(&[0.5, -0.5, 2.5, -2.5, 126.5, -126.5, 1.5]);
            xb[8] = -0.0;
        }
        2 => xb.fill(0.0),
        3 => xb.fill(-0.0),
        4 => {
            for v in xb.iter_mut() {
                *v = if rng.below(2) == 0 { 0.0 } else { -0.0 };
            }
        }
        k @ 5..=8 => {
            for v in xb.iter_mut() {
                *v = random(rng);
            }
            let special = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN][k - 5];
            xb[rng.below(n as u64) as usize] = special;
        }
        // The largest magnitude with both signs, in either order.
        k @ (9 | 10) => {
            for v in xb.iter_mut() {
                *v = random(rng);
            }
            let (i, j) = (
                rng.below(n as u64 / 2) as usize,
                n / 2 + rng.below(n as u64 / 2) as usize,
            );
            let a = if k == 9 { 9.5 } else { -9.5 };
            (xb[i], xb[j]) = (a, -a);
        }
        // Magnitudes 2⁻¹²⁷ … 2⁻¹¹³ (exponents 0 to 14: subnormals among them).
        11 => {
            for v in xb.iter_mut() {
                let r = rng.next() as u32;
                let e = (r >> 23) % 15;
                *v = f32::from_bits((r & 0x8000_0000) | (e << 23) | (r & 0x007f_ffff));
            }
        }
        _ => {
            for v in xb.iter_mut() {
                *v = random(rng);
            }
        }
    }
}

/// Runs `kernel` and the portable quantizer on every row of every activation type (the
/// buffers of `work`), calling `report` for each mismatch.
pub fn quantizers(
    work: &mut Work,
    kernel: Quantizer,
    report: &mut dyn FnMut(&QuantMismatch),
) -> Summary {
    let mut sum = Summary::default();
    let mut rng = Rng(0x5eed_0461);
    for (act, name) in ACTS {
        let (values, cols) = match act {
            ActivationType::Q8_K => (QK_K, ROW_K),
            _ => (BLOCK, ROW),
        };
        let (blocks, sums) = (cols / values, sums_len(cols));
        let per_row = blocks;
        let step = if cfg!(miri) { 8 } else { 1 };
        for r in (0..KINDS.div_ceil(per_row)).step_by(step) {
            let x = &mut work.x[..cols];
            for (j, xb) in x.chunks_exact_mut(values).enumerate() {
                fill((r * per_row + j) % KINDS, xb, &mut rng);
            }
            for short in 0..SHORTS {
                let lens = [
                    cols - if short == 1 { values } else { 0 },
                    blocks - usize::from(short == 2),
                    sums - if short == 3 { sums / blocks } else { 0 },
                ];
                let (qs_k, qs_p) = work.qs.split_at_mut(cols);
                let (d_k, d_p) = work.d.split_at_mut(blocks);
                let (s_k, s_p) = work.s.split_at_mut(sums);
                let (qk, dk, sk) = (
                    &mut qs_k[..lens[0]],
                    &mut d_k[..lens[1]],
                    &mut s_k[..lens[2]],
                );
                let (qp, dp, sp) = (
                    &mut qs_p[..lens[0]],
                    &mut d_p[..lens[1]],
                    &mut s_p[..lens[2]],
                );
                // The same start in both: bytes a quantizer leaves compare equal.
                qk.fill(0x55);
                qp.fill(0x55);
                dk.fill(7.0);
                dp.fill(7.0);
                sk.fill(9.0);
                sp.fill(9.0);
                let x = &work.x[..cols];
                if !kernel(act, x, qk, dk, sk) {
                    sum.declined += 1;
                    continue;
                }
                sum.compared += 1;
                quantize_activation(act, x, qp, dp, sp);
                let block = (0..blocks).find(|&b| {
                    qk.get(b * values..(b + 1) * values) != qp.get(b * values..(b + 1) * values)
                });
                let same = |a: &[f32], b: &[f32]| {
                    a.iter()
                        .map(|f| f.to_bits())
                        .eq(b.iter().map(|f| f.to_bits()))
                };
                if block.is_some() || !same(dk, dp) || !same(sk, sp) {
                    sum.mismatches += 1;
                    report(&QuantMismatch {
                        act: name,
                        kind: ((r * per_row) % KINDS) as u16,
                        short: short as u8,
                        block: block.map_or(u16::MAX, |b| b as u16),
                    });
                }
            }
        }
    }
    sum
}

/// [`quantizers`] with this build's dispatch (the kernels the forward pass runs).
pub fn run_quantizers(work: &mut Work, report: &mut dyn FnMut(&QuantMismatch)) -> Summary {
    quantizers(work, super::quantize, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This build's dispatch (AVX2, NEON where the CPU has them; the portable code, trivially,
    /// elsewhere and under Miri): every call compared where it has kernels.
    #[test]
    fn the_dispatched_quantizers_have_the_portable_bits() {
        let mut work = Box::new(Work::new());
        let mut bad = Vec::new();
        let sum = run_quantizers(&mut work, &mut |m| bad.push(*m));
        assert!(bad.is_empty(), "{bad:#?}");
        assert_eq!(sum.compared + sum.declined, CALLS, "{sum:?}");
        if super::super::kernels().is_some() {
            assert_eq!(sum.compared, CALLS, "{sum:?}");
        }
    }
}
