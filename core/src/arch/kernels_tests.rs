//! Tests of `arch::kernels`: fused kernels against dequantized rows, batched calls against
//! one-row calls.

use super::*;
use crate::arch::Portable;
use crate::format::{decode_rows, encode_rows};
use std::vec::Vec;

/// One row of `d` values encoded in `fmt`: its value bytes and scale words (`u16`, so that the
/// scales' bytes are 2-byte aligned as the kernels read them).
fn encoded(fmt: ElementFormat, d: usize, x: &[f32]) -> (Vec<u8>, Vec<u16>) {
    let mut v = vec![0u8; fmt.row_bytes(1, d).unwrap()];
    let mut w = vec![0u16; fmt.scale_row_bytes(1, d).unwrap() / 2];
    encode_rows::<crate::arch::NativeQuant, _>(fmt, d, x, &mut v, bytemuck::cast_slice_mut(&mut w))
        .unwrap();
    (v, w)
}

/// Eight rows of `d` values `next() · amp` encoded in `fmt`: value bytes and scale words.
fn eight_rows(
    fmt: ElementFormat,
    d: usize,
    amp: f32,
    next: &mut impl FnMut() -> f32,
) -> (Vec<Vec<u8>>, Vec<Vec<u16>>) {
    (0..8)
        .map(|_| {
            let row: Vec<f32> = (0..d).map(|_| next() * amp).collect();
            encoded(fmt, d, &row)
        })
        .unzip()
}

/// Fused kernels agree with dequantize-then-f32 to rounding, for every format.
#[test]
fn fused_kernels_match_dequantized_rows() {
    let d = 64;
    let x: Vec<f32> = (0..d)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.173)
        .collect();
    let q: Vec<f32> = (0..d)
        .map(|i| ((i * 11 % 17) as f32 - 8.0) * 0.05)
        .collect();
    let fmts = [
        ElementFormat::F32,
        ElementFormat::F16,
        ElementFormat::Bf16,
        ElementFormat::Q8_0,
        ElementFormat::Int8 { group: 64 },
        ElementFormat::Fp8Tile {
            dv: 48,
            tile: 16,
            bf16: false,
        },
        ElementFormat::Fp8Tile {
            dv: 32,
            tile: 32,
            bf16: true,
        },
        ElementFormat::Q4_0,
        ElementFormat::Q4_1,
    ];
    for fmt in fmts {
        let (vals, scale_words) = encoded(fmt, d, &x);
        let mut deq = vec![0f32; d];
        decode_rows(fmt, d, &vals, bytemuck::cast_slice(&scale_words), &mut deq).unwrap();
        let row = Row {
            vals: &vals,
            scales: bytemuck::cast_slice(&scale_words),
        };
        // Int8 keys score from the quantized query (tested below), not through `dot`.
        if !matches!(fmt, ElementFormat::Int8 { .. }) {
            let want: f64 = q.iter().zip(&deq).map(|(a, b)| *a as f64 * *b as f64).sum();
            let got = dot::<Portable, 1>(fmt, &q, row)[0] as f64;
            assert!(
                (got - want).abs() < 1e-4 * (1.0 + want.abs()),
                "{fmt:?}: {got} vs {want}"
            );
        }
        let mut acc: Vec<f32> = (0..d).map(|i| i as f32).collect();
        add_scaled::<Portable, 1, 1>(fmt, &mut acc, [[2.0]], [row]);
        for i in 0..d {
            let want = i as f32 + 2.0 * deq[i];
            assert!(
                (acc[i] - want).abs() < 1e-5 * (1.0 + want.abs()),
                "{fmt:?} [{i}]"
            );
        }
    }
}

/// Int8 scores from quantized queries: the f64 dot product of the dequantized query and key
/// to f32 rounding; several heads and several rows at once give each one's bits alone.
#[test]
fn int8_scores_match_the_dequantized_dot_product() {
    use crate::arch::query;
    let mut next = crate::testing::uniform(0x9e37_79b9_7f4a_7c15);
    for (d, g) in [(64usize, 32u16), (36, 12), (600, 300), (8, 2)] {
        let fmt = ElementFormat::Int8 { group: g };
        let g = g as usize;
        let (vals, words) = eight_rows(fmt, d, 3.0, &mut next);
        let deq: Vec<Vec<f32>> = (0..8)
            .map(|i| {
                let mut back = vec![0f32; d];
                let scales = bytemuck::cast_slice(&words[i]);
                decode_rows(fmt, d, &vals[i], scales, &mut back).unwrap();
                back
            })
            .collect();
        let rows: Vec<Row<'_>> = (0..8)
            .map(|i| Row {
                vals: &vals[i],
                scales: bytemuck::cast_slice(&words[i]),
            })
            .collect();
        let qf: Vec<f32> = (0..3 * d).map(|_| next()).collect();
        let (mut codes, mut scales) = (vec![0i16; 3 * d], vec![0f32; 3 * d / g]);
        query::quantize(&qf, g, 0.5, &mut codes, &mut scales);
        let q = QueryCodes {
            codes: &codes,
            scales: &scales,
        };
        let all = int8_scores::<Portable, 3>(q, &rows, g);
        for h in 0..3 {
            let one = QueryCodes {
                codes: &codes[h * d..(h + 1) * d],
                scales: &scales[h * d / g..(h + 1) * d / g],
            };
            for j in 0..8 {
                let want: f64 = (0..d)
                    .map(|i| 0.5 * qf[h * d + i] as f64 * deq[j][i] as f64)
                    .sum();
                let got = all[h][j];
                let bound = 1e-4 * (1.0 + qf.iter().map(|v| v.abs()).sum::<f32>() as f64);
                assert!(
                    (got as f64 - want).abs() < bound,
                    "d {d} g {g}: {got} vs {want}"
                );
                let alone = int8_scores::<Portable, 1>(one, &rows[j..j + 1], g)[0][0];
                assert_eq!(
                    alone.to_bits(),
                    got.to_bits(),
                    "d {d} g {g} head {h} row {j}"
                );
            }
        }
    }
}

