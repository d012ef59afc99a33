//! Tests of the int8 codec: ggml's formula, corner cases, exhaustive checks of the helpers.

use half::bf16;

use super::*;
use crate::format::load::*;
use crate::quant::quantize_q8;

/// `2^e` for a normal exponent, exactly (`powi` is not exact under Miri).
fn p2(e: i32) -> f32 {
    f32::from_bits(((127 + e) as u32) << 23)
}

fn q8<T: Element>(x: &[T], g: usize) -> (Vec<i8>, Vec<f16>) {
    let mut q = vec![0i8; x.len()];
    let mut s = vec![f16::ZERO; x.len() / g];
    quantize_q8(x, g, &mut q, &mut s).expect("quantize");
    (q, s)
}

fn dq(q: &[i8], s: &[f16], g: usize) -> Vec<f32> {
    let mut y = vec![0f32; q.len()];
    dequantize_q8(q, s, g, &mut y).expect("dequantize");
    y
}

/// Scalar reference: the formula exactly as ggml writes it (`roundf`, per element).
fn reference(x: &[f32], g: usize) -> (Vec<i8>, Vec<f16>) {
    let mut q = Vec::new();
    let mut s = Vec::new();
    for xg in x.chunks(g) {
        let amax = xg
            .iter()
            .fold(0f32, |m, v| if v.abs() > m { v.abs() } else { m });
        let amax = if xg.iter().any(|v| v.is_nan()) {
            f32::NAN
        } else if amax < libm::exp2f(-100.0) {
            0.0 // a group below 2^-100 is a zero group (`floor::QUANT_FLOOR`)
        } else {
            amax
        };
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        q.extend(xg.iter().map(|&v| (v * id).round() as i8));
        s.push(if d.is_nan() {
            f16::NAN
        } else {
            f16::from_f32(d)
        });
    }
    (q, s)
}

#[test]
fn round_q8_ties_and_edges() {
    let cases = [
        (0.0f32, 0i8),
        (-0.0, 0),
        (0.5, 1),
        (-0.5, -1),
        (1.5, 2),
        (2.5, 3),
        (-2.5, -3),
        (0.499_999_97, 0),
        (-0.499_999_97, 0),
        (126.5, 127),
        (127.49, 127),
        (127.5, 127),
        (-127.5, -128),
        (1e30, 127),
        (-1e30, -128),
        (f32::INFINITY, 127),
        (f32::NEG_INFINITY, -128),
        (f32::NAN, 0),
        (8_388_609.0, 127),
    ];
    for (v, want) in cases {
        assert_eq!(round_q8(v), want, "{v}");
    }
}

#[test]
fn simple_group() {
    let x = [0.5f32, -1.0, 0.25, 1.27];
    let (q, s) = q8(&x, 4);
    assert_eq!(q, [50, -100, 25, 127]);
    assert_eq!(s[0], f16::from_f32(1.27 / 127.0));
}

#[test]
fn zeros_and_negative_zero() {
    let x = [0.0f32, -0.0, 0.0, -0.0];
    let (q, s) = q8(&x, 2);
    assert_eq!(q, [0; 4]);
    assert_eq!(s.iter().map(|s| s.to_bits()).collect::<Vec<_>>(), [0, 0]);
    let y = dq(&q, &s, 2);
    assert!(y.iter().all(|&v| v == 0.0));
}

#[test]
fn ties_after_scaling() {
    // amax 127 → d = 1, id = 1: x * id is x exactly.
    let x = [127.0f32, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5];
    let (q, s) = q8(&x, 8);
    assert_eq!(q, [127, 1, -1, 2, -2, 3, -3, 127]);
    assert_eq!(s[0], f16::ONE);
}

