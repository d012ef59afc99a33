//! Accuracy report for the quantized page formats (a bench binary, not a test).
//!
//! Measures how much each K/V page format perturbs attention outputs `softmax(q·Kᵀ/√d)·V`, so
//! users can pick a format for their memory budget:
//!
//! - Data: K/V-like rows `[ctx][kv_heads][head_dim]`. K rows are N(0,1) times a per-(token, head)
//!   scale drawn log-uniform in [0.1, 10], with 2–4 fixed outlier channels per head amplified
//!   ×20–×50 (real K caches have them). V rows are the same without outliers, plus a variant with
//!   outliers. Queries are N(0,1); grouped-query attention maps query head `h` to KV head
//!   `h / (q_heads / kv_heads)`. Everything comes from a fixed-seed splitmix64 + Box–Muller PRNG,
//!   so every run prints the same numbers.
//! - Shapes: SmolLM2-135M-like (9 query heads, 3 KV heads, head_dim 64) and a larger one
//!   (32 query heads, 8 KV heads, head_dim 128); contexts 512 and 2048; 64 queries each.
//! - Path: the rows go through the real cache (`KvCache::write_kv`, then `read::<f32>`), which is
//!   what users get; the result is asserted bit-equal to the direct kernel round trip
//!   (`edgekv::quant`). The reference uses the original f32 K/V; both are computed in f64, so only
//!   the storage format contributes error.
//! - Reported per shape, context and (K, V) format pair: mean and max over (query, query head) of
//!   `‖o − o_ref‖₂ / ‖o_ref‖₂`, for V without and with outliers, and the bytes per token of the
//!   format (`page_bytes / page_tokens` of a one-layer cache: K + V incl. scales and padding).
//!
//!   A footer gives the reference's mean largest softmax weight: this data makes attention
//!   nearly one-hot, so K errors that reorder the top scores dominate (max errors above 1 are such
//!   flips onto a larger-scale V row).
//!
//! Run (prints a markdown table to stdout; about 15 s in release):
//!
//! ```sh
//! cargo bench -p edgekv-host-tests --bench accuracy
//! ```

use std::time::Instant;

use edgekv::quant::{
    dequantize_fp8_tile, dequantize_q8, fp8_tile_row_bytes, quantize_fp8_tile, quantize_q8,
};
use edgekv::{CacheConfig, ElementFormat, FreeList, HeapArenas, Kv, KvCache, SeqMode, Shape};
use half::f16;

/// PRNG seed: the report is deterministic.
const SEED: u64 = 0x0edc_e4b7_5eed_2024;
/// Random queries per shape and context.
const QUERIES: usize = 64;
/// Context lengths (tokens in the cache).
const CONTEXTS: [usize; 2] = [512, 2048];
/// Values per scale of the FP8 tile format.
const FP8_TILE: u16 = 64;

/// An attention shape.
struct Model {
    /// Query heads.
    q_heads: usize,
    /// Key/value heads (grouped-query attention).
    kv_heads: usize,
    /// Elements per head vector.
    head_dim: usize,
}

/// The shapes in the report.
const MODELS: [Model; 2] = [
    Model {
        q_heads: 9,
        kv_heads: 3,
        head_dim: 64,
    },
    Model {
        q_heads: 32,
        kv_heads: 8,
        head_dim: 128,
    },
];

/// splitmix64 with Box–Muller normals.
struct Rng {
    /// Generator state.
    state: u64,
    /// The second normal of the last Box–Muller pair.
    spare: Option<f64>,
}

impl Rng {
    /// A generator from `seed`.
    fn new(seed: u64) -> Self {
        Rng {
            state: seed,
            spare: None,
        }
    }

    /// The next 64 random bits.
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.uniform() * n as f64) as usize
    }

    /// Standard normal.
    fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        let u1 = 1.0 - self.uniform(); // (0, 1]: ln is finite
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let t = std::f64::consts::TAU * u2;
        self.spare = Some(r * t.sin());
        r * t.cos()
    }
}

