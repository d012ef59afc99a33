//! Issue 44's goal on Gemma 3 270M's shape: 18 layers of 1 KV head × 256 dims, pages of 16
//! tokens, q4_0 K and V; layers 5, 11 and 17 global, the other 15 attending to the last 512
//! positions. In a 4 MiB data arena the grouped cache holds one sequence of the planner's
//! `context_tokens` (≥ 2.5× the all-global layout's), attends at its end in a windowed and a
//! global layer, and its windowed group never holds more than ⌈(512 + 16 − 1) / 16⌉ + 1 = 34
//! pages. A grouped cache's attention equals, bit for bit, a one-group cache's over the same
//! rows. With q4_0 windowed and q8_0 global layers and a rollback of 32, the sequence fills its
//! 1,040 tokens, truncates back by the rollback in every group (not further) and decodes on.

use edgekv::attention::AttentionParams;
use edgekv::{
    CacheConfig, ElementFormat, Error, FreeList, GroupWindow, GroupedCache, HeapArena, Kv, KvCache,
    LayerGroup, Layers, META_ALIGN, NO_PAGE, PageAllocator, SeqId, SeqMode, Shape,
};

const GEMMA: Shape = Shape {
    layers: 18,
    kv_heads: 1,
    head_dim: 256,
};
const HD: usize = 256;
const Q_HEADS: u16 = 4;
const P: u32 = 16;
const WINDOW: u32 = 512;
const MIB4: usize = 4 << 20;

fn gemma() -> CacheConfig {
    let q4 = ElementFormat::Q4_0;
    CacheConfig::new(GEMMA)
        .with_formats(q4, q4)
        .with_sequences(1, 32768)
        .with_window(GroupWindow::new(WINDOW, 0))
        .with_group(
            LayerGroup::new(Layers::Every {
                period: 6,
                first: 5,
            })
            .with_formats(q4, q4),
        )
}