#[test]
fn f16_scale_underflow_keeps_codes() {
    // d = 1e-9 is below f16's smallest subnormal (~6e-8): stored scale 0, codes from f32 d.
    let x = [127e-9f32, -63.5e-9, 1e-9, 0.0];
    let (q, s) = q8(&x, 4);
    assert_eq!(s[0].to_bits(), 0);
    assert_eq!(q, reference(&x, 4).0);
    assert_eq!(q[0], 127);
    assert_eq!(q[1], -64);
    assert_eq!(dq(&q, &s, 4), [0.0; 4]);
}

#[test]
fn f16_scale_overflow_is_inf() {
    let x = [1e8f32, -5e7, 1.0, 0.0];
    let (q, s) = q8(&x, 4);
    assert_eq!(s[0], f16::INFINITY);
    assert_eq!(q, [127, -64, 0, 0]);
    let y = dq(&q, &s, 4);
    assert_eq!(y[0], f32::INFINITY);
    assert_eq!(y[1], f32::NEG_INFINITY);
    assert!(y[2].is_nan()); // 0 * inf
}

#[test]
fn groups_below_the_floor_are_zero_groups() {
    // Below 2^-100 (here subnormal: 1/d would overflow to inf, codes saturate) a group is a
    // zero group: codes 0, scale 0, as vector floats that flush subnormals write it too.
    let tiny = f32::from_bits(200);
    let x = [tiny, -tiny, 0.0, f32::from_bits(1)];
    let (q, s) = q8(&x, 4);
    assert_eq!(q, [0; 4]);
    assert_eq!(q, reference(&x, 4).0);
    assert_eq!(s[0].to_bits(), 0);
    // Just above the floor: d = 2^-100 / 127 is normal, codes as ggml's.
    let x = [libm::exp2f(-100.0), -tiny, 0.0, -libm::exp2f(-101.0)];
    let (q, s) = q8(&x, 4);
    assert_eq!(q, [127, 0, 0, -64]);
    assert_eq!(q, reference(&x, 4).0);
    assert_eq!(s[0].to_bits(), 0);
}

#[test]
fn nan_and_inf_poison_only_their_group() {
    let x = [
        1.0f32,
        f32::NAN,
        2.0,
        3.0,
        1.0,
        f32::INFINITY,
        -2.0,
        0.0,
        1.0,
        -1.0,
        0.5,
        0.0,
    ];
    let (q, s) = q8(&x, 4);
    assert!(s[0].is_nan());
    assert_eq!(s[1], f16::INFINITY);
    assert_eq!(&q[..8], &[0; 8]);
    assert_eq!(&q[8..], &[127, -127, 64, 0]);
    let y = dq(&q, &s, 4);
    assert!(y[..8].iter().all(|v| v.is_nan()));
    assert!(y[8..].iter().all(|v| !v.is_nan()));
    // The same for f16 and bf16 rows.
    let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    assert_eq!(q8(&h, 4).0, q);
    let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    assert_eq!(q8(&b, 4).0, q);
}

#[test]
fn matches_reference_on_mixed_groups() {
    let x: Vec<f32> = (0..384)
        .map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 0.013 * (1 + i % 5) as f32)
        .collect();
    for g in [1, 2, 3, 32, 64, 128, 96, 384] {
        let (q, s) = q8(&x, g);
        let (rq, rs) = reference(&x, g);
        assert_eq!(q, rq, "g = {g}");
        assert_eq!(s, rs, "g = {g}");
    }
}

#[test]
fn f16_and_bf16_rows_match_f32_rows() {
    let x: Vec<f32> = (0..256)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.37)
        .collect();
    let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let hf: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
    let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let bf: Vec<f32> = b.iter().map(|v| v.to_f32()).collect();
    for g in [16, 32, 64, 256] {
        assert_eq!(q8(&h, g), q8(&hf, g));
        assert_eq!(q8(&b, g), q8(&bf, g));
    }
    // Dequantizing into f16 / bf16 rounds the f32 result.
    let (q, s) = q8(&x, 32);
    let y = dq(&q, &s, 32);
    let mut yh = vec![f16::ZERO; 256];
    dequantize_q8(&q, &s, 32, &mut yh).expect("f16 out");
    let mut yb = vec![bf16::ZERO; 256];
    dequantize_q8(&q, &s, 32, &mut yb).expect("bf16 out");
    for i in 0..256 {
        assert_eq!(yh[i], f16::from_f32(y[i]));
        assert_eq!(yb[i], bf16::from_f32(y[i]));
    }
}

