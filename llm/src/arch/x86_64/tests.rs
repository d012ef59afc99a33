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

/// The AVX2 activation quantizer against the portable Q8_0 and Q8_1 quantizers, bit for bit:
/// random blocks at every magnitude (subnormal to near `f32::MAX`), exact halves (`±0.5`,
/// `±2.5`, `126.5` with a scale of 1), zeros of both signs, blocks holding an infinity or a NaN
/// (which take the portable code), and buffers of unequal lengths (the blocks all of them hold).
#[test]
fn activation_quantizer_has_the_portable_bits() {
    if super::name().is_none() {
        return;
    }
    let mut seed = 0x9e37_79b9u32;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    let mut blocks: Vec<[f32; BLOCK]> = Vec::new();
    for e in (0..254).step_by(3) {
        // Random mantissas and signs at exponent `e` (subnormals at 0).
        blocks.push(core::array::from_fn(|_| {
            let r = next();
            f32::from_bits((r & 0x8000_0000) | (e << 23) | (r & 0x007f_ffff))
        }));
        // Mixed exponents around `e`.
        blocks.push(core::array::from_fn(|_| {
            let r = next();
            let ee = (e + (r >> 28)).min(254);
            f32::from_bits((r & 0x8000_0000) | (ee << 23) | (r & 0x007f_ffff))
        }));
    }
    let mut halves = [0f32; BLOCK];
    halves[..8].copy_from_slice(&[127.0, 0.5, -0.5, 2.5, -2.5, 126.5, -126.5, 1.5]);
    halves[8] = -0.0;
    blocks.push(halves);
    blocks.push([0.0; BLOCK]);
    blocks.push([-0.0; BLOCK]);
    for special in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN] {
        let mut b: [f32; BLOCK] = core::array::from_fn(|i| i as f32 - 9.25);
        b[(next() % 32) as usize] = special;
        blocks.push(b);
    }
    let x: Vec<f32> = blocks.iter().flatten().copied().collect();
    let n = blocks.len();
    for (qs_len, d_len, s_len) in [(n, n, n), (n, n - 1, n), (n - 2, n, n), (n, n, n - 3)] {
        let run = |kernel: bool, sums: bool| {
            let (mut qs, mut d, mut s) = (
                vec![0x55i8; qs_len * BLOCK],
                vec![7.0f32; d_len],
                vec![9.0f32; s_len],
            );
            match (kernel, sums) {
                // SAFETY: `name()` found AVX2 and F16C above.
                (true, true) => unsafe { super::quantize::q8(&x, &mut qs, &mut d, Some(&mut s)) },
                // SAFETY: as above.
                (true, false) => unsafe { super::quantize::q8(&x, &mut qs, &mut d, None) },
                (false, true) => quantize_q8_1(&x, &mut qs, &mut d, &mut s),
                (false, false) => quantize_q8_0(&x, &mut qs, &mut d),
            }
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            (qs, bits(&d), bits(&s))
        };
        for sums in [false, true] {
            let (want, got) = (run(false, sums), run(true, sums));
            for (b, block) in blocks.iter().enumerate() {
                let codes = |v: &[i8]| v.get(b * BLOCK..(b + 1) * BLOCK).map(<[i8]>::to_vec);
                assert_eq!(
                    codes(&got.0),
                    codes(&want.0),
                    "codes of block {b} {block:?}"
                );
            }
            assert_eq!(got, want, "sums {sums}, lengths {qs_len} {d_len} {s_len}");
        }
    }
}
