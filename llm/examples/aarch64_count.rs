//! Work for instruction counts under `qemu-aarch64` (issue 47's figures): `steps` repetitions of
//! one decode step's attention at 2,048 keys, or of one SmolLM2-135M block's matmuls (or its LM
//! head's) on synthetic weights. Counting the instructions of a run with `steps = 3` and one
//! with `steps = 1` and halving the difference leaves one step (set-up cancels out). Build it
//! twice: as is (the NEON kernels) and with `--features portable,edgekv/portable`.
//!
//! `aarch64_count attn <q_heads> <kv_heads> <head_dim> <q8_0|f16> <steps>`
//! `aarch64_count block <steps>` (q, k, v, o, gate, up, down: Q4_1 × Q8_1)
//! `aarch64_count head <steps>` (576 → 49,152: Q8_0 × Q8_0)

use std::hint::black_box;

use edgekv::attention::AttentionParams;
use edgekv::{CacheConfig, ElementFormat, FreeList, HeapArenas, KvCache, SeqMode, Shape};
use edgekv_llm::gguf::TensorType;
use edgekv_llm::matmul::{Matrix, matmul_quant};
use edgekv_llm::quant::{q4_1, q8_0, quantize_q8_0, quantize_q8_1};

/// Keys of context.
const KEYS: usize = 2048;

fn stream(seed: u64) -> impl FnMut() -> f32 {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

fn attention(q_heads: u16, kv_heads: u16, hd: u16, fmt: ElementFormat, steps: usize) {
    let shape = Shape {
        layers: 1,
        kv_heads,
        head_dim: hd,
    };
    let row = kv_heads as usize * hd as usize;
    let mut next = stream(1);
    let k: Vec<f32> = (0..KEYS * row).map(|_| next() * 2.0).collect();
    let v: Vec<f32> = (0..KEYS * row).map(|_| next()).collect();
    let q: Vec<f32> = (0..q_heads as usize * hd as usize)
        .map(|_| next())
        .collect();
    let cfg = CacheConfig::new(shape)
        .with_page_tokens(16)
        .with_formats(fmt, fmt)
        .with_sequences(1, KEYS as u32);
    let mut arenas = HeapArenas::for_pages::<FreeList>(&cfg, KEYS / 16).expect("arenas");
    let mut cache: KvCache<'_, FreeList<'_>> = arenas.cache(cfg).expect("cache");
    let s = cache.create_sequence(SeqMode::Paged).expect("sequence");
    cache.reserve(s, KEYS as u32).expect("reserve");
    cache.write_kv(s, 0, 0, &k, &v).expect("write");
    let params = AttentionParams::new(shape, q_heads);
    let mut scratch = vec![0f32; cfg.scratch_len(q_heads, 1)];
    let mut out = vec![0f32; q.len()];
    for _ in 0..steps {
        cache
            .attention(
                s,
                0,
                KEYS as u32 - 1,
                black_box(&q),
                &mut out,
                &params,
                &mut scratch,
            )
            .expect("attention");
        black_box(&out);
    }
    let crc = out.iter().fold(0u32, |h, x| h.rotate_left(5) ^ x.to_bits());
    println!("attention {q_heads},{kv_heads},{hd} {fmt:?}: {crc:08x}");
}

/// Synthetic rows of `ty`: random bytes, f16 scales kept finite and small.
fn weights(ty: TensorType, rows: usize, cols: usize, seed: u64) -> (Vec<u8>, usize) {
    let bytes = if ty == TensorType::Q4_1 {
        q4_1::BYTES
    } else {
        q8_0::BYTES
    };
    let row_bytes = cols / 32 * bytes;
    let mut next = stream(seed);
    let mut w: Vec<u8> = (0..rows * row_bytes)
        .map(|_| (next() * 128.0) as i8 as u8)
        .collect();
    for b in w.chunks_exact_mut(bytes) {
        b[1] = 0x20 | (b[1] & 0x07);
        if ty == TensorType::Q4_1 {
            b[3] = 0xa0 | (b[3] & 0x07);
        }
    }
    (w, row_bytes)
}

fn matmuls(shapes: &[(TensorType, usize, usize)], steps: usize) {
    let mut next = stream(3);
    // Weights and quantized activations made once (outside the counted steps).
    let mats: Vec<_> = shapes
        .iter()
        .enumerate()
        .map(|(i, &(ty, rows, cols))| {
            let x: Vec<f32> = (0..cols).map(|_| next()).collect();
            let blocks = cols / 32;
            let (mut qs, mut d, mut s) = (vec![0i8; cols], vec![0f32; blocks], vec![0f32; blocks]);
            if ty == TensorType::Q4_1 {
                quantize_q8_1(&x, &mut qs, &mut d, &mut s);
            } else {
                quantize_q8_0(&x, &mut qs, &mut d);
            }
            let (w, row_bytes) = weights(ty, rows, cols, i as u64 + 7);
            (ty, rows, cols, w, row_bytes, qs, d, s)
        })
        .collect();
    let mut out = vec![0f32; shapes.iter().map(|s| s.1).max().unwrap_or(0)];
    let mut crc = 0u32;
    for step in 0..steps {
        for (ty, rows, cols, w, row_bytes, qs, d, s) in &mats {
            let m = Matrix {
                data: w,
                ty: *ty,
                cols: *cols,
                rows: *rows,
                row_bytes: *row_bytes,
            };
            matmul_quant(&m, black_box(qs), d, s, 1, &mut out[..*rows]);
            if step + 1 == steps {
                crc = out[..*rows]
                    .iter()
                    .fold(crc, |h, x| h.rotate_left(5) ^ x.to_bits());
            }
        }
    }
    println!("matmuls {:?}: {crc:08x}", edgekv_llm::matmul::kernels());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = |i: usize| args[i].parse::<usize>().expect("a number");
    match args.first().map(String::as_str) {
        Some("attn") => {
            let fmt = match args[4].as_str() {
                "f16" => ElementFormat::F16,
                _ => ElementFormat::Q8_0,
            };
            attention(n(1) as u16, n(2) as u16, n(3) as u16, fmt, n(5));
        }
        Some("block") => {
            let q41 = TensorType::Q4_1;
            let shapes = [
                (q41, 576, 576),
                (q41, 192, 576),
                (q41, 192, 576),
                (q41, 576, 576),
                (q41, 1536, 576),
                (q41, 1536, 576),
                (q41, 576, 1536),
            ];
            matmuls(&shapes, n(1));
        }
        Some("head") => matmuls(&[(TensorType::Q8_0, 49_152, 576)], n(1)),
        _ => eprintln!("usage: aarch64_count attn|block|head …"),
    }
}
