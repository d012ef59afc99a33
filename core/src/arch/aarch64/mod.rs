//! AArch64 (Cortex-A: NEON on every core; the dot-product extension, where the core has it,
//! detected at run time by `detect`): the [`Isa`](super::Isa) of the attention page loop's
//! AArch64 build (`isa`: f16 widening with `FCVTL`, lane sums with `FADDP`), its Q8_0 page
//! kernels (`int8`: scores with `SDOT` or `SMLAL`, values), its whole-page Q8_0 loop for runs of
//! up to four query heads in the lanes of one register (`page`; a page's scores in one `asm!`
//! block, `dot_quads` with `SDOT`, `smlal_quads` without), f16 page kernels (`f16`), and the
//! page quantizers ([`NativeQuant`]: Q8 groups in `quantize_int8`, FP8 E4M3 tiles in
//! `quantize_fp8`, sharing `quantize_lanes`, for groups and tiles of a multiple of 16 values;
//! Q4_0 / Q4_1 blocks in `quantize_int4`).
//!
//! Every kernel gives the portable code's bits: integer sums are exact (any order), float steps
//! are those of the portable kernels in their order, with no fused multiply-add (Rust never
//! fuses; `FMLA` would round once where the portable code rounds twice). The kernel check
//! (`arch::check`) runs both builds of the kernels, with and without `SDOT`, against the
//! portable ones.

mod dot_quads;
mod exp;
mod f16;
mod int8;
mod isa;
mod page;
mod quantize_fp8;
mod quantize_int4;
mod quantize_int8;
mod quantize_lanes;
#[cfg(test)]
mod quantize_tests;
mod smlal_quads;
#[cfg(test)]
mod tests;
mod values;

use half::f16 as F16;

use crate::format::QuantKernels;
use crate::format::int4::Q4Kind;

pub(crate) use isa::Neon;
#[cfg(test)]
pub(crate) use tests::force;

pub(crate) use super::aarch64_dotprod as dotprod;

/// The quantizer kernels with NEON (every AArch64 core has it), for groups (tiles) of a multiple
/// of 16 values; other sizes decline (the reference loop runs).
pub(crate) struct NativeQuant;

impl QuantKernels for NativeQuant {
    #[inline]
    fn q8_f32(x: &[f32], g: usize, codes: &mut [i8], scales: &mut [F16]) -> bool {
        let take = g != 0 && g % quantize_lanes::W == 0;
        if take {
            quantize_int8::quantize_groups(x, g, codes, scales);
        }
        take
    }

    #[inline]
    fn q8_f16(x: &[F16], g: usize, codes: &mut [i8], scales: &mut [F16]) -> bool {
        let take = g != 0 && g % quantize_lanes::W == 0;
        if take {
            quantize_int8::quantize_groups(x, g, codes, scales);
        }
        take
    }

    #[inline]
    fn fp8_f32(x: &[f32], tile: usize, codes: &mut [u8], scales: &mut [u8]) -> bool {
        let take = tile != 0 && tile % quantize_lanes::W == 0;
        if take {
            quantize_fp8::quantize_tiles(x, tile, codes, scales);
        }
        take
    }

    #[inline]
    fn fp8_f16(x: &[F16], tile: usize, codes: &mut [u8], scales: &mut [u8]) -> bool {
        let take = tile != 0 && tile % quantize_lanes::W == 0;
        if take {
            quantize_fp8::quantize_tiles(x, tile, codes, scales);
        }
        take
    }

    #[inline]
    fn q4_f32(kind: Q4Kind, x: &[f32], out: &mut [u8]) -> bool {
        let take = kind.bytes_for(x.len()) == Some(out.len());
        if take {
            quantize_int4::quantize_blocks(kind, x, out);
        }
        take
    }
}

/// The `Isa` of `small-code` builds' one page loop (`attention::small`): the portable one.
#[cfg(feature = "small-code")]
pub(crate) type SmallCode = super::Portable;

/// Which build of the page loop runs (the same for every page of a call: the query's codes are
/// laid out for it by [`arrange_query`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Build {
    /// NEON kernels with `SDOT` (the CPU has the dot-product extension).
    NeonDot,
    /// NEON kernels without `SDOT`.
    Neon,
    /// The portable build (tests only: to compare with it).
    #[cfg_attr(not(test), allow(dead_code))]
    Portable,
}

/// The build of the page loop this CPU runs ([`Build::NeonDot`] where [`dotprod`] says so).
#[inline]
pub(crate) fn build() -> Build {
    #[cfg(test)]
    if let Some(b) = tests::forced() {
        return b;
    }
    if dotprod() {
        Build::NeonDot
    } else {
        Build::Neon
    }
}

/// Lays a quantized query's codes (groups of `g`) out as this build's int8 score kernels read
/// them: with `SDOT` ([`Build::NeonDot`]) each chunk of 16 codes `q` as 16 bytes `q >> 8`, then
/// 16 bytes `(q & 0xff) − 128` (see `int8::dot_scores4`), for the groups the kernels take;
/// elsewhere as they are.
#[inline]
pub(crate) fn arrange_query(codes: &mut [i16], g: usize) {
    #[cfg(not(feature = "small-code"))]
    if build() == Build::NeonDot && isa::scores_take(g) {
        split_codes(codes);
    }
    #[cfg(feature = "small-code")]
    let _ = (codes, g);
}

/// [`arrange_query`] of [`Build::NeonDot`] (for the kernel check).
#[cfg(all(any(test, feature = "kernel-check"), not(feature = "small-code")))]
pub(crate) fn arrange_for_dot(codes: &mut [i16], g: usize) {
    if isa::scores_take(g) {
        split_codes(codes);
    }
}

/// Each whole chunk of 16 codes as 16 high bytes, then 16 low bytes less 128 (in place; a
/// tail of fewer than 16 stays).
#[cfg(not(feature = "small-code"))]
pub(crate) fn split_codes(codes: &mut [i16]) {
    for c in codes.chunks_exact_mut(16) {
        let mut b = [0u8; 32];
        for (i, &q) in c.iter().enumerate() {
            b[i] = (q >> 8) as u8;
            b[16 + i] = (q as u8).wrapping_sub(128);
        }
        for (c, b) in c.iter_mut().zip(b.chunks_exact(2)) {
            *c = i16::from_ne_bytes([b[0], b[1]]);
        }
    }
}
