//! The AVX2 kernels against the portable dot products at SmolLM2's widest shape (1,536 values:
//! 48 blocks, the four-block steps only) and at block counts that leave one to three blocks.

use super::super::Acts;
use crate::gguf::TensorType;
use crate::quant::{BLOCK, QuantRow, q4_1, q8_0, quantize_q8_0, quantize_q8_1};

fn rows_of(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn long_and_ragged_rows_have_the_portable_bits() {
    if super::name().is_none() {
        return;
    }
    for blocks in [1, 2, 3, 5, 6, 7, 48] {
        let cols = blocks * BLOCK;
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.03)
            .collect();
        let (mut qs, mut d, mut s) = (vec![0i8; cols], vec![0f32; blocks], vec![0f32; blocks]);
        quantize_q8_1(&x, &mut qs, &mut d, &mut s);
        for (ty, bytes) in [
            (TensorType::Q4_1, q4_1::BYTES),
            (TensorType::Q8_0, q8_0::BYTES),
        ] {
            if ty == TensorType::Q8_0 {
                quantize_q8_0(&x, &mut qs, &mut d);
            }
            let rows = 7;
            let mut w = rows_of(blocks as u32 * 7 + 1, rows * blocks * bytes);
            // Finite scales (f16 exponent below 0x1e), as quantized weights have.
            for b in w.chunks_exact_mut(bytes) {
                b[1] &= 0xbb;
                if ty == TensorType::Q4_1 {
                    b[3] &= 0xbb;
                }
            }
            let a = Acts {
                qs: &qs,
                d: &d,
                s: &s,
                cols,
            };
            let mut out = vec![0f32; rows];
            assert!(super::matmul(ty, &w, blocks * bytes, rows, &a, 1, &mut out));
            let row = QuantRow {
                qs: &qs,
                d: &d,
                s: &s,
                bsums: &[],
            };
            for (o, got) in out.iter().enumerate() {
                let r = &w[o * blocks * bytes..][..blocks * bytes];
                let want = match ty {
                    TensorType::Q4_1 => q4_1::dot_q4_1_q8_1(r, &row),
                    _ => q8_0::dot_q8_0_q8_0(r, &row),
                };
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{ty:?} blocks {blocks} row {o}"
                );
            }
        }
    }
}

/// Q5_0 at Gemma 3's width (640 values: 20 blocks) and Q4_K / Q6_K at its widest inputs
/// (1,024 and 2,048 values: 4 and 8 super-blocks), activations quantized as the forward pass
/// does, through the matmul entry with 1 and 6 activation rows (a tile of four and two rows
/// after it).
#[test]
fn gemma_widths_have_the_portable_bits() {
    use crate::quant::{ActivationType, q4_k, q5_0, q6_k, quantize_activation, sums_len};
    if super::name().is_none() {
        return;
    }
    for (ty, bytes, cols) in [
        (TensorType::Q5_0, q5_0::BYTES, 640),
        (TensorType::Q4_K, q4_k::BYTES, 1024),
        (TensorType::Q6_K, q6_k::BYTES, 2048),
    ] {
        let act = ActivationType::for_weights(ty).unwrap();
        let (values, rows, n) = (act.block_values(), 5, 6);
        let blocks = cols / values;
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.03)
            .collect();
        let (mut qs, mut d) = (vec![0i8; n * cols], vec![0f32; n * blocks]);
        let mut s = vec![0f32; n * sums_len(cols)];
        for t in 0..n {
            let sums = sums_len(cols);
            quantize_activation(
                act,
                &x[t * cols..][..cols],
                &mut qs[t * cols..][..cols],
                &mut d[t * blocks..][..blocks],
                &mut s[t * sums..][..sums],
            );
        }
        let row_bytes = blocks * bytes;
        let mut w = rows_of(cols as u32 + 3, rows * row_bytes);
        // Finite f16 scales (exponent below 0x1e), as quantized weights have.
        for b in w.chunks_exact_mut(bytes) {
            match ty {
                TensorType::Q5_0 => b[1] &= 0xbb,
                TensorType::Q4_K => (b[1], b[3]) = (b[1] & 0x3b, b[3] & 0x3b),
                _ => b[209] &= 0xbb,
            }
        }
        let a = Acts {
            qs: &qs,
            d: &d,
            s: &s,
            cols,
        };
        for n in [1, n] {
            let mut out = vec![0f32; n * rows];
            assert!(super::matmul(ty, &w, row_bytes, rows, &a, n, &mut out));
            for (i, got) in out.iter().enumerate() {
                let (o, t) = (i % rows, i / rows);
                let r = &w[o * row_bytes..][..row_bytes];
                let want = match ty {
                    TensorType::Q5_0 => q5_0::dot_q5_0_q8_0(r, &a.row(t)),
                    TensorType::Q4_K => q4_k::dot_q4_k_q8_k(r, &a.row_k(t)),
                    _ => q6_k::dot_q6_k_q8_k(r, &a.row_k(t)),
                };
                assert_eq!(got.to_bits(), want.to_bits(), "{ty:?} n {n} out {i}");
            }
        }
    }
}

/// The AVX2 activation quantizers (Q8_0, Q8_1, Q8_K) against the portable ones, bit for bit, on
/// `check_quantize`'s edge cases (every exponent, exact halves, zeros of both signs, infinities
/// and NaNs, ties of sign, short buffers): every call compared.
#[test]
fn activation_quantizers_have_the_portable_bits() {
    if super::name().is_none() {
        return;
    }
    let mut work = Box::new(crate::arch::check::Work::new());
    let mut bad = Vec::new();
    let sum =
        crate::arch::check_quantize::quantizers(&mut work, super::quantize, &mut |m| bad.push(*m));
    assert!(bad.is_empty(), "{bad:#?}");
    assert_eq!(sum.compared, crate::arch::check_quantize::CALLS, "{sum:?}");
}
