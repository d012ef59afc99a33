//! Criterion benchmark of decode attention (`KvCache::attention`, one query row at the last
//! position) at contexts 512, 2048 and 8192 for the SmolLM2-135M shape (3 KV heads, head_dim 64,
//! 9 query heads), over f32, f16, int8 (Q8_0, group 32), fp8 (`Fp8Tile { dv: 64, tile: 64 }`,
//! all 64 dims E4M3, one f32 scale per head), Q4_0 and Q4_1 pages of 16 tokens, K and V in the same format, next
//! to a dense contiguous f32 baseline written here and measured in the same run.
//!
//! One layer per iteration: the caches are built with `layers: 1` (the 30 layers of the model
//! only multiply the memory). Throughput is tokens of context per second.
//!
//! edgekv runs its page loop built for AVX2/F16C when the CPU has them (chosen at run time, same
//! bits as the portable build). So that the peer gets the same instruction set, the dense
//! baseline is measured twice: built for the default target (SSE2 on x86-64), and the very same
//! code built with AVX2 and F16C enabled (`dense_f32_avx2`, on CPUs that have them). Both call
//! `libm::expf` per score, as plain code would.
//!
//! `EDGEKV_AB=1` runs alternating rounds instead (`alternating`), `EDGEKV_THREADS=<n>` one call
//! against `n` threads (`threads_mode`), `EDGEKV_BLOCKS=1` prefill one row at a time against
//! blocks of rows (`blocks_mode`), and `EDGEKV_PEER_CTX=<ctx>` the peer mode of
//! `host-tests/peer/ggml-attention.sh` (`peer`).
//!
//! Goal (issue 5): int8 pages ≥ 1.0× the dense f32 baseline's speed (compare with the AVX2 peer).

// The one unsafe call: the AVX2 build of the dense peer, behind run-time detection.
#![allow(unsafe_code)]

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use edgekv::attention::AttentionParams;
use edgekv::{
    CacheConfig, ElementFormat, FreeList, HeapArenas, KvCache, PoolKind, SeqId, SeqMode, Shape,
};

/// SmolLM2-135M's attention shape, one layer.
const SHAPE: Shape = Shape {
    layers: 1,
    ..Shape::SMOLLM2_135M
};
const Q_HEADS: u16 = 9;
const KV_HEADS: usize = SHAPE.kv_heads as usize;
const HD: usize = SHAPE.head_dim as usize;
const KV_ROW: usize = KV_HEADS * HD;
const Q_ROW: usize = Q_HEADS as usize * HD;
const GROUP: usize = Q_ROW / KV_ROW;
const PAGE_TOKENS: u16 = 16;
const CONTEXTS: [usize; 3] = [512, 2048, 8192];

const FORMATS: [(&str, ElementFormat); 6] = [
    ("f32", ElementFormat::F32),
    ("f16", ElementFormat::F16),
    ("int8", ElementFormat::Q8_0),
    (
        "fp8",
        ElementFormat::Fp8Tile {
            dv: 64,
            tile: 64,
            bf16: false,
        },
    ),
    ("q4_0", ElementFormat::Q4_0),
    ("q4_1", ElementFormat::Q4_1),
];

/// Deterministic rows of SmolLM2-135M's shape (see [`rows_of`]).
fn rows(seed: u64, tokens: usize) -> Vec<f32> {
    rows_of(seed, tokens, KV_HEADS, HD)
}

/// Deterministic rows of `heads` heads of `hd`: xorshift values in [-1, 1), a scale per row (0.25
/// to 4), and one outlier channel in 31 scaled by 8.
fn rows_of(seed: u64, tokens: usize, heads: usize, hd: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    };
    let mut out = Vec::with_capacity(tokens * heads * hd);
    for _ in 0..tokens * heads {
        let row_scale = 2f32.powf(2.0 * next());
        for d in 0..hd {
            let outlier = if d % 31 == 7 { 8.0 } else { 1.0 };
            out.push(next() * row_scale * outlier);
        }
    }
    out
}

/// An `exp` implementation.
type ExpFn = fn(f32) -> f32;

