//! The activation quantizers on one decode token's rows (issue 46's figures): SmolLM2-135M's
//! (all Q4_1 weights: per layer q/k/v's shared Q8_1 row of 576, o's, gate/up's shared row, down's
//! of 1,536; 30 layers; the Q8_0 head's row) and Gemma 3 270M's (per layer q/k/v's and
//! gate/up's Q8_0 rows of 640, o's Q8_K row of 1,024, down's of 2,048; 18 layers; the Q8_0
//! head's row), through `matmul::quantize_activation` with this build's kernels or with the
//! portable code (`matmul::set_kernels(false)`: the code the `portable` build runs).
//!
//! `quantize_rows time [rounds]`: host nanoseconds per row of each shape, rounds alternating
//! kernels and portable code, medians printed (default 7 rounds).
//! `quantize_rows count <kernels|portable> <steps> [smollm2|gemma3]`: `steps` decode tokens'
//! rows (both models', or the one named), for an instruction count under `qemu-aarch64` (a
//! two-step run's count minus a one-step run's is one token); prints a CRC of every output (the
//! same either way).

use std::hint::black_box;
use std::time::Instant;

use edgekv_llm::matmul::{kernels, quantize_activation, set_kernels};
use edgekv_llm::quant::{ActivationType, sums_len};

/// Model, activation type, values per row, rows per decode token.
const TOKEN_ROWS: [(&str, ActivationType, usize, usize); 6] = [
    ("smollm2", ActivationType::Q8_1, 576, 3 * 30),
    ("smollm2", ActivationType::Q8_1, 1536, 30),
    ("smollm2", ActivationType::Q8_0, 576, 1),
    ("gemma3", ActivationType::Q8_0, 640, 2 * 18 + 1),
    ("gemma3", ActivationType::Q8_K, 1024, 18),
    ("gemma3", ActivationType::Q8_K, 2048, 18),
];

/// Random values in ±8 (xorshift64).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 20) as f32 - 8.0
        })
        .collect()
}

/// Buffers of one quantized row of `cols` values.
struct Row {
    qs: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
}

impl Row {
    fn new(act: ActivationType, cols: usize) -> Self {
        Row {
            qs: vec![0; cols],
            d: vec![0.0; cols / act.block_values()],
            s: vec![0.0; sums_len(cols)],
        }
    }

    fn quantize(&mut self, act: ActivationType, x: &[f32]) {
        quantize_activation(act, x, &mut self.qs, &mut self.d, &mut self.s);
    }

    /// CRC-32 (IEEE, reflected) of the row's bytes, continuing `crc`.
    fn crc(&self, mut crc: u32) -> u32 {
        let bytes = self.qs.iter().map(|&q| q as u8).chain(
            self.d
                .iter()
                .chain(&self.s)
                .flat_map(|v| v.to_bits().to_le_bytes()),
        );
        crc = !crc;
        for b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
            }
        }
        !crc
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("count") => {
            set_kernels(args.get(1).map(String::as_str) != Some("portable"));
            let steps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
            let only = args.get(3).map(String::as_str);
            let mut crc = 0;
            for step in 0..steps {
                for (i, (model, act, cols, rows)) in TOKEN_ROWS.into_iter().enumerate() {
                    if only.is_some_and(|m| m != model) {
                        continue;
                    }
                    let x = values(cols, (step * 8 + i) as u64);
                    let mut row = Row::new(act, cols);
                    for _ in 0..rows {
                        row.quantize(act, black_box(&x));
                    }
                    crc = row.crc(crc);
                }
            }
            println!(
                "quantize_rows count {} steps {steps}: crc {crc:08x}",
                kernels().unwrap_or("portable")
            );
        }
        _ => {
            let rounds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(7);
            let name = kernels().unwrap_or("portable");
            println!(
                "quantize_rows time: ns per row, medians of {rounds} rounds ({name} / portable)"
            );
            for (model, act, cols, _) in TOKEN_ROWS {
                let x = values(cols, cols as u64);
                let mut row = Row::new(act, cols);
                let reps = 2_000_000 / cols;
                let mut times = [Vec::new(), Vec::new()];
                for _ in 0..rounds {
                    for (k, on) in [true, false].into_iter().enumerate() {
                        set_kernels(on);
                        let t0 = Instant::now();
                        for _ in 0..reps {
                            row.quantize(act, black_box(&x));
                            black_box(&row.qs);
                        }
                        times[k].push(t0.elapsed().as_nanos() as f64 / reps as f64);
                    }
                }
                set_kernels(true);
                let [kernel, portable] = times.map(|mut t| {
                    t.sort_by(f64::total_cmp);
                    t[t.len() / 2]
                });
                println!(
                    "{model} {act:?} cols {cols}: {name} {kernel:.1} ns, portable {portable:.1} ns, {:.2}x",
                    portable / kernel
                );
            }
        }
    }
}
