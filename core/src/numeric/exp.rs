//! Attention weights: `exp` over a slice, eight lanes at a time, bit-identical to `libm::expf`,
//! then [`floor::weight`] (weights below 2^-60 are zero).
//!
//! `libm::expf` (FreeBSD's `e_expf`) is a handful of `f32` operations behind branches on the
//! argument's magnitude; one call per attention weight cost a fifth of decode time. Here the
//! branches become selects over eight lanes, so the compiler vectorizes the sequence on any
//! target. Every lane performs the very operations `libm` performs for its argument, in the same
//! order and without fused multiply-adds, so each result has the same bits. Arguments whose
//! magnitude reaches 87.3 (where `libm` handles overflow, subnormal results and underflow), NaN
//! and infinities go to `libm::expf` itself.
//!
//! `libm` is used rather than reimplemented for the scalar path; the vector form is written here
//! because no no_std crate offers a batched `expf` with `libm`'s exact bits.

use super::floor::weight;
use super::{LANES, larger};

/// `ln 2` split in a high part (exact when multiplied by small integers) and a low part.
pub(crate) const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
pub(crate) const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);
/// `1 / ln 2`.
pub(crate) const INV_LN2: f32 = f32::from_bits(0x3fb8_aa3b);
/// The rational approximation's coefficients on the reduced range `|r| ≤ ln 2 / 2`.
pub(crate) const P1: f32 = f32::from_bits(0x3e2a_aa8f);
pub(crate) const P2: f32 = f32::from_bits(0xbb35_5215);

/// `|x|` bit patterns: from here on (|x| ≥ 87.33655, infinities, NaN) `libm` decides.
pub(crate) const EDGE: u32 = 0x42ae_ac50;
/// Above `ln 2 / 2`: reduce by `k · ln 2`.
pub(crate) const HALF_LN2: u32 = 0x3eb1_7218;
/// Above `1.5 ln 2`: `k` from rounding `x / ln 2`; at or below, `k = ±1`.
pub(crate) const THREE_HALVES_LN2: u32 = 0x3f85_1592;
/// At or below `2^-14`: `exp(x)` rounds to `1 + x`.
pub(crate) const TINY: u32 = 0x3900_0000;
/// For `x ≤ 0`, `weight(libm::expf(x))` is zero exactly when `x` is below this (−41.58883: the
/// most negative `x` whose `exp` reaches [`floor::WEIGHT_FLOOR`](super::floor::WEIGHT_FLOOR)),
/// as a test checks over every negative `f32`.
pub(crate) const ZERO_BELOW: f32 = f32::from_bits(0xc226_5af6);

/// `xs[i] = weight(exp(xs[i] − shift))` for every element, each bit-identical to
/// `floor::weight(libm::expf(xs[i] - shift))`.
#[inline(always)]
pub(crate) fn exp_shifted(xs: &mut [f32], shift: f32) {
    let mut blocks = xs.chunks_exact_mut(LANES);
    for b in &mut blocks {
        let b: &mut [f32; LANES] = b.try_into().expect("a block");
        let mut x = [0f32; LANES];
        for l in 0..LANES {
            x[l] = b[l] - shift;
        }
        *b = exp8(x);
    }
    let tail = blocks.into_remainder();
    if !tail.is_empty() {
        let mut x = [0f32; LANES];
        for (x, t) in x.iter_mut().zip(tail.iter()) {
            *x = *t - shift;
        }
        let e = exp8(x);
        tail.copy_from_slice(&e[..tail.len()]);
    }
}

/// `xs[i] = weight(exp(xs[i] − shifts[i / row]))` for rows of `row` values (a multiple of
/// eight), each bit-identical to `floor::weight(libm::expf(xs[i] - shifts[i / row]))`: every
/// head's page of weights in one loop, the constants set up once rather than once per head
/// (3–4 % of a Q8_0 decode step on x86-64; summing the weights in the same loop measured
/// slower).
#[inline(always)]
pub(crate) fn exp_shifted_rows(xs: &mut [f32], row: usize, shifts: &[f32]) {
    for (xs, &shift) in xs.chunks_exact_mut(row).zip(shifts) {
        for b in xs.chunks_exact_mut(LANES) {
            let b: &mut [f32; LANES] = b.try_into().expect("a block");
            let mut x = [0f32; LANES];
            for l in 0..LANES {
                x[l] = b[l] - shift;
            }
            *b = exp8(x);
        }
    }
}