/// `Σ a[i]·b[i]` in eight lanes (vectorizes without reassociation).
#[inline(always)]
fn dot8(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    for (ca, cb) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for l in 0..8 {
            acc[l] += ca[l] * cb[l];
        }
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

/// Dense decode attention of one query row `q` ([q_heads][hd]) over `k`, `v`
/// ([tokens][kv_heads][hd], f32, contiguous): per KV head, every K row is loaded once for the
/// group's query heads, then a two-pass softmax (max, `exp`, sum) over all scores, then the
/// weighted V sum, each V row again loaded once for the group. `scores` holds `group · tokens`.
#[inline(always)]
fn dense_attention(
    exp: fn(f32) -> f32,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let tokens = k.len() / KV_ROW;
    let scores = &mut scores[..GROUP * tokens];
    for kh in 0..KV_HEADS {
        let qg = &q[kh * GROUP * HD..][..GROUP * HD];
        let og = &mut out[kh * GROUP * HD..][..GROUP * HD];
        for (j, krow) in k.chunks_exact(KV_ROW).enumerate() {
            let kr = &krow[kh * HD..][..HD];
            for (h, qh) in qg.chunks_exact(HD).enumerate() {
                scores[h * tokens + j] = dot8(qh, kr) * scale;
            }
        }
        let mut inv = [0f32; GROUP];
        for (h, s) in scores.chunks_exact_mut(tokens).enumerate() {
            let max = s.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let mut sum = 0f32;
            for x in s.iter_mut() {
                *x = exp(*x - max);
                sum += *x;
            }
            inv[h] = 1.0 / sum;
        }
        og.fill(0.0);
        for (j, vrow) in v.chunks_exact(KV_ROW).enumerate() {
            let vr = &vrow[kh * HD..][..HD];
            for (h, oh) in og.chunks_exact_mut(HD).enumerate() {
                let w = scores[h * tokens + j];
                for (o, &x) in oh.iter_mut().zip(vr) {
                    *o += w * x;
                }
            }
        }
        for (h, oh) in og.chunks_exact_mut(HD).enumerate() {
            for o in oh {
                *o *= inv[h];
            }
        }
    }
}

/// [`dense_attention`] built with AVX2 and F16C.
///
/// # Safety
///
/// The CPU supports AVX2 and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn dense_attention_avx2(
    exp: fn(f32) -> f32,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    dense_attention(exp, q, k, v, scale, scores, out)
}

/// Whether this CPU runs [`dense_attention_avx2`].
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A one-layer paged cache of `fmt` holding `k`, `v` (`tokens` rows) in one sequence; runs `f`
/// with the cache and the sequence.
fn with_cache(
    fmt: ElementFormat,
    k: &[f32],
    v: &[f32],
    f: impl FnOnce(&KvCache<'_, FreeList<'_>>, SeqId),
) {
    with_layers(SHAPE, fmt, k, v, 1, f)
}

/// [`with_cache`] with `layers` layers, each holding the same `k`, `v`.
fn with_layers(
    shape: Shape,
    fmt: ElementFormat,
    k: &[f32],
    v: &[f32],
    layers: u16,
    f: impl FnOnce(&KvCache<'_, FreeList<'_>>, SeqId),
) {
    let tokens = k.len() / (shape.kv_heads as usize * shape.head_dim as usize);
    let cfg = CacheConfig::new(Shape { layers, ..shape })
        .with_page_tokens(PAGE_TOKENS)
        .with_formats(fmt, fmt)
        .with_sequences(1, tokens as u32);
    let pages = tokens.div_ceil(PAGE_TOKENS as usize);
    let mut arenas = HeapArenas::for_pages::<FreeList>(&cfg, pages).expect("arenas");
    let mut cache: KvCache<'_, FreeList<'_>> = arenas.cache(cfg).expect("cache");
    let s = cache.create_sequence(SeqMode::Paged).expect("sequence");
    cache.reserve(s, tokens as u32).expect("reserve");
    for layer in 0..layers {
        cache.write_kv(s, layer, 0, k, v).expect("write");
    }
    f(&cache, s);
}

/// The scratch of one query row at a time in pages of `PAGE_TOKENS` (no rotation).
fn one_row_scratch(shape: Shape, q_heads: u16) -> Vec<f32> {
    let cfg = CacheConfig::new(shape).with_page_tokens(PAGE_TOKENS);
    vec![0f32; cfg.scratch_len(q_heads, 1)]
}

