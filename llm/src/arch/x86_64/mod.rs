//! x86-64 with AVX2 and F16C (detected at run time, see `detect`): each weight row's blocks four
//! at a time, their integer sums in AVX2 (exact: `VPMADDUBSW` on nibbles, `VPMADDWD` on
//! sign-extended codes), the four blocks' f16 scales converted by `VCVTPH2PS` (exact), their
//! terms by the portable expression in four lanes (`VMULPS`, `VADDPS`, no FMA), then added to
//! the row's sum one block after the other. The K-quants (Q4_K, Q6_K × Q8_K) by super-blocks:
//! the values of each of the portable code's eight integer lanes kept apart (`k_lanes`), the
//! eight f32 lane sums in one register. One file per weight type; tests in `tests.rs`.

// Register-only intrinsics are safe to call in `target_feature` code since Rust 1.87; the
// workspace supports 1.85, where they are unsafe fns: keep the blocks, allow them unused.
#![allow(unused_unsafe)]

mod detect;
mod k_lanes;
// Q4_1 and Q5_1.
mod q4_1;
// Q4_K and Q5_K.
mod q4_k;
// Q5_0 and Q4_0.
mod q5_0;
mod q6_k;
mod q8_0;
mod quantize;
#[cfg(test)]
mod tests;

use super::Acts;
use crate::gguf::TensorType;
use crate::quant::{ActivationType, QuantRow};

/// `"avx2"` where this CPU runs the kernels.
pub(super) fn name() -> Option<&'static str> {
    detect::avx2_f16c().then_some("avx2")
}

/// Every quantized weight type, where this CPU has AVX2 and F16C; F32 declines.
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
    if !detect::avx2_f16c() {
        return false;
    }
    match ty {
        // SAFETY: `avx2_f16c()` checked both features.
        TensorType::Q4_1 => unsafe { q4_1::matmul::<false>(w, row_bytes, rows, a, n, out) },
        // SAFETY: as above.
        TensorType::Q8_0 => unsafe { q8_0::matmul(w, row_bytes, rows, a, n, out) },
        // SAFETY: as above.
        TensorType::Q5_0 => unsafe { q5_0::matmul::<true>(w, row_bytes, rows, a, n, out) },
        // SAFETY: as above.
        TensorType::Q4_K => unsafe { q4_k::matmul::<false>(w, row_bytes, rows, a, n, out) },
        // SAFETY: as above.
        TensorType::Q6_K => unsafe { q6_k::matmul(w, row_bytes, rows, a, n, out) },
        // SAFETY: as above.
        TensorType::Q4_0 => unsafe { q5_0::matmul::<false>(w, row_bytes, rows, a, n, out) },
        // SAFETY: as above.
        TensorType::Q5_1 => unsafe { q4_1::matmul::<true>(w, row_bytes, rows, a, n, out) },
        // SAFETY: as above.
        TensorType::Q5_K => unsafe { q4_k::matmul::<true>(w, row_bytes, rows, a, n, out) },
        TensorType::F32 => false,
    }
}

/// One quantized row, where this CPU has AVX2 and F16C; F32 declines.
#[inline]
pub(super) fn dot(ty: TensorType, w: &[u8], a: &QuantRow<'_>) -> Option<f32> {
    if !detect::avx2_f16c() {
        return None;
    }
    match ty {
        // SAFETY: `avx2_f16c()` checked both features.
        TensorType::Q4_1 => Some(unsafe { q4_1::dot::<false>(w, a) }),
        // SAFETY: as above.
        TensorType::Q8_0 => Some(unsafe { q8_0::dot(w, a) }),
        // SAFETY: as above.
        TensorType::Q5_0 => Some(unsafe { q5_0::dot::<true>(w, a) }),
        // SAFETY: as above.
        TensorType::Q4_K => Some(unsafe { q4_k::dot::<false>(w, a) }),
        // SAFETY: as above.
        TensorType::Q6_K => Some(unsafe { q6_k::dot(w, a) }),
        // SAFETY: as above.
        TensorType::Q4_0 => Some(unsafe { q5_0::dot::<false>(w, a) }),
        // SAFETY: as above.
        TensorType::Q5_1 => Some(unsafe { q4_1::dot::<true>(w, a) }),
        // SAFETY: as above.
        TensorType::Q5_K => Some(unsafe { q4_k::dot::<true>(w, a) }),
        TensorType::F32 => None,
    }
}

/// Every activation type (Q8_0, Q8_1, Q8_K), where this CPU has AVX2 and F16C.
#[inline]
pub(super) fn quantize(
    act: ActivationType,
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
) -> bool {
    if !detect::avx2_f16c() {
        return false;
    }
    match act {
        // SAFETY: `avx2_f16c()` checked AVX2 and F16C.
        ActivationType::Q8_0 => unsafe { quantize::q8(x, qs, d, None) },
        // SAFETY: as above.
        ActivationType::Q8_1 => unsafe { quantize::q8(x, qs, d, Some(s)) },
        ActivationType::Q8_K => {
            // Q8_K's 16-value sums travel as i16 in `s` (`QuantRow::of`).
            let bsums: &mut [i16] = bytemuck::try_cast_slice_mut(s).unwrap_or(&mut []);
            // SAFETY: as above.
            unsafe { quantize::q8_k(x, qs, d, bsums) }
        }
    }
    true
}