/// K/V-like rows `[ctx][kv_heads][head_dim]`: each (token, head) row is N(0,1) times a scale
/// log-uniform in [0.1, 10]; with `outliers`, 2–4 fixed channels per head are amplified ×20–×50.
fn kv_rows(rng: &mut Rng, m: &Model, ctx: usize, outliers: bool) -> Vec<f32> {
    let d = m.head_dim;
    let mut gain = vec![1.0f64; m.kv_heads * d];
    if outliers {
        for head in gain.chunks_exact_mut(d) {
            let n = 2 + rng.below(3);
            let mut placed = 0;
            while placed < n {
                let c = rng.below(d);
                if head[c] == 1.0 {
                    head[c] = 20.0 + 30.0 * rng.uniform();
                    placed += 1;
                }
            }
        }
    }
    let (lo, hi) = (0.1f64.ln(), 10.0f64.ln());
    let mut out = Vec::with_capacity(ctx * gain.len());
    for _ in 0..ctx {
        for head in gain.chunks_exact(d) {
            let scale = (lo + (hi - lo) * rng.uniform()).exp();
            out.extend(head.iter().map(|g| (rng.normal() * scale * g) as f32));
        }
    }
    out
}

/// The data of one shape and context.
struct Data {
    /// Keys.
    k: Vec<f32>,
    /// Values without outlier channels.
    v: Vec<f32>,
    /// Values with outlier channels.
    v_out: Vec<f32>,
}

/// K and the two V variants after a trip through a cache, and the format's bytes per token.
struct Stored {
    /// Keys as read back.
    k: Vec<f32>,
    /// Values (no outliers) as read back.
    v: Vec<f32>,
    /// Values (outliers) as read back.
    v_out: Vec<f32>,
    /// All-layer (here one layer) K + V bytes per token, scales and padding included.
    bytes_per_token: usize,
}

/// Writes `data` through a one-layer `KvCache` with formats `k_fmt` / `v_fmt` (one sequence per V
/// variant) and reads everything back as f32.
fn through_cache(
    m: &Model,
    ctx: usize,
    k_fmt: ElementFormat,
    v_fmt: ElementFormat,
    data: &Data,
) -> edgekv::Result<Stored> {
    let shape = Shape {
        layers: 1,
        kv_heads: m.kv_heads as u16,
        head_dim: m.head_dim as u16,
    };
    let cfg = CacheConfig::new(shape)
        .with_formats(k_fmt, v_fmt)
        .with_sequences(2, ctx as u32);
    let geo = cfg.geometry()?;
    let pages = 2 * ctx.div_ceil(geo.page_tokens as usize);
    let plan = KvCache::<FreeList>::plan(&cfg, pages * geo.page_bytes)?;
    assert!(plan.num_pages as usize >= pages, "plan too small");
    let mut arenas = HeapArenas::for_plan(&cfg, &plan)?;
    let mut cache: KvCache<'_, FreeList<'_>> = arenas.cache(cfg)?;

    let n = data.k.len();
    let mut stored = Stored {
        k: vec![0.0; n],
        v: vec![0.0; n],
        v_out: vec![0.0; n],
        bytes_per_token: plan.geometry.page_bytes / plan.geometry.page_tokens as usize,
    };
    for (v_in, v_back) in [(&data.v, &mut stored.v), (&data.v_out, &mut stored.v_out)] {
        let seq = cache.create_sequence(SeqMode::Paged)?;
        let start = cache.reserve(seq, ctx as u32)?;
        cache.write_kv(seq, 0, start, &data.k, v_in)?;
        cache.read(seq, 0, Kv::K, start, &mut stored.k)?;
        cache.read(seq, 0, Kv::V, start, v_back)?;
    }
    Ok(stored)
}