fn bench_attention(c: &mut Criterion) {
    let params = AttentionParams::new(SHAPE, Q_HEADS);
    let mut scratch = one_row_scratch(SHAPE, Q_HEADS);
    let mut g = c.benchmark_group("attention_decode");
    for ctx in CONTEXTS {
        let k = rows(1, ctx);
        let v = rows(2, ctx);
        let q: Vec<f32> = rows(3, GROUP).into_iter().map(|x| x * 0.5).collect();
        let last = ctx as u32 - 1;
        g.throughput(Throughput::Elements(ctx as u64));

        let mut dense_out = vec![0f32; Q_ROW];
        let mut dense_scores = vec![0f32; GROUP * ctx];
        dense_attention(
            libm::expf,
            &q,
            &k,
            &v,
            params.scale,
            &mut dense_scores,
            &mut dense_out,
        );
        // The peer with the same exp as edgekv (libm, identical bits on every target), and one
        // with glibc's faster, host-only exp.
        let exps: [(&str, ExpFn); 2] =
            [("dense_f32", libm::expf), ("dense_f32_glibc_exp", f32::exp)];
        for (name, exp) in exps {
            g.bench_with_input(BenchmarkId::new(name, ctx), &ctx, |b, _| {
                b.iter(|| {
                    dense_attention(
                        exp,
                        black_box(&q),
                        black_box(&k),
                        black_box(&v),
                        params.scale,
                        &mut dense_scores,
                        &mut dense_out,
                    );
                    black_box(&dense_out);
                })
            });
        }

        #[cfg(target_arch = "x86_64")]
        if has_avx2() {
            g.bench_with_input(BenchmarkId::new("dense_f32_avx2", ctx), &ctx, |b, _| {
                b.iter(|| {
                    // SAFETY: `has_avx2` checked AVX2 and F16C.
                    unsafe {
                        dense_attention_avx2(
                            libm::expf,
                            black_box(&q),
                            black_box(&k),
                            black_box(&v),
                            params.scale,
                            &mut dense_scores,
                            &mut dense_out,
                        )
                    };
                    black_box(&dense_out);
                })
            });
        }

        for (name, fmt) in FORMATS {
            with_cache(fmt, &k, &v, |cache, s| {
                let mut out = vec![0f32; Q_ROW];
                cache
                    .attention(s, 0, last, &q, &mut out, &params, &mut scratch)
                    .expect("attention");
                assert!(out.iter().all(|x| x.is_finite()), "{name} {ctx}");
                if fmt == ElementFormat::F32 {
                    // Same work as the dense baseline: equal results up to rounding order.
                    let peak = dense_out.iter().fold(0f32, |m, x| m.max(x.abs()));
                    for (i, (a, b)) in out.iter().zip(&dense_out).enumerate() {
                        assert!((a - b).abs() <= 1e-4 * peak, "f32 {ctx} [{i}]: {a} vs {b}");
                    }
                }
                g.bench_with_input(BenchmarkId::new(name, ctx), &ctx, |b, _| {
                    b.iter(|| {
                        cache
                            .attention(s, 0, last, black_box(&q), &mut out, &params, &mut scratch)
                            .expect("attention");
                        black_box(&out);
                    })
                });
            });
        }
    }
    g.finish();
}

