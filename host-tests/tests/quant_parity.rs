//! Bit-exact parity of the quantization kernels with the reference vectors in `tests/data`:
//! `q8_0/` (gguf-py's Q8_0, which is ggml's `quantize_row_q8_0_ref`) and `fp8_tile/` (a torch
//! re-implementation of SGLang's per-tile e4m3fn K-cache quantization). See the READMEs there.

use std::path::PathBuf;

use edgekv::quant::{
    dequantize_fp8_tile, dequantize_q8, e4m3_from_f32, e4m3_to_f32, fp8_tile_row_bytes,
    quantize_fp8_tile, quantize_q8,
};
use half::{bf16, f16};

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

/// Reads a `.npy` file: its shape and its values.
fn npy<T: npyz::Deserialize>(rel: &str) -> (Vec<u64>, Vec<T>) {
    let bytes = std::fs::read(data(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let file = npyz::NpyFile::new(&bytes[..]).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let shape = file.shape().to_vec();
    let values = file
        .into_vec::<T>()
        .unwrap_or_else(|e| panic!("{rel}: {e}"));
    (shape, values)
}

fn manifest(dir: &str) -> String {
    std::fs::read_to_string(data(&format!("{dir}/manifest.json"))).expect("manifest")
}

// ---- Q8_0 ----

/// (case, rows, dim) as listed in `q8_0/manifest.json` (group 32 for all).
const Q8_CASES: [(&str, usize, usize); 3] = [
    ("normal_r256_d64", 256, 64),
    ("small_r64_d128", 64, 128),
    ("edge_r8_d64", 8, 64),
];

#[test]
fn q8_0_vectors_bit_exact() {
    let m = manifest("q8_0");
    for (case, rows, dim) in Q8_CASES {
        assert!(
            m.contains(&format!("\"{case}\"")),
            "{case} not in the manifest"
        );
        let (shape, x) = npy::<f32>(&format!("q8_0/{case}.input.npy"));
        assert_eq!(shape, [rows as u64, dim as u64]);
        let (_, want_q) = npy::<i8>(&format!("q8_0/{case}.q.npy"));
        let (sshape, want_s) = npy::<f16>(&format!("q8_0/{case}.scales.npy"));
        assert_eq!(sshape, [rows as u64, (dim / 32) as u64]);
        let (_, want_y) = npy::<f32>(&format!("q8_0/{case}.dequant.npy"));

        // The whole tensor in one call, and row by row: the same bits.
        let mut q = vec![0i8; x.len()];
        let mut s = vec![f16::ZERO; x.len() / 32];
        quantize_q8(&x, 32, &mut q, &mut s).expect("quantize");
        assert_eq!(q, want_q, "{case}: codes");
        let bits = |v: &[f16]| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&s), bits(&want_s), "{case}: scales");
        for r in 0..rows {
            let mut qr = vec![0i8; dim];
            let mut sr = vec![f16::ZERO; dim / 32];
            quantize_q8(&x[r * dim..(r + 1) * dim], 32, &mut qr, &mut sr).expect("row");
            assert_eq!(qr, want_q[r * dim..(r + 1) * dim], "{case}: row {r}");
            assert_eq!(bits(&sr), bits(&want_s[r * dim / 32..(r + 1) * dim / 32]));
        }

        let mut y = vec![0f32; x.len()];
        dequantize_q8(&q, &s, 32, &mut y).expect("dequantize");
        let fbits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(fbits(&y), fbits(&want_y), "{case}: dequant");

        // f16 rows of f16-exact values quantize like their f32 widening.
        let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        let hf: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
        let (mut qh, mut sh) = (vec![0i8; x.len()], vec![f16::ZERO; x.len() / 32]);
        let (mut qf, mut sf) = (vec![0i8; x.len()], vec![f16::ZERO; x.len() / 32]);
        quantize_q8(&h, 32, &mut qh, &mut sh).expect("f16");
        quantize_q8(&hf, 32, &mut qf, &mut sf).expect("f16 widened");
        assert_eq!((qh, bits(&sh)), (qf, bits(&sf)), "{case}: f16 input");
        eprintln!(
            "q8_0 {case}: {} codes, {} scales, {} dequant values bit-exact",
            q.len(),
            s.len(),
            y.len()
        );
    }
}

// ---- FP8 tiles ----

struct Fp8Case {
    name: &'static str,
    rows: usize,
    d: usize,
    dv: usize,
    tile: usize,
    bf16: bool,
}

