//! Unit tests of the cache: row I/O, fork and copy-on-write, truncate, contiguous growth,
//! eviction, and that every failing call leaves the cache unchanged.

use super::*;
use crate::alloc::{Bitmap, FreeList};
use crate::format::ElementFormat;
use crate::sequence::SeqMode;
use crate::shape::Shape;
use half::{bf16, f16};
use std::vec::Vec;

const SHAPE: Shape = Shape {
    layers: 2,
    kv_heads: 2,
    head_dim: 4,
};
const ROW: usize = 8;

fn cfg() -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(4)
        .with_sequences(4, 4096)
}

/// Arenas on the heap, sized for `pages` pages.
pub(crate) struct Arenas {
    data: Vec<MaybeUninit<u8>>,
    meta: Vec<MaybeUninit<u8>>,
}

pub(crate) fn arenas(cfg: &CacheConfig, pages: usize) -> Arenas {
    let plan = cfg.plan_pages(pages, 16).unwrap();
    // Over-allocate and align by hand: Vec<u8> gives no alignment guarantee.
    let data = std::vec![MaybeUninit::uninit(); plan.data_bytes + cfg.align];
    let meta = std::vec![MaybeUninit::uninit(); plan.meta.total + 2 * META_ALIGN];
    Arenas { data, meta }
}

fn aligned(v: &mut [MaybeUninit<u8>], align: usize, len: usize) -> &mut [MaybeUninit<u8>] {
    let skip = v.as_ptr().align_offset(align);
    &mut v[skip..skip + len]
}

pub(crate) fn cache<'a, A: PageAllocator<'a>>(
    a: &'a mut Arenas,
    cfg: CacheConfig,
    pages: usize,
) -> KvCache<'a, A> {
    let plan = cfg.plan_pages(pages, A::META_BITS_PER_PAGE).unwrap();
    let data = aligned(&mut a.data, cfg.align, plan.data_bytes);
    let meta = aligned(&mut a.meta, META_ALIGN, plan.meta.total);
    let c = KvCache::<A>::new(cfg, data, meta).unwrap();
    assert_eq!(c.arena_plan().num_pages as usize, pages);
    c
}

/// A row whose values depend on (tag, position, element) and are exact in f32, f16 and bf16
/// (at most 8 significant bits).
fn row(tag: u32, pos: u32) -> [f32; ROW] {
    let base = ((tag * 7 + pos * 3) % 31) as f32 - 15.0;
    core::array::from_fn(|e| base + e as f32 * 0.125)
}

fn rows(tag: u32, start: u32, n: u32) -> Vec<f32> {
    (start..start + n).flat_map(|p| row(tag, p)).collect()
}

fn check_rows<'a, A: PageAllocator<'a>>(
    c: &KvCache<'a, A>,
    seq: SeqId,
    tag: u32,
    start: u32,
    n: u32,
) {
    for layer in 0..SHAPE.layers {
        for kv in [Kv::K, Kv::V] {
            let mut out = std::vec![0f32; n as usize * ROW];
            c.read(seq, layer, kv, start, &mut out).unwrap();
            let t = tag + layer as u32 * 100 + (kv == Kv::V) as u32 * 1000;
            assert_eq!(out, rows(t, start, n), "layer {layer} {kv:?} from {start}");
        }
    }
}

fn write_all<'a, A: PageAllocator<'a>>(
    c: &mut KvCache<'a, A>,
    seq: SeqId,
    tag: u32,
    start: u32,
    n: u32,
) {
    for layer in 0..SHAPE.layers {
        let k = rows(tag + layer as u32 * 100, start, n);
        let v = rows(tag + layer as u32 * 100 + 1000, start, n);
        c.write_kv(seq, layer, start, &k, &v).unwrap();
    }
}

fn invariants<'a, A: PageAllocator<'a>>(c: &KvCache<'a, A>) {
    let mut scratch = std::vec![0u16; c.arena_plan().num_pages as usize];
    c.check_invariants(&mut scratch).unwrap();
}

/// Everything a caller can observe (without reading unwritten rows).
#[derive(Debug, PartialEq)]
struct Observed {
    stats: Stats,
    states: Vec<Option<PageState>>,
    seqs: Vec<(u32, Vec<PageId>, Vec<f32>)>,
}

fn observe<'a, A: PageAllocator<'a>>(c: &KvCache<'a, A>, seqs: &[SeqId]) -> Observed {
    let states = (0..c.arena_plan().num_pages)
        .map(|p| c.page_state(p))
        .collect();
    let seqs = seqs
        .iter()
        .filter_map(|&s| {
            let len = c.seq_len(s).ok()?;
            let mut data = std::vec![0f32; len as usize * ROW];
            for layer in 0..SHAPE.layers {
                for kv in [Kv::K, Kv::V] {
                    c.read(s, layer, kv, 0, &mut data).unwrap();
                }
            }
            Some((len, c.page_table(s).unwrap().to_vec(), data))
        })
        .collect();
    Observed {
        stats: c.stats(),
        states,
        seqs,
    }
}

