//! The NEON quantizers against the portable loops on the same rows (the x86 kernels' cases:
//! random values of every magnitude and corner-case groups — zeros and negative zeros, all-equal
//! groups, scales that underflow or overflow f16, f32 and f16 subnormals, ties after scaling and
//! their neighbours, every exponent, non-finite values — and every finite f16 value). Codes and
//! scales must be identical bit for bit. Run under `qemu-aarch64` (any CPU: no `SDOT` here).

use half::f16;

use super::NativeQuant;
use super::quantize_lanes::Lanes;
use crate::format::QuantKernels;
use crate::format::fp8::quantize_tiles;
use crate::format::int4::{Q4_BLOCK, Q4Kind, quantize_q4_with};
use crate::format::int8::groups::quantize_groups;
use crate::format::kernels::Reference;
use crate::format::load::{F16Bits, Load, ViaElement};

/// xorshift64: deterministic, no dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// One group of `g` f32 values of a randomly chosen kind.
fn group_f32(r: &mut Rng, g: usize, finite: bool) -> Vec<f32> {
    let kinds = if finite { 9 } else { 10 };
    let mut v: Vec<f32> = match r.below(kinds) {
        // Any magnitude from 1e-38 to 1e38.
        0 => {
            let scale = 10f32.powi(r.below(77) as i32 - 38);
            (0..g).map(|_| r.unit() * scale).collect()
        }
        1 => (0..g)
            .map(|_| if r.below(2) == 0 { 0.0 } else { -0.0 })
            .collect(),
        // All equal (up to sign).
        2 => {
            let a = r.unit() * 10f32.powi(r.below(20) as i32 - 10);
            (0..g)
                .map(|_| if r.below(2) == 0 { a } else { -a })
                .collect()
        }
        // d below f16's smallest subnormal, or around it.
        3 => {
            let scale = 127.0 * 10f32.powi(-(r.below(4) as i32) - 6);
            (0..g).map(|_| r.unit() * scale).collect()
        }
        // d near the f16 overflow threshold (65504 .. 65520 rounds down, 65520 up).
        4 => {
            let top = [65504.0f32, 65519.99, 65520.0, 65536.0][r.below(4) as usize] * 127.0;
            let mut v: Vec<f32> = (0..g).map(|_| r.unit() * top).collect();
            v[r.below(g as u64) as usize] = if r.below(2) == 0 { top } else { -top };
            v
        }
        // f32 subnormals (d subnormal: the portable slow path).
        5 => (0..g)
            .map(|_| f32::from_bits(r.below(0x80_0000) as u32 | (r.below(2) as u32) << 31))
            .collect(),
        // Ties after scaling and their neighbours (±2 ulps): amax 127 gives id = 1 (Q8 ties at
        // k + 0.5), amax 448 gives s = 1 (e4m3 ties halfway between grid points).
        6 => {
            let e4m3 = r.below(2) == 0;
            let mut v: Vec<f32> = (0..g)
                .map(|_| {
                    let t = if e4m3 {
                        let e = r.below(15) as i32 - 6;
                        let j = r.below(8) as f32 + 0.5;
                        if r.below(4) == 0 {
                            j * 2f32.powi(-9)
                        } else {
                            2f32.powi(e) + j * 2f32.powi(e - 3)
                        }
                    } else {
                        r.below(127) as f32 + 0.5
                    };
                    let t =
                        f32::from_bits(t.to_bits().wrapping_add(r.below(5) as u32).wrapping_sub(2));
                    if r.below(2) == 0 { t } else { -t }
                })
                .collect();
            v[0] = if e4m3 { 448.0 } else { 127.0 };
            v
        }
        // Extremes of f32.
        7 => (0..g)
            .map(|_| [f32::MAX, -f32::MAX, f32::MIN_POSITIVE, 1.0][r.below(4) as usize])
            .collect(),
        // Random bit patterns (finite).
        8 => (0..g)
            .map(|_| {
                let b = r.next() as u32;
                let v = f32::from_bits(b);
                if v.is_finite() {
                    v
                } else {
                    f32::from_bits(b & 0xBF7F_FFFF)
                }
            })
            .collect(),
        // Non-finite values somewhere in the group.
        _ => {
            let mut v: Vec<f32> = (0..g).map(|_| r.unit()).collect();
            let bad = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN];
            v[r.below(g as u64) as usize] = bad[r.below(4) as usize];
            v
        }
    };
    v.truncate(g);
    v
}

