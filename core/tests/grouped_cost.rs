//! What a one-group `GroupedCache` costs over the `KvCache` behind it: a decode loop (reserve one
//! position, write K and V and attend in every layer) timed on both, alternating, median of the
//! rounds. Ignored by default (a measurement, not a check); run it optimized:
//! `cargo test --release -p edgekv --features std --test integration grouped_cost:: -- --ignored --nocapture`.

use std::time::Instant;

use edgekv::attention::AttentionParams;
use edgekv::{
    CacheConfig, ElementFormat, FreeList, GroupedCache, HeapArena, KvCache, META_ALIGN,
    PageAllocator, SeqId, SeqMode, Shape,
};

const SHAPE: Shape = Shape {
    layers: 4,
    kv_heads: 2,
    head_dim: 64,
};
const ROW: usize = 128;
const Q_HEADS: u16 = 6;
const STEPS: u32 = 512;

fn config() -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0)
        .with_sequences(1, 1024)
}

/// One decode loop of `STEPS` positions; returns the nanoseconds it took.
fn run_kv(c: &mut KvCache<'_>, seq: SeqId, scratch: &mut [f32]) -> u128 {
    let params = AttentionParams::new(SHAPE, Q_HEADS);
    let (k, q) = (vec![0.25f32; ROW], vec![0.5f32; Q_HEADS as usize * 64]);
    let mut out = vec![0f32; q.len()];
    let t = Instant::now();
    for _ in 0..STEPS {
        let pos = c.reserve(seq, 1).unwrap();
        for layer in 0..SHAPE.layers {
            c.write_kv(seq, layer, pos, &k, &k).unwrap();
            c.attention(seq, layer, pos, &q, &mut out, &params, scratch)
                .unwrap();
        }
    }
    let ns = t.elapsed().as_nanos();
    c.truncate(seq, 0).unwrap();
    ns
}

fn run_grouped(c: &mut GroupedCache<'_>, seq: SeqId, scratch: &mut [f32]) -> u128 {
    let params = AttentionParams::new(SHAPE, Q_HEADS);
    let (k, q) = (vec![0.25f32; ROW], vec![0.5f32; Q_HEADS as usize * 64]);
    let mut out = vec![0f32; q.len()];
    let t = Instant::now();
    for _ in 0..STEPS {
        let pos = c.reserve(seq, 1).unwrap();
        for layer in 0..SHAPE.layers {
            c.write_kv(seq, layer, pos, &k, &k).unwrap();
            c.attention(seq, layer, pos, &q, &mut out, &params, scratch)
                .unwrap();
        }
    }
    let ns = t.elapsed().as_nanos();
    c.truncate(seq, 0).unwrap();
    ns
}

#[test]
#[ignore = "a measurement: run optimized with --ignored --nocapture"]
fn one_group_grouped_cache_costs_what_a_kv_cache_does() {
    let cfg = config();
    let plan = cfg.plan_pages(64, FreeList::META_BITS_PER_PAGE).unwrap();
    let arenas = || {
        (
            HeapArena::new(plan.data_bytes, 64).unwrap(),
            HeapArena::new(plan.meta.total, META_ALIGN).unwrap(),
        )
    };
    let (mut d1, mut m1) = arenas();
    let (mut d2, mut m2) = arenas();
    let mut k: KvCache = KvCache::new(cfg, d1.as_uninit_mut(), m1.as_uninit_mut()).unwrap();
    let mut g: GroupedCache =
        GroupedCache::new(cfg, d2.as_uninit_mut(), m2.as_uninit_mut()).unwrap();
    let (a, b) = (
        k.create_sequence(SeqMode::Paged).unwrap(),
        g.create_sequence(SeqMode::Paged).unwrap(),
    );
    let mut scratch = vec![0f32; g.scratch_len(Q_HEADS)];
    let (mut tk, mut tg) = (Vec::new(), Vec::new());
    for _ in 0..15 {
        tk.push(run_kv(&mut k, a, &mut scratch));
        tg.push(run_grouped(&mut g, b, &mut scratch));
    }
    tk.sort_unstable();
    tg.sort_unstable();
    let (mk, mg) = (tk[tk.len() / 2], tg[tg.len() / 2]);
    println!(
        "decode loop of {STEPS} positions × {} layers: KvCache {:.3} ms, GroupedCache (one group) {:.3} ms, {:+.2} %",
        SHAPE.layers,
        mk as f64 / 1e6,
        mg as f64 / 1e6,
        (mg as f64 / mk as f64 - 1.0) * 100.0
    );
}
