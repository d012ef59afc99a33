//! Arbitrary sequences of cache operations on a small pool. After every operation the cache's
//! invariants must hold, and an operation that fails must leave everything as it was.
#![no_main]

use arbitrary::Arbitrary;
use edgekv::attention::{AttentionParams, Window};
use edgekv::snapshot::{RamFlash, SliceFlash};
use edgekv::{
    Bitmap, CacheConfig, ElementFormat, FreeList, HeapArena, Kv, KvCache, META_ALIGN,
    PageAllocator, SeqId, SeqMode, Shape,
};
use libfuzzer_sys::fuzz_target;

const SHAPE: Shape = Shape {
    layers: 2,
    kv_heads: 1,
    head_dim: 32,
};

#[derive(Arbitrary, Debug)]
enum Op {
    Create {
        contiguous: bool,
    },
    Free(u8),
    Reserve(u8, u8),
    Fork(u8),
    Truncate(u8, u8),
    Write {
        seq: u8,
        layer: u8,
        start: u8,
        rows: u8,
        seed: u8,
    },
    Commit(u8),
    Reuse {
        seq: u8,
        prompt: u8,
        len: u8,
    },
    Slide {
        seq: u8,
        sinks: u8,
        window: u8,
        from: u8,
    },
    Attend {
        seq: u8,
        layer: u8,
        start: u8,
        rows: u8,
    },
    SnapshotRestore(u8),
}

#[derive(Arbitrary, Debug)]
struct Input {
    format: u8,
    bitmap: bool,
    ops: Vec<Op>,
}

/// Token ids of position `i` of prompt family `f` (families share prefixes).
fn token(f: u8, i: usize) -> u32 {
    if i < 6 {
        7 + i as u32
    } else {
        (f as u32 % 3) * 1000 + i as u32
    }
}

fn state<'a, A: PageAllocator<'a>>(c: &KvCache<'a, A>, seqs: &[(SeqId, u8)]) -> Vec<u64> {
    let s = c.stats();
    let mut v = vec![
        s.pages_used as u64,
        s.pages_free as u64,
        s.pages_cached as u64,
        s.pages_registered as u64,
        s.sequences as u64,
        s.tokens,
    ];
    for &(seq, _) in seqs {
        if let Ok(t) = c.page_table(seq) {
            v.extend(t.iter().map(|&p| p as u64));
            v.push(c.seq_len(seq).unwrap() as u64);
        }
    }
    v
}