/// Alternating rounds (`EDGEKV_AB=1 cargo bench --bench attention`): on a shared machine the
/// load drifts over the minutes a criterion group takes, so this measures dense (both builds),
/// int8 and f32 pages round-robin, `ROUNDS` times at each context, and reports each one's median
/// and best round and the int8 / dense speed ratios of the medians.
fn alternating() {
    const ROUNDS: usize = 31;
    let params = AttentionParams::new(SHAPE, Q_HEADS);
    let mut scratch = one_row_scratch(SHAPE, Q_HEADS);
    for ctx in CONTEXTS {
        let (k, v) = (rows(1, ctx), rows(2, ctx));
        let q: Vec<f32> = rows(3, GROUP).into_iter().map(|x| x * 0.5).collect();
        let last = ctx as u32 - 1;
        let mut out = vec![0f32; Q_ROW];
        let mut scores = vec![0f32; GROUP * ctx];
        // Iterations per round: about 3 ms of dense work.
        let iters = (3_000_000 / (ctx * 80)).max(1);
        with_cache(ElementFormat::Q8_0, &k, &v, |int8, s8| {
            with_cache(ElementFormat::F32, &k, &v, |f32s, s32| {
                let mut times: [Vec<f64>; 4] = Default::default();
                for _ in 0..ROUNDS {
                    for (i, t) in times.iter_mut().enumerate() {
                        let start = std::time::Instant::now();
                        for _ in 0..iters {
                            match i {
                                0 => dense_attention(
                                    libm::expf,
                                    black_box(&q),
                                    &k,
                                    &v,
                                    params.scale,
                                    &mut scores,
                                    &mut out,
                                ),
                                #[cfg(target_arch = "x86_64")]
                                1 if has_avx2() => {
                                    // SAFETY: `has_avx2` checked AVX2 and F16C.
                                    unsafe {
                                        dense_attention_avx2(
                                            libm::expf,
                                            black_box(&q),
                                            &k,
                                            &v,
                                            params.scale,
                                            &mut scores,
                                            &mut out,
                                        )
                                    }
                                }
                                1 => {}
                                2 => int8
                                    .attention(
                                        s8,
                                        0,
                                        last,
                                        black_box(&q),
                                        &mut out,
                                        &params,
                                        &mut scratch,
                                    )
                                    .expect("attention"),
                                _ => f32s
                                    .attention(
                                        s32,
                                        0,
                                        last,
                                        black_box(&q),
                                        &mut out,
                                        &params,
                                        &mut scratch,
                                    )
                                    .expect("attention"),
                            }
                            black_box(&out);
                        }
                        t.push(start.elapsed().as_secs_f64() * 1e6 / iters as f64);
                    }
                }
                let [d, da, i8t, f] = times.each_mut().map(|t| median_best(t));
                println!(
                    "ctx {ctx:5}: median (best) µs: dense {:.1} ({:.1}), dense_avx2 {:.1} ({:.1}), \
                     int8 {:.1} ({:.1}), f32 pages {:.1} ({:.1}); int8 speed vs dense {:.2}x, \
                     vs dense_avx2 {:.2}x",
                    d.0,
                    d.1,
                    da.0,
                    da.1,
                    i8t.0,
                    i8t.1,
                    f.0,
                    f.1,
                    d.0 / i8t.0,
                    da.0 / i8t.0
                );
            });
        });
    }
}

/// An environment variable as a number, or `default` when unset.
fn env_num(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number")),
        Err(_) => default,
    }
}

/// Median and best of `batches` timed batches of `f`, in µs per call. An untimed warm-up of at
/// least 10 ms sizes the batch to about 100 ms, so a measurement takes about `batches / 10` s
/// (ggml's perf loop runs for at least 1 s).
fn time_batches(batches: usize, mut f: impl FnMut()) -> (f64, f64, usize) {
    let (mut n, start) = (0usize, std::time::Instant::now());
    while n == 0 || start.elapsed().as_secs_f64() < 0.01 {
        f();
        n += 1;
    }
    let one = start.elapsed().as_secs_f64() / n as f64;
    let iters = ((0.1 / one) as usize).clamp(1, 10_000_000);
    let mut t: Vec<f64> = (0..batches.max(1))
        .map(|_| {
            let start = std::time::Instant::now();
            for _ in 0..iters {
                f();
            }
            start.elapsed().as_secs_f64() * 1e6 / iters as f64
        })
        .collect();
    let (median, best) = median_best(&mut t);
    (median, best, iters)
}

/// Median and smallest of non-empty timings (sorts them).
fn median_best(t: &mut [f64]) -> (f64, f64) {
    t.sort_by(f64::total_cmp);
    (t[t.len() / 2], t[0])
}

