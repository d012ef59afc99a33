//! AArch64 (Cortex-A): NEON on every core, `SDOT` where the core has the dot-product extension
//! (asked of the core crate's one AArch64 detection, [`edgekv::aarch64_dotprod`]). Four weight
//! rows at a time against one activation row: each block's integer sums exact (`SDOT`, or
//! `SMULL` then `SADALP` without it), the four rows' sums side by side in one register, their
//! f16 scales widened by `FCVTL` (exact), and the portable block term per row in four lanes
//! (`FMUL`, `FADD`, never fused), added to each row's sum block after block. One file per
//! weight type; `lanes` holds what they share. Q5_0 takes the same four-row form. The K-quants
//! (Q4_K, Q6_K × Q8_K) one weight row at a time, the portable code's eight integer lanes kept
//! apart by `SMULL` / `SMLAL` and their f32 sums in two registers (`k_lanes`, shared).

mod k_lanes;
mod lanes;
mod q4_1;
mod q4_k;
mod q5_0;
mod q6_k;
mod q8_0;
mod quantize;

use super::Acts;
use super::rows::{tiles, tiles_k};
use crate::gguf::TensorType;
use crate::quant::QuantRow;

/// Whether the kernels here use `SDOT` (this CPU has it).
#[inline]
fn dot_ext() -> bool {
    edgekv::aarch64_dotprod()
}

/// `"neon-dotprod"` where this CPU has `SDOT`, else `"neon"`.
pub(super) fn name() -> Option<&'static str> {
    Some(if dot_ext() { "neon-dotprod" } else { "neon" })
}

/// Q4_1, Q8_0 and Q5_0 weights, four weight rows at a time against each activation row
/// ([`tiles`] with tiles of 4 × 1); Q4_K and Q6_K one row at a time ([`tiles_k`], 1 × 1);
/// other types decline.
#[inline]
pub(super) fn matmul(
    ty: TensorType,
    w: &[u8],
    row_bytes: usize,
    rows: usize,
    a: &Acts<'_>,
    n: usize,
    out: &mut [f32],
) -> bool {
    if dot_ext() {
        matmul_with::<true>(ty, w, row_bytes, rows, a, n, out)
    } else {
        matmul_with::<false>(ty, w, row_bytes, rows, a, n, out)
    }
}

/// [`matmul`] with (`DOT`) or without `SDOT`.
#[inline(always)]
fn matmul_with<const DOT: bool>(
    ty: TensorType,
    w: &[u8],
    row_bytes: usize,
    rows: usize,
    a: &Acts<'_>,
    n: usize,
    out: &mut [f32],
) -> bool {
    match ty {
        TensorType::Q4_1 => tiles::<4, 1>(
            w,
            row_bytes,
            rows,
            a,
            n,
            out,
            |w, a| q4_1::dot4::<DOT>(w, &a[0]).map(|v| [v]),
            q4_1::dot4::<DOT>,
            |w, a| q4_1::dot4::<DOT>([w; 4], a)[0],
        ),
        TensorType::Q8_0 => tiles::<4, 1>(
            w,
            row_bytes,
            rows,
            a,
            n,
            out,
            |w, a| q8_0::dot4::<DOT>(w, &a[0]).map(|v| [v]),
            q8_0::dot4::<DOT>,
            |w, a| q8_0::dot4::<DOT>([w; 4], a)[0],
        ),
        TensorType::Q5_0 => tiles::<4, 1>(
            w,
            row_bytes,
            rows,
            a,
            n,
            out,
            |w, a| q5_0::dot4::<DOT>(w, &a[0]).map(|v| [v]),
            q5_0::dot4::<DOT>,
            |w, a| q5_0::dot4::<DOT>([w; 4], a)[0],
        ),
        TensorType::Q4_K => tiles_k::<1, 1>(
            w,
            row_bytes,
            rows,
            a,
            n,
            out,
            |w, a| [[q4_k::dot(w[0], &a[0])]],
            |w, a| [q4_k::dot(w[0], a)],
            q4_k::dot,
        ),
        TensorType::Q6_K => tiles_k::<1, 1>(
            w,
            row_bytes,
            rows,
            a,
            n,
            out,
            |w, a| [[q6_k::dot(w[0], &a[0])]],
            |w, a| [q6_k::dot(w[0], a)],
            q6_k::dot,
        ),
        _ => false,
    }
}

