//! Criterion benchmarks of the hot paths: page alloc/free, `reserve(seq, 1)` and one token's
//! K/V write/read for all layers of SmolLM2-135M (30 layers, 3 KV heads, head_dim 64), next to
//! naive baselines (a `Vec<u16>` slab and dense per-layer `Vec<f32>`s).
//!
//! Goals (issue): alloc + free ≤ 20 ns, reserve ≤ 50 ns amortized.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Bencher, Criterion, criterion_group, criterion_main};
use edgekv::{
    Bitmap, CacheConfig, ElementFormat, FreeList, HeapArena, KvCache, PageAllocator, PagePool,
    SeqId, SeqMode, Shape,
};

const SHAPE: Shape = Shape::SMOLLM2_135M;
const ROW: usize = SHAPE.row_elems(); // 192
const LAYERS: u16 = SHAPE.layers;
/// Tokens one benchmark sequence cycles through (64 pages of 16 tokens).
const TOKENS: u32 = 1024;
const POOL_PAGES: u16 = 1024;

// ---- pool: alloc + release of one page ----

/// Metadata sections for a standalone `PagePool`.
struct PoolMem {
    refcounts: Vec<u16>,
    links: Vec<u16>,
    flags: Vec<u8>,
    alloc: Vec<u8>,
}

impl PoolMem {
    fn new(pages: u16) -> Self {
        let n = pages as usize;
        PoolMem {
            refcounts: vec![0; n],
            links: vec![0; 2 * n],
            flags: vec![0; n],
            // 16 bits per page covers both allocators; +8 bytes to align to 8 below.
            alloc: vec![0; 2 * n + 8],
        }
    }

