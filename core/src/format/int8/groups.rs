//! The Q8 group loop of the reference codec: rounding, the block scale math and the codes,
//! written for LLVM's vectorizers (no per-element branches, no float→int `as` casts on x86, where
//! Rust's saturating casts stay scalar). The ISA kernels (`crate::arch`) reuse the scale math
//! and the slow paths, so their bits are these.

use half::f16;

use crate::format::load::{Load, select};
use crate::numeric::floor::quant_input;

/// `0.5 - 2^-25`, the largest f32 below one half.
///
/// For every f32 `v`, `trunc(v + copysign(ROUND_BIAS, v))` equals `v.round()` (half away from
/// zero): a half-integer `n + 0.5` gives `n + 1 - 2^-25`, which rounds up to `n + 1` in f32, while
/// anything below it stays below `n + 1` (the classic `v + 0.5` fails on `0.49999997`). Checked on
/// all 2^32 inputs (the ignored `exhaustive_round_q8` test).
pub(crate) const ROUND_BIAS: f32 = 0.499_999_97;

/// `round_half_away_from_zero(v)` saturated to `i8` (NaN → 0): exactly `v.round() as i8`.
#[inline(always)]
pub(crate) fn round_q8(v: f32) -> i8 {
    let bias = f32::from_bits(ROUND_BIAS.to_bits() | (v.to_bits() & 0x8000_0000));
    (v + bias) as i8
}

/// 2^23: for `0 ≤ a < 2^23`, `a + M23` rounds `a` to an integer (nearest even) whose value is
/// the low mantissa bits of the sum.
#[cfg(any(test, target_arch = "x86", target_arch = "x86_64"))]
const M23: f32 = 8_388_608.0;

/// [`round_q8`] of `0 ≤ a < 127.5` (as a `u32` whose low byte is the code), without a
/// float→int conversion: `n = RNE(a)` is the low byte of `a + 2^23`, plus 1 on an exact tie
/// (`a − n == 0.5`; the subtraction is exact by Sterbenz's lemma). Equal to [`round_q8`] on
/// that range (all 2^31 values in the ignored `exhaustive_round_mag` test).
#[cfg(any(test, target_arch = "x86", target_arch = "x86_64"))]
#[inline(always)]
pub(crate) fn round_mag_magic(a: f32) -> u32 {
    let t = a + M23;
    let tie = (a - (t - M23) == 0.5) as u32;
    t.to_bits().wrapping_add(tie)
}

/// [`round_q8`] of `0 ≤ a < 127.5` through the cast (`trunc(a + ROUND_BIAS)`).
#[cfg(any(test, not(any(target_arch = "x86", target_arch = "x86_64"))))]
#[inline(always)]
pub(crate) fn round_mag_cast(a: f32) -> u32 {
    (a + ROUND_BIAS) as u32
}

/// `round_half_away_from_zero(a)` for `0 ≤ a < 127.5`, in the low byte. On x86 the magic-number
/// form, which vectorizes (LLVM keeps Rust's saturating float→int casts scalar there);
/// elsewhere the cast, which is native (ARM's FCVTZU/VCVT saturate).
#[inline(always)]
fn round_mag(a: f32) -> u32 {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        round_mag_magic(a)
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        round_mag_cast(a)
    }
}

/// Codes from magnitudes and signs, sixteen at a time (one 16-lane tree for LLVM's SLP
/// vectorizer): `|code| = round(mag(x) · pre · idp)` ([`round_mag`]), then the sign applied to
/// the bytes. `pre` is 1, or a power of two that makes `mag(x) · pre` exact.
/// (`small-code` builds: one rolled loop, the same codes.)
#[inline(always)]
fn codes16_sm<L: Load>(x: &[L::R], codes: &mut [i8], idp: f32, pre: f32) {
    let code = |r| {
        let m = round_mag(L::mag_prescaled(r) * pre * idp) as u8;
        let s = L::neg_mask(r);
        ((m ^ s).wrapping_sub(s)) as i8
    };
    if cfg!(feature = "small-code") {
        for (c, &r) in codes.iter_mut().zip(x) {
            *c = code(r);
        }
        return;
    }
    let mut xs = x.chunks_exact(16);
    let mut cs = codes.chunks_exact_mut(16);
    for (xc, cc) in (&mut xs).zip(&mut cs) {
        for (c, &r) in cc.iter_mut().zip(xc) {
            *c = code(r);
        }
    }
    for (c, &r) in cs.into_remainder().iter_mut().zip(xs.remainder()) {
        *c = code(r);
    }
}

