//! A synthetic transformer-shaped workload for prefix tests: the K/V row of position `t` is a
//! deterministic function of the tokens `[0, t]` (as a real model's is), so reused rows can be
//! compared with rows written cold.

#![allow(dead_code)] // each test binary uses part of it

use edgekv::prefix::plan_prefill;
use edgekv::{HeapArenas, Kv, KvCache, PageAllocator, SeqId};

/// Elements per row (kv_heads × head_dim) of the test shapes.
pub const ROW: usize = 8;

/// Arenas on the heap for `pages` pages of `cfg` ([`HeapArenas`], unwrapped for tests).
pub struct Arenas(HeapArenas);

impl Arenas {
    pub fn new<'a, A: PageAllocator<'a>>(cfg: &edgekv::CacheConfig, pages: usize) -> Arenas {
        Arenas(HeapArenas::for_pages::<A>(cfg, pages).unwrap())
    }

    pub fn cache<'a, A: PageAllocator<'a>>(
        &'a mut self,
        cfg: edgekv::CacheConfig,
    ) -> KvCache<'a, A> {
        self.0.cache(cfg).unwrap()
    }
}

/// Hash of the tokens `[0, t]` (FNV-1a), the "context" of position `t`.
pub fn context(tokens: &[u32], t: usize) -> u64 {
    tokens[..=t].iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The row of position `t` in `(layer, kv)`: exact in f32 and f16 (small integers / 8).
pub fn kv_row(tokens: &[u32], t: usize, layer: u16, kv: Kv) -> [f32; ROW] {
    let h = context(tokens, t) ^ ((layer as u64) << 40) ^ ((kv == Kv::V) as u64 * 0x9e37_79b9);
    core::array::from_fn(|e| ((h >> (e * 7)) & 0x7f) as f32 / 8.0 - 8.0)
}

/// Prefills positions `[from, tokens.len())` of `seq` (which holds `from` positions) in chunks
/// aligned to absolute multiples of the cache's chunk size, writing every layer's K and V rows.
pub fn prefill<'a, A: PageAllocator<'a>>(
    cache: &mut KvCache<'a, A>,
    seq: SeqId,
    tokens: &[u32],
    from: u32,
) {
    assert_eq!(cache.seq_len(seq), Ok(from));
    let chunk = cache.config().chunk();
    for c in plan_prefill(from, tokens.len() as u32, chunk) {
        append(cache, seq, tokens, c.start, c.end);
    }
}

/// Reserves and writes positions `[start, end)` in one step (a prefill chunk or a decode token).
pub fn append<'a, A: PageAllocator<'a>>(
    cache: &mut KvCache<'a, A>,
    seq: SeqId,
    tokens: &[u32],
    start: u32,
    end: u32,
) {
    assert_eq!(cache.reserve(seq, end - start), Ok(start));
    let layers = cache.config().shape.layers;
    for layer in 0..layers {
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for t in start..end {
            k.extend(kv_row(tokens, t as usize, layer, Kv::K));
            v.extend(kv_row(tokens, t as usize, layer, Kv::V));
        }
        cache.write_kv(seq, layer, start, &k, &v).unwrap();
    }
}

/// Asserts that positions `[0, n)` of `seq` hold the rows a cold run over `tokens` writes.
pub fn assert_rows<'a, A: PageAllocator<'a>>(
    cache: &KvCache<'a, A>,
    seq: SeqId,
    tokens: &[u32],
    n: u32,
) {
    let layers = cache.config().shape.layers;
    let mut out = vec![0f32; n as usize * ROW];
    for layer in 0..layers {
        for kv in [Kv::K, Kv::V] {
            cache.read(seq, layer, kv, 0, &mut out).unwrap();
            for t in 0..n as usize {
                assert_eq!(
                    out[t * ROW..(t + 1) * ROW],
                    kv_row(tokens, t, layer, kv),
                    "row {t} layer {layer} {kv:?}"
                );
            }
        }
    }
}

/// Runs `check_invariants` with a scratch buffer.
pub fn invariants<'a, A: PageAllocator<'a>>(cache: &KvCache<'a, A>) {
    let mut scratch = vec![0u16; cache.arena_plan().num_pages as usize];
    cache.check_invariants(&mut scratch).unwrap();
}
