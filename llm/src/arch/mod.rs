//! ISA kernels of the quantized matmuls behind one dispatch point, as the core crate's `arch`:
//! [`matmul`] and [`dot`] are called by [`matmul_quant`](crate::matmul::matmul_quant) and
//! [`dot_quant`](crate::matmul::dot_quant) and forward to `native`, the module of the ISA this
//! build targets, chosen once below: `arm/` (Helium, Cortex-M55 / M85, chosen at build time by
//! `build.rs`), `dsp/` (the DSP extension's `SMLAD`, Cortex-M4 / M7 / M33 with a hard-float FPU
//! and no Helium, also chosen by `build.rs`), `x86_64/` (AVX2 and F16C, detected at run time),
//! `aarch64/` (NEON, with `SDOT` where the core has it, detected at run time by the core crate's
//! [`aarch64_dotprod`](edgekv::aarch64_dotprod)), otherwise `none.rs`, where
//! every entry declines and the portable code of [`quant`](crate::quant) runs (as it does in
//! every build with the feature `portable`, and under Miri).
//!
//! The portable dot products are the reference: a kernel computes each block's integer sum in
//! any order (it is exact) and combines the block scales in f32 with the same operations in the
//! same block order, so it has their bits (tested here, in `x86_64/tests.rs`, and on the boards
//! by [`check`]'s `matmul-check` firmware).
//!
//! Adding an ISA: a folder `arch/<isa>/` with `matmul` and `dot` as `none.rs` has them, one file
//! per weight type, and one more line in the selection below. Adding a weight type to an ISA: a
//! file beside the others and an arm in its `matmul` / `dot`.

use core::sync::atomic::{AtomicBool, Ordering};

use crate::gguf::TensorType;
use crate::quant::{ActivationType, QuantRow};

// Which ISA module this build dispatches to: the build script names it (`edgekv_llm_mve`,
// `edgekv_llm_dsp`, `edgekv_llm_x86`, `edgekv_llm_aarch64`; none with the feature `portable` or
// under Miri).
#[cfg_attr(edgekv_llm_mve, path = "arm/mod.rs")]
#[cfg_attr(edgekv_llm_dsp, path = "dsp/mod.rs")]
#[cfg_attr(edgekv_llm_x86, path = "x86_64/mod.rs")]
#[cfg_attr(edgekv_llm_aarch64, path = "aarch64/mod.rs")]
#[cfg_attr(
    not(any(edgekv_llm_mve, edgekv_llm_dsp, edgekv_llm_x86, edgekv_llm_aarch64)),
    path = "none.rs"
)]
// The crate's only unsafe code: `asm!` and intrinsics behind build-time selection or run-time
// detection.
#[allow(unsafe_code)]
mod native;

#[cfg(any(test, feature = "matmul-check"))]
#[cfg_attr(not(feature = "matmul-check"), allow(dead_code))]
pub mod check;
#[cfg(any(test, feature = "matmul-check"))]
#[cfg_attr(not(feature = "matmul-check"), allow(dead_code))]
pub mod check_quantize;
#[cfg_attr(
    not(any(edgekv_llm_mve, edgekv_llm_dsp, edgekv_llm_aarch64)),
    allow(dead_code)
)]
mod quantize_rows;
#[cfg_attr(
    not(any(edgekv_llm_mve, edgekv_llm_x86, edgekv_llm_aarch64)),
    allow(dead_code)
)]
mod rows;

pub(crate) use rows::Acts;

/// Whether the kernels may run ([`set_kernels`]).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Whether [`tiles`] runs its tiles of several activation rows ([`set_tiles`]).
static TILES: AtomicBool = AtomicBool::new(true);

/// The ISA whose matmul kernels run here (this build, this CPU: `"helium"`, `"dsp"`, `"avx2"`,
/// `"neon-dotprod"`, `"neon"`), `None`
/// when the portable code runs (no kernels, or turned off by [`set_kernels`]).
pub fn kernels() -> Option<&'static str> {
    native::name().filter(|_| ENABLED.load(Ordering::Relaxed))
}

/// Turns this build's matmul kernels off (`false`: the portable code runs, with the same bits)
/// or back on, for every thread: for benchmarks that compare both in one process.
pub fn set_kernels(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Turns the tiles of several activation rows off (`false`: every weight row is multiplied with
/// one activation row after the other, each weight block decoded once per row, as before the
/// tiles; the same bits) or back on, for every thread: for benchmarks that compare both in one
/// process. On by default.
pub fn set_tiles(on: bool) {
    TILES.store(on, Ordering::Relaxed);
}

/// Whether the tiles of several activation rows run ([`set_tiles`]).
pub(crate) fn tiles_on() -> bool {
    TILES.load(Ordering::Relaxed)
}

/// `out[t · rows + o] = W[o] · a[t]` with this build's kernel for weights of type `ty`
/// (`rows` rows of `row_bytes` bytes in `w`, `n` activation rows in `a`); `false` (nothing
/// written) when it has none for `ty` and the caller runs the portable loops.
#[inline]
pub(crate) fn matmul(
    ty: TensorType,
    w: &[u8],
    row_bytes: usize,
    rows: usize,
    a: &Acts<'_>,
    n: usize,
    out: &mut [f32],
) -> bool {
    ENABLED.load(Ordering::Relaxed) && native::matmul(ty, w, row_bytes, rows, a, n, out)
}

/// One weight row of type `ty` dotted with one activation row by this build's kernel, `None`
/// when it has none for `ty`.
#[inline]
pub(crate) fn dot(ty: TensorType, w: &[u8], a: &QuantRow<'_>) -> Option<f32> {
    if !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    native::dot(ty, w, a)
}

/// Quantizes the activation row `x` as `act` with this build's kernel (the portable
/// [`quantize_activation`](crate::quant::quantize_activation)'s bits, the same buffers);
/// `false` (nothing written) when it has none for `act`.
#[inline]
pub(crate) fn quantize(
    act: ActivationType,
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
) -> bool {
    ENABLED.load(Ordering::Relaxed) && native::quantize(act, x, qs, d, s)
}