#[test]
fn rows_span_pages_and_formats_convert() {
    for (kf, vf) in [
        (ElementFormat::F32, ElementFormat::F32),
        (ElementFormat::F16, ElementFormat::Bf16),
        (ElementFormat::Bf16, ElementFormat::F16),
    ] {
        let cfg = cfg().with_formats(kf, vf);
        let mut a = arenas(&cfg, 8);
        let mut c: KvCache<'_> = cache(&mut a, cfg, 8);
        let s = c.create_sequence(SeqMode::Paged).unwrap();
        assert_eq!(c.reserve(s, 3).unwrap(), 0);
        assert_eq!(c.reserve(s, 7).unwrap(), 3);
        write_all(&mut c, s, 1, 0, 10);
        check_rows(&c, s, 1, 0, 10);
        check_rows(&c, s, 1, 3, 5);
        // f16 / bf16 callers read the same (exactly representable) values.
        let mut h = [f16::ZERO; ROW];
        c.read(s, 1, Kv::K, 9, &mut h).unwrap();
        assert_eq!(h.map(f16::to_f32), row(101, 9));
        let mut b = [bf16::ZERO; ROW];
        c.write(s, 0, Kv::V, 2, &row(7, 2).map(bf16::from_f32))
            .unwrap();
        c.read(s, 0, Kv::V, 2, &mut b).unwrap();
        assert_eq!(b.map(bf16::to_f32), row(7, 2));
        assert_eq!(c.sequence(s).unwrap().pages, 3);
        invariants(&c);
    }
}

#[test]
fn page_bytes_are_token_major_little_endian() {
    let cfg = cfg();
    let mut a = arenas(&cfg, 4);
    let mut c: KvCache<'_> = cache(&mut a, cfg, 4);
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(s, 6).unwrap();
    c.write(s, 1, Kv::V, 5, &row(3, 5)).unwrap();
    let page = c.page_table(s).unwrap()[1];
    let bytes = c.page_bytes(1, Kv::V, page).unwrap();
    let off = ROW * 4; // position 5 is row 1 of the second page
    let want: Vec<u8> = row(3, 5).iter().flat_map(|x| x.to_le_bytes()).collect();
    assert_eq!(&bytes[off..off + ROW * 4], &want[..]);
    let plan = *c.arena_plan();
    let base = c.data_ptr() as usize;
    assert_eq!(
        bytes.as_ptr() as usize - base,
        plan.page_offset(1, Kv::V, page).unwrap()
    );
    assert_eq!(
        c.page_bytes(2, Kv::K, 0).err(),
        Some(Error::LayerOutOfRange)
    );
    assert_eq!(c.page_bytes(0, Kv::K, 4).err(), Some(Error::InvalidPage));
}

#[test]
fn fork_shares_full_pages_and_copies_the_tail() {
    let cfg = cfg();
    let mut a = arenas(&cfg, 8);
    let mut c: KvCache<'_> = cache(&mut a, cfg, 8);
    let p = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(p, 10).unwrap();
    write_all(&mut c, p, 1, 0, 10);
    let ch = c.fork(p).unwrap();
    let (tp, tc) = (
        c.page_table(p).unwrap().to_vec(),
        c.page_table(ch).unwrap().to_vec(),
    );
    assert_eq!(&tp[..2], &tc[..2], "full pages shared");
    assert_ne!(tp[2], tc[2], "partial tail copied");
    assert_eq!(c.page_state(tp[0]), Some(PageState::Used(2)));
    assert_eq!(c.page_state(tc[2]), Some(PageState::Used(1)));
    check_rows(&c, ch, 1, 0, 10);
    invariants(&c);

    // Diverge: the child rewrites position 5 (shared page 1) and appends; the parent is untouched.
    c.reserve(ch, 3).unwrap();
    write_all(&mut c, ch, 2, 5, 1);
    write_all(&mut c, ch, 2, 10, 3);
    check_rows(&c, p, 1, 0, 10);
    check_rows(&c, ch, 2, 5, 1);
    check_rows(&c, ch, 1, 6, 4);
    let tc2 = c.page_table(ch).unwrap().to_vec();
    assert_eq!(tc2[0], tp[0]);
    assert_ne!(tc2[1], tp[1], "copy-on-write of the shared page");
    assert_eq!(c.page_state(tp[1]), Some(PageState::Used(1)));
    invariants(&c);

    // Freeing the parent leaves the child whole.
    c.free_sequence(p).unwrap();
    check_rows(&c, ch, 1, 0, 5);
    assert_eq!(c.page_state(tp[0]), Some(PageState::Used(1)));
    assert_eq!(c.free_sequence(p), Err(Error::UnknownSequence));
    invariants(&c);
}