/// `floor::weight(libm::expf(x))` for one `x`, with `libm`'s steps inline for
/// `ZERO_BELOW ≤ x ≤ 0` (what attention's weights take: a score minus a maximum at least as
/// large) and `libm` itself elsewhere: the scalar weight of cores without vector floats. A call
/// of `libm::expf` checks every range `expf` handles and scales its result by `scalbnf`: on a
/// Cortex-M4 52 instructions a weight, a tenth of a decode step. Here the range checks are two
/// compares, the scaling one multiplication (exact: the result is normal), and the floor nothing
/// ([`ZERO_BELOW`] is where it starts). Each step is `libm`'s, in its order and unfused.
#[cfg_attr(feature = "small-code", allow(dead_code))]
#[inline(always)]
pub(crate) fn scalar(x: f32) -> f32 {
    // NaN fails both compares and goes to `libm` (which returns it).
    if x <= 0.0 {
        if x < ZERO_BELOW {
            return 0.0;
        }
        let hx = x.to_bits() & 0x7fff_ffff;
        if hx <= TINY {
            return 1.0 + x;
        }
        // libm's argument reduction for a negative `x` (its `HALF[sign]` is −0.5).
        let (k, hi, lo, r) = if hx > HALF_LN2 {
            let k = if hx > THREE_HALVES_LN2 {
                (INV_LN2 * x - 0.5) as i32
            } else {
                -1
            };
            let kf = k as f32;
            let hi = x - kf * LN2_HI;
            let lo = kf * LN2_LO;
            (k, hi, lo, hi - lo)
        } else {
            (0, x, 0.0, x)
        };
        let rr = r * r;
        let c = r - rr * (P1 + rr * P2);
        let y = 1.0 + (r * c / (2.0 - c) - lo + hi);
        // −60 ≤ k ≤ 0 here: libm's `scalbnf(y, k)` is this one multiplication (k = 0: y · 1).
        return y * f32::from_bits(((k + 127) as u32) << 23);
    }
    weight(libm::expf(x))
}

/// The largest of `s` (not NaN; −∞ if none), as `s.iter().fold(−∞, f32::max)` but in eight
/// lanes. A zero maximum may come out with the other sign than the fold's (`f32::max` leaves it
/// open), which changes no result: it is only compared and subtracted from scores, and
/// `x − 0` and `x + 0` differ only at `x = −0`, whose exp is 1 either way.
#[inline(always)]
pub(crate) fn max_of(s: &[f32]) -> f32 {
    // Not NaN in, not NaN out: `m` only ever takes a larger, hence non-NaN, `x`.
    let step = larger;
    let mut m = [f32::NEG_INFINITY; 8];
    let mut blocks = s.chunks_exact(8);
    for b in &mut blocks {
        for l in 0..8 {
            m[l] = step(m[l], b[l]);
        }
    }
    for (l, &x) in blocks.remainder().iter().enumerate() {
        m[l] = step(m[l], x);
    }
    step(
        step(step(m[0], m[1]), step(m[2], m[3])),
        step(step(m[4], m[5]), step(m[6], m[7])),
    )
}

/// `xs[i] = libm::expf(xs[i])` for every element, bit for bit (NaN stays NaN), eight lanes at
/// a time: `libm`'s steps as lanes the compiler vectorizes, `libm` itself for arguments of
/// magnitude 87.3 or more, infinities and NaN. For activations such as SiLU's `exp(−x)`.
pub fn exp_in_place(xs: &mut [f32]) {
    let mut blocks = xs.chunks_exact_mut(LANES);
    for b in &mut blocks {
        let b: &mut [f32; LANES] = b.try_into().expect("a block");
        *b = expf8(*b);
    }
    let tail = blocks.into_remainder();
    if !tail.is_empty() {
        let mut x = [0f32; LANES];
        x[..tail.len()].copy_from_slice(tail);
        let e = expf8(x);
        tail.copy_from_slice(&e[..tail.len()]);
    }
}

