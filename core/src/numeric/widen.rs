//! f16 widening: the exact conversion in integer operations every target runs, and the
//! [`Widen`] trait through which the decoders of `crate::format` take an ISA's own conversion
//! (F16C, the FPU's `VCVTB`) with the same bits.

use super::LANES;

/// f16 values to f32 with the bits of [`f16_to_f32`] (those of `half::f16::to_f32`, NaNs made
/// quiet). Implemented by [`Soft`] here and by each ISA's kernels with its own instructions.
pub(crate) trait Widen {
    /// One f16 value.
    fn one(h: u16) -> f32;
    /// Eight little-endian f16 values.
    fn block(b: &[u8; 2 * LANES]) -> [f32; LANES];
}

/// [`Widen`] in integer operations ([`f16_to_f32`], [`f16_block`]), on every target.
pub(crate) struct Soft;

impl Widen for Soft {
    #[inline(always)]
    fn one(h: u16) -> f32 {
        f16_to_f32(h)
    }

    #[inline(always)]
    fn block(b: &[u8; 2 * LANES]) -> [f32; LANES] {
        f16_block(b)
    }
}

/// Eight little-endian f16 values, the portable way. Out of line: inlined into the large
/// attention loops, LLVM leaves this scalar (one branchy conversion per element); alone it
/// vectorizes.
#[inline(never)]
pub(crate) fn f16_block(b: &[u8; 2 * LANES]) -> [f32; LANES] {
    let mut x = [0f32; LANES];
    for l in 0..LANES {
        x[l] = f16_to_f32(u16::from_le_bytes([b[2 * l], b[2 * l + 1]]));
    }
    x
}

/// IEEE binary16 to f32, bit-identical to `half::f16::to_f32` (NaNs made quiet) but branch-free
/// and without `half`'s per-call CPU feature check, so it inlines and vectorizes. Integer ops
/// and one exact subtraction; no subnormal f32 is ever formed.
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let em = (h & 0x7FFF) << 13; // exponent and mantissa in f32 position
    let exp = em & 0x0F80_0000;
    let normal = em + (112 << 23); // rebias 15 → 127
    // Subnormal or zero: 2^-14 · (1 + m) − 2^-14 = 2^-14 · m, exact.
    let sub = (f32::from_bits(em + (113 << 23)) - f32::from_bits(113 << 23)).to_bits();
    // Infinity or NaN (quiet bit set, as `half` does).
    let special = em | 0x7F80_0000 | ((((em & 0x007F_FFFF) != 0) as u32) << 22);
    // Selected with masks, not `if`s: branches here would keep LLVM from vectorizing.
    let is_sub = ((exp == 0) as u32).wrapping_neg();
    let is_special = ((exp == 0x0F80_0000) as u32).wrapping_neg();
    let mag = (sub & is_sub) | (special & is_special) | (normal & !(is_sub | is_special));
    f32::from_bits(mag | (h & 0x8000) << 16)
}