#[test]
fn truncate_releases_pages_and_reappends() {
    let cfg = cfg();
    let mut a = arenas(&cfg, 8);
    let mut c: KvCache<'_> = cache(&mut a, cfg, 8);
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(s, 12).unwrap();
    write_all(&mut c, s, 1, 0, 12);
    c.truncate(s, 5).unwrap();
    assert_eq!(c.sequence(s).unwrap().pages, 2);
    assert_eq!(c.stats().pages_free, 6);
    assert_eq!(c.truncate(s, 6), Err(Error::TruncateBeyondLength));
    c.reserve(s, 4).unwrap();
    write_all(&mut c, s, 3, 5, 4);
    check_rows(&c, s, 1, 0, 5);
    check_rows(&c, s, 3, 5, 4);
    c.truncate(s, 0).unwrap();
    assert_eq!(c.stats().pages_free, 8);
    invariants(&c);
}

#[test]
fn truncated_shared_page_is_copied_on_write() {
    let cfg = cfg();
    let mut a = arenas(&cfg, 8);
    let mut c: KvCache<'_> = cache(&mut a, cfg, 8);
    let p = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(p, 8).unwrap();
    write_all(&mut c, p, 1, 0, 8);
    let ch = c.fork(p).unwrap();
    c.truncate(ch, 6).unwrap(); // the child's second page is now partial but still shared
    c.reserve(ch, 2).unwrap();
    write_all(&mut c, ch, 5, 6, 2);
    check_rows(&c, p, 1, 0, 8);
    check_rows(&c, ch, 5, 6, 2);
    invariants(&c);
}

#[test]
fn contiguous_capacity_doubles_and_data_survives_growth() {
    let cfg = cfg().with_page_tokens(16);
    let mut a = arenas(&cfg, 80);
    let mut c: KvCache<'_, Bitmap<'_>> = cache(&mut a, cfg, 80);
    // A paged neighbour right after the first run forces relocation at some growths.
    let s = c.create_sequence(SeqMode::Contiguous).unwrap();
    let mut caps = Vec::new();
    for pos in 0..300u32 {
        c.reserve(s, 1).unwrap();
        write_all(&mut c, s, 1, pos, 1);
        let cap = c.sequence(s).unwrap().capacity;
        if caps.last() != Some(&cap) {
            caps.push(cap);
        }
        if (255..=258).contains(&pos) {
            check_rows(&c, s, 1, 0, pos + 1);
        }
        if pos == 16 {
            // Occupy the page after the run so the next growth must move.
            let other = c.create_sequence(SeqMode::Paged).unwrap();
            c.reserve(other, 1).unwrap();
        }
        // Every token natively; at page boundaries under Miri, where each check is slow.
        if !cfg!(miri) || pos % 16 == 0 {
            invariants(&c);
        }
    }
    assert_eq!(caps, [16, 32, 64, 128, 256, 512]);
    assert_eq!(
        c.sequence(s).unwrap().capacity,
        512,
        "capacity 512 after the 257th token"
    );
    let t = c.page_table(s).unwrap();
    assert!(t.windows(2).all(|w| w[1] == w[0] + 1), "one run");
    check_rows(&c, s, 1, 0, 300);
}

#[test]
fn contiguous_reserve_across_several_doublings() {
    let cfg = cfg().with_page_tokens(16);
    let mut a = arenas(&cfg, 64);
    let mut c: KvCache<'_, Bitmap<'_>> = cache(&mut a, cfg, 64);
    let s = c.create_sequence(SeqMode::Contiguous).unwrap();
    c.reserve(s, 20).unwrap();
    write_all(&mut c, s, 4, 0, 20);
    assert_eq!(c.sequence(s).unwrap().capacity, 32);
    c.reserve(s, 200).unwrap(); // 220 tokens: 14 pages → capacity 16 pages, from 2: three doublings
    assert_eq!(c.sequence(s).unwrap().capacity, 256);
    check_rows(&c, s, 4, 0, 20);
    write_all(&mut c, s, 4, 20, 200);
    check_rows(&c, s, 4, 0, 220);
    invariants(&c);
}

