//! A configured window ([`CacheConfig::window`]): pages released as positions leave it, the
//! rollback kept, truncation past it refused, attention taking the window from the
//! configuration, and reserve all-or-nothing at every page availability.

use super::tests::{arenas, cache};
use super::*;
use crate::alloc::NO_PAGE;
use crate::attention::AttentionParams;
use crate::config::GroupWindow;
use crate::sequence::SeqMode;
use crate::shape::Shape;
use std::vec::Vec;

const SHAPE: Shape = Shape {
    layers: 2,
    kv_heads: 1,
    head_dim: 4,
};
const P: u32 = 4;
/// Fewer steps under Miri (the same code paths).
const STEPS: u32 = if cfg!(miri) { 30 } else { 150 };

fn cfg(window: GroupWindow) -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(P as u16)
        .with_sequences(4, 4096)
        .with_window(window)
}

fn row(layer: u16, kv: Kv, pos: u32) -> [f32; 4] {
    let b = ((pos * 7 + layer as u32 * 3 + kv as u32 * 5) % 29) as f32 * 0.25 - 3.0;
    core::array::from_fn(|e| b + e as f32 * 0.5)
}

/// Appends one position to `seq` in every layer.
fn push<'a>(c: &mut KvCache<'a>, seq: SeqId) -> Result<u32> {
    let pos = c.reserve(seq, 1)?;
    for layer in 0..SHAPE.layers {
        for kv in [Kv::K, Kv::V] {
            c.write(seq, layer, kv, pos, &row(layer, kv, pos))?;
        }
    }
    Ok(pos)
}

fn held(c: &KvCache<'_>, seq: SeqId) -> usize {
    c.page_table(seq)
        .unwrap()
        .iter()
        .filter(|&&p| p != NO_PAGE)
        .count()
}

/// Everything a refused call must leave as it was.
fn state(c: &KvCache<'_>, seqs: &[SeqId]) -> Vec<u64> {
    let mut s = std::vec![c.pool().free_pages() as u64, c.pool().cached_pages() as u64];
    for &q in seqs {
        s.push(c.seq_len(q).unwrap() as u64);
        s.extend(c.page_table(q).unwrap().iter().map(|&p| p as u64));
    }
    s
}

fn invariants(c: &KvCache<'_>) {
    let mut scratch = std::vec![0u16; c.arena_plan().num_pages as usize];
    c.check_invariants(&mut scratch).unwrap();
}

#[test]
fn a_window_holds_its_bound_and_attends_as_an_explicit_window() {
    for (window, sinks, rollback) in [(8, 0, 0), (9, 2, 0), (8, 0, 6), (1, 0, 0), (13, 5, 3)] {
        let w = GroupWindow {
            window,
            sinks,
            rollback,
        };
        let c1 = cfg(w);
        let bound = w.pages_per_sequence(P, P).unwrap();
        let mut a = arenas(&c1, bound);
        let mut c: KvCache = cache(&mut a, c1, bound);
        // The reference keeps everything and is given the window per call.
        let c2 = cfg(w);
        let c2 = CacheConfig { window: None, ..c2 };
        let mut b = arenas(&c2, 64);
        let mut r: KvCache = cache(&mut b, c2, 64);
        let (s, t) = (
            c.create_sequence(SeqMode::Paged).unwrap(),
            r.create_sequence(SeqMode::Paged).unwrap(),
        );
        let params = AttentionParams::new(SHAPE, 2);
        let explicit = params.with_window(sinks, window);
        let mut scratch = std::vec![0f32; c1.scratch_len(2, 1)];
        for _ in 0..STEPS {
            let pos = push(&mut c, s).unwrap();
            push(&mut r, t).unwrap();
            assert!(held(&c, s) <= bound, "{w:?} at {pos}");
            for layer in 0..SHAPE.layers {
                let q: Vec<f32> = (0..8).map(|i| (i as f32 - 3.5) * 0.3).collect();
                let (mut o1, mut o2) = (std::vec![0f32; 8], std::vec![0f32; 8]);
                c.attention(s, layer, pos, &q, &mut o1, &params, &mut scratch)
                    .unwrap();
                r.attention(t, layer, pos, &q, &mut o2, &explicit, &mut scratch)
                    .unwrap();
                assert_eq!(o1, o2, "{w:?} layer {layer} at {pos}");
            }
            invariants(&c);
        }
        // Full causal attention over released keys is refused, nothing written.
        let q = [1f32; 8];
        let mut out = [7f32; 8];
        let full = AttentionParams::new(SHAPE, 2).with_window(0, 4096);
        assert_eq!(
            c.attention(s, 0, STEPS - 1, &q, &mut out, &full, &mut scratch),
            Err(Error::PositionOutOfRange)
        );
        assert_eq!(out, [7f32; 8]);
    }
}

