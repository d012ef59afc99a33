//! The quantizers on arbitrary finite input: Q8_0-style groups and FP8 tile rows never panic,
//! never produce NaN codes or scales (nor int8 code -128 under a non-zero scale), and
//! requantizing dequantized int8 values reproduces codes and scales wherever the stored scale is
//! finite and non-zero. Q4_0 / Q4_1 blocks: no panic, finite values back from finite scales, and
//! Q4_0 requantizes to the same block wherever its f16 scale is finite and non-zero.
#![no_main]

use edgekv::quant::{
    Q4Kind, dequantize_fp8_tile, dequantize_q4, dequantize_q8, fp8_tile_row_bytes,
    quantize_fp8_tile, quantize_q4, quantize_q8,
};
use half::f16;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let x: Vec<f32> = rest
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .filter(|v| v.is_finite())
        .collect();
    let g = [1usize, 3, 8, 32, 64][sel as usize % 5];
    let n = x.len() / g * g;
    if n == 0 {
        return;
    }
    let x = &x[..n];

    // int8 groups.
    let (mut q, mut s) = (vec![0i8; n], vec![f16::ZERO; n / g]);
    quantize_q8(x, g, &mut q, &mut s).unwrap();
    assert!(s.iter().all(|v| !v.is_nan()), "NaN scale");
    // -128 only where the f32 scale is subnormal (1/d overflows to inf, as in ggml / gguf-py,
    // whose bits we keep); the f16 scale is then 0 and the group dequantizes to zeros.
    for gi in 0..s.len() {
        if s[gi].to_f32() != 0.0 {
            assert!(
                q[gi * g..(gi + 1) * g].iter().all(|&c| c != i8::MIN),
                "code -128"
            );
        }
    }
    let mut y = vec![0f32; n];
    dequantize_q8(&q, &s, g, &mut y).unwrap();
    let (mut q2, mut s2) = (vec![0i8; n], vec![f16::ZERO; n / g]);
    quantize_q8(&y, g, &mut q2, &mut s2).unwrap();
    for gi in 0..s.len() {
        let sf = s[gi].to_f32();
        if sf.is_finite() && sf != 0.0 {
            assert_eq!(
                &q2[gi * g..(gi + 1) * g],
                &q[gi * g..(gi + 1) * g],
                "requantized codes"
            );
            assert_eq!(s2[gi], s[gi], "requantized scale");
        }
    }

    // ggml 4-bit blocks of 32 values.
    for kind in [Q4Kind::Q4_0, Q4Kind::Q4_1] {
        for xb in x.chunks_exact(32) {
            let mut b = vec![0u8; kind.block_bytes()];
            quantize_q4(kind, xb, &mut b).unwrap();
            let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
            let m = match kind {
                Q4Kind::Q4_0 => 0.0,
                Q4Kind::Q4_1 => f16::from_le_bytes([b[2], b[3]]).to_f32(),
            };
            let mut y = [0f32; 32];
            dequantize_q4(kind, &b, &mut y).unwrap();
            if d.is_finite() && m.is_finite() {
                assert!(
                    y.iter().all(|v| v.is_finite()),
                    "{kind:?}: non-finite value"
                );
            }
            // Q4_0's code 0 holds −8·d exactly, the block's largest magnitude: requantized,
            // the scale and every code come back.
            if kind == Q4Kind::Q4_0 && d.is_finite() && d != 0.0 {
                let mut b2 = vec![0u8; kind.block_bytes()];
                quantize_q4(kind, &y, &mut b2).unwrap();
                assert_eq!(b2, b, "Q4_0 requantized block");
            }
        }
    }

    // FP8 tile rows of 32 values: 16 E4M3 codes in one tile, 16 raw tail values.
    for (bf16, row) in [(false, 32usize), (true, 32)] {
        for xr in x.chunks_exact(row) {
            let mut bytes = vec![0u8; fp8_tile_row_bytes(row, 16, 16, bf16).unwrap()];
            quantize_fp8_tile(xr, 16, 16, bf16, &mut bytes).unwrap();
            // bf16 rows are rounded to bf16 first: past its largest finite value they become
            // inf, which gives NaN codes by design (as torch does).
            let finite = !bf16 || xr.iter().all(|v| half::bf16::from_f32(*v).is_finite());
            if finite {
                assert!(bytes[..16].iter().all(|&c| c & 0x7F != 0x7F), "NaN code");
            }
            let mut back = vec![0f32; row];
            dequantize_fp8_tile(&bytes, 16, 16, bf16, &mut back).unwrap();
        }
    }
});