    fn pool<'a, A: PageAllocator<'a>>(&'a mut self, pages: u16) -> PagePool<'a, A> {
        let off = self.alloc.as_ptr().align_offset(8);
        PagePool::new(
            pages,
            &mut self.refcounts,
            &mut self.links,
            &mut self.flags,
            &mut self.alloc[off..],
        )
        .expect("pool")
    }
}

/// Pages `0..n` in a fixed scrambled order (multiplicative permutation, `n` a power of two).
fn scrambled(n: u16) -> impl Iterator<Item = u16> {
    (0..n).map(move |i| i.wrapping_mul(0x9e5).wrapping_add(0x3b) & (n - 1))
}

/// A pool of `POOL_PAGES` with half its pages allocated, the free half scattered.
fn half_used<'a, A: PageAllocator<'a>>(mem: &'a mut PoolMem) -> PagePool<'a, A> {
    let mut pool = mem.pool::<A>(POOL_PAGES);
    for _ in 0..POOL_PAGES {
        pool.alloc().expect("alloc");
    }
    for page in scrambled(POOL_PAGES).take(POOL_PAGES as usize / 2) {
        pool.release(page).expect("release");
    }
    assert_eq!(pool.free_pages(), POOL_PAGES as usize / 2);
    pool
}

fn alloc_release<'a, A: PageAllocator<'a>>(b: &mut Bencher, mem: &'a mut PoolMem) {
    let mut pool = half_used::<A>(mem);
    b.iter(|| {
        let pool = black_box(&mut pool);
        let page = pool.alloc().expect("alloc");
        pool.release(black_box(page)).expect("release");
    });
}

fn bench_pool(c: &mut Criterion) {
    let mut g = c.benchmark_group("pool/alloc_release_pair");
    let mut mem = PoolMem::new(POOL_PAGES);
    g.bench_function("free_list", |b| alloc_release::<FreeList<'_>>(b, &mut mem));
    g.bench_function("bitmap", |b| alloc_release::<Bitmap<'_>>(b, &mut mem));
    g.finish();
}

// ---- cache: reserve, write, read ----

fn config(format: ElementFormat) -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(16)
        .with_formats(format, format)
        .with_sequences(4, TOKENS)
}

/// Data and metadata arenas for exactly the pages `TOKENS` tokens of one sequence need.
fn arenas(cfg: &CacheConfig, alloc_bits: usize) -> (HeapArena, HeapArena) {
    let pages = (TOKENS as usize).div_ceil(cfg.page_tokens as usize);
    let plan = cfg.plan_pages(pages, alloc_bits).expect("plan");
    (
        HeapArena::new(plan.data_bytes, cfg.align).expect("data arena"),
        HeapArena::new(plan.meta.total, edgekv::META_ALIGN).expect("meta arena"),
    )
}

/// How a full sequence is reset, outside the timed part.
#[derive(Clone, Copy)]
enum Reset {
    /// `truncate(seq, 0)`: a paged sequence releases its pages; a contiguous one keeps its run.
    Truncate,
    /// `free_sequence` + `create_sequence`: the next cycle regrows from nothing.
    Recreate,
}

/// `reserve(seq, 1)` timed in batches of up to `TOKENS` calls (one full sequence), resetting the
/// sequence between batches, so page allocation (every 16 tokens) is amortized in.
fn reserve_one<'a, A: PageAllocator<'a>>(
    b: &mut Bencher,
    cache: &mut KvCache<'a, A>,
    mode: SeqMode,
    reset: Reset,
) {
    let mut seq = cache.create_sequence(mode).expect("create");
    let mut len = 0u32;
    b.iter_custom(|iters| {
        let mut total = Duration::ZERO;
        let mut left = iters;
        while left > 0 {
            let n = left.min((TOKENS - len) as u64);
            let cache = black_box(&mut *cache);
            let t = Instant::now();
            for _ in 0..n {
                black_box(cache.reserve(black_box(seq), 1).expect("reserve"));
            }
            total += t.elapsed();
            left -= n;
            len += n as u32;
            if len == TOKENS {
                match reset {
                    Reset::Truncate => cache.truncate(seq, 0).expect("truncate"),
                    Reset::Recreate => {
                        cache.free_sequence(seq).expect("free");
                        seq = cache.create_sequence(mode).expect("create");
                    }
                }
                len = 0;
            }
        }
        total
    });
    cache.free_sequence(seq).expect("free");
}

fn bench_reserve(c: &mut Criterion) {
    let cfg = config(ElementFormat::F32);
    let mut g = c.benchmark_group("cache/reserve_1");
    {
        let (mut data, mut meta) = arenas(&cfg, FreeList::META_BITS_PER_PAGE);
        let mut cache: KvCache<'_, FreeList<'_>> =
            KvCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut()).expect("cache");
        g.bench_function("free_list", |b| {
            reserve_one(b, &mut cache, SeqMode::Paged, Reset::Truncate)
        });
    }
    {
        let (mut data, mut meta) = arenas(&cfg, Bitmap::META_BITS_PER_PAGE);
        let mut cache: KvCache<'_, Bitmap<'_>> =
            KvCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut()).expect("cache");
        g.bench_function("bitmap", |b| {
            reserve_one(b, &mut cache, SeqMode::Paged, Reset::Truncate)
        });
        g.bench_function("contiguous_bitmap/truncate", |b| {
            reserve_one(b, &mut cache, SeqMode::Contiguous, Reset::Truncate)
        });
        g.bench_function("contiguous_bitmap/recreate", |b| {
            reserve_one(b, &mut cache, SeqMode::Contiguous, Reset::Recreate)
        });
    }
    g.finish();
}

/// A token's K and V rows (distinct values, so f16 conversion does real work).
fn token_rows() -> (Vec<f32>, Vec<f32>) {
    let k = (0..ROW).map(|i| i as f32 * 0.01 - 0.9).collect();
    let v = (0..ROW).map(|i| 0.7 - i as f32 * 0.003).collect();
    (k, v)
}

/// A paged sequence with all `TOKENS` positions reserved.
fn full_sequence<'a>(cache: &mut KvCache<'a, FreeList<'a>>) -> SeqId {
    let seq = cache.create_sequence(SeqMode::Paged).expect("create");
    cache.reserve(seq, TOKENS).expect("reserve");
    seq
}