#[test]
fn contiguous_growth_falls_back_to_the_exact_need() {
    let cfg = cfg().with_page_tokens(16);
    let mut a = arenas(&cfg, 10);
    let mut c: KvCache<'_, Bitmap<'_>> = cache(&mut a, cfg, 10);
    let s = c.create_sequence(SeqMode::Contiguous).unwrap();
    c.reserve(s, 64).unwrap(); // pages 0..4
    write_all(&mut c, s, 2, 0, 64);
    let other = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(other, 1).unwrap(); // page 4 blocks growth in place
    // 5 pages needed: no run of 8 exists (5 free), exactly 5 does (pages 5..10): relocate.
    c.reserve(s, 1).unwrap();
    assert_eq!(c.page_table(s).unwrap(), &[5, 6, 7, 8, 9]);
    check_rows(&c, s, 2, 0, 64);
    invariants(&c);
    // Growing to 10 pages needs a new run of 10 while 4 are free: all or nothing.
    let mut seqs = std::vec![s, other];
    let before = observe(&c, &seqs);
    assert_eq!(c.reserve(s, 16 * 5), Err(Error::OutOfPages));
    assert_eq!(observe(&c, &seqs), before);
    // Fragment the free pages to {0, 3}: two free pages but no run of two.
    c.reserve(other, 16).unwrap(); // page 0
    let t = c.create_sequence(SeqMode::Contiguous).unwrap();
    c.reserve(t, 32).unwrap(); // pages 1, 2
    c.truncate(other, 1).unwrap(); // releases page 0
    let u = c.create_sequence(SeqMode::Contiguous).unwrap();
    seqs.extend([t, u]);
    let before = observe(&c, &seqs);
    assert_eq!(c.stats().pages_free, 2);
    assert_eq!(c.reserve(u, 32), Err(Error::NoContiguousRun));
    assert_eq!(observe(&c, &seqs), before);
    invariants(&c);
}

#[test]
fn contiguous_fork_copies_and_mode_needs_runs() {
    let cfg = cfg();
    let mut a = arenas(&cfg, 16);
    let mut c: KvCache<'_, Bitmap<'_>> = cache(&mut a, cfg, 16);
    let s = c.create_sequence(SeqMode::Contiguous).unwrap();
    c.reserve(s, 9).unwrap();
    write_all(&mut c, s, 1, 0, 9);
    let f = c.fork(s).unwrap();
    assert_eq!(c.sequence(f).unwrap().mode, SeqMode::Contiguous);
    let (ts, tf) = (
        c.page_table(s).unwrap().to_vec(),
        c.page_table(f).unwrap().to_vec(),
    );
    assert!(ts.iter().all(|p| !tf.contains(p)), "no sharing");
    write_all(&mut c, f, 2, 0, 9);
    check_rows(&c, s, 1, 0, 9);
    check_rows(&c, f, 2, 0, 9);
    invariants(&c);

    let mut a2 = arenas(&cfg, 4);
    let mut lifo: KvCache<'_> = cache(&mut a2, cfg, 4);
    assert_eq!(
        lifo.create_sequence(SeqMode::Contiguous),
        Err(Error::ContiguousUnsupported)
    );
}

#[test]
fn registered_pages_are_cached_revived_and_evicted() {
    let cfg = cfg();
    let mut a = arenas(&cfg, 4);
    let mut c: KvCache<'_> = cache(&mut a, cfg, 4);
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(s, 8).unwrap();
    write_all(&mut c, s, 1, 0, 8);
    let t = c.page_table(s).unwrap().to_vec();
    let prompt: Vec<u32> = (100..108).collect();
    assert_eq!(c.commit_prompt(s, &prompt[..4]), Ok(1));
    assert!(c.pool().is_registered(t[0]));
    // Writing into a registered page copies it: published KV never changes.
    write_all(&mut c, s, 2, 0, 1);
    let t2 = c.page_table(s).unwrap().to_vec();
    assert_ne!(t2[0], t[0]);
    assert_eq!(c.page_state(t[0]), Some(PageState::Cached));
    // The copy of page 0 is not published again (an equal page is); page 1 is.
    assert_eq!(c.commit_prompt(s, &prompt), Ok(1));
    assert!(!c.pool().is_registered(t2[0]) && c.pool().is_registered(t2[1]));
    c.free_sequence(s).unwrap();
    let st = c.stats();
    assert_eq!((st.pages_cached, st.pages_free, st.pages_used), (2, 2, 0));
    invariants(&c);
    // Fresh pages first, then the least recently cached (t[0], cached first) is evicted.
    let s2 = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(s2, 12).unwrap();
    assert_eq!(c.stats().pages_cached, 1);
    assert_eq!(c.page_state(t2[1]), Some(PageState::Cached));
    assert!(c.page_table(s2).unwrap().contains(&t[0]));
    assert!(!c.pool().is_registered(t[0]));
    invariants(&c);
}

#[test]
fn handles_are_bound_to_their_cache_instance() {
    let cfg = cfg();
    let mut a = arenas(&cfg, 6);
    let old = {
        let mut c: KvCache<'_> = cache(&mut a, cfg, 6);
        let s = c.create_sequence(SeqMode::Paged).unwrap();
        c.reserve(s, 3).unwrap();
        s
    };
    // A new cache in the same arenas: the old handle names the same slot and generation, but
    // another instance.
    let mut c: KvCache<'_> = cache(&mut a, cfg, 6);
    let new = c.create_sequence(SeqMode::Paged).unwrap();
    assert_eq!(
        (new.slot(), new.to_raw() as u32),
        (old.slot(), old.to_raw() as u32)
    );
    assert_ne!(new, old);
    assert_eq!(c.seq_len(old), Err(Error::UnknownSequence));
    assert_eq!(c.reserve(old, 1), Err(Error::UnknownSequence));
    assert_eq!(c.free_sequence(old), Err(Error::UnknownSequence));
    assert_eq!(c.seq_len(new), Ok(0));
    // And a handle of another live cache.
    let mut b = arenas(&cfg, 6);
    let mut other: KvCache<'_> = cache(&mut b, cfg, 6);
    let theirs = other.create_sequence(SeqMode::Paged).unwrap();
    assert_eq!(c.seq_len(theirs), Err(Error::UnknownSequence));
    assert_eq!(SeqId::from_raw(theirs.to_raw()), theirs);
}

