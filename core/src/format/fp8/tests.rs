//! Tests of the FP8 tile codec: the e4m3 cast against `float8`, the reference's layout and
//! corner cases.

use super::*;
use crate::quant::quantize_fp8_tile;

/// The oracle: `float8`'s cast (through f64), except that NaN signs are taken from the bits
/// (a float cast may change a NaN's sign; Miri does so at random).
fn float8_code(x: f32) -> u8 {
    if x.is_nan() {
        0x7F | ((x.to_bits() >> 24) & 0x80) as u8
    } else {
        float8::F8E4M3::from_f32(x).to_bits()
    }
}

/// `2^e` for a normal exponent, exactly (`powi` is not exact under Miri).
fn p2(e: i32) -> f32 {
    f32::from_bits(((127 + e) as u32) << 23)
}
use half::f16;

fn quant<T: Element>(x: &[T], dv: usize, tile: usize, bf16: bool) -> Vec<u8> {
    let n = fp8_tile_row_bytes(x.len(), dv, tile, bf16).expect("row bytes");
    let mut row = vec![0xAAu8; n];
    quantize_fp8_tile(x, dv, tile, bf16, &mut row).expect("quantize");
    row
}

fn dequant(row: &[u8], d: usize, dv: usize, tile: usize, bf16: bool) -> Vec<f32> {
    let mut y = vec![0f32; d];
    dequantize_fp8_tile(row, dv, tile, bf16, &mut y).expect("dequantize");
    y
}

fn scale(row: &[u8], dv: usize, t: usize) -> f32 {
    let o = dv + 4 * t;
    f32::from_le_bytes([row[o], row[o + 1], row[o + 2], row[o + 3]])
}

#[test]
fn e4m3_special_values() {
    let cases: [(f32, u8); 22] = [
        (0.0, 0x00),
        (-0.0, 0x80),
        (448.0, 0x7E),
        (449.0, 0x7E),
        (463.9, 0x7E),
        (464.0, 0x7E),
        (464.1, 0x7E),
        (1e6, 0x7E),
        (-1e6, 0xFE),
        (f32::INFINITY, 0x7E),
        (f32::NEG_INFINITY, 0xFE),
        (f32::NAN, 0x7F),
        (-f32::NAN, 0xFF),
        (1.0, 0x38),
        (-1.5, 0xBC),
        (p2(-6), 0x08),
        (p2(-9), 0x01),
        (p2(-10), 0x00),        // tie between 0 and the smallest subnormal → even (0)
        (3.0 * p2(-10), 0x02),  // tie between 1 and 2 → even (2)
        (15.0 * p2(-10), 0x08), // tie between 7·2^-9 and 2^-6 → even (8)
        (1.0625, 0x38),         // tie between 1 and 1.125 → even (1)
        (1.1875, 0x3A),         // tie between 1.125 and 1.25 → even (1.25)
    ];
    for (x, want) in cases {
        assert_eq!(e4m3_from_f32(x), want, "{x:e}");
        assert_eq!(e4m3_from_f32(x), float8_code(x), "{x:e}");
    }
    assert_eq!(e4m3_from_f32(f32::from_bits(1)), 0x00);
    assert_eq!(e4m3_from_f32(-f32::from_bits(1)), 0x80);
}

#[test]
fn e4m3_decode_all_codes() {
    for c in 0..=255u8 {
        let v = e4m3_to_f32(c);
        let want = float8::F8E4M3::from_bits(c).to_f32();
        if c & 0x7F == 0x7F {
            assert!(v.is_nan() && v.is_sign_negative() == (c >= 0x80));
        } else {
            assert_eq!(v.to_bits(), want.to_bits(), "{c:#x}");
            assert_eq!(e4m3_from_f32(v), c, "round trip {c:#x}");
        }
    }
    assert_eq!(e4m3_to_f32(0x7E), 448.0);
    assert_eq!(e4m3_to_f32(0x01), p2(-9));
}

#[test]
fn e4m3_matches_float8_on_a_sweep() {
    // Every 65537th bit pattern (all of them in the ignored exhaustive test).
    let step = if cfg!(miri) { 16_777_259 } else { 65_537 };
    for b in (0..=u32::MAX).step_by(step) {
        let x = f32::from_bits(b);
        assert_eq!(e4m3_from_f32(x), float8_code(x), "{b:#x}");
    }
}