fn run<'a, A: PageAllocator<'a>>(mut c: KvCache<'a, A>, ops: &[Op]) {
    let mut seqs: Vec<(SeqId, u8)> = Vec::new(); // handle, prompt family
    let mut scratch16 = [0u16; 256];
    // One flash for every snapshot of the run (each snapshot erases what it writes).
    let mut mem = vec![0u8; 64 * 1024];
    let pick = |seqs: &[(SeqId, u8)], i: u8| seqs.get(i as usize % seqs.len().max(1)).copied();
    for op in ops {
        let before = state(&c, &seqs);
        let ok = match *op {
            Op::Create { contiguous } => {
                let mode = if contiguous {
                    SeqMode::Contiguous
                } else {
                    SeqMode::Paged
                };
                c.create_sequence(mode).map(|s| seqs.push((s, 0))).is_ok()
            }
            Op::Free(i) => pick(&seqs, i).is_some_and(|(s, _)| c.free_sequence(s).is_ok()),
            Op::Reserve(i, n) => {
                pick(&seqs, i).is_some_and(|(s, _)| c.reserve(s, n as u32 % 40).is_ok())
            }
            Op::Fork(i) => match pick(&seqs, i) {
                Some((s, f)) => c.fork(s).map(|k| seqs.push((k, f))).is_ok(),
                None => false,
            },
            Op::Truncate(i, n) => {
                pick(&seqs, i).is_some_and(|(s, _)| c.truncate(s, n as u32).is_ok())
            }
            Op::Write {
                seq,
                layer,
                start,
                rows,
                seed,
            } => pick(&seqs, seq).is_some_and(|(s, _)| {
                let n = rows as usize % 9;
                let x: Vec<f32> = (0..n * 32)
                    .map(|i| {
                        ((i as u32).wrapping_mul(2_654_435_761) ^ seed as u32) as f32 * 1e-9 - 2.0
                    })
                    .collect();
                let kv = if seed & 1 == 0 { Kv::K } else { Kv::V };
                c.write(s, layer as u16 % 3, kv, start as u32, &x).is_ok()
            }),
            Op::Commit(i) => pick(&seqs, i).is_some_and(|(s, f)| {
                let len = c.seq_len(s).unwrap_or(0) as usize;
                let p: Vec<u32> = (0..len).map(|t| token(f, t)).collect();
                c.commit_prompt(s, &p).is_ok()
            }),
            Op::Reuse { seq, prompt, len } => pick(&seqs, seq).is_some_and(|(s, _)| {
                let p: Vec<u32> = (0..len as usize % 48).map(|t| token(prompt, t)).collect();
                match c.lookup(&p) {
                    Ok(hit) => c.attach(s, &hit, &p).is_ok(),
                    Err(_) => false,
                }
            }),
            Op::Slide {
                seq,
                sinks,
                window,
                from,
            } => pick(&seqs, seq).is_some_and(|(s, _)| {
                let w = Window {
                    sinks: sinks as u32 % 8,
                    window: window as u32 % 24,
                };
                c.slide(s, &w, from as u32).is_ok()
            }),
            Op::Attend {
                seq,
                layer,
                start,
                rows,
            } => pick(&seqs, seq).is_some_and(|(s, _)| {
                let n = rows as usize % 4;
                let q = vec![0.25f32; n * 2 * 32];
                let mut out = vec![0f32; q.len()];
                let mut scratch = vec![0f32; c.config().scratch_len(2, 1)];
                let params = AttentionParams::new(SHAPE, 2);
                c.attention(
                    s,
                    layer as u16 % 3,
                    start as u32,
                    &q,
                    &mut out,
                    &params,
                    &mut scratch,
                )
                .is_ok()
            }),
            Op::SnapshotRestore(i) => pick(&seqs, i).is_some_and(|(s, f)| {
                let len = c.seq_len(s).unwrap_or(0) as usize;
                let p: Vec<u32> = (0..len).map(|t| token(f, t)).collect();
                let mut flash = RamFlash::<8, 1024>::new(&mut mem);
                if c.snapshot(s, &p, 9, &mut flash, 0).is_err() {
                    false
                } else {
                    let mut toks = vec![0u32; len];
                    match c.restore(&mut SliceFlash(&mem), 0, 9, &mut toks) {
                        Ok((r, _)) => {
                            assert_eq!(toks, p);
                            seqs.push((r, f));
                            true
                        }
                        Err(_) => false,
                    }
                }
            }),
        };
        if let Err(v) = c.check_invariants(&mut scratch16) {
            panic!("after {op:?}: {v:?}");
        }
        // A failed operation changes nothing observable (state of the sequences known before).
        if !ok {
            let n = before.len();
            let now = state(&c, &seqs);
            assert_eq!(
                &now[..n.min(now.len())],
                &before[..],
                "failed {op:?} changed the cache"
            );
        }
        seqs.retain(|&(s, _)| c.seq_len(s).is_ok());
    }
}

fuzz_target!(|input: Input| {
    let formats = [
        (ElementFormat::F32, ElementFormat::F16),
        (ElementFormat::Q8_0, ElementFormat::Q8_0),
        (
            ElementFormat::Fp8Tile {
                dv: 16,
                tile: 16,
                bf16: false,
            },
            ElementFormat::Bf16,
        ),
        (ElementFormat::Q4_0, ElementFormat::Q4_1),
    ];
    let (k, v) = formats[input.format as usize % formats.len()];
    let cfg = CacheConfig::new(SHAPE)
        .with_page_tokens(4)
        .with_chunk_tokens(8)
        .with_formats(k, v)
        .with_sequences(6, 64);
    let ops = &input.ops[..input.ops.len().min(64)];
    if input.bitmap {
        let plan = cfg
            .plan_pages(16, <Bitmap as PageAllocator>::META_BITS_PER_PAGE)
            .unwrap();
        let mut data = HeapArena::new(plan.data_bytes, cfg.align).unwrap();
        let mut meta = HeapArena::new(plan.meta.total, META_ALIGN).unwrap();
        run(
            KvCache::<Bitmap>::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut()).unwrap(),
            ops,
        );
    } else {
        let plan = cfg
            .plan_pages(16, <FreeList as PageAllocator>::META_BITS_PER_PAGE)
            .unwrap();
        let mut data = HeapArena::new(plan.data_bytes, cfg.align).unwrap();
        let mut meta = HeapArena::new(plan.meta.total, META_ALIGN).unwrap();
        run(
            KvCache::<FreeList>::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut()).unwrap(),
            ops,
        );
    }
});