#[test]
fn failing_calls_change_nothing() {
    let cfg = cfg().with_sequences(3, 40);
    let mut a = arenas(&cfg, 6);
    let mut c: KvCache<'_> = cache(&mut a, cfg, 6);
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(s, 10).unwrap();
    write_all(&mut c, s, 1, 0, 10);
    let f = c.fork(s).unwrap();
    let stale = c.create_sequence(SeqMode::Paged).unwrap();
    c.free_sequence(stale).unwrap();
    let seqs = [s, f];
    let before = observe(&c, &seqs);
    let r = row(0, 0);
    let mut out = [0f32; ROW];
    let errs: Vec<(Error, Error)> = std::vec![
        (c.reserve(s, 100).unwrap_err(), Error::SequenceFull),
        // Past max_seq_tokens however far (even past u32::MAX): one mistake, one code.
        (c.reserve(s, u32::MAX).unwrap_err(), Error::SequenceFull),
        (c.reserve(s, 20).unwrap_err(), Error::OutOfPages),
        (c.reserve(stale, 1).unwrap_err(), Error::UnknownSequence),
        (
            c.reserve(SeqId::from_raw(u64::MAX), 1).unwrap_err(),
            Error::UnknownSequence
        ),
        (
            c.write(s, 2, Kv::K, 0, &r).unwrap_err(),
            Error::LayerOutOfRange
        ),
        (
            c.write(s, 0, Kv::K, 10, &r).unwrap_err(),
            Error::PositionOutOfRange
        ),
        (
            c.write(s, 0, Kv::K, u32::MAX, &r).unwrap_err(),
            Error::PositionOutOfRange
        ),
        (
            c.write(s, 0, Kv::K, 0, &r[..5]).unwrap_err(),
            Error::LengthMismatch
        ),
        (
            c.write_kv(s, 0, 0, &r, &r[..4]).unwrap_err(),
            Error::LengthMismatch
        ),
        (
            c.write_kv(s, 0, 9, &rows(0, 0, 2), &rows(0, 0, 2))
                .unwrap_err(),
            Error::PositionOutOfRange
        ),
        (
            c.read(s, 0, Kv::V, 10, &mut out).unwrap_err(),
            Error::PositionOutOfRange
        ),
        (
            c.read(stale, 0, Kv::V, 0, &mut out).unwrap_err(),
            Error::UnknownSequence
        ),
        (c.truncate(s, 11).unwrap_err(), Error::TruncateBeyondLength),
        (c.free_sequence(stale).unwrap_err(), Error::UnknownSequence),
        (c.fork(stale).unwrap_err(), Error::UnknownSequence),
    ];
    for (got, want) in errs {
        assert_eq!(got, want);
        assert_eq!(observe(&c, &seqs), before, "after {want:?}");
    }
    // Pool: 6 pages, s and f share 2 full pages and each has its tail: 4 used, 2 free.
    let x = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(x, 8).unwrap(); // takes the last 2 pages
    let seqs = [s, f, x];
    let before = observe(&c, &seqs);
    assert_eq!(c.fork(s), Err(Error::TooManySequences));
    assert_eq!(
        c.create_sequence(SeqMode::Paged),
        Err(Error::TooManySequences)
    );
    // Copy-on-write needs a page and none is left: the write fails whole.
    assert_eq!(
        c.write(f, 0, Kv::K, 0, &rows(9, 0, 10)),
        Err(Error::OutOfPages)
    );
    assert_eq!(c.reserve(x, 1), Err(Error::OutOfPages));
    assert_eq!(observe(&c, &seqs), before);
    c.free_sequence(x).unwrap();
    // A fork of a sequence with a partial tail needs one page; with none left it fails whole.
    let y = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(y, 8).unwrap();
    c.free_sequence(f).unwrap();
    let seqs = [s, y];
    c.reserve(y, 4).unwrap(); // takes f's freed tail page
    let before = observe(&c, &seqs);
    assert_eq!(c.stats().pages_free, 0);
    assert_eq!(c.fork(s), Err(Error::OutOfPages));
    assert_eq!(observe(&c, &seqs), before);
    invariants(&c);
}