/// Every f16 bit pattern (a stride under Miri) through the branch-free conversions, against
/// `half`. NaN policy: `key_f32` gives what `half` gives for `|x|` (quiet bit set, payload
/// shifted up by 13, sign cleared), bit for bit; `f32`/`mag_prescaled` are only used on
/// finite values; the sign helpers take the sign bit of any pattern, NaN included.
#[test]
fn f16_bit_widening_is_exact() {
    let step = if cfg!(miri) { 251 } else { 1 };
    for b in (0..=u16::MAX).step_by(step) {
        let h = f16::from_bits(b);
        let neg = b & 0x8000 != 0;
        if h.is_finite() {
            assert_eq!(F16Bits::f32(h).to_bits(), h.to_f32().to_bits(), "{b:#x}");
            let pre = (F16Bits::f32_prescaled(h) as f64) * f64::from_bits((1023 + 112) << 52);
            assert_eq!(pre, h.to_f32() as f64, "{b:#x}");
            let mag = (F16Bits::mag_prescaled(h) as f64) * f64::from_bits((1023 + 112) << 52);
            assert_eq!(mag, h.to_f32().abs() as f64, "{b:#x}");
            assert_eq!(
                F16Bits::mag_prescaled(h) * TWO_POW_112,
                h.to_f32().abs(),
                "{b:#x}"
            );
        }
        assert_eq!(
            F16Bits::key_f32(F16Bits::key(h)).to_bits(),
            h.to_f32().abs().to_bits(),
            "{b:#x}"
        );
        assert_eq!(F16Bits::neg_mask(h), if neg { 0xFF } else { 0 }, "{b:#x}");
        assert_eq!(F16Bits::sign_byte(h) >= 0x80, neg, "{b:#x}");
    }
}

/// The f32 and bf16 loaders' sign helpers and magnitudes on every bf16 pattern (a stride
/// under Miri), widened to f32.
#[test]
fn element_sign_and_magnitude() {
    let step = if cfg!(miri) { 251 } else { 1 };
    for b in (0..=u16::MAX).step_by(step) {
        let v = bf16::from_bits(b);
        let f = v.to_f32();
        let neg = b & 0x8000 != 0;
        for (m, n, g) in [
            (
                ViaElement::<f32>::mag_prescaled(f),
                ViaElement::<f32>::neg_mask(f),
                ViaElement::<f32>::sign_byte(f),
            ),
            (
                ViaElement::<bf16>::mag_prescaled(v),
                ViaElement::<bf16>::neg_mask(v),
                ViaElement::<bf16>::sign_byte(v),
            ),
        ] {
            assert_eq!(m.to_bits(), f.abs().to_bits(), "{b:#x}");
            assert_eq!(n, if neg { 0xFF } else { 0 }, "{b:#x}");
            assert_eq!(g >= 0x80, neg, "{b:#x}");
        }
    }
}

#[test]
fn small_f16_groups_match_f32() {
    // amax below 127·2^-16: id·2^112 overflows f32, the codes undo the prescale first; and
    // down to f16 subnormals (d subnormal in f32 never happens for f16 input: amax ≥ 2^-24).
    let mut h = Vec::new();
    for e in 0..40u16 {
        let top = (0x2000u16.saturating_sub(e * 0x100)).max(1);
        for i in 0..32u16 {
            let b = (top / 32 * i + e) % top.max(1);
            h.push(f16::from_bits(if i % 3 == 0 { b | 0x8000 } else { b }));
        }
        h.push(f16::from_bits(top));
    }
    h.truncate(h.len() / 32 * 32);
    let hf: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
    for g in [1, 8, 32] {
        assert_eq!(q8(&h, g), reference(&hf, g), "g = {g}");
    }
}