/// Signalling and quiet NaNs of both signs give 0x7F / 0xFF on every target (the oracle's NaN rule
/// is integer-only too): on AArch64 the clamp once went through `FMINNM`, which quiets a
/// signalling NaN instead of returning 448, and 0x7f807f80 encoded as 0x3D.
#[test]
fn e4m3_nans_of_every_kind() {
    for b in [
        0x7F80_0001u32,
        0x7F80_7F80,
        0x7FBF_FFFF,
        0x7FC0_0000,
        0x7FFF_FFFF,
    ] {
        for sign in [0, 0x8000_0000] {
            let x = f32::from_bits(b | sign);
            let want = 0x7F | (sign >> 24) as u8;
            assert_eq!(
                e4m3_from_f32(core::hint::black_box(x)),
                want,
                "{:#x}",
                b | sign
            );
        }
    }
}

#[test]
#[ignore = "exhaustive over 2^32 inputs; run with --release -- --ignored"]
fn exhaustive_e4m3() {
    for b in 0..=u32::MAX {
        let x = f32::from_bits(b);
        assert_eq!(e4m3_from_f32(x), float8_code(x), "{b:#x}");
        if b & 0x7FFF_FFFF < 0x43E8_0000 {
            assert_eq!(e4m3_mag_small(x), e4m3_mag(x), "{b:#x}");
        }
    }
}

#[test]
fn e4m3_mag_small_matches_below_464() {
    let step = if cfg!(miri) { 1_000_003 } else { 4_093 };
    for b in (0..0x43E8_0000u32)
        .step_by(step)
        .chain([0x43E7_FFFF, 0x43E0_0000, 0x3C80_0000])
    {
        assert_eq!(
            e4m3_mag_small(f32::from_bits(b)),
            e4m3_mag(f32::from_bits(b)),
            "{b:#x}"
        );
    }
}

#[test]
fn row_bytes() {
    assert_eq!(fp8_tile_row_bytes(300, 256, 64, false), Some(448));
    assert_eq!(fp8_tile_row_bytes(576, 512, 128, true), Some(656));
    assert_eq!(fp8_tile_row_bytes(40, 32, 16, false), Some(72));
    assert_eq!(fp8_tile_row_bytes(32, 32, 32, true), Some(36));
    assert_eq!(fp8_tile_row_bytes(32, 32, 0, false), None);
    assert_eq!(fp8_tile_row_bytes(32, 0, 16, false), None);
    assert_eq!(fp8_tile_row_bytes(32, 24, 16, false), None);
    assert_eq!(fp8_tile_row_bytes(16, 32, 16, false), None);
    assert_eq!(fp8_tile_row_bytes(usize::MAX, 1, 1, false), None);
    assert_eq!(
        fp8_tile_row_bytes(usize::MAX / 2, usize::MAX / 2, 1, false),
        None
    );
}

#[test]
fn linspace_tile_scale_one() {
    // Tile 0 of the edge vector: linspace(-448, 448, 16) → scale 1, codes e4m3(x).
    let x: Vec<f32> = (0..16).map(|i| -448.0 + 896.0 * i as f32 / 15.0).collect();
    let row = quant(&x, 16, 16, false);
    assert_eq!(scale(&row, 16, 0), 1.0);
    for (i, &v) in x.iter().enumerate() {
        assert_eq!(row[i], e4m3_from_f32(v));
    }
    assert_eq!(row[0], 0xFE);
    assert_eq!(row[15], 0x7E);
}

#[test]
fn zero_tile_scale_zero_codes_zero() {
    let mut x = vec![0.0f32; 40];
    x[1] = -0.0;
    for v in x.iter_mut().skip(16).take(16) {
        *v = 1.0;
    }
    let row = quant(&x, 32, 16, false);
    assert_eq!(&row[..16], &[0; 16]);
    assert_eq!(scale(&row, 32, 0).to_bits(), 0);
    assert_eq!(scale(&row, 32, 1), 1.0 / 448.0);
    let y = dequant(&row, 40, 32, 16, false);
    assert!(y.iter().all(|v| v.is_finite()));
    assert_eq!(&y[..16], &[0.0; 16]);
    // Underflowing scale: amax / 448 rounds to 0 → also codes 0.
    let tiny = [f32::from_bits(100), -f32::from_bits(3), 0.0, 0.0];
    let row = quant(&tiny, 4, 4, false);
    assert_eq!(&row[..4], &[0; 4]);
    assert_eq!(scale(&row, 4, 0), 0.0);
}