#[test]
fn stale_handles_are_rejected_after_slot_reuse() {
    let cfg = cfg();
    let mut a = arenas(&cfg, 4);
    let mut c: KvCache<'_> = cache(&mut a, cfg, 4);
    let old = c.create_sequence(SeqMode::Paged).unwrap();
    c.free_sequence(old).unwrap();
    let new = c.create_sequence(SeqMode::Paged).unwrap();
    assert_eq!(old.slot(), new.slot());
    assert_eq!(c.seq_len(old), Err(Error::UnknownSequence));
    assert_eq!(c.seq_len(new), Ok(0));
    assert_eq!(SeqId::from_raw(new.to_raw()), new);
}

#[test]
fn construction_errors() {
    let cfg = cfg();
    let plan = cfg.plan_pages(4, 16).unwrap();
    let mut a = arenas(&cfg, 4);
    let data = aligned(&mut a.data, 64, plan.data_bytes);
    let meta = aligned(&mut a.meta, 8, plan.meta.total);
    let r = KvCache::<FreeList>::new(cfg, &mut data[..100], meta);
    assert_eq!(r.err(), Some(ConfigError::ArenaTooSmall));
    let mut a = arenas(&cfg, 4);
    let data = aligned(&mut a.data, 64, plan.data_bytes);
    let meta = aligned(&mut a.meta, 8, plan.meta.total);
    let r = KvCache::<FreeList>::new(cfg, data, &mut meta[..plan.meta.total - 1]);
    assert_eq!(r.err(), Some(ConfigError::ArenaTooSmall));
    let mut a = arenas(&cfg, 4);
    let data = aligned(&mut a.data, 64, plan.data_bytes);
    let meta = aligned(&mut a.meta, 8, plan.meta.total + 8);
    let r = KvCache::<FreeList>::new(cfg, data, &mut meta[1..]);
    assert_eq!(r.err(), Some(ConfigError::MisalignedArena));
    let mut a = arenas(&cfg, 5);
    let data = aligned(&mut a.data, 64, plan.data_bytes + 64);
    let meta = aligned(&mut a.meta, 8, plan.meta.total);
    let r = KvCache::<FreeList>::new(cfg, &mut data[32..], meta);
    assert_eq!(r.err(), Some(ConfigError::MisalignedArena));
    let mut a = arenas(&cfg, 4);
    let data = aligned(&mut a.data, 64, plan.data_bytes);
    let meta = aligned(&mut a.meta, 8, plan.meta.total);
    let r = KvCache::<FreeList>::new(cfg.with_page_tokens(3), data, meta);
    assert_eq!(r.err(), Some(ConfigError::PageTokensNotPowerOfTwo));
}

/// A cache from a [`PlannedConfig`] has the runtime plan's layout and behaviour; each bad arena
/// or allocator is refused with its error and the arenas left unwritten.
#[test]
fn cache_from_a_planned_config() {
    let cfg = cfg();
    let plan = cfg.plan_pages(4, 16).unwrap();
    let planned = PlannedConfig::new(cfg, plan.data_bytes, 16).unwrap();
    assert_eq!(planned.plan(), &cfg.plan(plan.data_bytes, 16).unwrap());
    assert_eq!(planned.config(), &cfg);
    assert_eq!(planned.alloc_bits_per_page(), 16);
    // Configuration errors are the planner's.
    assert_eq!(
        PlannedConfig::new(cfg.with_page_tokens(3), plan.data_bytes, 16),
        Err(ConfigError::PageTokensNotPowerOfTwo)
    );
    assert_eq!(
        PlannedConfig::new(cfg, 10, 16),
        Err(ConfigError::ArenaTooSmall)
    );

    let (mut a, mut b) = (arenas(&cfg, 4), arenas(&cfg, 4));
    let mut runtime = cache::<FreeList>(&mut b, cfg, 4);
    let data = aligned(&mut a.data, 64, plan.data_bytes);
    let meta = aligned(&mut a.meta, 8, plan.meta.total);
    let mut c = KvCache::<FreeList>::from_planned(&planned, data, meta).unwrap();
    assert_eq!(c.arena_plan(), runtime.arena_plan());
    for cache in [&mut c, &mut runtime] {
        let s = cache.create_sequence(SeqMode::Paged).unwrap();
        cache.reserve(s, 10).unwrap();
        write_all(cache, s, 3, 0, 10);
        check_rows(cache, s, 3, 0, 10);
        invariants(cache);
    }
    for page in 0..4 {
        assert_eq!(
            c.page_bytes(1, Kv::V, page),
            runtime.page_bytes(1, Kv::V, page)
        );
    }

    // Each refusal comes before the arenas are zeroed (`with_plan_epoch` checks, then writes).
    let mut a = arenas(&cfg, 5);
    let data = aligned(&mut a.data, 64, plan.data_bytes + 64);
    let meta = aligned(&mut a.meta, 8, plan.meta.total + 8);
    let refusals = [
        (
            KvCache::<Bitmap>::from_planned(&planned, &mut data[..], &mut meta[..]).err(),
            ConfigError::PlannedForOtherAllocator,
        ),
        (
            KvCache::<FreeList>::from_planned(&planned, &mut data[..100], &mut meta[..]).err(),
            ConfigError::ArenaTooSmall,
        ),
        (
            KvCache::<FreeList>::from_planned(&planned, &mut data[..], &mut meta[..8]).err(),
            ConfigError::ArenaTooSmall,
        ),
        (
            KvCache::<FreeList>::from_planned(&planned, &mut data[32..], &mut meta[..]).err(),
            ConfigError::MisalignedArena,
        ),
        (
            KvCache::<FreeList>::from_planned(&planned, &mut data[..], &mut meta[1..]).err(),
            ConfigError::MisalignedArena,
        ),
    ];
    for (got, want) in refusals {
        assert_eq!(got, Some(want));
    }
}