/// Groups per block: their `max|x|`, scales and inverse scales are computed together (vectorized
/// across groups), then the codes group by group.
// `small-code` builds use it only through the x86 kernels.
#[cfg_attr(feature = "small-code", allow(dead_code))]
pub(crate) const NB: usize = 16;

/// The scale math of a block of [`NB`] groups, from their `max|x|` keys (unused lanes hold
/// [`Load::K0`]).
// `small-code` builds use it only through the x86 kernels.
#[cfg_attr(feature = "small-code", allow(dead_code))]
pub(crate) struct BlockScales {
    /// `max|x|` per group (f32, exact).
    pub amax: [f32; NB],
    /// `1 / d`, or 0 when `d == 0`.
    pub ids: [f32; NB],
    /// Whether [`quantize_codes_fast`] applies (`d` zero or normal, `max|x|` finite).
    pub fast: [bool; NB],
    /// The stored scales' f16 bits.
    pub bits: [u16; NB],
}

/// [`BlockScales`] of the keys, in fixed-size lanes so that the math vectorizes across groups.
// `small-code` builds use it only through the x86 kernels.
#[cfg_attr(feature = "small-code", allow(dead_code))]
#[inline(always)]
pub(crate) fn block_scales<L: Load>(keys: &[L::K; NB]) -> BlockScales {
    let mut b = BlockScales {
        amax: [0f32; NB],
        ids: [0f32; NB],
        fast: [false; NB],
        bits: [0u16; NB],
    };
    for (i, &k) in keys.iter().enumerate() {
        (b.amax[i], b.ids[i], b.fast[i], b.bits[i]) = group_scale::<L>(k);
    }
    b
}

/// One group's scale math from its `max|x|` key: `max|x|`, `1 / d` (0 when `d == 0`), whether
/// [`quantize_codes_fast`] applies, and the stored scale's f16 bits.
#[inline(always)]
fn group_scale<L: Load>(k: L::K) -> (f32, f32, bool, u16) {
    // A group below 2^-100 is a zero group (`floor::quant_input`: its f16 scale is zero anyway;
    // otherwise `1 / d` and the codes of subnormal values could differ where vector floats
    // flush subnormals). At or above it, a subnormal x gives |x · id| < 2^-19: code 0.
    let a = quant_input(L::key_f32(k));
    let d = a / 127.0;
    let id = f32::from_bits(select(d == 0.0, 0, (1.0 / d).to_bits()));
    // d normal (or 0) and finite: the vectorized codes apply.
    let fast = (d == 0.0) | ((d >= f32::MIN_POSITIVE) & (a <= f32::MAX));
    // A NaN scale is the canonical NaN (no payload from the input).
    let bits = f16_bits_rne(f32::from_bits(select(
        a.is_nan(),
        f32::NAN.to_bits(),
        d.to_bits(),
    )));
    (a, id, fast, bits)
}

/// The group loop, in blocks of [`NB`] groups. (Not specialized on constant group sizes: fully
/// unrolled groups leave the `max|x|` reductions to the SLP vectorizer, which does worse.)
#[cfg(not(feature = "small-code"))]
pub(crate) fn quantize_groups<L: Load>(x: &[L::R], g: usize, codes: &mut [i8], scales: &mut [f16]) {
    for ((xb, cb), sb) in x
        .chunks(NB * g)
        .zip(codes.chunks_mut(NB * g))
        .zip(scales.chunks_mut(NB))
    {
        let mut keys = [L::K0; NB];
        for (k, xg) in keys.iter_mut().zip(xb.chunks_exact(g)) {
            *k = L::amax_key(xg);
        }
        let b = block_scales::<L>(&keys);
        for (s, &bits) in sb.iter_mut().zip(&b.bits) {
            *s = f16::from_bits(bits);
        }
        for (((xg, cg), &a), (&id, &f)) in xb
            .chunks_exact(g)
            .zip(cb.chunks_exact_mut(g))
            .zip(&b.amax)
            .zip(b.ids.iter().zip(&b.fast))
        {
            if f {
                quantize_codes_fast::<L>(xg, id, cg);
            } else {
                quantize_codes_slow::<L>(xg, a, id, cg);
            }
        }
    }
}