/// The peer mode's shape, `EDGEKV_SHAPE=q_heads,kv_heads,head_dim` (default SmolLM2-135M's
/// 9,3,64), one layer: the shape and the query heads.
fn peer_shape() -> (Shape, u16) {
    let Ok(v) = std::env::var("EDGEKV_SHAPE") else {
        return (SHAPE, Q_HEADS);
    };
    let n: Vec<u16> = v
        .split(',')
        .map(|x| x.trim().parse().ok())
        .collect::<Option<_>>()
        .unwrap_or_default();
    let [q_heads, kv_heads, head_dim] = n[..] else {
        panic!("EDGEKV_SHAPE={v}: expected q_heads,kv_heads,head_dim");
    };
    assert!(
        kv_heads > 0 && head_dim > 0 && q_heads % kv_heads == 0,
        "EDGEKV_SHAPE={v}: q_heads a multiple of kv_heads, both nonzero"
    );
    let shape = Shape {
        layers: 1,
        kv_heads,
        head_dim,
    };
    (shape, q_heads)
}

/// Peer mode (`EDGEKV_PEER_CTX=<ctx>`, run by `host-tests/peer/ggml-attention.sh`): for that one
/// context and shape ([`peer_shape`]), decode attention over Q8_0 pages and over f16 pages (K and V in the same format, the
/// other settings as above), and a `memcpy` of exactly the bytes the Q8_0 pages hold for K and V
/// (values and scales, from the cache's page geometry). `EDGEKV_PEER_WHAT` picks one of `q8_0`,
/// `f16`, `memcpy` (default: all three, in that order); `EDGEKV_PEER_BATCHES` is the number of
/// timed batches (default 10); `EDGEKV_PEER_LAYERS=<n>` (default 1) runs a whole decode step's
/// attention over `n` layers (each its own pages, the same rows) and copies `n` times the bytes,
/// so that with the model's 30 layers the KV no longer fits in the last-level cache, as in a real
/// decode step (times are then per layer). One machine-readable line per measurement:
/// `edgekv-peer ctx=… what=… median_us=… best_us=… iters=… batches=… bytes=… layers=…`, where
/// `bytes` is the K+V page bytes the measurement reads per layer.
fn peer(ctx: usize) {
    let batches = env_num("EDGEKV_PEER_BATCHES", 10);
    let layers = env_num("EDGEKV_PEER_LAYERS", 1);
    let layers16 = u16::try_from(layers)
        .ok()
        .filter(|&l| l > 0)
        .expect("EDGEKV_PEER_LAYERS: 1 to 65535");
    let what = std::env::var("EDGEKV_PEER_WHAT").unwrap_or_else(|_| "q8_0,f16,memcpy".into());
    assert!(
        ctx > 0 && ctx % PAGE_TOKENS as usize == 0,
        "EDGEKV_PEER_CTX={ctx}: a positive multiple of {PAGE_TOKENS}"
    );
    let (shape, q_heads) = peer_shape();
    let (kvh, hd) = (shape.kv_heads as usize, shape.head_dim as usize);
    let params = AttentionParams::new(shape, q_heads);
    let mut scratch = one_row_scratch(shape, q_heads);
    let (k, v) = (rows_of(1, ctx, kvh, hd), rows_of(2, ctx, kvh, hd));
    let q: Vec<f32> = rows_of(3, 1, q_heads as usize, hd)
        .into_iter()
        .map(|x| x * 0.5)
        .collect();
    let last = ctx as u32 - 1;
    // K+V bytes `ctx` tokens take in pages of `fmt`: values and scales, from the geometry.
    let page_bytes = |fmt: ElementFormat| {
        let g = CacheConfig::new(shape)
            .with_page_tokens(PAGE_TOKENS)
            .with_formats(fmt, fmt)
            .with_sequences(1, ctx as u32)
            .geometry()
            .expect("geometry");
        let per_token: usize = [
            PoolKind::KValues,
            PoolKind::KScales,
            PoolKind::VValues,
            PoolKind::VScales,
        ]
        .map(|p| g.pool_row_bytes(p))
        .iter()
        .sum();
        per_token * ctx
    };
    let report = |name: &str, (median, best, iters): (f64, f64, usize), bytes: usize| {
        let per = layers as f64;
        println!(
            "edgekv-peer ctx={ctx} what={name} median_us={:.3} best_us={:.3} \
             iters={iters} batches={batches} bytes={bytes} layers={layers}",
            median / per,
            best / per
        );
    };
    for name in what.split(',').map(str::trim) {
        match name {
            "q8_0" | "f16" => {
                let fmt = if name == "q8_0" {
                    ElementFormat::Q8_0
                } else {
                    ElementFormat::F16
                };
                with_layers(shape, fmt, &k, &v, layers16, |cache, s| {
                    let mut out = vec![0f32; q.len()];
                    let t = time_batches(batches, || {
                        for layer in 0..layers16 {
                            cache
                                .attention(
                                    s,
                                    layer,
                                    last,
                                    black_box(&q),
                                    &mut out,
                                    &params,
                                    &mut scratch,
                                )
                                .expect("attention");
                            black_box(&out);
                        }
                    });
                    assert!(out.iter().all(|x| x.is_finite()), "{name} {ctx}");
                    report(name, t, page_bytes(fmt));
                });
            }
            "memcpy" => {
                let layer_bytes = page_bytes(ElementFormat::Q8_0);
                let bytes = layer_bytes * layers;
                // Both buffers page-aligned: glibc's memcpy on AMD Zen (`rep movsb`) runs about
                // 15x slower when the destination is 1 to 16 bytes past the source modulo 4096,
                // which heap placement alone can produce.
                let page_aligned = |buf: &[u8]| buf.as_ptr().align_offset(4096);
                let (mut src_buf, mut dst_buf) = (vec![0u8; bytes + 4096], vec![0u8; bytes + 4096]);
                let (so, d_o) = (page_aligned(&src_buf), page_aligned(&dst_buf));
                let src = &mut src_buf[so..][..bytes];
                for (i, b) in src.iter_mut().enumerate() {
                    *b = (i * 131 + 7) as u8;
                }
                let src = &*src;
                let dst = &mut dst_buf[d_o..][..bytes];
                let t = time_batches(batches, || {
                    dst.copy_from_slice(black_box(src));
                    black_box(&mut *dst);
                });
                report(name, t, layer_bytes);
            }
            other => panic!("EDGEKV_PEER_WHAT: unknown measurement {other:?}"),
        }
    }
}