#[test]
fn one_buffer_split_in_two() {
    let cfg = cfg();
    let mut buf = crate::ArenaBuf::<{ 64 * 1024 }>::new();
    let mut c: KvCache<'_, Bitmap<'_>> = KvCache::new_split(cfg, buf.as_uninit_mut()).unwrap();
    let plan = *c.arena_plan();
    assert!(plan.split_bytes().unwrap() <= 64 * 1024);
    let s = c.create_sequence(SeqMode::Contiguous).unwrap();
    c.reserve(s, plan.token_capacity() as u32).unwrap();
    write_all(&mut c, s, 1, 0, plan.token_capacity() as u32);
    check_rows(&c, s, 1, 0, plan.token_capacity() as u32);
    invariants(&c);
    let mut small = crate::ArenaBuf::<256>::new();
    assert_eq!(
        KvCache::<FreeList>::new_split(cfg, small.as_uninit_mut()).err(),
        Some(ConfigError::ArenaTooSmall)
    );
    let mut buf = crate::ArenaBuf::<{ 64 * 1024 }>::new();
    assert_eq!(
        KvCache::<FreeList>::new_split(cfg, &mut buf.as_uninit_mut()[8..]).err(),
        Some(ConfigError::MisalignedArena)
    );
}

#[test]
fn stats_count_tokens_and_bytes() {
    let cfg = cfg();
    let mut a = arenas(&cfg, 8);
    let mut c: KvCache<'_> = cache(&mut a, cfg, 8);
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(s, 6).unwrap();
    let f = c.fork(s).unwrap();
    c.reserve(f, 1).unwrap();
    let st = c.stats();
    let page_bytes = 2 * 2 * 4 * ROW * 4; // layers × K/V × P × row bytes
    assert_eq!(st.page_bytes, page_bytes);
    assert_eq!(st.bytes_per_token, page_bytes / 4);
    assert_eq!(
        (st.pages_used, st.pages_free, st.sequences, st.tokens),
        (3, 5, 2, 13)
    );
    assert_eq!(st.bytes_used, 3 * page_bytes);
}

// ---- quantized pages ----

const QSHAPE: Shape = Shape {
    layers: 2,
    kv_heads: 2,
    head_dim: 64,
};
const QROW: usize = 128;

/// A deterministic K/V-like row: mixed magnitudes and an outlier channel.
fn qrow(tag: u32, pos: u32) -> [f32; QROW] {
    core::array::from_fn(|i| {
        let x = (tag.wrapping_mul(31) ^ pos.wrapping_mul(977) ^ i as u32).wrapping_mul(0x9E37_79B9);
        let v = ((x >> 9) % 4001) as f32 / 1000.0 - 2.0;
        if i % 64 == 7 { v * 40.0 } else { v }
    })
}

/// What a page of `fmt` gives back for `row`: the kernels' own quantize → dequantize.
fn roundtrip(fmt: ElementFormat, row: &[f32; QROW]) -> [f32; QROW] {
    let mut out = [0f32; QROW];
    match fmt {
        ElementFormat::Int8 { group } => {
            let mut codes = [0i8; QROW];
            let mut scales = std::vec![f16::ZERO; QROW / group as usize];
            crate::quant::quantize_q8(row, group as usize, &mut codes, &mut scales).unwrap();
            crate::quant::dequantize_q8(&codes, &scales, group as usize, &mut out).unwrap();
        }
        ElementFormat::Fp8Tile { dv, tile, bf16 } => {
            let n = crate::quant::fp8_tile_row_bytes(64, dv as usize, tile as usize, bf16).unwrap();
            let mut bytes = std::vec![0u8; n];
            for (x, o) in row.chunks_exact(64).zip(out.chunks_exact_mut(64)) {
                crate::quant::quantize_fp8_tile(x, dv as usize, tile as usize, bf16, &mut bytes)
                    .unwrap();
                crate::quant::dequantize_fp8_tile(&bytes, dv as usize, tile as usize, bf16, o)
                    .unwrap();
            }
        }
        ElementFormat::Int4 { kind } => {
            let mut blocks = std::vec![0u8; kind.bytes_for(QROW).unwrap()];
            crate::quant::quantize_q4(kind, row, &mut blocks).unwrap();
            crate::quant::dequantize_q4(kind, &blocks, &mut out).unwrap();
        }
        ElementFormat::F16 => out = row.map(|x| f16::from_f32(x).to_f32()),
        _ => out = *row,
    }
    out
}