/// The direct kernel round trip of rows `x` (`[..][head_dim]`) through format `fmt`.
fn kernel_round_trip(fmt: ElementFormat, head_dim: usize, x: &[f32]) -> edgekv::Result<Vec<f32>> {
    let mut out = vec![0.0f32; x.len()];
    match fmt {
        ElementFormat::F32 => out.copy_from_slice(x),
        ElementFormat::F16 => {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = f16::from_f32(v).to_f32();
            }
        }
        ElementFormat::Int8 { group } => {
            let g = group as usize;
            let mut codes = vec![0i8; x.len()];
            let mut scales = vec![f16::ZERO; x.len() / g];
            quantize_q8(x, g, &mut codes, &mut scales)?;
            dequantize_q8(&codes, &scales, g, &mut out)?;
        }
        ElementFormat::Fp8Tile { dv, tile, bf16 } => {
            let (dv, tile) = (dv as usize, tile as usize);
            let bytes = fp8_tile_row_bytes(head_dim, dv, tile, bf16)
                .ok_or(edgekv::ConfigError::Overflow)?;
            let mut row = vec![0u8; bytes];
            for (src, dst) in x.chunks_exact(head_dim).zip(out.chunks_exact_mut(head_dim)) {
                quantize_fp8_tile(src, dv, tile, bf16, &mut row)?;
                dequantize_fp8_tile(&row, dv, tile, bf16, dst)?;
            }
        }
        _ => unimplemented!("format {fmt:?} is not in the report"),
    }
    Ok(out)
}

/// Asserts the cache returned exactly what the kernels produce.
fn assert_bit_equal(what: &str, cache: &[f32], kernel: &[f32]) {
    assert_eq!(cache.len(), kernel.len());
    let same = cache
        .iter()
        .zip(kernel)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(
        same,
        "{what}: cache path differs from the direct kernel round trip"
    );
}

/// Dot product of an f64 query and an f32 key row (eight independent accumulators).
fn dot(q: &[f64], k: &[f32]) -> f64 {
    let mut acc = [0.0f64; 8];
    for (a, b) in q.chunks_exact(8).zip(k.chunks_exact(8)) {
        for i in 0..8 {
            acc[i] += a[i] * f64::from(b[i]);
        }
    }
    acc.iter().sum()
}

/// Attention outputs `[query][q_head][head_dim]` in f64 of `queries` over `k` and, with the same
/// weights, each of the two V variants `vs`; also the mean largest softmax weight.
fn attention(m: &Model, queries: &[f64], k: &[f32], vs: [&[f32]; 2]) -> ([Vec<f64>; 2], f64) {
    let d = m.head_dim;
    let row = m.kv_heads * d;
    let ctx = k.len() / row;
    let per_kv = m.q_heads / m.kv_heads;
    let scale = 1.0 / (d as f64).sqrt();
    let mut outs = [vec![0.0f64; queries.len()], vec![0.0f64; queries.len()]];
    let mut w = vec![0.0f64; ctx];
    let mut top = 0.0;
    for (qi, q) in queries.chunks_exact(d).enumerate() {
        let kv = (qi % m.q_heads) / per_kv;
        for (t, wt) in w.iter_mut().enumerate() {
            *wt = dot(q, &k[t * row + kv * d..][..d]) * scale;
        }
        let max = w.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut sum = 0.0;
        for wt in &mut w {
            *wt = (*wt - max).exp();
            sum += *wt;
        }
        top += 1.0 / sum; // the largest weight is exp(0) / sum
        for (v, out) in vs.iter().zip(&mut outs) {
            let o = &mut out[qi * d..][..d];
            for (t, &wt) in w.iter().enumerate() {
                for (oj, &vj) in o.iter_mut().zip(&v[t * row + kv * d..][..d]) {
                    *oj += wt * f64::from(vj);
                }
            }
            for oj in o {
                *oj /= sum;
            }
        }
    }
    let pairs = queries.len() / d;
    (outs, top / pairs as f64)
}

/// Mean and max over head vectors of `‖o − r‖₂ / ‖r‖₂`.
fn rel_errors(o: &[f64], r: &[f64], d: usize) -> (f64, f64) {
    let (mut total, mut max, mut n) = (0.0f64, 0.0f64, 0usize);
    for (a, b) in o.chunks_exact(d).zip(r.chunks_exact(d)) {
        let diff: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
        let norm: f64 = b.iter().map(|y| y * y).sum();
        let e = (diff / norm).sqrt();
        total += e;
        max = max.max(e);
        n += 1;
    }
    (total / n as f64, max)
}

