//! Criterion benchmarks of prefix reuse: `common_prefix_len` next to the naive per-token loop and
//! slice equality (libc `memcmp`) over the same bytes, at 100 to 1M tokens with the mismatch at
//! 90 %; and `lookup` / `attach` of a 4096-token prompt against a warm index.
//!
//! Goals (issue 4): ≥ 0.8× memcmp throughput from 10k tokens up, ≤ 50 ns at 100 tokens.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use edgekv::prefix::{common_prefix_len, namespace};
use edgekv::{CacheConfig, FreeList, HeapArenas, Kv, KvCache, SeqMode, Shape};

/// The obvious loop, one branch per token.
fn naive(a: &[u32], b: &[u32]) -> usize {
    let mut i = 0;
    while i < a.len() && i < b.len() && a[i] == b[i] {
        i += 1;
    }
    i
}

fn matcher(c: &mut Criterion) {
    let mut g = c.benchmark_group("common_prefix_len");
    for n in [100usize, 1_000, 10_000, 100_000, 1_000_000] {
        let a: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2654435761) >> 16)
            .collect();
        let mut b = a.clone();
        let at = n * 9 / 10;
        b[at] ^= 1;
        assert_eq!(common_prefix_len(&a, &b), at);
        assert_eq!(naive(&a, &b), at);
        // Bytes examined: the common prefix of one side.
        g.throughput(Throughput::Bytes((at * 4) as u64));
        g.bench_with_input(BenchmarkId::new("edgekv", n), &n, |bch, _| {
            bch.iter(|| common_prefix_len(black_box(&a), black_box(&b)))
        });
        g.bench_with_input(BenchmarkId::new("naive", n), &n, |bch, _| {
            bch.iter(|| naive(black_box(&a), black_box(&b)))
        });
        // memcmp of the same prefix (what equality of the matched part costs; finds no position).
        g.bench_with_input(BenchmarkId::new("memcmp", n), &n, |bch, _| {
            bch.iter(|| black_box(&a)[..at] == black_box(&b)[..at])
        });
    }
    g.finish();
}

fn lookup(c: &mut Criterion) {
    // One layer is enough: lookups never touch page data.
    let shape = Shape {
        layers: 1,
        kv_heads: 3,
        head_dim: 64,
    };
    let cfg = CacheConfig::new(shape)
        .with_page_tokens(16)
        .with_chunk_tokens(64)
        .with_sequences(4, 8192)
        .with_namespace(namespace(&[b"SmolLM2-135M-Instruct.Q4_1"]));
    let mut arenas = HeapArenas::for_pages::<FreeList>(&cfg, 600).unwrap();
    let mut cache: KvCache = arenas.cache(cfg).unwrap();
    let prompt: Vec<u32> = (0..4096u32).map(|i| (i * 7919) % 49152).collect();
    let s = cache.create_sequence(SeqMode::Paged).unwrap();
    cache.reserve(s, 4096).unwrap();
    cache.write(s, 0, Kv::K, 0, &[0f32; 192]).unwrap();
    assert_eq!(cache.commit_prompt(s, &prompt), Ok(256));
    // A new turn: the whole conversation plus one user token.
    let mut next = prompt.clone();
    next.push(1);
    let hit = cache.lookup(&next).unwrap();
    assert_eq!(hit.tokens, 4096);
    cache.free_sequence(s).unwrap(); // all 256 published pages cached: a warm index

    let mut g = c.benchmark_group("prefix_index");
    g.bench_function("lookup_4096", |b| {
        b.iter(|| cache.lookup(black_box(&next)).unwrap())
    });
    g.bench_function("attach_free_4096", |b| {
        b.iter(|| {
            let t = cache.create_sequence(SeqMode::Paged).unwrap();
            let hit = cache.lookup(&next).unwrap();
            cache.attach(t, &hit, &next).unwrap();
            cache.free_sequence(t).unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, matcher, lookup);
criterion_main!(benches);