/// A deterministic row in [-1, 1) for `(layer, kv, pos)`.
fn row(layer: u16, kv: Kv, pos: u32) -> Vec<f32> {
    let mut x = (pos as u64) << 20 ^ (layer as u64) << 8 ^ kv as u64 ^ 0x9e37_79b9_7f4a_7c15;
    (0..HD)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn rows(layer: u16, kv: Kv, start: u32, n: u32) -> Vec<f32> {
    (start..start + n).flat_map(|t| row(layer, kv, t)).collect()
}

fn query(pos: u32) -> Vec<f32> {
    (0..Q_HEADS)
        .flat_map(|h| row(100 + h, Kv::K, pos))
        .collect()
}

/// Arenas of `data` and `meta` bytes on the heap.
fn arenas(data: usize, meta: usize) -> (HeapArena, HeapArena) {
    (
        HeapArena::new(data, 64).unwrap(),
        HeapArena::new(meta.max(1), META_ALIGN).unwrap(),
    )
}

/// Pages `seq` holds in group `g` (released entries not counted).
fn held(c: &GroupedCache<'_>, g: usize, seq: SeqId) -> usize {
    let table = c.group(g).unwrap().page_table(seq).unwrap();
    table.iter().filter(|&&p| p != NO_PAGE).count()
}

/// Causal attention of one query row at `t` over the rows the cache reads back, in f64:
/// keys `[t + 1 − window, t]` (all of `[0, t]` without a window).
fn reference(
    c: &GroupedCache<'_>,
    seq: SeqId,
    layer: u16,
    t: u32,
    window: Option<u32>,
) -> Vec<f64> {
    let first = window.map_or(0, |w| (t + 1).saturating_sub(w));
    let n = (t + 1 - first) as usize;
    let (mut k, mut v) = (vec![0f32; n * HD], vec![0f32; n * HD]);
    c.read(seq, layer, Kv::K, first, &mut k).unwrap();
    c.read(seq, layer, Kv::V, first, &mut v).unwrap();
    let q = query(t);
    let scale = 1.0 / (HD as f64).sqrt();
    let mut out = vec![0f64; Q_HEADS as usize * HD];
    for h in 0..Q_HEADS as usize {
        let qh = &q[h * HD..(h + 1) * HD];
        let scores: Vec<f64> = (0..n)
            .map(|j| {
                let kj = &k[j * HD..(j + 1) * HD];
                qh.iter()
                    .zip(kj)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let max = scores.iter().cloned().fold(f64::MIN, f64::max);
        let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = w.iter().sum();
        for (j, wj) in w.iter().enumerate() {
            for e in 0..HD {
                out[h * HD + e] += wj / sum * v[j * HD + e] as f64;
            }
        }
    }
    out
}

#[test]
fn gemma_fills_its_planned_context_in_4_mib_and_attends_at_the_end() {
    let cfg = gemma();
    let plan = GroupedCache::<edgekv::FreeList>::plan(&cfg, MIB4).unwrap();
    let global = GroupedCache::<edgekv::FreeList>::plan(&cfg.without_windows(), MIB4).unwrap();
    // The planner's figures: 2,128 tokens against 800 when every layer keeps everything.
    assert_eq!((plan.context_tokens, global.context_tokens), (2128, 800));
    assert!(plan.context_tokens as f64 >= 2.5 * global.context_tokens as f64);
    assert!(plan.data_bytes <= MIB4);
    let bound = (WINDOW + P - 1).div_ceil(P) as usize + 1;
    assert_eq!(plan.group(0).unwrap().num_pages as usize, bound);

    let (mut data, mut meta) = arenas(MIB4, plan.meta_bytes);
    let mut c: GroupedCache =
        GroupedCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut()).unwrap();
    let seq = c.create_sequence(SeqMode::Paged).unwrap();
    let context = plan.context_tokens;
    let mut scratch = vec![0u16; 256];
    // Prefill in chunks of one page, then decode the last 16 positions one at a time.
    let mut len = 0;
    while len < context {
        let n = if len < context - P { P } else { 1 };
        assert_eq!(c.reserve(seq, n), Ok(len));
        for layer in 0..GEMMA.layers {
            let (k, v) = (rows(layer, Kv::K, len, n), rows(layer, Kv::V, len, n));
            c.write_kv(seq, layer, len, &k, &v).unwrap();
        }
        len += n;
        assert!(
            held(&c, 0, seq) <= bound,
            "{} pages at {len}",
            held(&c, 0, seq)
        );
        assert_eq!(held(&c, 1, seq), len.div_ceil(P) as usize);
    }
    c.check_invariants(&mut scratch).unwrap();
    assert_eq!(c.seq_len(seq), Ok(context));
    // The global group is full: one more position is refused, in every group.
    let before = (
        c.stats(),
        c.group(0).unwrap().page_table(seq).unwrap().to_vec(),
    );
    assert_eq!(c.reserve(seq, 1), Err(Error::OutOfPages));
    assert_eq!(
        (
            c.stats(),
            c.group(0).unwrap().page_table(seq).unwrap().to_vec()
        ),
        before
    );

    let params = AttentionParams::new(GEMMA, Q_HEADS);
    let mut s = vec![0f32; c.scratch_len(Q_HEADS)];
    let t = context - 1;
    for (layer, window) in [
        (0u16, Some(WINDOW)),
        (4, Some(WINDOW)),
        (5, None),
        (17, None),
    ] {
        let mut out = vec![0f32; Q_HEADS as usize * HD];
        c.attention(seq, layer, t, &query(t), &mut out, &params, &mut s)
            .unwrap();
        let want = reference(&c, seq, layer, t, window);
        for (i, (&o, &w)) in out.iter().zip(&want).enumerate() {
            assert!(
                (o as f64 - w).abs() < 1e-4,
                "layer {layer} element {i}: {o} vs {w}"
            );
        }
    }
    // A windowed layer no longer holds position 0; a global one does.
    let mut r = vec![0f32; HD];
    assert_eq!(
        c.read(seq, 0, Kv::K, 0, &mut r),
        Err(Error::PositionOutOfRange)
    );
    c.read(seq, 5, Kv::K, 0, &mut r).unwrap();
}

#[test]
fn grouped_attention_equals_a_one_group_cache_bit_for_bit() {
    let cfg = gemma().with_sequences(2, 4096);
    let plan = GroupedCache::<edgekv::FreeList>::plan_pages(&cfg, &[80, 80]).unwrap();
    let (mut data, mut meta) = arenas(plan.data_bytes, plan.meta_bytes);
    let (d, m) = (data.as_uninit_mut(), meta.as_uninit_mut());
    let mut c: GroupedCache = GroupedCache::with_pages(cfg, &[80, 80], d, m).unwrap();
    // One cache per group, as a one-group configuration: the windowed 15 layers, the global 3.
    let mut one = Vec::new();
    for g in 0..2 {
        let gc = cfg.group_config(g).unwrap();
        let p = gc.plan_pages(80, FreeList::META_BITS_PER_PAGE).unwrap();
        one.push((gc, arenas(p.data_bytes, p.meta.total)));
    }
    let mut singles: Vec<KvCache<'_>> = one
        .iter_mut()
        .map(|(gc, (d, m))| KvCache::new(*gc, d.as_uninit_mut(), m.as_uninit_mut()).unwrap())
        .collect();
    let seq = c.create_sequence(SeqMode::Paged).unwrap();
    let ids: Vec<SeqId> = singles
        .iter_mut()
        .map(|k| k.create_sequence(SeqMode::Paged).unwrap())
        .collect();
    let params = AttentionParams::new(GEMMA, Q_HEADS);
    let mut s = vec![0f32; c.scratch_len(Q_HEADS)];
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // Chunks of 48, 16 and 1 positions up to 700 (past the window): attention over each chunk.
    let mut len = 0u32;
    let mut step = 0;
    while len < 700 {
        let n = [48, 16, 1][step % 3].min(700 - len);
        step += 1;
        assert_eq!(c.reserve(seq, n), Ok(len));
        for (k, &id) in singles.iter_mut().zip(&ids) {
            assert_eq!(k.reserve(id, n), Ok(len));
        }
        for layer in 0..GEMMA.layers {
            let (g, l) = cfg.layer_group(layer).unwrap();
            let (kr, vr) = (rows(layer, Kv::K, len, n), rows(layer, Kv::V, len, n));
            c.write_kv(seq, layer, len, &kr, &vr).unwrap();
            singles[g].write_kv(ids[g], l, len, &kr, &vr).unwrap();
            let q: Vec<f32> = (len..len + n).flat_map(query).collect();
            let (mut a, mut b) = (vec![0f32; q.len()], vec![0f32; q.len()]);
            c.attention(seq, layer, len, &q, &mut a, &params, &mut s)
                .unwrap();
            singles[g]
                .attention(ids[g], l, len, &q, &mut b, &params, &mut s)
                .unwrap();
            assert_eq!(bits(&a), bits(&b), "layer {layer} at {len}");
        }
        len += n;
        for (g, (k, &id)) in singles.iter().zip(&ids).enumerate() {
            assert_eq!(
                c.group(g).unwrap().page_table(seq).unwrap(),
                k.page_table(id).unwrap()
            );
        }
    }
    assert!(held(&c, 0, seq) <= 34);
}

#[test]
fn mixed_formats_and_rollback_at_gemmas_shape() {
    // q4_0 in the windowed layers, q8_0 in the global ones; 32 positions of rollback.
    let q4 = ElementFormat::Q4_0;
    let window = GroupWindow {
        window: WINDOW,
        sinks: 0,
        rollback: 32,
    };
    let cfg = CacheConfig::new(GEMMA)
        .with_formats(q4, q4)
        .with_sequences(1, 32768)
        .with_window(window)
        .with_group(
            LayerGroup::new(Layers::Every {
                period: 6,
                first: 5,
            })
            .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0),
        );
    let plan = GroupedCache::<FreeList>::plan(&cfg, MIB4).unwrap();
    let global = GroupedCache::<FreeList>::plan(&cfg.without_windows(), MIB4).unwrap();
    let bound = window.pages_per_sequence(P, P).unwrap();
    assert_eq!(plan.group(0).unwrap().num_pages as usize, bound);
    // The q8_0 global group is the limit now: 65 of its pages, 1,040 tokens.
    assert_eq!(plan.context_tokens, 1040);
    assert!(plan.context_tokens > global.context_tokens);
    let (mut data, mut meta) = arenas(MIB4, plan.meta_bytes);
    let (d, m) = (data.as_uninit_mut(), meta.as_uninit_mut());
    let mut c: GroupedCache = GroupedCache::new(cfg, d, m).unwrap();
    let seq = c.create_sequence(SeqMode::Paged).unwrap();
    let context = plan.context_tokens;
    let mut len = 0;
    while len < context {
        let n = P.min(context - len);
        assert_eq!(c.reserve(seq, n), Ok(len));
        for layer in 0..GEMMA.layers {
            let (k, v) = (rows(layer, Kv::K, len, n), rows(layer, Kv::V, len, n));
            c.write_kv(seq, layer, len, &k, &v).unwrap();
        }
        len += n;
        assert!(held(&c, 0, seq) <= bound);
    }
    let mut scratch = vec![0u16; 512];
    c.check_invariants(&mut scratch).unwrap();
    // Back by the rollback: allowed in every group; further back than the window keeps:
    // refused, in every group.
    let before = c.stats();
    assert_eq!(
        c.truncate(seq, context - 600),
        Err(Error::TruncateBeyondWindow)
    );
    assert_eq!(c.stats(), before);
    assert_eq!(c.group(1).unwrap().seq_len(seq), Ok(context));
    c.truncate(seq, context - 32).unwrap();
    assert_eq!(c.group(1).unwrap().seq_len(seq), Ok(context - 32));
    // And decode on from there: attention in a windowed and a global layer.
    assert_eq!(c.reserve(seq, 1), Ok(context - 32));
    let t = context - 32;
    for layer in 0..GEMMA.layers {
        let (k, v) = (rows(layer, Kv::K, t, 1), rows(layer, Kv::V, t, 1));
        c.write_kv(seq, layer, t, &k, &v).unwrap();
    }
    let params = AttentionParams::new(GEMMA, Q_HEADS);
    let mut s = vec![0f32; c.scratch_len(Q_HEADS)];
    for (layer, window) in [(3u16, Some(WINDOW)), (11, None)] {
        let mut out = vec![0f32; Q_HEADS as usize * HD];
        c.attention(seq, layer, t, &query(t), &mut out, &params, &mut s)
            .unwrap();
        let want = reference(&c, seq, layer, t, window);
        for (&o, &w) in out.iter().zip(&want) {
            assert!((o as f64 - w).abs() < 1e-4, "layer {layer}: {o} vs {w}");
        }
    }
    c.check_invariants(&mut scratch).unwrap();
}