#[test]
fn truncate_within_the_rollback_and_refused_past_it() {
    let w = GroupWindow {
        window: 8,
        sinks: 0,
        rollback: 6,
    };
    let c1 = cfg(w);
    let mut a = arenas(&c1, 16);
    let mut c: KvCache = cache(&mut a, c1, 16);
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    for _ in 0..60 {
        push(&mut c, s).unwrap();
    }
    // Back by the rollback (and by anything the kept pages still cover): fine.
    let before = state(&c, &[s]);
    let mut shortest = 60;
    let mut refused = false;
    for len in (0..60).rev() {
        let f = c.fork(s).unwrap();
        match c.truncate(f, len) {
            Ok(()) => {
                // Once refused, only the empty sequence is fine again.
                assert!(!refused || len == 0, "truncate to {len} after a refusal");
                if !refused {
                    shortest = len;
                }
                // The truncated copy continues: attention at its new length sees its window.
                push(&mut c, f).unwrap();
                let mut scratch = std::vec![0f32; c1.scratch_len(1, 1)];
                let mut out = [0f32; 4];
                let p = AttentionParams::new(SHAPE, 1);
                c.attention(f, 0, len, &[1.0; 4], &mut out, &p, &mut scratch)
                    .unwrap();
            }
            Err(e) => {
                assert_eq!(e, Error::TruncateBeyondWindow, "to {len}");
                refused = true;
                let fs = state(&c, &[f]);
                assert_eq!(c.truncate(f, len), Err(Error::TruncateBeyondWindow));
                assert_eq!(state(&c, &[f]), fs, "refused truncate changed the cache");
            }
        }
        c.free_sequence(f).unwrap();
        invariants(&c);
    }
    assert!(shortest <= 60 - 6, "rollback of 6 not kept: {shortest}");
    assert!(refused && shortest > 0, "nothing was released");
    assert_eq!(state(&c, &[s]), before);
}

#[test]
fn reserve_is_all_or_nothing_at_every_availability() {
    let w = GroupWindow::new(8, 0);
    let c1 = cfg(w);
    let pages = 12;
    let lens: &[u32] = if cfg!(miri) {
        &[0, 8, 11, 21]
    } else {
        &[0, 3, 4, 7, 8, 11, 12, 15, 16, 21]
    };
    for &len in lens {
        for n in [1u32, 3, 4, 9] {
            for free in 0..=pages - 5 {
                let mut a = arenas(&c1, pages);
                let mut c: KvCache = cache(&mut a, c1, pages);
                let s = c.create_sequence(SeqMode::Paged).unwrap();
                for _ in 0..len {
                    push(&mut c, s).unwrap();
                }
                // A forked twin shares the full pages (released ones free nothing for them)
                // half the time.
                let twin = (len % 2 == 1).then(|| c.fork(s).unwrap());
                // A hog takes all but `free` pages.
                let hog = c.create_sequence(SeqMode::Paged).unwrap();
                let take = c.pool().available().saturating_sub(free);
                c.reserve(hog, take as u32 * P).unwrap();
                let mut seqs = std::vec![s, hog];
                seqs.extend(twin);
                let before = state(&c, &seqs);
                match c.reserve(s, n) {
                    Ok(first) => {
                        assert_eq!(first, len);
                        assert!(held(&c, s) <= w.pages_per_sequence(P, n.max(1)).unwrap());
                    }
                    Err(e) => {
                        assert_eq!(e, Error::OutOfPages);
                        assert_eq!(state(&c, &seqs), before, "len {len} n {n} free {free}");
                    }
                }
                invariants(&c);
            }
        }
    }
}

#[test]
fn released_pages_make_room_in_a_full_pool() {
    // A pool of exactly the bound: growing far past the window never runs out.
    let w = GroupWindow::new(16, 4);
    let c1 = cfg(w);
    let bound = w.pages_per_sequence(P, P).unwrap();
    let mut a = arenas(&c1, bound);
    let mut c: KvCache = cache(&mut a, c1, bound);
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    for _ in 0..10 * STEPS {
        push(&mut c, s).unwrap();
    }
    let last = 10 * STEPS - 1;
    // The sinks' page is kept, the positions before the window are gone.
    let mut out = [0f32; 4];
    c.read(s, 0, Kv::K, 0, &mut out).unwrap();
    assert_eq!(out, row(0, Kv::K, 0));
    assert_eq!(
        c.read(s, 0, Kv::K, last / 2, &mut out),
        Err(Error::PositionOutOfRange)
    );
    c.read(s, 1, Kv::V, last - 15, &mut out).unwrap();
    assert_eq!(out, row(1, Kv::V, last - 15));
    // Without a window the same pool is full after bound pages.
    let c2 = CacheConfig { window: None, ..c1 };
    let mut b = arenas(&c2, bound);
    let mut d: KvCache = cache(&mut b, c2, bound);
    let t = d.create_sequence(SeqMode::Paged).unwrap();
    for _ in 0..bound as u32 * P {
        push(&mut d, t).unwrap();
    }
    assert_eq!(push(&mut d, t), Err(Error::OutOfPages));
}
