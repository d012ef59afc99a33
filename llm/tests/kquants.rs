//! Weight types against references: dequantization bit for bit against gguf-py (committed
//! blocks and gguf-py's output, `tests/data/gen_kquants.py`), dot products bit for bit against
//! an independent transcription of ggml's generic dot products' order and within a rounding
//! bound of a dense f64 dot product, and the real Gemma 3 270M file (when fetched).

// The references index as the C code they transcribe does.
#![allow(clippy::needless_range_loop)]

mod common;

use std::path::PathBuf;

use edgekv_llm::gguf::{Gguf, QK_K, TensorType};
use edgekv_llm::matmul::{Matrix, dot_quant, matmul_quant};
use edgekv_llm::quant::{ActivationType, QuantRow, dequantize_row, quantize_activation, sums_len};

const TYPES: [(&str, TensorType); 8] = [
    ("q4_0", TensorType::Q4_0),
    ("q4_1", TensorType::Q4_1),
    ("q5_0", TensorType::Q5_0),
    ("q5_1", TensorType::Q5_1),
    ("q8_0", TensorType::Q8_0),
    ("q4_k", TensorType::Q4_K),
    ("q5_k", TensorType::Q5_K),
    ("q6_k", TensorType::Q6_K),
];

fn data(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/kquants")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Blocks and gguf-py's dequantization of them (`stem.blocks`, `stem.f32`).
fn reference(stem: &str) -> (Vec<u8>, Vec<f32>) {
    (
        data(&format!("{stem}.blocks")),
        f32s(&data(&format!("{stem}.f32"))),
    )
}

fn assert_bits(ty: TensorType, stem: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(w.is_finite(), "{stem}[{i}]");
        assert_eq!(g.to_bits(), w.to_bits(), "{ty:?} {stem}[{i}]: {g} vs {w}");
    }
}

#[test]
fn dequantization_matches_gguf_py_bit_for_bit() {
    for (name, ty) in TYPES {
        let (blocks, want) = reference(name);
        assert_eq!(blocks.len() % ty.block_bytes(), 0, "{name}");
        assert_eq!(
            want.len(),
            blocks.len() / ty.block_bytes() * ty.block_values()
        );
        let mut got = vec![f32::NAN; want.len()];
        dequantize_row(ty, &blocks, &mut got).unwrap();
        assert_bits(ty, name, &got, &want);
        // Several distinct values per block (not a degenerate file).
        let distinct: std::collections::BTreeSet<u32> = want.iter().map(|v| v.to_bits()).collect();
        assert!(distinct.len() > 20, "{name}");
    }
}

#[test]
fn dequantize_row_refuses_partial_blocks_and_wrong_lengths() {
    use edgekv_llm::{Error, GgufError};
    for (_, ty) in TYPES {
        let n = ty.block_values();
        let bytes = vec![0u8; 2 * ty.block_bytes()];
        let mut out = vec![0f32; 2 * n];
        assert_eq!(dequantize_row(ty, &bytes, &mut out), Ok(()));
        let partial = Err(Error::Gguf(GgufError::PartialBlock {
            type_id: ty.id(),
            row_len: 2 * n - 16,
        }));
        assert_eq!(dequantize_row(ty, &bytes, &mut out[..2 * n - 16]), partial);
        let short = Err(Error::Mismatch("row bytes"));
        assert_eq!(dequantize_row(ty, &bytes[1..], &mut out), short);
        assert_eq!(
            dequantize_row(ty, &bytes[..ty.block_bytes()], &mut out),
            short
        );
    }
}

/// A deterministic activation generator (xorshift64*), values in roughly [-2, 2) with rarer
/// outliers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn value(&mut self) -> f32 {
        let u = (self.next() >> 40) as f32 / (1u64 << 24) as f32;
        let v = (u - 0.5) * 4.0;
        if self.next() % 97 == 0 { v * 50.0 } else { v }
    }
}

/// Activation rows: random ones and edge cases (all zero, one outlier, a negative extreme,
/// halves that round to even / away from zero, a zero super-block between nonzero ones).
fn activations(cols: usize) -> Vec<Vec<f32>> {
    let mut rows = Vec::new();
    for seed in 1..=40u64 {
        let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        rows.push((0..cols).map(|_| r.value()).collect());
    }
    rows.push(vec![0.0; cols]);
    let mut outlier = vec![0.001; cols];
    outlier[cols / 3] = 1000.0;
    rows.push(outlier);
    rows.push(
        (0..cols)
            .map(|i| if i % 37 == 0 { -3.0 } else { 1.5 })
            .collect(),
    );
    rows.push((0..cols).map(|i| (i % 9) as f32 * 0.5 - 2.0).collect());
    let mut gap: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
    gap[..cols.min(QK_K)].fill(0.0);
    rows.push(gap);
    rows
}