/// As listed in `fp8_tile/manifest.json` (rows = num_blocks · block_size, h_k = 1).
const FP8_CASES: [Fp8Case; 4] = [
    Fp8Case {
        name: "f32_d300_dv256_t64",
        rows: 32,
        d: 300,
        dv: 256,
        tile: 64,
        bf16: false,
    },
    Fp8Case {
        name: "bf16_d576_dv512_t128",
        rows: 32,
        d: 576,
        dv: 512,
        tile: 128,
        bf16: true,
    },
    Fp8Case {
        name: "f32_small_d40_dv32_t16",
        rows: 4,
        d: 40,
        dv: 32,
        tile: 16,
        bf16: false,
    },
    Fp8Case {
        name: "edge_f32_d40_dv32_t16",
        rows: 2,
        d: 40,
        dv: 32,
        tile: 16,
        bf16: false,
    },
];

/// Input rows as f32 (bf16 cases: the uint16 bit patterns reinterpreted as bf16, then widened,
/// which is exact) and, for bf16 cases, as bf16.
fn fp8_input(c: &Fp8Case) -> (Vec<f32>, Vec<bf16>) {
    let file = format!("fp8_tile/{}.input.npy", c.name);
    if c.bf16 {
        let (shape, raw) = npy::<u16>(&file);
        assert_eq!(shape.iter().product::<u64>(), (c.rows * c.d) as u64);
        let b: Vec<bf16> = raw.into_iter().map(bf16::from_bits).collect();
        (b.iter().map(|v| v.to_f32()).collect(), b)
    } else {
        let (shape, x) = npy::<f32>(&file);
        assert_eq!(shape.iter().product::<u64>(), (c.rows * c.d) as u64);
        (x, Vec::new())
    }
}

#[test]
fn fp8_tile_vectors_bit_exact() {
    let m = manifest("fp8_tile");
    for c in &FP8_CASES {
        assert!(
            m.contains(&format!("\"{}\"", c.name)),
            "{} not in the manifest",
            c.name
        );
        let rb = fp8_tile_row_bytes(c.d, c.dv, c.tile, c.bf16).expect("row bytes");
        assert!(
            m.contains(&format!("\"row_bytes\": {rb}")),
            "{}: row bytes {rb}",
            c.name
        );
        let (x, xb) = fp8_input(c);
        let (oshape, want) = npy::<u8>(&format!("fp8_tile/{}.output.npy", c.name));
        assert_eq!(oshape.last(), Some(&(rb as u64)));
        assert_eq!(want.len(), c.rows * rb);
        let tiles = c.dv / c.tile;
        let (mut exact_tiles, mut zero_tiles) = (0, 0);
        for r in 0..c.rows {
            let xr = &x[r * c.d..(r + 1) * c.d];
            let wr = &want[r * rb..(r + 1) * rb];
            let mut row = vec![0u8; rb];
            quantize_fp8_tile(xr, c.dv, c.tile, c.bf16, &mut row).expect("quantize");
            if c.bf16 {
                // bf16 callers give the same bytes as f32 callers with bf16-exact values.
                let mut rowb = vec![0u8; rb];
                quantize_fp8_tile(&xb[r * c.d..(r + 1) * c.d], c.dv, c.tile, true, &mut rowb)
                    .expect("quantize bf16");
                assert_eq!(rowb, row, "{} row {r}: bf16 input", c.name);
            }
            for t in 0..tiles {
                let codes = t * c.tile..(t + 1) * c.tile;
                let sc = c.dv + 4 * t..c.dv + 4 * t + 4;
                let all_zero = xr[codes.clone()].iter().all(|&v| v == 0.0);
                if all_zero {
                    // The deliberate difference: scale 0 and codes 0 where the reference has
                    // scale 0 and NaN codes (0/0, negative on x86).
                    assert_eq!(&wr[sc.clone()], &[0; 4], "{} row {r} tile {t}", c.name);
                    assert!(
                        wr[codes.clone()].iter().all(|&b| b == 0xFF),
                        "{} row {r} tile {t}",
                        c.name
                    );
                    assert_eq!(&row[sc], &[0; 4]);
                    assert!(row[codes].iter().all(|&b| b == 0));
                    zero_tiles += 1;
                } else {
                    assert_eq!(
                        &row[codes.clone()],
                        &wr[codes],
                        "{} row {r} tile {t}: codes",
                        c.name
                    );
                    assert_eq!(
                        &row[sc.clone()],
                        &wr[sc],
                        "{} row {r} tile {t}: scale",
                        c.name
                    );
                    exact_tiles += 1;
                }
            }
            let tail = c.dv + 4 * tiles..rb;
            assert_eq!(&row[tail.clone()], &wr[tail], "{} row {r}: tail", c.name);

            // Dequantization: code · scale, tail raw.
            let mut y = vec![0f32; c.d];
            dequantize_fp8_tile(&row, c.dv, c.tile, c.bf16, &mut y).expect("dequantize");
            for i in 0..c.dv {
                let s = &row[c.dv + 4 * (i / c.tile)..][..4];
                let s = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                assert_eq!(y[i].to_bits(), (e4m3_to_f32(row[i]) * s).to_bits());
            }
            assert_eq!(y[c.dv..], xr[c.dv..], "{} row {r}: tail", c.name);
        }
        eprintln!(
            "fp8_tile {}: {} rows, {exact_tiles} tiles bit-exact, {zero_tiles} all-zero tiles \
             (ours: scale 0, codes 0; reference: NaN codes), tails bit-exact",
            c.name, c.rows
        );
        assert_eq!(exact_tiles + zero_tiles, c.rows * tiles);
    }
}