fn qwrite<'a, A: PageAllocator<'a>>(
    c: &mut KvCache<'a, A>,
    s: SeqId,
    tag: u32,
    start: u32,
    n: u32,
) {
    for layer in 0..QSHAPE.layers {
        for pos in start..start + n {
            let k = qrow(tag + layer as u32, pos);
            let v = qrow(tag + layer as u32 + 500, pos);
            c.write_kv(s, layer, pos, &k, &v).unwrap();
        }
    }
}

fn qcheck<'a, A: PageAllocator<'a>>(c: &KvCache<'a, A>, s: SeqId, tag: u32, start: u32, n: u32) {
    let cfg = *c.config();
    for layer in 0..QSHAPE.layers {
        for pos in start..start + n {
            for (kv, fmt, t) in [(Kv::K, cfg.k_format, 0), (Kv::V, cfg.v_format, 500)] {
                let mut got = [0f32; QROW];
                c.read(s, layer, kv, pos, &mut got).unwrap();
                let want = roundtrip(fmt, &qrow(tag + layer as u32 + t, pos));
                assert_eq!(
                    got.map(f32::to_bits),
                    want.map(f32::to_bits),
                    "{fmt:?} layer {layer} pos {pos}"
                );
            }
        }
    }
}

const QFORMATS: [(ElementFormat, ElementFormat); 6] = [
    (ElementFormat::Q8_0, ElementFormat::Q8_0),
    (ElementFormat::F16, ElementFormat::Int8 { group: 64 }),
    (
        ElementFormat::Fp8Tile {
            dv: 48,
            tile: 16,
            bf16: false,
        },
        ElementFormat::Q8_0,
    ),
    (
        ElementFormat::Int8 { group: 64 },
        ElementFormat::Fp8Tile {
            dv: 64,
            tile: 32,
            bf16: true,
        },
    ),
    (ElementFormat::Q4_0, ElementFormat::Q4_1),
    (ElementFormat::Q8_0, ElementFormat::Q4_0),
];

#[test]
fn quantized_pages_read_back_what_the_kernels_give() {
    // Under Miri one combination covering both kernels (int8 and fp8); each is slow there.
    let formats = if cfg!(miri) {
        &QFORMATS[2..3]
    } else {
        &QFORMATS[..]
    };
    for &(kf, vf) in formats {
        let cfg = CacheConfig::new(QSHAPE)
            .with_page_tokens(4)
            .with_formats(kf, vf)
            .with_sequences(4, 64);
        let mut a = arenas(&cfg, 8);
        let mut c: KvCache<'_> = cache(&mut a, cfg, 8);
        let s = c.create_sequence(SeqMode::Paged).unwrap();
        c.reserve(s, 10).unwrap();
        qwrite(&mut c, s, 1, 0, 10);
        qcheck(&c, s, 1, 0, 10);
        // Multi-row access across pages agrees with per-row access.
        let mut many = std::vec![0f32; 6 * QROW];
        c.read(s, 1, Kv::V, 2, &mut many).unwrap();
        for (i, row) in many.chunks_exact(QROW).enumerate() {
            let mut one = [0f32; QROW];
            c.read(s, 1, Kv::V, 2 + i as u32, &mut one).unwrap();
            assert_eq!(row, &one[..]);
        }
        // Fork, then the child rewrites a shared page: scales travel with the copy.
        let f = c.fork(s).unwrap();
        qwrite(&mut c, f, 9, 1, 2);
        qcheck(&c, s, 1, 0, 10);
        qcheck(&c, f, 9, 1, 2);
        qcheck(&c, f, 1, 3, 7);
        invariants(&c);
    }
}

#[test]
fn quantized_contiguous_growth_moves_scales() {
    let cfg = CacheConfig::new(QSHAPE)
        .with_page_tokens(4)
        .with_formats(ElementFormat::Q8_0, ElementFormat::Int8 { group: 32 });
    let mut a = arenas(&cfg, 16);
    let mut c: KvCache<'_, Bitmap<'_>> = cache(&mut a, cfg, 16);
    let s = c.create_sequence(SeqMode::Contiguous).unwrap();
    c.reserve(s, 4).unwrap();
    qwrite(&mut c, s, 3, 0, 4);
    let blocker = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(blocker, 1).unwrap(); // page 1: growth must relocate
    c.reserve(s, 5).unwrap();
    assert_ne!(c.page_table(s).unwrap()[0], 0, "moved");
    qwrite(&mut c, s, 3, 4, 5);
    qcheck(&c, s, 3, 0, 9);
    invariants(&c);
}