#[test]
fn subnormal_codes_and_saturation() {
    // amax 3 → s = 3/448; 1e-5 / s ≈ 1.49e-3 → subnormal codes.
    let x = [3.0f32, 1e-5, -2e-5, 4e-5, 0.0, -3.0, 2.9999, 1.5];
    let row = quant(&x, 8, 8, false);
    let s = 3.0f32 / 448.0;
    assert_eq!(scale(&row, 8, 0), s);
    for i in 0..8 {
        assert_eq!(row[i], e4m3_from_f32(x[i] / s), "{i}");
    }
    assert!(row[1] > 0 && row[1] < 8, "{:#x}", row[1]);
    assert_eq!(row[0], 0x7E);
    assert_eq!(row[5], 0xFE);
    // A tile below 2^-24 (here with a subnormal scale, where x / s would saturate) is a zero
    // tile: scale 0, codes 0 (so no weight × scale × code product of attention is subnormal).
    let t = f32::from_bits(1_000);
    let x = [t, -t, t * 0.5, 0.0];
    let row = quant(&x, 4, 4, false);
    assert_eq!(scale(&row, 4, 0), 0.0);
    assert_eq!(&row[..4], &[0; 4]);
    let below = f32::from_bits(TILE_FLOOR.to_bits() - 1);
    let row = quant(&[below, -1e-9, 0.0, 1e-30], 4, 4, false);
    assert_eq!((scale(&row, 4, 0), &row[..4]), (0.0, &[0u8; 4][..]));
    // At the floor the tile is quantized: its largest value is 448 · s.
    let row = quant(&[-TILE_FLOOR, 1e-9, 0.0, 1e-30], 4, 4, false);
    assert_eq!(scale(&row, 4, 0), TILE_FLOOR / 448.0);
    assert_eq!(row[0], 0xFE);
}

#[test]
fn bf16_scale_rounding_and_tail() {
    let x: Vec<bf16> = (0..24)
        .map(|i| bf16::from_f32((i as f32 - 7.3) * 0.77))
        .collect();
    let row = quant(&x, 16, 8, true);
    assert_eq!(row.len(), 16 + 8 + 16);
    for t in 0..2 {
        let xt = &x[t * 8..t * 8 + 8];
        let amax = xt.iter().fold(0f32, |m, v| m.max(v.to_f32().abs()));
        let s = bf16::from_f32(amax / 448.0).to_f32();
        assert_eq!(scale(&row, 16, t), s);
        for (i, v) in xt.iter().enumerate() {
            assert_eq!(row[t * 8 + i], e4m3_from_f32(v.to_f32() / s));
        }
    }
    for (i, v) in x[16..].iter().enumerate() {
        assert_eq!(&row[24 + 2 * i..26 + 2 * i], &v.to_le_bytes());
    }
    // f32 and f16 callers with bf16 = true round to bf16 first.
    let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    assert_eq!(quant(&xf, 16, 8, true), row);
    let xf2: Vec<f32> = xf.iter().map(|v| v + v * p2(-12)).collect();
    assert_eq!(quant(&xf2, 16, 8, true), row);
    let xh: Vec<f16> = x.iter().map(|v| f16::from_f32(v.to_f32())).collect();
    assert_eq!(quant(&xh, 16, 8, true), row);
}