/// The widest integer sums (group 600, codes ±32767 times −128) are exact.
#[test]
fn int8_integer_sums_do_not_overflow() {
    let q = vec![-32767i16; 600];
    let k = vec![0x80u8; 600];
    assert_eq!(int_dot(&q, &k), (600i64 * 32767 * 128) as f32);
    assert_eq!(int_dot(&q[..256], &k[..256]), (256 * 32767 * 128) as f32);
}

/// The int8 row-batch kernel gives the bits of one-row `add_scaled` calls in row order, for
/// one to eight rows, with and without a partial block per group.
#[test]
fn int8_rows_kernel_equals_rows_one_by_one() {
    fn check<const G: usize>(d: usize, g: u16) {
        let fmt = ElementFormat::Int8 { group: g };
        let mut next = crate::testing::uniform(0x9e37_79b9_7f4a_7c15);
        let (vals, words) = eight_rows(fmt, d, 4.0, &mut next);
        let rows: Vec<Row<'_>> = (0..8)
            .map(|i| Row {
                vals: &vals[i],
                scales: bytemuck::cast_slice(&words[i]),
            })
            .collect();
        let p: Vec<[f32; G]> = (0..8)
            .map(|_| core::array::from_fn(|_| next().abs()))
            .collect();
        for m in 1..=8 {
            let start: Vec<f32> = (0..G * d).map(|_| next()).collect();
            let mut together = start.clone();
            int8_add_scaled_rows::<Portable, G>(&mut together, &p[..m], &rows[..m], g as usize);
            let mut alone = start;
            for i in 0..m {
                add_scaled::<Portable, G, 1>(fmt, &mut alone, [p[i]], [rows[i]]);
            }
            let same = together
                .iter()
                .zip(&alone)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "d {d} group {g} G {G} rows {m}");
        }
    }
    check::<1>(64, 32);
    check::<3>(64, 32);
    check::<4>(64, 64);
    check::<2>(36, 12);
    check::<3>(36, 12);
}

/// Several heads at once give each head's single-head bits, for every format and for head
/// dims with and without a partial block.
#[test]
fn heads_together_equal_heads_alone() {
    let cases: [(usize, &[ElementFormat]); 2] = [
        (
            64,
            &[
                ElementFormat::F32,
                ElementFormat::F16,
                ElementFormat::Bf16,
                ElementFormat::Q8_0,
                ElementFormat::Fp8Tile {
                    dv: 48,
                    tile: 16,
                    bf16: false,
                },
            ],
        ),
        (
            36,
            &[
                ElementFormat::F32,
                ElementFormat::Int8 { group: 12 },
                ElementFormat::Fp8Tile {
                    dv: 20,
                    tile: 4,
                    bf16: true,
                },
            ],
        ),
    ];
    for (d, fmts) in cases {
        let x: Vec<f32> = (0..d)
            .map(|i| ((i * 29 % 31) as f32 - 15.0) * 0.21)
            .collect();
        let q: Vec<f32> = (0..3 * d)
            .map(|i| ((i * 13 % 19) as f32 - 9.0) * 0.07)
            .collect();
        for &fmt in fmts {
            let (vals, scale_words) = encoded(fmt, d, &x);
            let row = Row {
                vals: &vals,
                scales: bytemuck::cast_slice(&scale_words),
            };
            let qs: [&[f32]; 3] = [&q[..d], &q[d..2 * d], &q[2 * d..]];
            let together = dot::<Portable, 3>(fmt, &q, row);
            let mut acc3: Vec<f32> = (0..3 * d).map(|i| i as f32 * 0.1).collect();
            let mut alone_acc = acc3.clone();
            let p = [0.3, 1.7, -0.9];
            add_scaled::<Portable, 3, 1>(fmt, &mut acc3, [p], [row]);
            for h in 0..3 {
                let alone = dot::<Portable, 1>(fmt, qs[h], row)[0];
                assert_eq!(together[h].to_bits(), alone.to_bits(), "{fmt:?} dot {h}");
                let a = &mut alone_acc[h * d..(h + 1) * d];
                add_scaled::<Portable, 1, 1>(fmt, a, [[p[h]]], [row]);
            }
            let same = acc3
                .iter()
                .zip(&alone_acc)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{fmt:?} add_scaled");
        }
    }
}
