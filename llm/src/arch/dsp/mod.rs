//! The DSP extension (ARMv7E-M and ARMv8-M Mainline without Helium: Cortex-M4, M7, M33 with a
//! hard-float FPU), chosen at build time (`build.rs`, as the core crate's DSP attention kernels):
//! one activation row against every weight row, two codes a step by `SMLAD` (16-bit halves,
//! exact in an `i32`), each block's scales combined by the scalar FPU in the portable order.
//!
//! The activation row is expanded once per call (per [`CHUNK`] blocks, on the stack) into the
//! 16-bit pairs `SMLAD` multiplies with the weights' pairs, and its block scales beside them
//! ([`expand_q8_1`], [`expand_q8_0`]), so that every weight row's inner loop only loads,
//! splits (`AND` of nibbles, `SXTB16` of bytes) and multiplies. Two weight rows at a time would
//! share the activation loads, but it needs one register more than the twelve `asm!` may take,
//! and counted it saves about half an instruction per block and row of ~51 (the weight codes
//! then load a word at a time instead of two). One file per weight type, each one `asm!` loop
//! (the DSP intrinsics are unstable).
//!
//! Of the types Gemma 3 adds, Q5_0 × Q8_0 is one `asm!` loop as these; Q4_K and Q6_K × Q8_K
//! one `asm!` block per two of a super-block's eight integer lanes, their f32 steps in Rust
//! (`k_lanes`), with small `asm!` helpers for the expansions and f16 scales (`insn`). Each expands the activation row once per call into the pairs its
//! weight unpacking gives (`k_lanes` for the K-quants, whose eight integer lanes per super-block
//! stay apart, as the portable order needs).

mod insn;
mod k_lanes;
mod q4_1;
mod q4_k;
mod q5_0;
mod q6_k;
mod q8_0;
mod quantize;

use super::Acts;
use crate::gguf::TensorType;
use crate::quant::{BLOCK, QuantRow};

/// Activation blocks expanded at a time (SmolLM2's 576-value rows in one chunk, its 1,536-value
/// FFN rows in two): at most 32 × 18 words (2,304 bytes) of stack.
const CHUNK: usize = 32;

/// This build's kernels.
pub(super) fn name() -> Option<&'static str> {
    Some("dsp")
}

/// Q4_1, Q8_0, Q5_0, Q4_K and Q6_K weights, every weight row against one activation row after
/// the other; other types, and Q4_1 rows not 4-byte aligned (its kernel loads blocks by words),
/// decline.
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
    let k_quant = matches!(ty, TensorType::Q4_K | TensorType::Q6_K);
    let fits = rows.checked_mul(row_bytes).is_some_and(|b| b <= w.len())
        && n.checked_mul(rows).is_some_and(|o| o <= out.len())
        && if k_quant { a.holds_k(n) } else { a.holds(n) };
    let known = k_quant || matches!(ty, TensorType::Q4_1 | TensorType::Q8_0 | TensorType::Q5_0);
    if !fits || !known {
        return false;
    }
    for t in 0..n {
        let out = &mut out[t * rows..][..rows];
        let done = match ty {
            TensorType::Q4_1 => q4_1::rows(w, row_bytes, &a.row(t), out),
            TensorType::Q5_0 => q5_0::rows(w, row_bytes, &a.row(t), out),
            TensorType::Q4_K => q4_k::rows(w, row_bytes, &a.row_k(t), out),
            TensorType::Q6_K => q6_k::rows(w, row_bytes, &a.row_k(t), out),
            _ => q8_0::rows(w, row_bytes, &a.row(t), out),
        };
        // Only at `t` = 0: whether the kernel takes the rows does not depend on `t`.
        if !done {
            return false;
        }
    }
    true
}

/// One weight row of type `ty` dotted with `a` (the activation row expanded for it alone),
/// `None` for the types and rows [`matmul`] declines.
#[inline]
pub(super) fn dot(ty: TensorType, w: &[u8], a: &QuantRow<'_>) -> Option<f32> {
    let mut out = [0.0f32];
    let done = match ty {
        TensorType::Q4_1 => q4_1::rows(w, w.len(), a, &mut out),
        TensorType::Q8_0 => q8_0::rows(w, w.len(), a, &mut out),
        TensorType::Q5_0 => q5_0::rows(w, w.len(), a, &mut out),
        TensorType::Q4_K => q4_k::rows(w, w.len(), a, &mut out),
        TensorType::Q6_K => q6_k::rows(w, w.len(), a, &mut out),
        _ => false,
    };
    done.then_some(out[0])
}

/// The 16-bit halves `(lo, hi)` of one word, as `SMLAD` multiplies them.
#[inline(always)]
fn pair(lo: i8, hi: i8) -> u32 {
    u32::from(lo as i16 as u16) | (u32::from(hi as i16 as u16) << 16)
}

/// Words per expanded Q8_1 block: `d`, `s` (f32 bits), then the 16 code pairs.
const Q8_1_WORDS: usize = 18;

/// Blocks `from..from + out.len() / 18` of `a` as the Q4_1 kernel reads them: per block `d` and
/// `s`, then for each of the block's four nibble words `k` the pairs of codes its four `AND`s
/// give (`(4k, 4k+2)`, `(4k+1, 4k+3)` of the low nibbles, `(4k+16, 4k+18)`, `(4k+17, 4k+19)` of
/// the high ones). The caller keeps the blocks within `a`.
fn expand_q8_1(a: &QuantRow<'_>, from: usize, out: &mut [u32]) {
    for (b, x) in (from..).zip(out.chunks_exact_mut(Q8_1_WORDS)) {
        x[0] = a.d[b].to_bits();
        x[1] = a.s[b].to_bits();
        let q = &a.qs[b * BLOCK..][..BLOCK];
        for (k, p) in x[2..].chunks_exact_mut(4).enumerate() {
            let j = 4 * k;
            p[0] = pair(q[j], q[j + 2]);
            p[1] = pair(q[j + 1], q[j + 3]);
            p[2] = pair(q[j + 16], q[j + 18]);
            p[3] = pair(q[j + 17], q[j + 19]);
        }
    }
}

/// Words per expanded Q8_0 block: `d` (f32 bits), then the 16 code pairs.
const Q8_0_WORDS: usize = 17;

/// Blocks `from..from + out.len() / 17` of `a` as the Q8_0 kernel reads them: per block `d`,
/// then for each of the block's eight code words `k` the pairs its two `SXTB16`s give
/// (`(4k, 4k+2)`, `(4k+1, 4k+3)`). The caller keeps the blocks within `a`.
fn expand_q8_0(a: &QuantRow<'_>, from: usize, out: &mut [u32]) {
    for (b, x) in (from..).zip(out.chunks_exact_mut(Q8_0_WORDS)) {
        x[0] = a.d[b].to_bits();
        let q = &a.qs[b * BLOCK..][..BLOCK];
        for (k, p) in x[1..].chunks_exact_mut(2).enumerate() {
            let j = 4 * k;
            p[0] = pair(q[j], q[j + 2]);
            p[1] = pair(q[j + 1], q[j + 3]);
        }
    }
}

/// Q8_0 and Q8_1 activation rows (`quantize`: `VCVT` truncation for `roundf`); Q8_K declines
/// (the portable quantizer runs).
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
        ActivationType::Q8_K => return false,
    }
    true
}
