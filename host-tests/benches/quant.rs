//! Criterion benchmarks of the quantization kernels, with `memcpy` of the same input bytes in the
//! same run as the peer figure (throughput = bytes of input).
//!
//! Goals (issue): int8 (Q8_0 math) ≥ 4 GB/s of input for K rows [4096 tokens × 8 heads × 64] and
//! [32768 × 8 × 128], from f32 and from f16; FP8 tiles on [512×32 rows, d = 300, dv = 256,
//! tile = 64] f32 ≤ 2.0 ms (torch CPU: 4.0 ms).
//!
//! The kernels are called one token row (8 heads × head_dim values) at a time, as the cache does.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use edgekv::Element;
use edgekv::quant::{fp8_tile_row_bytes, quantize_fp8_tile, quantize_q8};
use half::f16;

const HEADS: usize = 8;

/// Deterministic pseudo-normal values (sum of uniforms), with per-row magnitudes.
fn input(n: usize, row: usize) -> Vec<f32> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32
    };
    (0..n)
        .map(|i| {
            let g = next() + next() + next() + next() - 2.0;
            g * (1 << (i / row % 8)) as f32 * 0.03
        })
        .collect()
}

fn q8_rows<T: Element>(x: &[T], row: usize, group: usize, codes: &mut [i8], scales: &mut [f16]) {
    let spr = row / group;
    for ((xr, cr), sr) in x
        .chunks_exact(row)
        .zip(codes.chunks_exact_mut(row))
        .zip(scales.chunks_exact_mut(spr))
    {
        quantize_q8(xr, group, cr, sr).expect("quantize");
    }
}

fn bench_q8(c: &mut Criterion) {
    for (tokens, head_dim) in [(4096usize, 64usize), (32768, 128)] {
        let row = HEADS * head_dim;
        let n = tokens * row;
        let x32 = input(n, row);
        let x16: Vec<f16> = x32.iter().map(|&v| f16::from_f32(v)).collect();
        let mut codes = vec![0i8; n];
        let mut scales = vec![f16::ZERO; n / 32];
        let shape = format!("{tokens}x{HEADS}x{head_dim}");
        let mut g = c.benchmark_group(format!("q8/{shape}"));
        if tokens > 8192 {
            g.sample_size(10);
        }
        for group in [32, head_dim] {
            g.throughput(Throughput::Bytes((n * 4) as u64));
            g.bench_function(BenchmarkId::new("f32", format!("g{group}")), |b| {
                b.iter(|| {
                    q8_rows(
                        black_box(&x32),
                        row,
                        group,
                        &mut codes,
                        &mut scales[..n / group],
                    )
                })
            });
            g.throughput(Throughput::Bytes((n * 2) as u64));
            g.bench_function(BenchmarkId::new("f16", format!("g{group}")), |b| {
                b.iter(|| {
                    q8_rows(
                        black_box(&x16),
                        row,
                        group,
                        &mut codes,
                        &mut scales[..n / group],
                    )
                })
            });
        }
        memcpy(&mut g, input_bytes(&x32));
        memcpy(&mut g, input_bytes(&x16));
        g.finish();
    }
}

fn input_bytes<T: plain::Plain>(x: &[T]) -> Vec<u8> {
    x.iter().flat_map(|v| v.bytes()).collect()
}

/// Little-endian bytes of values.
mod plain {
    pub trait Plain {
        fn bytes(&self) -> Vec<u8>;
    }
    impl Plain for f32 {
        fn bytes(&self) -> Vec<u8> {
            self.to_le_bytes().to_vec()
        }
    }
    impl Plain for half::f16 {
        fn bytes(&self) -> Vec<u8> {
            self.to_le_bytes().to_vec()
        }
    }
}

/// `memcpy` of `src` (same bytes as a benchmark's input) into a fresh buffer.
fn memcpy(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, src: Vec<u8>) {
    let mut dst = vec![0u8; src.len()];
    g.throughput(Throughput::Bytes(src.len() as u64));
    g.bench_function(
        BenchmarkId::new("memcpy", format!("{}MB", src.len() >> 20)),
        |b| b.iter(|| dst.copy_from_slice(black_box(&src))),
    );
}

fn fp8_rows(x: &[f32], d: usize, dv: usize, tile: usize, rb: usize, out: &mut [u8]) {
    for (xr, r) in x.chunks_exact(d).zip(out.chunks_exact_mut(rb)) {
        quantize_fp8_tile(xr, dv, tile, false, r).expect("quantize");
    }
}

fn bench_fp8(c: &mut Criterion) {
    let (rows, d, dv, tile) = (512 * 32, 300, 256, 64);
    let rb = fp8_tile_row_bytes(d, dv, tile, false).expect("row bytes");
    let x = input(rows * d, d);
    let mut out = vec![0u8; rows * rb];
    let mut g = c.benchmark_group("fp8/16384x300_dv256_t64");
    g.throughput(Throughput::Bytes((x.len() * 4) as u64));
    g.bench_function("f32/1thread", |b| {
        b.iter(|| fp8_rows(black_box(&x), d, dv, tile, rb, &mut out))
    });
    // torch's CPU figure uses its intra-op threads (2 on this machine): the same split here.
    g.bench_function("f32/2threads", |b| {
        b.iter(|| {
            let half_rows = rows / 2;
            let (x0, x1) = x.split_at(half_rows * d);
            let (o0, o1) = out.split_at_mut(half_rows * rb);
            std::thread::scope(|s| {
                s.spawn(|| fp8_rows(black_box(x0), d, dv, tile, rb, o0));
                fp8_rows(black_box(x1), d, dv, tile, rb, o1);
            });
        })
    });
    memcpy(&mut g, input_bytes(&x));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = bench_q8, bench_fp8
}
criterion_main!(benches);