#[test]
fn f16_and_bf16_rows_match_f32() {
    let x: Vec<f32> = (0..40)
        .map(|i| ((i * 13 % 29) as f32 - 14.0) * 0.31)
        .collect();
    let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let xhf: Vec<f32> = xh.iter().map(|v| v.to_f32()).collect();
    assert_eq!(quant(&xh, 32, 16, false), quant(&xhf, 32, 16, false));
    let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let xbf: Vec<f32> = xb.iter().map(|v| v.to_f32()).collect();
    assert_eq!(quant(&xb, 32, 16, false), quant(&xbf, 32, 16, false));
    // Dequantize into every type: T::from_f32 of the f32 result.
    let row = quant(&x, 32, 16, false);
    let y = dequant(&row, 40, 32, 16, false);
    let mut yh = vec![f16::ZERO; 40];
    dequantize_fp8_tile(&row, 32, 16, false, &mut yh).expect("f16");
    let mut yb = vec![bf16::ZERO; 40];
    dequantize_fp8_tile(&row, 32, 16, false, &mut yb).expect("bf16");
    for i in 0..40 {
        assert_eq!(yh[i], f16::from_f32(y[i]));
        assert_eq!(yb[i], bf16::from_f32(y[i]));
    }
    assert_eq!(&y[32..], &x[32..]);
}

#[test]
fn nan_and_inf_tiles() {
    let mut x = [1.0f32; 24];
    x[2] = f32::NAN;
    x[3] = -2.0;
    x[9] = f32::NEG_INFINITY;
    x[10] = -3.0;
    x[20] = f32::NAN; // tail: copied raw
    let row = quant(&x, 16, 8, false);
    assert!(scale(&row, 16, 0).is_nan());
    assert_eq!(&row[..4], &[0x7F, 0x7F, 0x7F, 0xFF]);
    assert_eq!(scale(&row, 16, 1), f32::INFINITY);
    assert_eq!(&row[8..11], &[0x00, 0xFF, 0x80]);
    let y = dequant(&row, 24, 16, 8, false);
    assert!(y[..16].iter().all(|v| v.is_nan()));
    assert!(y[20].is_nan());
    // bf16 mode: same rules.
    let row = quant(&x, 16, 8, true);
    assert!(scale(&row, 16, 0).is_nan());
    assert_eq!(&row[8..11], &[0x00, 0xFF, 0x80]);
}

#[test]
fn errors_leave_outputs_untouched() {
    let x = [1.0f32; 40];
    let mut row = [0x55u8; 72];
    let e = |r: Result<()>| r.expect_err("must fail");
    assert_eq!(
        e(quantize_fp8_tile(&x, 32, 0, false, &mut row)),
        Error::Config(ConfigError::InvalidFormat)
    );
    assert_eq!(
        e(quantize_fp8_tile(&x, 0, 16, false, &mut row)),
        Error::Config(ConfigError::InvalidFormat)
    );
    assert_eq!(
        e(quantize_fp8_tile(&x, 24, 16, false, &mut row)),
        Error::Config(ConfigError::InvalidFormat)
    );
    assert_eq!(
        e(quantize_fp8_tile(&x[..16], 32, 16, false, &mut row)),
        Error::Config(ConfigError::InvalidFormat)
    );
    assert_eq!(
        e(quantize_fp8_tile(&x, 32, 16, false, &mut row[..71])),
        Error::LengthMismatch
    );
    assert_eq!(
        e(quantize_fp8_tile(&x, 32, 16, true, &mut row)),
        Error::LengthMismatch
    );
    assert_eq!(
        e(quantize_fp8_tile(&x[..39], 32, 16, false, &mut row)),
        Error::LengthMismatch
    );
    assert_eq!(row, [0x55; 72]);
    let mut y = [3f32; 40];
    assert_eq!(
        e(dequantize_fp8_tile(&row, 32, 0, false, &mut y)),
        Error::Config(ConfigError::InvalidFormat)
    );
    assert_eq!(
        e(dequantize_fp8_tile(&row, 48, 16, false, &mut y)),
        Error::Config(ConfigError::InvalidFormat)
    );
    assert_eq!(
        e(dequantize_fp8_tile(&row[..70], 32, 16, false, &mut y)),
        Error::LengthMismatch
    );
    assert_eq!(
        e(dequantize_fp8_tile(&row, 32, 16, false, &mut y[..39])),
        Error::LengthMismatch
    );
    assert_eq!(
        e(dequantize_fp8_tile(&row, 32, 16, true, &mut y)),
        Error::LengthMismatch
    );
    assert_eq!(y, [3.0; 40]);
}