/// A quantized activation row as the forward pass lays it out.
struct Act {
    qs: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
}

fn quantize(act: ActivationType, x: &[f32]) -> Act {
    let mut a = Act {
        qs: vec![0; x.len()],
        d: vec![0.0; x.len() / act.block_values()],
        s: vec![0.0; sums_len(x.len())],
    };
    quantize_activation(act, x, &mut a.qs, &mut a.d, &mut a.s);
    a
}

fn f16(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// ggml's generic dot products for 32-value blocks, transcribed independently of the crate:
/// the integer sums as the C loops form them, then each type's f32 expression.
fn reference_dot_32(ty: TensorType, w: &[u8], a: &QuantRow<'_>) -> f32 {
    let mut sumf = 0f32;
    for (ib, wb) in w.chunks_exact(ty.block_bytes()).enumerate() {
        let qa = &a.qs[32 * ib..][..32];
        let (da, dw) = (a.d[ib], f16(wb, 0));
        let (mut s0, mut s1) = (0i32, 0i32);
        match ty {
            TensorType::Q4_0 => {
                for j in 0..16 {
                    s0 += ((wb[2 + j] & 0x0f) as i32 - 8) * qa[j] as i32;
                    s1 += ((wb[2 + j] >> 4) as i32 - 8) * qa[j + 16] as i32;
                }
                sumf += (((s0 + s1) as f32) * dw) * da;
            }
            TensorType::Q4_1 => {
                for j in 0..16 {
                    s0 += (wb[4 + j] & 0x0f) as i32 * qa[j] as i32;
                    s1 += (wb[4 + j] >> 4) as i32 * qa[j + 16] as i32;
                }
                sumf += (dw * da) * (s0 + s1) as f32 + f16(wb, 2) * a.s[ib];
            }
            TensorType::Q5_0 => {
                let qh = u32::from_le_bytes(wb[2..6].try_into().unwrap());
                for j in 0..16 {
                    let xh0 = (((qh & (1 << j)) >> j) << 4) as u8;
                    let xh1 = ((qh & (1 << (j + 16))) >> (j + 12)) as u8;
                    s0 += (((wb[6 + j] & 0x0f) | xh0) as i8 - 16) as i32 * qa[j] as i32;
                    s1 += (((wb[6 + j] >> 4) | xh1) as i8 - 16) as i32 * qa[j + 16] as i32;
                }
                sumf += (dw * da) * (s0 + s1) as f32;
            }
            TensorType::Q5_1 => {
                let qh = u32::from_le_bytes(wb[4..8].try_into().unwrap());
                for j in 0..16 {
                    let xh0 = ((qh >> j) << 4) as u8 & 0x10;
                    let xh1 = (qh >> (j + 12)) as u8 & 0x10;
                    s0 += ((wb[8 + j] & 0x0f) | xh0) as i32 * qa[j] as i32;
                    s1 += ((wb[8 + j] >> 4) | xh1) as i32 * qa[j + 16] as i32;
                }
                sumf += (dw * da) * (s0 + s1) as f32 + f16(wb, 2) * a.s[ib];
            }
            TensorType::Q8_0 => {
                for j in 0..32 {
                    s0 += wb[2 + j] as i8 as i32 * qa[j] as i32;
                }
                sumf += s0 as f32 * (dw * da);
            }
            _ => unreachable!(),
        }
    }
    sumf
}

/// Q4_K / Q5_K scales and minimums as the generic dot product unpacks them: the 12 bytes as
/// three little-endian u32 words, rearranged with the masks 0x3f3f3f3f, 0x0f0f0f0f, 0x03030303.
fn k4_scales_mins(packed: &[u8]) -> ([u8; 8], [u8; 8]) {
    let w = |i: usize| u32::from_le_bytes(packed[4 * i..4 * i + 4].try_into().unwrap());
    let (u0, u1, u2) = (w(0), w(1), w(2));
    let m3 = ((u2 >> 4) & 0x0f0f_0f0f) | (((u1 >> 6) & 0x0303_0303) << 4);
    let m2 = u1 & 0x3f3f_3f3f;
    let s1 = (u2 & 0x0f0f_0f0f) | (((u0 >> 6) & 0x0303_0303) << 4);
    let s0 = u0 & 0x3f3f_3f3f;
    let cat = |a: u32, b: u32| {
        let mut o = [0u8; 8];
        o[..4].copy_from_slice(&a.to_le_bytes());
        o[4..].copy_from_slice(&b.to_le_bytes());
        o
    };
    (cat(s0, s1), cat(m2, m3))
}

/// ggml's generic K-quant dot products, transcribed independently: `aux8` filled as the C loops
/// fill it, eight i32 lanes over 8-value steps, f32 lanes `sums[l] += d · aux32[l]`, minimums
/// subtracted from `sumf`, the lanes added last.
fn reference_dot_k(ty: TensorType, w: &[u8], a: &QuantRow<'_>) -> f32 {
    let (mut sums, mut sumf) = ([0f32; 8], 0f32);
    for (i, x) in w.chunks_exact(ty.block_bytes()).enumerate() {
        let q8 = &a.qs[QK_K * i..][..QK_K];
        let mut aux8 = [0i8; QK_K];
        // One scale per 16 values.
        let mut scale16 = [0i32; 16];
        let mut mins_term = None;
        match ty {
            TensorType::Q4_K | TensorType::Q5_K => {
                let (q4, hm) = if ty == TensorType::Q4_K {
                    (&x[16..144], &[][..])
                } else {
                    (&x[48..176], &x[16..48])
                };
                let mut m = 1u8;
                for j in 0..4 {
                    for l in 0..32 {
                        let hi = |bit: u8| {
                            if !hm.is_empty() && hm[l] & bit != 0 {
                                16
                            } else {
                                0
                            }
                        };
                        aux8[64 * j + l] = (q4[32 * j + l] & 0x0f) as i8 + hi(m);
                        aux8[64 * j + 32 + l] = (q4[32 * j + l] >> 4) as i8 + hi(m << 1);
                    }
                    m = m.wrapping_shl(2);
                }
                let (scales, mins) = k4_scales_mins(&x[4..16]);
                let mut sumi = 0i32;
                for j in 0..16 {
                    sumi += a.bsums[16 * i + j] as i32 * mins[j / 2] as i32;
                }
                for j in 0..16 {
                    scale16[j] = scales[j / 2] as i32;
                }
                mins_term = Some((f16(x, 2) * a.d[i], sumi));
            }
            TensorType::Q6_K => {
                for n in 0..2 {
                    let (ql, qh) = (&x[64 * n..], &x[128 + 32 * n..]);
                    for l in 0..32 {
                        let t = &mut aux8[128 * n..];
                        t[l] = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i8 - 32;
                        t[l + 32] = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                        t[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                        t[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                    }
                }
                for (j, s) in scale16.iter_mut().enumerate() {
                    *s = x[192 + j] as i8 as i32;
                }
            }
            _ => unreachable!(),
        }
        let mut aux32 = [0i32; 8];
        for step in 0..QK_K / 8 {
            for l in 0..8 {
                let k = 8 * step + l;
                let aux16 = q8[k] as i16 * aux8[k] as i16;
                aux32[l] += scale16[k / 16] * aux16 as i32;
            }
        }
        let d = f16(x, if ty == TensorType::Q6_K { 208 } else { 0 }) * a.d[i];
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
        if let Some((dmin, sumi)) = mins_term {
            sumf -= dmin * sumi as f32;
        }
    }
    for s in sums {
        sumf += s;
    }
    sumf
}

/// The blocks of `ty` with their codes zeroed, dequantized: each value's offset term (`m` for
/// Q4_1 / Q5_1, `−dmin · m` for Q4_K / Q5_K), or `None` for types without one.
fn offsets(ty: TensorType, blocks: &[u8]) -> Option<Vec<f32>> {
    let codes = match ty {
        TensorType::Q4_1 | TensorType::Q5_1 => 4..ty.block_bytes(),
        TensorType::Q4_K | TensorType::Q5_K => 16..ty.block_bytes(),
        _ => return None,
    };
    let mut b = blocks.to_vec();
    for blk in b.chunks_exact_mut(ty.block_bytes()) {
        blk[codes.clone()].fill(0);
    }
    let mut out = vec![0f32; blocks.len() / ty.block_bytes() * ty.block_values()];
    dequantize_row(ty, &b, &mut out).unwrap();
    Some(out)
}

/// Every weight type's dot product (the committed reference blocks as one row, and the real
/// Gemma 3 rows, with several activation rows): bit for bit the order of ggml's generic code (independent transcription),
/// and within `(blocks + 8) · 2⁻²³ · M` of the dense f64 dot product of the dequantized weights
/// and dequantized activations, `M = Σ|w·a| + 2 Σ|offset·a|` (the magnitude of the terms the f32
/// arithmetic adds), plus for Q8_1 partners the block sums' own f16 rounding
/// `Σ_b |m_b| · |s_b − d_b · Σq_b|` (ggml multiplies the minimum by the stored sum).
#[test]
fn dot_products_follow_ggml_order_and_the_dense_reference() {
    let real = [
        ("real-q8_0", TensorType::Q8_0),
        ("real-q5_0", TensorType::Q5_0),
        ("real-q4_k", TensorType::Q4_K),
        ("real-q6_k", TensorType::Q6_K),
    ];
    for (name, ty) in TYPES.into_iter().chain(real) {
        let (w, wdeq) = reference(name);
        let cols = wdeq.len();
        let act = ActivationType::for_weights(ty).unwrap();
        let off = offsets(ty, &w);
        let blocks = cols / ty.block_values();
        let mut worst = 0f64;
        for (r, x) in activations(cols).iter().enumerate() {
            let q = quantize(act, x);
            let a = QuantRow::of(act, &q.qs, &q.d, &q.s);
            let got = dot_quant(ty, &w, &a);
            let want = if ty.block_values() == QK_K {
                reference_dot_k(ty, &w, &a)
            } else {
                reference_dot_32(ty, &w, &a)
            };
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{name} row {r}: {got} vs {want}"
            );
            let nb = act.block_values();
            let adeq = |k: usize| q.qs[k] as f64 * q.d[k / nb] as f64;
            let dense: f64 = (0..cols).map(|k| wdeq[k] as f64 * adeq(k)).sum();
            let mut m: f64 = (0..cols).map(|k| (wdeq[k] as f64 * adeq(k)).abs()).sum();
            let mut extra = 0f64;
            if let Some(off) = &off {
                m += 2.0
                    * (0..cols)
                        .map(|k| (off[k] as f64 * adeq(k)).abs())
                        .sum::<f64>();
                if act == ActivationType::Q8_1 {
                    for b in 0..blocks {
                        let sq: i32 = q.qs[32 * b..][..32].iter().map(|&v| v as i32).sum();
                        let exact = q.d[b] as f64 * sq as f64;
                        extra += (off[32 * b] as f64).abs() * (q.s[b] as f64 - exact).abs();
                    }
                }
            }
            let bound = (blocks + 8) as f64 * 2f64.powi(-23) * m + extra;
            assert!(
                (got as f64 - dense).abs() <= bound,
                "{name} row {r}: {got} vs dense {dense} (bound {bound})"
            );
            if bound > 0.0 {
                worst = worst.max((got as f64 - dense).abs() / bound);
            }
        }
        println!("{name}: largest |dot − dense| / bound {worst:.3}");
    }
}

/// `matmul_quant` over several rows and activation rows laid out as the forward pass lays them
/// out equals each row's dot product, and a Q8_K row's 16-value sums live in the sums buffer.
#[test]
fn matmul_lays_out_each_activation_type() {
    for (name, ty) in TYPES {
        let (blk, _) = reference(name);
        // Rows of two blocks each, cut from the reference blocks (wrapping around).
        let per_row = 2 * ty.block_bytes();
        let rows = 3;
        let data: Vec<u8> = blk
            .iter()
            .cycle()
            .skip(ty.block_bytes())
            .take(rows * per_row)
            .copied()
            .collect();
        let cols = 2 * ty.block_values();
        let m = Matrix {
            data: &data,
            ty,
            cols,
            rows,
            row_bytes: per_row,
        };
        let act = m.activation().unwrap();
        let xs = activations(cols);
        let n = xs.len();
        let (mut qs, mut d, mut s) = (
            vec![0i8; n * cols],
            vec![0f32; n * cols / act.block_values()],
            vec![0f32; n * sums_len(cols)],
        );
        let (nd, ns) = (cols / act.block_values(), sums_len(cols));
        for (t, x) in xs.iter().enumerate() {
            quantize_activation(
                act,
                x,
                &mut qs[t * cols..][..cols],
                &mut d[t * nd..][..nd],
                &mut s[t * ns..][..ns],
            );
        }
        let mut out = vec![f32::NAN; n * rows];
        matmul_quant(&m, &qs, &d, &s, n, &mut out);
        for (t, x) in xs.iter().enumerate() {
            let q = quantize(act, x);
            let a = QuantRow::of(act, &q.qs, &q.d, &q.s);
            if act == ActivationType::Q8_K {
                assert_eq!(a.bsums.len(), cols / 16);
                let sum: i32 = q.qs[..16].iter().map(|&v| v as i32).sum();
                assert_eq!(a.bsums[0] as i32, sum);
            }
            for o in 0..rows {
                let want = dot_quant(ty, m.row(o), &a);
                assert_eq!(
                    out[t * rows + o].to_bits(),
                    want.to_bits(),
                    "{name} {t} {o}"
                );
            }
        }
    }
}

fn type_name(ty: TensorType) -> &'static str {
    match ty {
        TensorType::F32 => "F32",
        TensorType::Q4_0 => "Q4_0",
        TensorType::Q4_1 => "Q4_1",
        TensorType::Q5_0 => "Q5_0",
        TensorType::Q5_1 => "Q5_1",
        TensorType::Q8_0 => "Q8_0",
        TensorType::Q4_K => "Q4_K",
        TensorType::Q5_K => "Q5_K",
        TensorType::Q6_K => "Q6_K",
    }
}

/// The real rows gguf-py dequantized (committed), always; with the Gemma 3 270M file present
/// (`bash model/fetch-gemma.sh`), every tensor's name, type and shape as gguf-py lists them, the
/// committed rows equal to the file's, and one row of every quantized tensor dequantized and
/// multiplied without error.
#[test]
fn real_gemma_tensors_match_gguf_py() {
    let real = [
        ("real-q8_0", TensorType::Q8_0, "token_embd.weight"),
        ("real-q5_0", TensorType::Q5_0, "blk.0.attn_k.weight"),
        ("real-q4_k", TensorType::Q4_K, "blk.0.attn_output.weight"),
        ("real-q6_k", TensorType::Q6_K, "blk.0.ffn_down.weight"),
    ];
    for (stem, ty, _) in real {
        let (blocks, want) = reference(stem);
        let mut got = vec![0f32; want.len()];
        dequantize_row(ty, &blocks, &mut got).unwrap();
        assert_bits(ty, stem, &got, &want);
    }
    // The file part (skipped, with a notice, without the file).
    let Some(bytes) = common::gemma_bytes() else {
        return;
    };
    let g = Gguf::parse(bytes).expect("Gemma 3 270M parses");
    let listed = String::from_utf8(data("real-tensors.txt")).unwrap();
    let listed: Vec<&str> = listed.lines().collect();
    assert_eq!(g.tensor_count() as usize, listed.len());
    let mut counts = std::collections::BTreeMap::new();
    for (t, line) in g.tensors().zip(&listed) {
        let dims: Vec<String> = t.dims[..t.n_dims as usize]
            .iter()
            .map(|d| d.to_string())
            .collect();
        let mine = format!("{} {} {}", t.name, type_name(t.ty), dims.join(" "));
        assert_eq!(&mine, line);
        *counts.entry(type_name(t.ty)).or_insert(0) += 1;
        if t.ty == TensorType::F32 {
            continue;
        }
        // One row of every quantized tensor: dequantized, and its dot product with a quantized
        // activation row finite.
        let row = &t.data[..t.ty.row_bytes(t.dims[0]).unwrap()];
        let mut v = vec![0f32; t.dims[0]];
        dequantize_row(t.ty, row, &mut v).unwrap();
        assert!(v.iter().all(|x| x.is_finite()), "{}", t.name);
        let act = ActivationType::for_weights(t.ty).unwrap();
        let x: Vec<f32> = (0..t.dims[0]).map(|i| (i as f32 * 0.1).cos()).collect();
        let q = quantize(act, &x);
        assert!(dot_quant(t.ty, row, &QuantRow::of(act, &q.qs, &q.d, &q.s)).is_finite());
    }
    let counts: Vec<(&str, i32)> = counts.into_iter().collect();
    assert_eq!(
        counts,
        [
            ("F32", 109),
            ("Q4_K", 27),
            ("Q5_0", 81),
            ("Q6_K", 9),
            ("Q8_0", 10)
        ]
    );
    for (stem, ty, name) in real {
        let t = g.tensor(name).unwrap();
        assert_eq!(t.ty, ty);
        let (blocks, _) = reference(stem);
        assert_eq!(&t.data[..blocks.len()], &blocks[..], "{name}");
    }
}