/// Eight `floor::weight(libm::expf(x))`s.
#[inline(always)]
fn exp8(x: [f32; LANES]) -> [f32; LANES] {
    let mut out = expf8(x);
    for o in &mut out {
        *o = weight(*o);
    }
    out
}

/// Eight `libm::expf(x)`s.
#[inline(always)]
fn expf8(x: [f32; LANES]) -> [f32; LANES] {
    let mut out = [0f32; LANES];
    let mut edge = false;
    for l in 0..LANES {
        out[l] = lane(x[l]);
        edge |= x[l].to_bits() & 0x7fff_ffff >= EDGE;
    }
    if edge {
        for l in 0..LANES {
            if x[l].to_bits() & 0x7fff_ffff >= EDGE {
                out[l] = libm::expf(x[l]);
            }
        }
    }
    out
}

/// `libm::expf(x)` for `|x| < 87.33655`, branch-free (any value otherwise).
#[inline(always)]
fn lane(x: f32) -> f32 {
    let bits = x.to_bits();
    let hx = bits & 0x7fff_ffff;
    let negative = (bits >> 31) as i32;
    let half = if negative != 0 { -0.5 } else { 0.5 };
    // Out-of-range lanes (|x| ≥ 87.3, NaN) are overwritten by the caller.
    let rounded = trunc_small(INV_LN2 * x + half);
    let one = 1 - negative - negative;
    let k = select_i32(
        hx > THREE_HALVES_LN2,
        rounded,
        select_i32(hx > HALF_LN2, one, 0),
    );
    // k = 0 reproduces libm's unreduced branch exactly: x − 0·LN2_HI = x, lo = 0, r = x.
    let kf = k as f32;
    let hi = x - kf * LN2_HI;
    let lo = kf * LN2_LO;
    let r = hi - lo;
    let rr = r * r;
    let c = r - rr * (P1 + rr * P2);
    let y = 1.0 + (r * c / (2.0 - c) - lo + hi);
    // libm's scalbnf(y, k) is this one multiplication for k ≥ −126 (here −126 ≤ k ≤ 126), and
    // k = 0 gives y · 1 = y.
    let scaled = y * f32::from_bits((k.wrapping_add(127) as u32) << 23);
    if hx <= TINY { 1.0 + x } else { scaled }
}

/// 1.5 · 2²³: for `|v| < 2²²`, `v + MAGIC` rounds `v` to an integer `n` (nearest even) whose
/// value is the sum's bits minus `MAGIC`'s.
const MAGIC: f32 = 12_582_912.0;

/// `v as i32` (truncation toward zero) for `|v| < 2²²`, any value otherwise, without a float →
/// int conversion: Rust's saturating casts stay scalar on x86 (eight `cvttss2si` with range
/// fix-ups per block), these integer and float steps vectorize. `n = RNE(v)` from the magic
/// sum, then one step toward zero where rounding went away from it (`n − v` is exact there).
#[inline(always)]
fn trunc_small(v: f32) -> i32 {
    let t = v + MAGIC;
    let n = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let nf = t - MAGIC;
    let away = if v >= 0.0 {
        -((nf > v) as i32)
    } else {
        (nf < v) as i32
    };
    n.wrapping_add(away)
}