/// `EDGEKV_THREADS=<n> cargo bench --bench attention`: Q8_0 attention in one call against the
/// same split over `n` threads three ways (the same bits): scoped threads started in each call
/// (`KvCache::attention_threads`), a `Workers` team kept between calls whose idle workers spin
/// (`attention_workers`, default 1 ms spin: back-to-back calls find them spinning), and a team
/// whose workers sleep between calls (spin 0: every call wakes them). Alternating rounds at each
/// context, decode (one row) and a 64-row prefill; medians and speed-ups.
fn threads_mode(n: usize) {
    const ROUNDS: usize = 31;
    const WAYS: [&str; 4] = ["one call", "scoped", "team", "team, sleeping"];
    let params = AttentionParams::new(SHAPE, Q_HEADS);
    let mut scratch = one_row_scratch(SHAPE, Q_HEADS);
    let mut spinning = edgekv::Workers::new(n).expect("workers");
    let mut sleeping = edgekv::Workers::with_spin(n, std::time::Duration::ZERO).expect("workers");
    for ctx in CONTEXTS {
        let (k, v) = (rows(1, ctx), rows(2, ctx));
        with_cache(ElementFormat::Q8_0, &k, &v, |c, s| {
            // (label, first position, query rows, rounds, calls per round)
            let decode_iters = (3_000_000 / (ctx * 80)).max(1);
            let n_rows = 64.min(ctx);
            let cases = [
                ("decode", ctx - 1, 1, ROUNDS, decode_iters),
                ("prefill of 64 rows", ctx - n_rows, n_rows, 11, 1),
            ];
            for (label, first, n_q, rounds, iters) in cases {
                let q: Vec<f32> = rows(if n_q == 1 { 3 } else { 4 }, n_q * GROUP)
                    .into_iter()
                    .map(|x| x * 0.5)
                    .collect();
                let first = first as u32;
                let mut outs: [Vec<f32>; 4] = Default::default();
                outs.iter_mut().for_each(|o| *o = vec![0f32; q.len()]);
                let mut times: [Vec<f64>; 4] = Default::default();
                for _ in 0..rounds {
                    for (i, t) in times.iter_mut().enumerate() {
                        let out = &mut outs[i];
                        let start = std::time::Instant::now();
                        for _ in 0..iters {
                            let q = black_box(&q);
                            match i {
                                0 => c.attention(s, 0, first, q, out, &params, &mut scratch),
                                1 => c.attention_threads(s, 0, first, q, out, &params, n),
                                2 => {
                                    c.attention_workers(s, 0, first, q, out, &params, &mut spinning)
                                }
                                _ => {
                                    c.attention_workers(s, 0, first, q, out, &params, &mut sleeping)
                                }
                            }
                            .expect("attention");
                        }
                        t.push(start.elapsed().as_secs_f64() * 1e6 / iters as f64);
                    }
                }
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                for o in &outs[1..] {
                    assert_eq!(bits(o), bits(&outs[0]), "the same bits");
                }
                let m = times.each_mut().map(|t| median_best(t));
                let mut line = format!("ctx {ctx:5}, {label}, {n} threads: median (best) µs");
                for (w, (med, best)) in WAYS.iter().zip(m) {
                    line += &format!(" | {w} {med:.1} ({best:.1}) {:.2}x", m[0].0 / med);
                }
                println!("{line}");
            }
        });
    }
}