/// A row of `n` groups of `g` f32 values (mixed kinds).
fn row_f32(r: &mut Rng, g: usize, n: usize, finite: bool) -> Vec<f32> {
    (0..n).flat_map(|_| group_f32(r, g, finite)).collect()
}

/// A row of f16: the f32 kinds rounded to f16, and random finite f16 bit patterns (subnormals
/// included) in some groups.
fn row_f16(r: &mut Rng, g: usize, n: usize, finite: bool) -> Vec<f16> {
    (0..n)
        .flat_map(|_| {
            if r.below(3) == 0 {
                let top = 0x7C00 >> r.below(8);
                (0..g)
                    .map(|_| f16::from_bits(r.below(top) as u16 | (r.below(2) as u16) << 15))
                    .collect::<Vec<_>>()
            } else {
                group_f32(r, g, finite)
                    .into_iter()
                    .map(|v| {
                        let h = f16::from_f32(v);
                        if finite && !h.is_finite() {
                            f16::MAX
                        } else {
                            h
                        }
                    })
                    .collect()
            }
        })
        .collect()
}

/// Group and tile sizes the kernels take (multiples of 16).
const SIZES: [usize; 7] = [16, 32, 48, 64, 96, 128, 256];

fn q8_both<T: Lanes>(x: &[T], g: usize) -> [(Vec<i8>, Vec<u16>); 2] {
    let run = |simd: bool| {
        let mut q = vec![0x55i8; x.len()];
        let mut s = vec![f16::from_bits(0x5555); x.len() / g];
        if simd {
            super::quantize_int8::quantize_groups(x, g, &mut q, &mut s);
        } else {
            quantize_groups::<T::L>(x, g, &mut q, &mut s);
        }
        (q, s.iter().map(|s| s.to_bits()).collect())
    };
    [run(true), run(false)]
}

fn fp8_both<T: Lanes>(x: &[T], tile: usize) -> [(Vec<u8>, Vec<u8>); 2] {
    let run = |simd: bool| {
        let mut c = vec![0x55u8; x.len()];
        let mut s = vec![0x55u8; x.len() / tile * 4];
        if simd {
            super::quantize_fp8::quantize_tiles(x, tile, &mut c, &mut s);
        } else {
            quantize_tiles::<T::L>(x, tile, false, &mut c, &mut s);
        }
        (c, s)
    };
    [run(true), run(false)]
}

/// Rows per size (fewer than the x86 tests': these run under emulation).
const ROWS: usize = 120;

#[test]
fn q8_f32_neon_matches_portable() {
    let mut r = Rng(0x1234_5678_9ABC_DEF1);
    for &g in &SIZES {
        for i in 0..ROWS {
            let x = row_f32(&mut r, g, 1 + (i % 20), i % 3 != 0);
            let [a, b] = q8_both(&x, g);
            assert_eq!(a, b, "g = {g}, x = {x:?}");
        }
    }
}

#[test]
fn q8_f16_neon_matches_portable() {
    let mut r = Rng(0x0F0F_1234_5555_AAAB);
    for &g in &SIZES {
        for i in 0..ROWS {
            let x = row_f16(&mut r, g, 1 + (i % 20), i % 3 != 0);
            let [a, b] = q8_both(&x, g);
            assert_eq!(a, b, "g = {g}, x = {x:?}");
        }
    }
}

#[test]
fn fp8_f32_neon_matches_portable() {
    let mut r = Rng(0xDEAD_BEEF_0000_0001);
    for &t in &SIZES {
        for i in 0..ROWS {
            let x = row_f32(&mut r, t, 1 + (i % 6), i % 3 != 0);
            let [a, b] = fp8_both(&x, t);
            assert_eq!(a, b, "tile = {t}, x = {x:?}");
        }
    }
}