#[test]
fn errors_leave_outputs_untouched() {
    let x = [1.0f32; 8];
    let mut q = [5i8; 8];
    let mut s = [f16::ONE; 2];
    let bad = |r: Result<()>, e: Error| assert_eq!(r, Err(e));
    bad(
        quantize_q8(&x, 0, &mut q, &mut s),
        Error::Config(ConfigError::InvalidFormat),
    );
    bad(quantize_q8(&x, 3, &mut q, &mut s), Error::LengthMismatch);
    bad(
        quantize_q8(&x, 4, &mut q[..7], &mut s),
        Error::LengthMismatch,
    );
    bad(
        quantize_q8(&x, 4, &mut q, &mut s[..1]),
        Error::LengthMismatch,
    );
    bad(quantize_q8(&x, 8, &mut q, &mut s), Error::LengthMismatch);
    assert_eq!(q, [5; 8]);
    assert_eq!(s, [f16::ONE; 2]);
    let mut y = [7f32; 8];
    bad(
        dequantize_q8(&q, &s, 0, &mut y),
        Error::Config(ConfigError::InvalidFormat),
    );
    bad(dequantize_q8(&q, &s, 3, &mut y), Error::LengthMismatch);
    bad(dequantize_q8(&q[..4], &s, 4, &mut y), Error::LengthMismatch);
    bad(dequantize_q8(&q, &s[..1], 4, &mut y), Error::LengthMismatch);
    bad(dequantize_q8(&q, &s, 4, &mut y[..4]), Error::LengthMismatch);
    assert_eq!(y, [7.0; 8]);
    // Empty rows are fine.
    assert_eq!(quantize_q8::<f32>(&[], 4, &mut [], &mut []), Ok(()));
    assert_eq!(dequantize_q8::<f32>(&[], &[], 4, &mut []), Ok(()));
}

#[test]
fn round_mag_matches_on_its_range() {
    // The f32 in [0, 127.5) are the bit patterns below 0x42FF_0000; sample them (all in the
    // ignored exhaustive test), plus every tie.
    let step = if cfg!(miri) { 1_000_003 } else { 997 };
    let ties = (0..127).map(|k| (k as f32 + 0.5).to_bits());
    for b in (0..0x42FF_0000u32).step_by(step).chain(ties) {
        let v = f32::from_bits(b);
        assert_eq!(round_mag_magic(v) as u8, round_q8(v) as u8, "{v:e}");
        assert_eq!(round_mag_cast(v) as u8, round_q8(v) as u8, "{v:e}");
    }
}

#[test]
fn amax_lanes() {
    type L = ViaElement<f32>;
    let mut x: Vec<f32> = (0..37).map(|i| (i as f32 - 18.0) * 0.5).collect();
    assert_eq!(L::amax(&x), 9.0);
    x[36] = -20.0; // in the remainder
    assert_eq!(L::amax(&x), 20.0);
    x[3] = f32::NEG_INFINITY;
    assert_eq!(L::amax(&x), f32::INFINITY);
    x[35] = f32::NAN;
    assert!(L::amax(&x).is_nan());
    x[3] = 0.0;
    assert!(L::amax(&x).is_nan());
    assert_eq!(L::amax(&[]), 0.0);
    assert_eq!(L::amax(&[-0.0]).to_bits(), 0);
    let h: Vec<f16> = (0..40).map(|i| f16::from_f32(i as f32 - 30.0)).collect();
    assert_eq!(F16Bits::amax(&h), 30.0);
    let mut h2 = h.clone();
    h2[20] = f16::NAN;
    assert!(F16Bits::amax(&h2).is_nan());
    h2[20] = f16::NEG_INFINITY;
    assert_eq!(F16Bits::amax(&h2), f32::INFINITY);
}