#[test]
fn e4m3fn_cast_table_bit_exact() {
    let (shape, x) = npy::<f32>("fp8_tile/e4m3fn_cast.input_f32.npy");
    let (_, want) = npy::<u8>("fp8_tile/e4m3fn_cast.output_u8.npy");
    assert_eq!(shape, [4119]);
    assert_eq!(want.len(), x.len());
    let got: Vec<u8> = x.iter().map(|&v| e4m3_from_f32(v)).collect();
    let bad: Vec<_> = (0..x.len())
        .filter(|&i| got[i] != want[i])
        .map(|i| (x[i], got[i], want[i]))
        .collect();
    assert!(
        bad.is_empty(),
        "{} mismatches, first: {:?}",
        bad.len(),
        &bad[..bad.len().min(8)]
    );
    // Decoding a finite code and encoding it again is the identity.
    for &c in &want {
        if c & 0x7F != 0x7F {
            assert_eq!(e4m3_from_f32(e4m3_to_f32(c)), c);
        }
    }
    eprintln!("e4m3fn cast table: {} values bit-exact", x.len());
}

// ---- Q4_0 / Q4_1 ----

/// (case, rows, dim) as listed in `q4/manifest.json` (blocks of 32).
const Q4_CASES: [(&str, usize, usize); 3] = [
    ("normal_r256_d64", 256, 64),
    ("small_r64_d128", 64, 128),
    ("edge_r10_d64", 10, 64),
];

#[test]
fn q4_vectors_bit_exact() {
    use edgekv::quant::{Q4Kind, dequantize_q4, quantize_q4};
    let m = manifest("q4");
    for (case, rows, dim) in Q4_CASES {
        assert!(
            m.contains(&format!("\"{case}\"")),
            "{case} not in the manifest"
        );
        let (shape, x) = npy::<f32>(&format!("q4/{case}.input.npy"));
        assert_eq!(shape, [rows as u64, dim as u64]);
        for (kind, name) in [(Q4Kind::Q4_0, "q4_0"), (Q4Kind::Q4_1, "q4_1")] {
            let (bshape, want_b) = npy::<u8>(&format!("q4/{case}.{name}.blocks.npy"));
            assert_eq!(
                bshape,
                [rows as u64, (dim / 32) as u64, kind.block_bytes() as u64]
            );
            let (_, want_y) = npy::<f32>(&format!("q4/{case}.{name}.dequant.npy"));
            // The whole tensor in one call, and row by row: the same bytes.
            let mut b = vec![0u8; want_b.len()];
            quantize_q4(kind, &x, &mut b).unwrap();
            let row_bytes = kind.bytes_for(dim).unwrap();
            for (r, (xr, br)) in x.chunks(dim).zip(want_b.chunks(row_bytes)).enumerate() {
                let mut one = vec![0u8; row_bytes];
                quantize_q4(kind, xr, &mut one).unwrap();
                assert_eq!(one, br, "{case} {name} row {r}: blocks differ from gguf-py");
            }
            assert_eq!(b, want_b, "{case} {name}");
            let mut y = vec![0f32; x.len()];
            dequantize_q4(kind, &want_b, &mut y).unwrap();
            for (i, (a, e)) in y.iter().zip(&want_y).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    e.to_bits(),
                    "{case} {name} value {i}: {a} vs gguf-py {e}"
                );
            }
        }
    }
}