#[test]
fn fp8_f16_neon_matches_portable() {
    let mut r = Rng(0x7777_0000_3333_1111);
    for &t in &SIZES {
        for i in 0..ROWS {
            let x = row_f16(&mut r, t, 1 + (i % 6), i % 3 != 0);
            let [a, b] = fp8_both(&x, t);
            assert_eq!(a, b, "tile = {t}, x = {x:?}");
        }
    }
}

/// Every finite f16 value through both paths, in groups of 32 and tiles of 64 holding one
/// large value and the rest (all group scales from the f16 range), and as f32.
#[test]
fn every_f16_value_matches() {
    let all: Vec<f16> = (0..0x7C00u16)
        .flat_map(|b| [f16::from_bits(b), f16::from_bits(b | 0x8000)])
        .collect();
    for g in [32, 64] {
        let [a, b] = q8_both(&all, g);
        assert_eq!(a, b, "q8 g = {g}");
        let [a, b] = fp8_both(&all, g);
        assert_eq!(a, b, "fp8 tile = {g}");
    }
    let wide: Vec<f32> = all.iter().map(|h| h.to_f32()).collect();
    let [a, b] = q8_both(&wide, 32);
    assert_eq!(a, b, "q8 f32");
    let [a, b] = fp8_both(&wide, 64);
    assert_eq!(a, b, "fp8 f32");
}

/// Every f32 exponent (each with random mantissas and both signs) in every lane position: the
/// codes' rounding across the whole range.
#[test]
fn every_f32_exponent_matches() {
    let mut r = Rng(0x5151_2020_9999_0001);
    let x: Vec<f32> = (0..256u32)
        .flat_map(|e| (0..16).map(move |k| (e, k)))
        .map(|(e, k)| {
            let m = r.next() as u32 & 0x7F_FFFF;
            f32::from_bits(((k & 1) << 31) | (e.min(254) << 23) | m)
        })
        .collect();
    for g in [16, 32, 64] {
        let [a, b] = q8_both(&x, g);
        assert_eq!(a, b, "q8 g = {g}");
        let [a, b] = fp8_both(&x, g);
        assert_eq!(a, b, "fp8 tile = {g}");
    }
}

/// The kernel entry takes multiples of 16 and declines the rest (the reference loop runs).
#[test]
fn entry_declines_other_sizes() {
    let x = [1.0f32; 24];
    let (mut q, mut s) = ([0i8; 24], [f16::ZERO; 3]);
    assert!(!NativeQuant::q8_f32(&x, 8, &mut q, &mut s));
    assert!(!NativeQuant::q8_f32(&x, 0, &mut q, &mut s));
    assert!(NativeQuant::q8_f32(&x[..16], 16, &mut q[..16], &mut s[..1]));
    let (mut c, mut sc) = ([0u8; 24], [0u8; 12]);
    assert!(!NativeQuant::fp8_f32(&x, 8, &mut c, &mut sc));
}

/// Q4 blocks of `kind` from `x` (whole blocks) by the NEON entry and by the reference codec.
fn q4_both(kind: Q4Kind, x: &[f32]) -> [Vec<u8>; 2] {
    let bytes = kind.bytes_for(x.len()).expect("whole blocks");
    let mut simd = vec![0x55u8; bytes];
    assert!(NativeQuant::q4_f32(kind, x, &mut simd));
    let mut reference = vec![0x55u8; bytes];
    quantize_q4_with::<Reference, f32>(kind, x, &mut reference).expect("lengths");
    [simd, reference]
}