#[test]
fn f16_prescaled_product_is_exact() {
    // (x·2^-112)·(id·2^112) == x·id for every f16 x and a few ids.
    let step = if cfg!(miri) { 127 } else { 1 };
    for id in [1.0f32, 0.3, 127.0 / 3.0, 1e-3, 65000.0] {
        let idp = id * TWO_POW_112;
        for b in (0..0x7C00u16).step_by(step) {
            for h in [f16::from_bits(b), f16::from_bits(b | 0x8000)] {
                assert_eq!(
                    (F16Bits::f32_prescaled(h) * idp).to_bits(),
                    (h.to_f32() * id).to_bits()
                );
            }
        }
    }
}

/// `round_mag_*` against `round_q8` on every f32 in [0, 127.5).
#[test]
#[ignore = "exhaustive over 2^30 inputs; run with --release -- --ignored"]
fn exhaustive_round_mag() {
    for b in 0..0x42FF_0000u32 {
        let v = f32::from_bits(b);
        assert_eq!(round_mag_magic(v) as u8, round_q8(v) as u8, "{b:#x}");
        assert_eq!(round_mag_cast(v) as u8, round_q8(v) as u8, "{b:#x}");
    }
}

#[test]
fn f16_bits_rne_matches_half() {
    let step = if cfg!(miri) { 16_777_259 } else { 65_521 };
    let special = [
        0x4780_0000u32,
        0x477F_F000,
        0x477F_EFFF,
        0x3880_0000,
        0x387F_FFFF,
        0x3300_0000,
        0x3300_0001,
        0x7F80_0000,
        0,
    ];
    for b in (0..=u32::MAX)
        .step_by(step)
        .chain(special)
        .chain(special.map(|b| b | 0x8000_0000))
    {
        let v = f32::from_bits(b);
        if !v.is_nan() {
            assert_eq!(f16_bits_rne(v), f16::from_f32(v).to_bits(), "{b:#x}");
        }
    }
    assert_eq!(f16_bits_rne(f32::NAN), f16::NAN.to_bits());
}

#[test]
#[ignore = "exhaustive over 2^32 inputs; run with --release -- --ignored"]
fn exhaustive_f16_bits_rne() {
    for b in 0..=u32::MAX {
        let v = f32::from_bits(b);
        if !v.is_nan() {
            assert_eq!(f16_bits_rne(v), f16::from_f32(v).to_bits(), "{b:#x}");
        }
    }
}

/// `round_q8` against `f32::round` on every f32 (about 10 s in release).
#[test]
#[ignore = "exhaustive over 2^32 inputs; run with --release -- --ignored"]
fn exhaustive_round_q8() {
    for b in 0..=u32::MAX {
        let v = f32::from_bits(b);
        assert_eq!(round_q8(v), v.round() as i8, "{b:#x}");
    }
}

#[cfg(not(miri))]
mod props {
    use super::*;
    use proptest::prelude::*;