/// One Q4_1, Q8_0 or Q5_0 row (the four-row kernel on the row four times), one Q4_K or Q6_K
/// row; other types decline.
#[inline]
pub(super) fn dot(ty: TensorType, w: &[u8], a: &QuantRow<'_>) -> Option<f32> {
    let dot = dot_ext();
    match ty {
        TensorType::Q4_1 if dot => Some(q4_1::dot4::<true>([w; 4], a)[0]),
        TensorType::Q4_1 => Some(q4_1::dot4::<false>([w; 4], a)[0]),
        TensorType::Q8_0 if dot => Some(q8_0::dot4::<true>([w; 4], a)[0]),
        TensorType::Q8_0 => Some(q8_0::dot4::<false>([w; 4], a)[0]),
        TensorType::Q5_0 if dot => Some(q5_0::dot4::<true>([w; 4], a)[0]),
        TensorType::Q5_0 => Some(q5_0::dot4::<false>([w; 4], a)[0]),
        TensorType::Q4_K => Some(q4_k::dot(w, a)),
        TensorType::Q6_K => Some(q6_k::dot(w, a)),
        _ => None,
    }
}

/// Every activation type (Q8_0, Q8_1, Q8_K: `quantize`, NEON on every AArch64 core).
#[inline]
pub(super) fn quantize(
    act: crate::quant::ActivationType,
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
) -> bool {
    use crate::quant::ActivationType;
    match act {
        ActivationType::Q8_0 => quantize::q8(x, qs, d, None),
        ActivationType::Q8_1 => quantize::q8(x, qs, d, Some(s)),
        ActivationType::Q8_K => {
            // Q8_K's 16-value sums travel as i16 in `s` (`QuantRow::of`).
            let bsums: &mut [i16] = bytemuck::try_cast_slice_mut(s).unwrap_or(&mut []);
            quantize::q8_k(x, qs, d, bsums)
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{BLOCK, q4_1 as portable_q4_1, q8_0 as portable_q8_0, quantize_q8_1};

    /// Both builds (with `SDOT` where this CPU has it) of both kernels against the portable dot
    /// products on rows of 1 to 48 blocks with edge codes: the same bits.
    #[test]
    fn both_builds_give_the_portable_bits() {
        let mut x = 0x2545_f491u32;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for blocks in [1, 2, 3, 7, 18, 48] {
            let cols = blocks * BLOCK;
            let v: Vec<f32> = (0..cols)
                .map(|_| (next() % 2001) as f32 * 1e-3 - 1.0)
                .collect();
            let (mut qs, mut d, mut s) = (vec![0i8; cols], vec![0f32; blocks], vec![0f32; blocks]);
            quantize_q8_1(&v, &mut qs, &mut d, &mut s);
            qs[0] = -128;
            qs[cols - 1] = 127;
            let a = QuantRow {
                qs: &qs,
                d: &d,
                s: &s,
                bsums: &[],
            };
            for (bytes, q4) in [(portable_q4_1::BYTES, true), (portable_q8_0::BYTES, false)] {
                let rows: Vec<Vec<u8>> = (0..4)
                    .map(|_| {
                        let mut r: Vec<u8> = (0..blocks * bytes).map(|_| next() as u8).collect();
                        for b in r.chunks_exact_mut(bytes) {
                            b[1] &= 0xbb;
                            b[3] &= 0xbb;
                            if !q4 {
                                b[2] = 0x80;
                            }
                        }
                        r
                    })
                    .collect();
                let w: [&[u8]; 4] = core::array::from_fn(|i| &rows[i][..]);
                let want = w.map(|w| {
                    if q4 {
                        portable_q4_1::dot_q4_1_q8_1(w, &a)
                    } else {
                        portable_q8_0::dot_q8_0_q8_0(w, &a)
                    }
                });
                let mut builds = vec![false];
                if dot_ext() {
                    builds.push(true);
                }
                for dot in builds {
                    let got = match (q4, dot) {
                        (true, true) => q4_1::dot4::<true>(w, &a),
                        (true, false) => q4_1::dot4::<false>(w, &a),
                        (false, true) => q8_0::dot4::<true>(w, &a),
                        (false, false) => q8_0::dot4::<false>(w, &a),
                    };
                    for (g, w) in got.iter().zip(&want) {
                        assert_eq!(
                            g.to_bits(),
                            w.to_bits(),
                            "q4 {q4} dot {dot} blocks {blocks}"
                        );
                    }
                }
            }
        }
    }

    /// The NEON activation quantizers (Q8_0, Q8_1, Q8_K) against the portable ones, bit for bit, on
    /// `check_quantize`'s edge cases (every exponent, exact halves, zeros of both signs, infinities
    /// and NaNs, ties of sign, short buffers): every call compared.
    #[test]
    fn activation_quantizers_have_the_portable_bits() {
        let mut work = Box::new(crate::arch::check::Work::new());
        let mut bad = Vec::new();
        let sum = crate::arch::check_quantize::quantizers(&mut work, super::quantize, &mut |m| {
            bad.push(*m)
        });
        assert!(bad.is_empty(), "{bad:#?}");
        assert_eq!(sum.compared, crate::arch::check_quantize::CALLS, "{sum:?}");
    }
}