/// Q4 blocks the generators above miss: ties of Q4_0's `x · id + 8.5` (a block maximum of −8
/// gives `id = 1`) and their neighbours, and Q4_1 blocks of non-negative values whose minimum
/// is a zero of either sign.
fn q4_edges(r: &mut Rng) -> Vec<f32> {
    if r.below(2) == 0 {
        let mut v: Vec<f32> = (0..Q4_BLOCK)
            .map(|_| {
                let t = r.below(16) as f32 - 8.0;
                f32::from_bits(t.to_bits().wrapping_add(r.below(5) as u32).wrapping_sub(2))
            })
            .collect();
        v[r.below(Q4_BLOCK as u64) as usize] = -8.0;
        v
    } else {
        (0..Q4_BLOCK)
            .map(|_| match r.below(3) {
                0 => 0.0,
                1 => -0.0,
                _ => r.unit().abs(),
            })
            .collect()
    }
}

#[test]
fn q4_neon_matches_portable() {
    let mut r = Rng(0x4444_1111_2222_3333);
    for kind in [Q4Kind::Q4_0, Q4Kind::Q4_1] {
        for i in 0..4 * ROWS {
            let mut x = row_f32(&mut r, Q4_BLOCK, 1 + (i % 8), i % 3 != 0);
            x.extend(q4_edges(&mut r));
            let [a, b] = q4_both(kind, &x);
            assert_eq!(a, b, "{kind:?}, x = {x:?}");
        }
    }
}

/// Every finite f16 value (as f32) and every f32 exponent in Q4 blocks, and f16 rows through
/// the codec's entry (widened a block at a time) against the reference codec.
#[test]
fn q4_every_value_and_f16_rows_match() {
    let all: Vec<f32> = (0..0x7C00u16)
        .flat_map(|b| [f16::from_bits(b), f16::from_bits(b | 0x8000)])
        .map(f16::to_f32)
        .collect();
    let mut r = Rng(0x0101_4040_7070_0003);
    let exps: Vec<f32> = (0..256u32)
        .flat_map(|e| (0..8).map(move |k| (e, k)))
        .map(|(e, k)| {
            let m = r.next() as u32 & 0x7F_FFFF;
            f32::from_bits(((k & 1) << 31) | (e.min(254) << 23) | m)
        })
        .collect();
    for kind in [Q4Kind::Q4_0, Q4Kind::Q4_1] {
        for x in [&all, &exps] {
            let [a, b] = q4_both(kind, x);
            assert_eq!(a, b, "{kind:?}");
        }
        for i in 0..ROWS {
            let h = row_f16(&mut r, Q4_BLOCK, 1 + (i % 8), i % 3 != 0);
            let bytes = kind.bytes_for(h.len()).expect("whole blocks");
            let (mut a, mut b) = (vec![0x55u8; bytes], vec![0x55u8; bytes]);
            quantize_q4_with::<NativeQuant, f16>(kind, &h, &mut a).expect("lengths");
            quantize_q4_with::<Reference, f16>(kind, &h, &mut b).expect("lengths");
            assert_eq!(a, b, "{kind:?}, h = {h:?}");
        }
    }
}

/// The Q4 entry declines lengths that are not whole blocks (nothing written).
#[test]
fn q4_entry_declines_partial_blocks() {
    let x = [1.0f32; 48];
    let mut o = [0x55u8; 40];
    assert!(!NativeQuant::q4_f32(Q4Kind::Q4_0, &x, &mut o));
    assert!(!NativeQuant::q4_f32(Q4Kind::Q4_1, &x[..32], &mut o[..18]));
    assert_eq!(o, [0x55u8; 40]);
}

/// The keys agree with the portable ones on the keys' extremes.
#[test]
fn amax_keys_match() {
    let mut r = Rng(99);
    for n in [16usize, 32, 48, 64, 96, 128] {
        for _ in 0..100 {
            let x = row_f32(&mut r, n, 1, false);
            let h = row_f16(&mut r, n, 1, false);
            assert_eq!(
                <f32 as Lanes>::amax_key(&x),
                ViaElement::<f32>::amax_key(&x),
                "{x:?}"
            );
            assert_eq!(<f16 as Lanes>::amax_key(&h), F16Bits::amax_key(&h), "{h:?}");
        }
    }
}