/// The group loop of `small-code` builds: group by group, each with [`group_scale`] and the
/// codes of the block loop above (the same bits, less code).
#[cfg(feature = "small-code")]
pub(crate) fn quantize_groups<L: Load>(x: &[L::R], g: usize, codes: &mut [i8], scales: &mut [f16]) {
    for ((xg, cg), s) in x.chunks_exact(g).zip(codes.chunks_exact_mut(g)).zip(scales) {
        let (a, id, fast, bits) = group_scale::<L>(L::amax_key(xg));
        *s = f16::from_bits(bits);
        if fast {
            quantize_codes_fast::<L>(xg, id, cg);
        } else {
            quantize_codes_slow::<L>(xg, a, id, cg);
        }
    }
}

/// `f16::from_f32(v).to_bits()` (round to nearest even; overflow to inf; a NaN becomes the
/// canonical quiet NaN with its sign), inline and branch-free (it vectorizes across groups):
/// `half`'s conversion is an out-of-line call on x86 hosts. The normal range rounds on the bits;
/// the subnormal range lets the FPU round (adding 0.5 puts the f16 subnormal spacing 2^-24 at the
/// f32 ulp). Equal to `half` on every non-NaN f32 (the ignored `exhaustive_f16_bits_rne` test).
#[inline(always)]
pub(crate) fn f16_bits_rne(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = (x >> 16) & 0x8000;
    let a = x & 0x7FFF_FFFF;
    // ≥ 65536 (or inf/NaN): everything from 65520 up rounds to inf.
    let big = select(a > 0x7F80_0000, 0x7E00, 0x7C00);
    // Below 2^-14: f16 subnormal or zero.
    let sub = (f32::from_bits(a) + 0.5)
        .to_bits()
        .wrapping_sub(0x3F00_0000);
    let odd = (a >> 13) & 1;
    let normal = a.wrapping_sub(112 << 23).wrapping_add(0xFFF + odd) >> 13;
    let o = select(a >= 0x4780_0000, big, select(a < 0x3880_0000, sub, normal));
    (o | sign) as u16
}

/// The codes of a group whose `d = max|x| / 127` is 0 or a normal f32 and `max|x|` finite:
/// `|x·id| ≤ max|x|·id ≤ 127·(1 + 2^-22) < 127.5` for every (finite) x.
#[inline(always)]
pub(crate) fn quantize_codes_fast<L: Load>(x: &[L::R], id: f32, codes: &mut [i8]) {
    let idp = id * L::INV_PRESCALE;
    if idp <= f32::MAX {
        // x·id = (x·PRESCALE)·(id/PRESCALE) exactly (powers of two), so the same rounding.
        codes16_sm::<L>(x, codes, idp, 1.0);
    } else {
        // id/PRESCALE overflows: undo the prescale first (exact), then x·id.
        codes16_sm::<L>(x, codes, id, L::INV_PRESCALE);
    }
}

/// The codes of a group that [`quantize_codes_fast`] does not take: non-finite `max|x|`, or
/// `d` subnormal (`max|x| < 127·2^-126`: `1/d` is imprecise or inf, codes may saturate).
#[inline(never)]
pub(crate) fn quantize_codes_slow<L: Load>(x: &[L::R], amax: f32, id: f32, codes: &mut [i8]) {
    if !amax.is_finite() {
        // inf: d = inf, id = 0, every x * 0 is 0 or NaN; NaN: d and id are NaN. Codes 0 either way.
        codes.fill(0);
    } else {
        for (c, &r) in codes.iter_mut().zip(x) {
            *c = round_q8(L::f32(r) * id);
        }
    }
}