/// Short name of a format for the table.
fn name(fmt: ElementFormat, head_dim: usize) -> String {
    match fmt {
        ElementFormat::F32 => "f32".into(),
        ElementFormat::F16 => "f16".into(),
        ElementFormat::Bf16 => "bf16".into(),
        ElementFormat::Int8 { group } if group as usize == head_dim => {
            format!("int8 g{group} (=d)")
        }
        ElementFormat::Int8 { group } => format!("int8 g{group}"),
        ElementFormat::Fp8Tile { tile, .. } => format!("fp8 e4m3 t{tile}"),
        _ => format!("{fmt:?}"),
    }
}

/// The (K, V) format pairs of the report for `head_dim`.
fn combos(head_dim: usize) -> [(ElementFormat, ElementFormat); 6] {
    let row = ElementFormat::Int8 {
        group: head_dim as u16,
    };
    let fp8 = ElementFormat::Fp8Tile {
        dv: head_dim as u16,
        tile: FP8_TILE,
        bf16: false,
    };
    [
        (ElementFormat::F32, ElementFormat::F32),
        (ElementFormat::F16, ElementFormat::F16),
        (ElementFormat::Q8_0, ElementFormat::Q8_0),
        (row, row),
        (fp8, fp8),
        (ElementFormat::F16, ElementFormat::Q8_0),
    ]
}

fn main() -> edgekv::Result<()> {
    let started = Instant::now();
    let mut rng = Rng::new(SEED);
    let mut sharpness = Vec::new();
    println!(
        "Relative error ‖o − o_ref‖₂/‖o_ref‖₂ of attention outputs over {QUERIES} queries × query \
         heads (reference: f32 K/V, f64 math)."
    );
    println!();
    println!(
        "| q/kv heads × d | ctx | K | V | bytes/token | vs f32 | mean err | max err | mean err \
         (V outliers) | max err (V outliers) |"
    );
    println!("|---|--:|---|---|--:|--:|--:|--:|--:|--:|");
    for m in &MODELS {
        for ctx in CONTEXTS {
            let data = Data {
                k: kv_rows(&mut rng, m, ctx, true),
                v: kv_rows(&mut rng, m, ctx, false),
                v_out: kv_rows(&mut rng, m, ctx, true),
            };
            let queries: Vec<f64> = (0..QUERIES * m.q_heads * m.head_dim)
                .map(|_| rng.normal())
                .collect();
            let (reference, top) = attention(m, &queries, &data.k, [&data.v, &data.v_out]);
            sharpness.push(format!(
                "{}/{} × {}, ctx {ctx}: {top:.2}",
                m.q_heads, m.kv_heads, m.head_dim
            ));
            let mut f32_bytes = 0;
            for (k_fmt, v_fmt) in combos(m.head_dim) {
                let s = through_cache(m, ctx, k_fmt, v_fmt, &data)?;
                let d = m.head_dim;
                assert_bit_equal("K", &s.k, &kernel_round_trip(k_fmt, d, &data.k)?);
                assert_bit_equal("V", &s.v, &kernel_round_trip(v_fmt, d, &data.v)?);
                assert_bit_equal("V*", &s.v_out, &kernel_round_trip(v_fmt, d, &data.v_out)?);
                if k_fmt == ElementFormat::F32 && v_fmt == ElementFormat::F32 {
                    f32_bytes = s.bytes_per_token;
                }
                let ([o, o_out], _) = attention(m, &queries, &s.k, [&s.v, &s.v_out]);
                let (mean, max) = rel_errors(&o, &reference[0], d);
                let (mean_out, max_out) = rel_errors(&o_out, &reference[1], d);
                println!(
                    "| {}/{} × {} | {ctx} | {} | {} | {} | {:.1}% | {mean:.2e} | {max:.2e} | \
                     {mean_out:.2e} | {max_out:.2e} |",
                    m.q_heads,
                    m.kv_heads,
                    d,
                    name(k_fmt, d),
                    name(v_fmt, d),
                    s.bytes_per_token,
                    100.0 * s.bytes_per_token as f64 / f32_bytes as f64,
                );
            }
        }
    }
    println!();
    println!(
        "Softmax sharpness (mean largest attention weight of the reference): {}.",
        sharpness.join("; ")
    );
    eprintln!("accuracy report took {:.1?}", started.elapsed());
    Ok(())
}