fn bench_write_read(c: &mut Criterion) {
    let (k, v) = token_rows();
    let mut g = c.benchmark_group("cache/write_token_all_layers");
    for (name, fmt) in [("f32", ElementFormat::F32), ("f16", ElementFormat::F16)] {
        let cfg = config(fmt);
        let (mut data, mut meta) = arenas(&cfg, FreeList::META_BITS_PER_PAGE);
        let mut cache: KvCache<'_> =
            KvCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut()).expect("cache");
        let seq = full_sequence(&mut cache);
        let mut pos = 0u32;
        g.bench_function(name, |b| {
            b.iter(|| {
                for layer in 0..LAYERS {
                    cache
                        .write_kv::<f32>(seq, layer, pos, black_box(&k), black_box(&v))
                        .expect("write");
                }
                pos = (pos + 1) % TOKENS;
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("cache/read_token_all_layers");
    let cfg = config(ElementFormat::F32);
    let (mut data, mut meta) = arenas(&cfg, FreeList::META_BITS_PER_PAGE);
    let mut cache: KvCache<'_> =
        KvCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut()).expect("cache");
    let seq = full_sequence(&mut cache);
    let (mut ko, mut vo) = (vec![0f32; ROW], vec![0f32; ROW]);
    let mut pos = 0u32;
    g.bench_function("f32", |b| {
        b.iter(|| {
            for layer in 0..LAYERS {
                cache
                    .read(seq, layer, edgekv::Kv::K, pos, &mut ko)
                    .expect("read");
                cache
                    .read(seq, layer, edgekv::Kv::V, pos, &mut vo)
                    .expect("read");
                black_box((&ko, &vo));
            }
            pos = (pos + 1) % TOKENS;
        })
    });
    g.finish();
}

// ---- baselines ----

fn bench_baselines(c: &mut Criterion) {
    let mut g = c.benchmark_group("baseline");

    // A plain stack of free page ids, half the pool free: pop + push.
    let mut slab: Vec<u16> = scrambled(POOL_PAGES)
        .take(POOL_PAGES as usize / 2)
        .collect();
    g.bench_function("slab_alloc_free", |b| {
        b.iter(|| {
            let slab = black_box(&mut slab);
            let page = slab.pop().expect("pop");
            slab.push(black_box(page));
        })
    });

    // A naive dense heap cache: one Vec<f32> per layer for K and one for V, one token row
    // appended per layer. Capacity for `TOKENS` is kept across cycles (cleared outside the timed
    // part), so this is its best case: no reallocation.
    let (k, v) = token_rows();
    let cap = TOKENS as usize * ROW;
    let mut ks: Vec<Vec<f32>> = (0..LAYERS).map(|_| Vec::with_capacity(cap)).collect();
    let mut vs: Vec<Vec<f32>> = (0..LAYERS).map(|_| Vec::with_capacity(cap)).collect();
    let mut len = 0u32;
    g.bench_function("vec_push_token_all_layers", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min((TOKENS - len) as u64);
                let t = Instant::now();
                for _ in 0..n {
                    for (kl, vl) in ks.iter_mut().zip(vs.iter_mut()) {
                        kl.extend_from_slice(black_box(&k));
                        vl.extend_from_slice(black_box(&v));
                    }
                }
                total += t.elapsed();
                black_box((&ks, &vs));
                left -= n;
                len += n as u32;
                if len == TOKENS {
                    ks.iter_mut().chain(vs.iter_mut()).for_each(Vec::clear);
                    len = 0;
                }
            }
            total
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50);
    targets = bench_pool, bench_reserve, bench_write_read, bench_baselines
}
criterion_main!(benches);