/// `if c { a } else { b }` on integers, kept branch-free.
#[inline(always)]
fn select_i32(c: bool, a: i32, b: i32) -> i32 {
    let m = -(c as i32);
    (a & m) | (b & !m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(x: f32) {
        let mut v = [x];
        exp_shifted(&mut v, 0.0);
        let want = weight(libm::expf(x));
        assert!(
            v[0].to_bits() == want.to_bits() || (v[0].is_nan() && want.is_nan()),
            "exp({x:e}) = {:e}, libm {want:e}",
            v[0]
        );
    }

    /// `exp_in_place` is `libm::expf` on every lane and tail length, ranges and edges included.
    #[test]
    fn exp_in_place_is_libm() {
        let mut next = crate::testing::xorshift(0x2545_f491_4f6c_dd1d);
        let mut v: std::vec::Vec<f32> = (0..4099)
            .map(|i| {
                let x = next();
                match i % 4 {
                    0 => f32::from_bits(x as u32),
                    1 => (x as u32 as f32 / u32::MAX as f32 - 0.5) * 200.0,
                    2 => (x as u32 as f32 / u32::MAX as f32 - 0.5) * 2.0,
                    _ => (x as u32 as f32 / u32::MAX as f32 - 0.5) * 1e-3,
                }
            })
            .collect();
        v.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            88.72,
            -103.9,
        ]);
        for len in [0, 1, 7, 8, 9, v.len()] {
            let mut got = v[..len].to_vec();
            exp_in_place(&mut got);
            for (&g, &x) in got.iter().zip(&v) {
                let want = libm::expf(x);
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "exp({x:e}) = {g:e}, libm {want:e}"
                );
            }
        }
    }

    /// `max_of` equals the fold with `f32::max` (NaNs skipped, −∞ when nothing else).
    #[test]
    fn page_maximum_equals_the_fold() {
        let mut next = crate::testing::xorshift(0x9e37_79b9_7f4a_7c15);
        let pool = [
            f32::NAN,
            f32::NEG_INFINITY,
            f32::INFINITY,
            -3.5,
            2.25,
            0.0,
            -1e-30,
        ];
        for len in 0..40 {
            for _ in 0..50 {
                let s: std::vec::Vec<f32> = (0..len)
                    .map(|_| {
                        let x = next();
                        if x % 3 == 0 {
                            pool[(x >> 8) as usize % pool.len()]
                        } else {
                            (x >> 40) as f32 / 1e5 - 80.0
                        }
                    })
                    .collect();
                let want = s.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                assert_eq!(max_of(&s), want, "{s:?}");
            }
        }
    }

    /// Rows with their own shifts give each row's `exp_shifted` bits.
    #[test]
    fn rows_equal_one_row_at_a_time() {
        let xs: std::vec::Vec<f32> = (0..9 * 16)
            .map(|i| ((i * 37) % 101) as f32 * 0.71 - 40.0)
            .collect();
        let shifts = [
            0.0,
            3.5,
            -2.0,
            f32::NEG_INFINITY,
            30.0,
            1e-3,
            -0.0,
            88.5,
            12.25,
        ];
        let mut rows = xs.clone();
        exp_shifted_rows(&mut rows, 16, &shifts);
        for (h, (row, x)) in rows.chunks(16).zip(xs.chunks(16)).enumerate() {
            let mut one = x.to_vec();
            exp_shifted(&mut one, shifts[h]);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<std::vec::Vec<_>>();
            assert_eq!(bits(row), bits(&one), "row {h}");
        }
    }

    /// The conversion-free truncation equals `as i32` over the range the reduction uses (every
    /// f32 of magnitude below 256, stepped) and at its ends.
    #[test]
    fn trunc_small_equals_the_cast() {
        let mut b = 0u32;
        while b < 0x4380_0000 {
            for v in [f32::from_bits(b), -f32::from_bits(b)] {
                assert_eq!(trunc_small(v), v as i32, "{v:e}");
            }
            b += if cfg!(miri) { 0x0012_3457 } else { 0x0000_0101 };
        }
        for v in [
            0.5, -0.5, 0.49999997, 1.5, -1.5, 126.5, -126.5, 4194303.5, -4194303.5,
        ] {
            assert_eq!(trunc_small(v), v as i32, "{v:e}");
        }
    }

    /// Every branch boundary of libm's `expf` and its neighbours, specials included.
    #[test]
    fn boundaries_and_specials() {
        let edges = [
            0u32,
            TINY,
            HALF_LN2,
            THREE_HALVES_LN2,
            EDGE,
            0x42b1_7218,
            0x42cf_f1b5,
            0x7f80_0000,
        ];
        for e in edges {
            for d in 0..=8u32 {
                for sign in [0, 0x8000_0000] {
                    check(f32::from_bits((e.saturating_sub(4) + d) | sign));
                }
            }
        }
        for x in [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
            0.0,
            -0.0,
        ] {
            check(x);
        }
    }

    /// Bit patterns from `from` to the last, a stride apart, then the range attention uses
    /// densely: [−90, 0].
    fn sweep(from: u32) -> std::vec::Vec<f32> {
        let stride = if cfg!(miri) { 0x0100_0f01 } else { 0x0000_1f03 };
        let mut xs = std::vec::Vec::new();
        let mut b = from;
        while let Some(n) = b.checked_add(stride) {
            xs.push(f32::from_bits(b));
            b = n;
        }
        let steps = if cfg!(miri) { 1_000 } else { 400_000 };
        xs.extend((0..=steps).map(|i| -90.0 * i as f32 / steps as f32));
        xs
    }

    /// A stride through all bit patterns (every exponent, both signs), plus the range attention
    /// uses densely: [−90, 0].
    #[test]
    fn matches_libm_on_a_sweep() {
        let xs = sweep(0);
        let mut got = xs.clone();
        exp_shifted(&mut got, 0.0);
        for (x, g) in xs.iter().zip(&got) {
            let want = weight(libm::expf(*x));
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "exp({x:e}) = {g:e}, libm {want:e}"
            );
        }
    }

    /// [`scalar`] on the sweep, every branch boundary and the specials.
    #[test]
    fn scalar_matches_libm() {
        let mut xs = sweep(0);
        for e in [
            0,
            TINY,
            HALF_LN2,
            THREE_HALVES_LN2,
            ZERO_BELOW.to_bits() & 0x7fff_ffff,
        ] {
            xs.extend((0..=16u32).map(|d| f32::from_bits((e.saturating_sub(8) + d) | 1 << 31)));
        }
        xs.extend([
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1.0,
            90.0,
        ]);
        for x in xs {
            let (got, want) = (scalar(x), weight(libm::expf(x)));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "exp({x:e}) = {got:e}, libm {want:e}"
            );
        }
    }

    /// [`scalar`] on every `x` in [`ZERO_BELOW`, 0] (`cargo test --release -p edgekv
    /// scalar_every_weight -- --ignored`).
    #[test]
    #[ignore = "exhaustive: 1.1 · 10^9 values, run in release"]
    fn scalar_every_weight() {
        for b in 0x8000_0000..=ZERO_BELOW.to_bits() {
            let x = f32::from_bits(b);
            assert_eq!(
                scalar(x).to_bits(),
                weight(libm::expf(x)).to_bits(),
                "{x:e}"
            );
        }
    }

    /// [`ZERO_BELOW`]: over every negative `f32`, `weight(libm::expf(x))` is zero exactly below
    /// it (a full scan in release; a stride and the band around it otherwise).
    #[test]
    fn zero_below_is_where_weights_vanish() {
        let (stride, band) = match (cfg!(miri), cfg!(debug_assertions)) {
            (true, _) => (0x0100_0f01, 64),
            (false, true) => (0x0000_0f0f, 1 << 20),
            (false, false) => (1, 1),
        };
        let zero = |x: f32| weight(libm::expf(x)).to_bits() == 0;
        let below = f32::from_bits(ZERO_BELOW.to_bits() + 1);
        assert!(zero(below) && !zero(ZERO_BELOW));
        let mut b = 0x8000_0000u32;
        while b <= 0xff80_0000 {
            let x = f32::from_bits(b);
            assert_eq!(zero(x), x < ZERO_BELOW, "{x:e}");
            let near = b.abs_diff(ZERO_BELOW.to_bits()) < band;
            b += if near { 1 } else { stride };
        }
    }

    /// The Helium form of `arch/arm/mve_weights.rs`, step by step: for `x = s − shift ≤ 0`, `k`
    /// from a truncating conversion and two compares, [`ZERO_BELOW`] for the floor, every vector
    /// float step flushing subnormal inputs and results to zero (Helium's standard FPSCR), the
    /// division by the scalar FPU (IEEE).
    fn helium_form(s: f32, shift: f32) -> f32 {
        let z = |v: f32| {
            if v.is_subnormal() {
                0f32.copysign(v)
            } else {
                v
            }
        };
        let add = |a: f32, b: f32| z(z(a) + z(b));
        let sub = |a: f32, b: f32| z(z(a) - z(b));
        let mul = |a: f32, b: f32| z(z(a) * z(b));
        let lt = |a: f32, b: f32| z(a) < z(b);
        let x = sub(s, shift);
        let trunc = add(mul(x, INV_LN2), -0.5) as i32;
        let mut k = 0;
        if lt(x, -f32::from_bits(HALF_LN2)) {
            k = -1;
        }
        if lt(x, -f32::from_bits(THREE_HALVES_LN2)) {
            k = trunc;
        }
        let kf = k as f32;
        let hi = sub(x, mul(kf, LN2_HI));
        let lo = mul(kf, LN2_LO);
        let r = sub(hi, lo);
        let rr = mul(r, r);
        let c = sub(r, mul(rr, add(mul(rr, P2), P1)));
        let t = mul(r, c) / sub(2.0, c);
        let y = add(add(sub(t, lo), hi), 1.0);
        let two_k = ((k as u32) << 23).wrapping_add(1f32.to_bits());
        let mut out = mul(y, f32::from_bits(two_k));
        if z(x) >= z(-f32::from_bits(TINY)) {
            out = add(x, 1.0);
        }
        if lt(x, ZERO_BELOW) {
            out = 0.0;
        }
        out
    }

    /// The Helium form has `weight(libm::expf(x))`'s bits for every `x ≤ 0` tried (a stride
    /// through the negative floats, and [−90, 0] densely), NaN for NaN.
    #[test]
    fn helium_form_matches_libm() {
        let mut xs = std::vec![0.0, f32::NAN, f32::NEG_INFINITY, f32::MIN];
        xs.extend(sweep(0x8000_0000));
        for &x in &xs {
            let want = weight(libm::expf(x));
            let got = helium_form(x, 0.0);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "exp({x:e}) = {got:e}, libm {want:e}"
            );
        }
        // Shifted scores at or below their shift.
        for (s, shift) in [
            (-3.25, 7.5),
            (1e-3, 1e-3),
            (-40.0, 1.5),
            (f32::NEG_INFINITY, 0.0),
        ] {
            let want = weight(libm::expf(s - shift));
            assert_eq!(
                helium_form(s, shift).to_bits(),
                want.to_bits(),
                "{s} − {shift}"
            );
        }
    }

    /// The shift is applied first, then exp; tails shorter than a block work.
    #[test]
    fn shift_and_tail() {
        for n in 0..20 {
            let xs: std::vec::Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 3.0).collect();
            let mut got = xs.clone();
            exp_shifted(&mut got, 1.25);
            for (x, g) in xs.iter().zip(&got) {
                assert_eq!(g.to_bits(), weight(libm::expf(x - 1.25)).to_bits());
            }
        }
    }

    /// All 2^32 arguments (`cargo test --release -p edgekv exp_every_f32 -- --ignored`).
    #[test]
    #[ignore = "exhaustive: 2^32 values, run in release"]
    fn exp_every_f32() {
        let mut buf = std::vec![0f32; 1 << 16];
        for hi in 0..=u16::MAX as u32 {
            for (i, x) in buf.iter_mut().enumerate() {
                *x = f32::from_bits(hi << 16 | i as u32);
            }
            exp_shifted(&mut buf, 0.0);
            for (i, g) in buf.iter().enumerate() {
                let x = f32::from_bits(hi << 16 | i as u32);
                let want = weight(libm::expf(x));
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "exp({x:e}) = {g:e}, libm {want:e}"
                );
            }
        }
    }
}