    /// Finite f32 values of mixed magnitudes (about 1e-30 .. 1e30) with some exact zeros.
    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            8 => -1e3f32..1e3f32,
            2 => (-30i32..30, -1f32..1f32).prop_map(|(e, m)| m * 10f32.powi(e)),
            1 => Just(0.0f32),
            1 => Just(-0.0f32),
        ]
    }

    fn row() -> impl Strategy<Value = (Vec<f32>, usize)> {
        prop_oneof![Just(1usize), Just(3), Just(8), Just(32), Just(64)].prop_flat_map(|g| {
            (1usize..5).prop_flat_map(move |n| (prop::collection::vec(value(), n * g), Just(g)))
        })
    }

    proptest! {
        /// Matches the scalar `roundf` reference bit for bit.
        #[test]
        fn matches_reference((x, g) in row()) {
            prop_assert_eq!(q8(&x, g), reference(&x, g));
        }

        /// The round-trip bound. Let `d` be the f32 scale the codes come from and `s` the
        /// stored scale widened to f32. Each `x·id` is within `3·2^-24·127` of `x/d`, so
        /// `|q·d − x| ≤ d/2 + 2^-16·d`, and `|q·s − x| ≤ d/2 + 127·|s − d| + 2^-16·d`
        /// (plus the f32 rounding of `q·s`). For `s` an f16 normal, `|s − d| ≤ 2^-11·d`, so
        /// `|y − x| ≤ 0.5621·d`; when `s == d` exactly it is the classic `d/2`. If `s` rounds
        /// to 0 the bound is `128·d ≈ amax`; if it overflows to inf, y is ±inf/NaN (not
        /// checked here, see `f16_scale_overflow_is_inf`).
        #[test]
        fn roundtrip_error_bound((x, g) in row()) {
            let (q, s) = q8(&x, g);
            let y = dq(&q, &s, g);
            for (gi, (xg, yg)) in x.chunks(g).zip(y.chunks(g)).enumerate() {
                let amax = xg.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let sf = s[gi].to_f32();
                if sf.is_infinite() {
                    continue;
                }
                let slack = p2(-16) * d + p2(-22) * amax;
                let general = 0.5 * d + 127.0 * (sf - d).abs() + slack;
                let normal = (p2(-14)..=65504.0).contains(&sf);
                for (&xv, &yv) in xg.iter().zip(yg) {
                    prop_assert!(yv.is_finite());
                    let err = (yv - xv).abs();
                    prop_assert!(err <= general, "x {} y {} d {} s {}", xv, yv, d, sf);
                    if normal {
                        let bound = if sf == d { 0.5 * d } else { 0.5621 * d } + slack;
                        prop_assert!(err <= bound, "x {} y {} d {} s {}", xv, yv, d, sf);
                    }
                }
            }
        }

        /// Requantizing dequantized values reproduces codes and scales for every group whose
        /// stored scale `s` is finite and non-zero. Proof: then `d` is a normal f32, the
        /// element with `|x| = amax` gets `|q| = 127` (`amax·id = 127·(1 ± 3·2^-24)`) and no
        /// code exceeds it; `y = q·s` is exact (7 × 11 significant bits); so the new
        /// `amax' = 127·s`, `d' = s` exactly, and `y·(1/s) = q·(1 ± 2^-23)` rounds back to q.
        /// (With `s` = 0 or inf the group dequantizes to 0 or NaN, so it cannot hold.)
        #[test]
        fn requantize_reproduces_codes((x, g) in row()) {
            let (q, s) = q8(&x, g);
            let y = dq(&q, &s, g);
            let (q2, s2) = q8(&y, g);
            for gi in 0..s.len() {
                let sf = s[gi].to_f32();
                if sf.is_finite() && sf != 0.0 {
                    prop_assert_eq!(&q2[gi * g..(gi + 1) * g], &q[gi * g..(gi + 1) * g]);
                    prop_assert_eq!(s2[gi], s[gi]);
                }
            }
        }

        /// The same fixed point from exact multiples of an f16 scale (every f16 exponent).
        #[test]
        fn requantize_exact_multiples(
            qs in prop::collection::vec(-127i8..=127, 1..5usize).prop_map(|mut v| { v[0] = -127; v }),
            bits in 1u16..0x7C00,
        ) {
            let d = f16::from_bits(bits).to_f32();
            let x: Vec<f32> = qs.iter().map(|&q| q as f32 * d).collect();
            let g = x.len();
            let (q, s) = q8(&x, g);
            prop_assert_eq!(s[0].to_f32(), d);
            prop_assert_eq!(&q, &qs);
        }

        /// Finite input: finite scales never NaN, codes in range, no panics (any type).
        #[test]
        fn finite_inputs_never_nan((x, g) in row()) {
            let (_, s) = q8(&x, g);
            prop_assert!(s.iter().all(|s| !s.is_nan()));
            let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
            let (_, sh) = q8(&h, g);
            prop_assert!(sh.iter().all(|s| !s.is_nan()));
        }
    }
}
