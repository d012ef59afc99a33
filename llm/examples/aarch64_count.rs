//! Work for instruction counts under `qemu-aarch64` (issue 47's figures): `steps` repetitions of
//! one decode step's attention at 2,048 keys, or of one SmolLM2-135M block's matmuls (or its LM
//! head's) on synthetic weights. Counting the instructions of a run with `steps = 3` and one
//! with `steps = 1` and halving the difference leaves one step (set-up cancels out). Build it
//! twice: as is (the NEON kernels) and with `--features portable,edgekv/portable`.
//!
//! `aarch64_count attn <q_heads> <kv_heads> <head_dim> <q8_0|f16> <steps>`
//! `aarch64_count block <steps>` (q, k, v, o, gate, up, down: Q4_1 × Q8_1)
//! `aarch64_count head <steps>` (576 → 49,152: Q8_0 × Q8_0)
//! `aarch64_count gemma <a|b> <steps>` (one Gemma 3 270M block's matmuls with its GGUF's types:
//! q, k, gate, up Q5_0; o Q4_K; `a`: v Q8_0, down Q6_K; `b`: v Q5_0, down Q4_K — nine blocks of
//! each in the Q4_K_M file)
//! `aarch64_count gemma-head <steps>` (640 → 32,768: an eighth of the tied embedding's 262,144
//! Q8_0 rows — the cost is linear in the rows; the whole head's 168 MB of synthetic weights
//! would take minutes of emulated set-up)
//! `aarch64_count quant <kv_heads> <head_dim> <q8_0|fp8|q4_0|q4_1> <steps>` (one decode token's
//! K and V rows written to one layer's pages: the page quantizers; FP8 in tiles of 32)

use std::hint::black_box;

use edgekv::attention::AttentionParams;
use edgekv::quant::Q4Kind;
use edgekv::{CacheConfig, ElementFormat, FreeList, HeapArenas, Kv, KvCache, SeqMode, Shape};
use edgekv_llm::gguf::TensorType;
use edgekv_llm::matmul::{Matrix, matmul_quant};
use edgekv_llm::quant::{
    ActivationType, q4_1, q4_k, q5_0, q6_k, q8_0, quantize_activation, sums_len,
};

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
    // Bytes and values per block, and the high bytes of its f16 scales.
    let (bytes, values, scales): (usize, usize, &[usize]) = match ty {
        TensorType::Q4_1 => (q4_1::BYTES, 32, &[1, 3]),
        TensorType::Q5_0 => (q5_0::BYTES, 32, &[1]),
        TensorType::Q4_K => (q4_k::BYTES, 256, &[1, 3]),
        TensorType::Q6_K => (q6_k::BYTES, 256, &[209]),
        _ => (q8_0::BYTES, 32, &[1]),
    };
    let row_bytes = cols / values * bytes;
    let mut next = stream(seed);
    let mut w: Vec<u8> = (0..rows * row_bytes)
        .map(|_| (next() * 128.0) as i8 as u8)
        .collect();
    for b in w.chunks_exact_mut(bytes) {
        for (k, &at) in scales.iter().enumerate() {
            b[at] = if k == 1 { 0xa0 } else { 0x20 } | (b[at] & 0x07);
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
            let act = ActivationType::for_weights(ty).expect("a quantized type");
            let blocks = cols / act.block_values();
            let (mut qs, mut d, mut s) = (
                vec![0i8; cols],
                vec![0f32; blocks],
                vec![0f32; sums_len(cols)],
            );
            quantize_activation(act, &x, &mut qs, &mut d, &mut s);
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

/// One decode token's K and V rows (`kv_heads × head_dim` each) written to one layer's pages of
/// `fmt`, `steps` times (positions 0, 1, …): the page quantizers (and the write's page lookup).
fn quantize(kv_heads: u16, hd: u16, fmt: ElementFormat, steps: usize) {
    let shape = Shape {
        layers: 1,
        kv_heads,
        head_dim: hd,
    };
    let row = kv_heads as usize * hd as usize;
    let mut next = stream(5);
    let k: Vec<f32> = (0..row).map(|_| next() * 2.0).collect();
    let v: Vec<f32> = (0..row).map(|_| next()).collect();
    let cfg = CacheConfig::new(shape)
        .with_page_tokens(16)
        .with_formats(fmt, fmt)
        .with_sequences(1, 64);
    let mut arenas = HeapArenas::for_pages::<FreeList>(&cfg, 4).expect("arenas");
    let mut cache: KvCache<'_, FreeList<'_>> = arenas.cache(cfg).expect("cache");
    let s = cache.create_sequence(SeqMode::Paged).expect("sequence");
    cache.reserve(s, 64).expect("reserve");
    for step in 0..steps {
        cache
            .write_kv(s, 0, step as u32, black_box(&k), black_box(&v))
            .expect("write");
    }
    let mut back = vec![0f32; row];
    cache.read(s, 0, Kv::K, 0, &mut back).expect("read");
    let crc = back
        .iter()
        .fold(0u32, |h, x| h.rotate_left(5) ^ x.to_bits());
    println!("quantize {kv_heads},{hd} {fmt:?}: {crc:08x}");
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
        Some("gemma") => {
            let (q50, q4k) = (TensorType::Q5_0, TensorType::Q4_K);
            let (v, down) = match args[1].as_str() {
                "a" => (TensorType::Q8_0, TensorType::Q6_K),
                _ => (q50, q4k),
            };
            let shapes = [
                (q50, 1024, 640),
                (q50, 256, 640),
                (v, 256, 640),
                (q4k, 640, 1024),
                (q50, 2048, 640),
                (q50, 2048, 640),
                (down, 640, 2048),
            ];
            matmuls(&shapes, n(2));
        }
        Some("gemma-head") => matmuls(&[(TensorType::Q8_0, 32_768, 640)], n(1)),
        Some("quant") => {
            let fmt = match args[3].as_str() {
                "fp8" => ElementFormat::Fp8Tile {
                    dv: n(2) as u16,
                    tile: 32,
                    bf16: false,
                },
                "q4_0" => ElementFormat::Int4 { kind: Q4Kind::Q4_0 },
                "q4_1" => ElementFormat::Int4 { kind: Q4Kind::Q4_1 },
                _ => ElementFormat::Q8_0,
            };
            quantize(n(1) as u16, n(2) as u16, fmt, n(4));
        }
        _ => eprintln!("usage: aarch64_count attn|block|head|gemma|gemma-head|quant …"),
    }
}