#[cfg(not(miri))]
mod props {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            8 => -1e3f32..1e3f32,
            2 => (-35i32..35, -1f32..1f32).prop_map(|(e, m)| m * 10f32.powi(e)),
            1 => Just(0.0f32),
            1 => Just(-0.0f32),
        ]
    }

    /// (values, dv, tile) with d = dv + tail.
    fn row() -> impl Strategy<Value = (Vec<f32>, usize, usize)> {
        (
            prop_oneof![Just(1usize), Just(4), Just(16), Just(64)],
            1usize..4,
            0usize..6,
        )
            .prop_flat_map(|(tile, nt, tail)| {
                (
                    prop::collection::vec(value(), tile * nt + tail),
                    Just(tile * nt),
                    Just(tile),
                )
            })
    }

    /// Scalar reference (the formula as written, per element).
    fn reference(x: &[f32], dv: usize, tile: usize) -> Vec<u8> {
        let mut codes = Vec::new();
        let mut scales = Vec::new();
        for xt in x[..dv].chunks(tile) {
            let amax = xt.iter().fold(0f32, |m, v| m.max(v.abs()));
            // Tiles below 2^-24 are zero tiles (`TILE_FLOOR`).
            let amax = if amax < TILE_FLOOR { 0.0 } else { amax };
            let s = amax / 448.0;
            codes.extend(
                xt.iter()
                    .map(|&v| if s == 0.0 { 0 } else { float8_code(v / s) }),
            );
            scales.extend_from_slice(&s.to_le_bytes());
        }
        codes.extend(scales);
        codes.extend(x[dv..].iter().flat_map(|v| v.to_le_bytes()));
        codes
    }

    proptest! {
        #[test]
        fn matches_reference((x, dv, tile) in row()) {
            prop_assert_eq!(quant(&x, dv, tile, false), reference(&x, dv, tile));
        }

        /// Round-trip bound. For a tile with a normal scale `s` (s = amax/448 in f32, or that
        /// rounded to bf16), `q = x / s` is within 448·(1 + 2^-8) of 0, and e4m3 rounding to
        /// nearest has relative error ≤ 2^-4 for normal codes and absolute error ≤ 2^-10 for
        /// subnormal ones (spacing 2^-9). Hence |y − x| ≤ s·max(2^-4·|x/s|, 2^-10) + f32
        /// rounding, i.e. `|y − x| ≤ 2^-4·|x| + 2^-10·s + 2^-22·amax`. Saturation cannot add
        /// error beyond that: |x/s| ≤ 448 for an f32 scale, and ≤ 449.75 (rounds to 448,
        /// error ≤ 1.75·s ≤ 2^-4·|x|) for a bf16 scale.
        #[test]
        fn roundtrip_error_bound((x, dv, tile) in row(), bf16 in any::<bool>()) {
            let x: Vec<f32> = if bf16 { x.iter().map(|&v| bf16::from_f32(v).to_f32()).collect() } else { x };
            let row = quant(&x, dv, tile, bf16);
            let y = dequant(&row, x.len(), dv, tile, bf16);
            for (t, (xt, yt)) in x[..dv].chunks(tile).zip(y.chunks(tile)).enumerate() {
                let s = scale(&row, dv, t);
                let amax = xt.iter().fold(0f32, |m, v| m.max(v.abs()));
                prop_assert!(s.is_finite());
                for (&xv, &yv) in xt.iter().zip(yt) {
                    prop_assert!(yv.is_finite());
                    let err = (yv - xv).abs();
                    if s >= f32::MIN_POSITIVE {
                        let bound = p2(-4) * xv.abs() + p2(-10) * s + p2(-22) * amax;
                        prop_assert!(err <= bound, "x {} y {} s {} bound {}", xv, yv, s, bound);
                    } else {
                        // Zero or subnormal scale (amax < 448·2^-126): codes saturate at
                        // most, so |y| ≤ 448·s ≤ amax + 448·2^-150 and signs agree.
                        prop_assert!(err <= amax + f32::from_bits(1 << 9), "x {} y {} s {}", xv, yv, s);
                    }
                }
            }
            prop_assert_eq!(&y[dv..], &x[dv..]);
        }

        /// Requantizing a dequantized row reproduces every code of each tile whose old and
        /// new scales lie in [2^-100, 2^100]. Proof: y = e·s with e the code's e4m3 value is
        /// rounded at most twice (the f32 product, then to bf16 in bf16 mode), and s' differs
        /// from s by at most one f32 ulp (f32 mode: amax' = fl(448·s), s' = fl(amax'/448)) or
        /// one bf16 ulp (bf16 mode); so y/s' = e·(1 ± 2^-6) at worst, while the distance from e
        /// to the next rounding boundary is at least e·2^-4/1.875 (normal codes) or 2^-10
        /// (subnormal codes, and then |e·2^-6| ≤ 2^-12), and values above 448 saturate back to
        /// 448. The scale itself is reproduced to within that ulp (exactly when `448·s` is
        /// exact, e.g. s a power of two: see `requantize_power_of_two_scale`).
        #[test]
        fn requantize_reproduces_codes((x, dv, tile) in row(), bf16 in any::<bool>()) {
            let x: Vec<f32> = if bf16 { x.iter().map(|&v| bf16::from_f32(v).to_f32()).collect() } else { x };
            let row = quant(&x, dv, tile, bf16);
            let y = dequant(&row, x.len(), dv, tile, bf16);
            let row2 = quant(&y, dv, tile, bf16);
            let ulp = if bf16 { p2(-7) } else { p2(-23) };
            for t in 0..dv / tile {
                let (s, s2) = (scale(&row, dv, t), scale(&row2, dv, t));
                let range = p2(-100)..=p2(100);
                if range.contains(&s) && range.contains(&s2) {
                    prop_assert_eq!(&row2[t * tile..(t + 1) * tile], &row[t * tile..(t + 1) * tile]);
                    prop_assert!((s2 - s).abs() <= s * ulp, "s {} s2 {}", s, s2);
                }
            }
        }

        /// With a power-of-two scale (448·s exact) the whole row is a fixed point.
        #[test]
        fn requantize_power_of_two_scale(
            codes in prop::collection::vec(any::<u8>().prop_filter("finite", |c| c & 0x7F != 0x7F), 1..40),
            exp in -32i32..100, // amax = 448 · 2^exp at least 2^-24 (`TILE_FLOOR`)
            tail in prop::collection::vec(-1e3f32..1e3, 0..4),
            bf16 in any::<bool>(),
        ) {
            let s = p2(exp);
            let mut x: Vec<f32> = codes.iter().map(|&c| e4m3_to_f32(c) * s).collect();
            x[0] = 448.0 * s; // amax = 448·s
            let dv = x.len();
            x.extend(tail.iter().map(|&v| if bf16 { bf16::from_f32(v).to_f32() } else { v }));
            let row = quant(&x, dv, dv, bf16);
            prop_assert_eq!(scale(&row, dv, 0), s);
            let y = dequant(&row, x.len(), dv, dv, bf16);
            prop_assert_eq!(&y, &x);
            prop_assert_eq!(quant(&y, dv, dv, bf16), row);
        }

        /// Finite input never yields NaN codes (0x7F/0xFF) or non-finite scales, any type.
        #[test]
        fn finite_input_no_nan_codes((x, dv, tile) in row(), bf16 in any::<bool>()) {
            let row = quant(&x, dv, tile, bf16);
            prop_assert!(row[..dv].iter().all(|&c| c & 0x7F != 0x7F));
            for t in 0..dv / tile {
                prop_assert!(scale(&row, dv, t).is_finite());
            }
            let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v.clamp(-65504.0, 65504.0))).collect();
            let rowh = quant(&xh, dv, tile, bf16);
            prop_assert!(rowh[..dv].iter().all(|&c| c & 0x7F != 0x7F));
        }
    }
}

/// The branch-free decoder against the plain formula: the code's bits placed in an f32 and
/// rebiased by a multiplication (exact), NaN for 0x7F magnitudes.
#[test]
fn e4m3_decoder_matches_the_formula() {
    for c in 0..=255u8 {
        let b = c as u32;
        let mag = f32::from_bits((b & 0x7F) << 20) * f32::from_bits((127 + 120) << 23);
        let mag = if b & 0x7F == 0x7F { f32::NAN } else { mag };
        let want = f32::from_bits(mag.to_bits() | ((b & 0x80) << 24));
        assert_eq!(e4m3_to_f32(c).to_bits(), want.to_bits(), "code {c:#x}");
    }
}