/// `EDGEKV_BLOCKS=1 cargo bench --bench attention`: prefill attention (all query rows of one
/// call over the keys before them) one row at a time (the scratch of
/// `CacheConfig::scratch_len(q_heads, 1)`) against blocks of 2, 4 and 8 rows
/// (`CacheConfig::scratch_len(q_heads, rows)`; the same bits), for Q8_0, f16 and Q4_0 pages,
/// in alternating rounds; medians and speed-ups. Cases: 64 rows at the end of 512 and 2,048
/// keys, and the model bench's warm prefill (rows 656–768, after 656 reused tokens).
fn blocks_mode() {
    const ROUNDS: usize = 11;
    const BLOCKS: [usize; 4] = [1, 2, 4, 8];
    let params = AttentionParams::new(SHAPE, Q_HEADS);
    let fmts = [
        ("q8_0", ElementFormat::Q8_0),
        ("f16", ElementFormat::F16),
        ("q4_0", ElementFormat::Q4_0),
    ];
    for (name, fmt) in fmts {
        for (ctx, n_q) in [(512, 64), (2048, 64), (769, 113)] {
            let (k, v) = (rows(1, ctx), rows(2, ctx));
            with_cache(fmt, &k, &v, |c, s| {
                let q: Vec<f32> = rows(4, n_q * GROUP).into_iter().map(|x| x * 0.5).collect();
                let first = (ctx - n_q) as u32;
                let mut outs: [Vec<f32>; 4] = Default::default();
                outs.iter_mut().for_each(|o| *o = vec![0f32; q.len()]);
                let mut scratches = BLOCKS.map(|b| vec![0f32; c.config().scratch_len(Q_HEADS, b)]);
                let mut times: [Vec<f64>; 4] = Default::default();
                for _ in 0..ROUNDS {
                    for (i, t) in times.iter_mut().enumerate() {
                        let start = std::time::Instant::now();
                        c.attention(
                            s,
                            0,
                            first,
                            black_box(&q),
                            &mut outs[i],
                            &params,
                            &mut scratches[i],
                        )
                        .expect("attention");
                        t.push(start.elapsed().as_secs_f64() * 1e6);
                    }
                }
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                for o in &outs[1..] {
                    assert_eq!(bits(o), bits(&outs[0]), "the same bits");
                }
                let m = times.each_mut().map(|t| median_best(t));
                let mut line = format!("{name} ctx {ctx:4}, {n_q} rows: median (best) µs");
                for (b, (med, best)) in BLOCKS.iter().zip(m) {
                    line += &format!(" | rows {b} {med:.0} ({best:.0}) {:.2}x", m[0].0 / med);
                }
                println!("{line}");
            });
        }
    }
}

criterion_group!(benches, bench_attention);

fn main() {
    if std::env::var_os("EDGEKV_AB").is_some() {
        alternating();
        return;
    }
    if std::env::var_os("EDGEKV_THREADS").is_some() {
        threads_mode(env_num("EDGEKV_THREADS", 2));
        return;
    }
    if std::env::var_os("EDGEKV_BLOCKS").is_some() {
        blocks_mode();
        return;
    }
    if std::env::var_os("EDGEKV_PEER_CTX").is_some() {
        peer(env_num("EDGEKV_PEER_CTX", 0));
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
