//! Device views: segment coalescing, region offsets, staging tensors, and every bad input
//! refused before any maintenance, with the cache unchanged.

use edgekv::attention::Window;
use edgekv::{
    CacheConfig, ElementFormat, Error, HeapArena, Kv, KvCache, META_ALIGN, NO_PAGE, PageAllocator,
    PoolKind, SeqMode, Shape,
};
use edgekv_hal::{
    CacheMaintenance, DevAddr, HalError, IdentityMap, MapEntry, NO_OFFSET, NoCache, OffsetMap,
    Segment, TableMap, bind_region, device_input, device_output, gather, ingest, read_view,
    segments, take_output,
};

const SHAPE: Shape = Shape {
    layers: 2,
    kv_heads: 2,
    head_dim: 32,
};
const ROW: usize = 64;

/// NoCache that counts the maintenance calls that got through validation.
struct Counting {
    inner: NoCache,
    calls: usize,
}

impl Counting {
    fn new(line: usize) -> Self {
        Counting {
            inner: NoCache::with_line_size(line).unwrap(),
            calls: 0,
        }
    }
    fn done(&mut self, r: Result<(), HalError>) -> Result<(), HalError> {
        self.calls += usize::from(r.is_ok());
        r
    }
}

impl CacheMaintenance for Counting {
    fn line_size(&self) -> usize {
        self.inner.line_size()
    }
    fn clean(&mut self, a: usize, n: usize) -> Result<(), HalError> {
        let r = self.inner.clean(a, n);
        self.done(r)
    }
    fn invalidate(&mut self, a: usize, n: usize) -> Result<(), HalError> {
        let r = self.inner.invalidate(a, n);
        self.done(r)
    }
    fn clean_invalidate(&mut self, a: usize, n: usize) -> Result<(), HalError> {
        let r = self.inner.clean_invalidate(a, n);
        self.done(r)
    }
}

/// An ingest call under test.
type Ingest = Box<dyn Fn(&mut KvCache, &mut Counting, &mut [f32]) -> Result<u32, HalError>>;

#[repr(C, align(64))]
struct Aligned<const N: usize>([f32; N]);

struct Arenas {
    data: HeapArena,
    meta: HeapArena,
}

fn arenas(cfg: &CacheConfig, pages: usize) -> Arenas {
    let plan = cfg
        .plan_pages(
            pages,
            <edgekv::FreeList as PageAllocator>::META_BITS_PER_PAGE,
        )
        .unwrap();
    Arenas {
        data: HeapArena::new(plan.data_bytes, cfg.align).unwrap(),
        meta: HeapArena::new(plan.meta.total, META_ALIGN).unwrap(),
    }
}

fn config(k: ElementFormat) -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(8)
        .with_formats(k, ElementFormat::F32)
        .with_sequences(3, 64)
}

fn rows(seed: u32, n: usize) -> Vec<f32> {
    (0..n * ROW)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
        .collect()
}

#[test]
fn segments_merge_neighbouring_pages_and_split_at_gaps() {
    let cfg = config(ElementFormat::Q8_0);
    let mut a = arenas(&cfg, 16);
    let mut cache: KvCache =
        KvCache::new(cfg, a.data.as_uninit_mut(), a.meta.as_uninit_mut()).unwrap();
    let (s1, s2) = (
        cache.create_sequence(SeqMode::Paged).unwrap(),
        cache.create_sequence(SeqMode::Paged).unwrap(),
    );
    // s1 takes pages 0..3 in one go; then s1 and s2 alternate one page each.
    cache.reserve(s1, 24).unwrap();
    for _ in 0..2 {
        cache.reserve(s1, 8).unwrap();
        cache.reserve(s2, 8).unwrap();
    }
    let stride = cache.arena_plan().geometry.k_stride;
    let mut out = [Segment::default(); 8];
    let n = segments(&cache, &IdentityMap, s1, 1, PoolKind::KValues, &mut out).unwrap();
    let got: Vec<(u32, u32)> = out[..n].iter().map(|s| (s.first_page, s.pages)).collect();
    assert_eq!(got, [(0, 4), (4, 1)], "pages 0-3, then 5 (4 went to s2)");
    assert_eq!(out[0].len, 4 * stride);
    let kbytes = cache.pool_bytes(1, PoolKind::KValues).unwrap();
    assert_eq!(out[0].cpu, kbytes.as_ptr() as usize);
    assert_eq!(out[1].cpu, kbytes.as_ptr() as usize + 5 * stride);
    assert_eq!(out[0].dev, DevAddr(out[0].cpu as u64));

    // Scales form their own list; a full-precision pool has none.
    let n = segments(&cache, &IdentityMap, s1, 1, PoolKind::KScales, &mut out).unwrap();
    assert_eq!(n, 2);
    assert_eq!(out[0].len, 4 * cache.arena_plan().geometry.k_scale_stride);
    assert_eq!(
        segments(&cache, &IdentityMap, s1, 1, PoolKind::VScales, &mut out),
        Ok(0)
    );

    // A device window boundary inside a run splits it.
    let cut = kbytes.as_ptr() as usize + 2 * stride;
    let table = [
        MapEntry::new(0, cut, DevAddr(0x1000_0000)),
        MapEntry::new(cut, usize::MAX / 2, DevAddr(0x9000_0000)),
    ];
    let map = TableMap::new(&table).unwrap();
    let n = segments(&cache, &map, s1, 1, PoolKind::KValues, &mut out).unwrap();
    let got: Vec<(u32, u32)> = out[..n].iter().map(|s| (s.first_page, s.pages)).collect();
    assert_eq!(got, [(0, 2), (2, 2), (4, 1)]);
    assert_eq!(out[1].dev, DevAddr(0x9000_0000));

    // Released pages end a segment.
    let w = Window {
        sinks: 8,
        window: 8,
    };
    let len = cache.seq_len(s1).unwrap();
    cache.slide(s1, &w, len - 1).unwrap();
    let table = cache.page_table(s1).unwrap();
    assert_eq!(&table[1..4], &[NO_PAGE; 3]);
    let n = segments(&cache, &IdentityMap, s1, 0, PoolKind::KValues, &mut out).unwrap();
    let got: Vec<(u32, u32)> = out[..n].iter().map(|s| (s.first_page, s.pages)).collect();
    assert_eq!(got, [(0, 1), (4, 1)]);

    // Too small: the count needed, the output untouched.
    let mut short = [Segment::default(); 1];
    assert_eq!(
        segments(&cache, &IdentityMap, s1, 0, PoolKind::KValues, &mut short),
        Err(HalError::BufferTooSmall { needed: 2 })
    );
    assert_eq!(short[0], Segment::default());
    assert_eq!(
        segments(&cache, &IdentityMap, s1, 2, PoolKind::KValues, &mut out),
        Err(HalError::Cache(Error::LayerOutOfRange))
    );
    cache.free_sequence(s2).unwrap();
    assert_eq!(
        segments(&cache, &IdentityMap, s2, 0, PoolKind::KValues, &mut out),
        Err(HalError::Cache(Error::UnknownSequence))
    );
    // An unmapped arena.
    let far = OffsetMap::new(0, 64, DevAddr(0)).unwrap();
    assert_eq!(
        segments(&cache, &far, s1, 0, PoolKind::KValues, &mut out),
        Err(HalError::Unmapped)
    );
}

#[test]
fn read_view_cleans_every_segment_or_nothing() {
    let cfg = config(ElementFormat::Q8_0);
    let mut a = arenas(&cfg, 8);
    let mut cache: KvCache =
        KvCache::new(cfg, a.data.as_uninit_mut(), a.meta.as_uninit_mut()).unwrap();
    let s = cache.create_sequence(SeqMode::Paged).unwrap();
    cache.reserve(s, 20).unwrap();
    let (mut v, mut sc) = ([Segment::default(); 4], [Segment::default(); 4]);
    let mut m = Counting::new(32);
    let view = read_view(&cache, &IdentityMap, &mut m, s, 0, Kv::K, &mut v, &mut sc).unwrap();
    assert_eq!((view.values, view.scales, m.calls), (1, 1, 2));
    let view = read_view(&cache, &IdentityMap, &mut m, s, 0, Kv::V, &mut v, &mut sc).unwrap();
    assert_eq!((view.values, view.scales, m.calls), (1, 0, 3));

    // Lines larger than the arena alignment: refused before any clean.
    let mut big = Counting::new(128);
    assert_eq!(
        read_view(&cache, &IdentityMap, &mut big, s, 0, Kv::K, &mut v, &mut sc),
        Err(HalError::Misaligned)
    );
    assert_eq!(big.calls, 0);
    // Scales that do not fit: nothing written to either list.
    let (mut v2, mut none): ([Segment; 4], [Segment; 0]) = ([Segment::default(); 4], []);
    assert_eq!(
        read_view(
            &cache,
            &IdentityMap,
            &mut m,
            s,
            0,
            Kv::K,
            &mut v2,
            &mut none
        ),
        Err(HalError::BufferTooSmall { needed: 1 })
    );
    assert_eq!(v2[0], Segment::default());
    assert_eq!(m.calls, 3);
}

#[test]
fn region_offsets_are_slot_offsets_from_the_arena_base() {
    let cfg = config(ElementFormat::Int8 { group: 32 });
    let mut a = arenas(&cfg, 8);
    let mut cache: KvCache =
        KvCache::new(cfg, a.data.as_uninit_mut(), a.meta.as_uninit_mut()).unwrap();
    let s = cache.create_sequence(SeqMode::Paged).unwrap();
    cache.reserve(s, 40).unwrap();
    cache
        .slide(
            s,
            &Window {
                sinks: 8,
                window: 8,
            },
            39,
        )
        .unwrap();
    let map = OffsetMap::new(
        cache.data_ptr() as usize,
        cache.arena_bytes().len(),
        DevAddr(0x8000_0000),
    )
    .unwrap();
    let (mut k, mut ks) = ([7u32; 8], [7u32; 8]);
    let mut m = Counting::new(32);
    let r = bind_region(&cache, &map, &mut m, s, 1, Kv::K, &mut k, &mut ks).unwrap();
    assert_eq!((r.base, r.pages), (DevAddr(0x8000_0000), 5));
    assert_eq!(r.len, cache.arena_bytes().len());
    let plan = cache.arena_plan();
    for (i, &page) in cache.page_table(s).unwrap().iter().enumerate() {
        if page == NO_PAGE {
            assert_eq!((k[i], ks[i]), (NO_OFFSET, NO_OFFSET));
        } else {
            assert_eq!(
                k[i] as usize,
                plan.slot_offset(1, PoolKind::KValues, page).unwrap()
            );
            assert_eq!(
                ks[i] as usize,
                plan.slot_offset(1, PoolKind::KScales, page).unwrap()
            );
        }
    }
    assert_eq!(&k[5..], &[7; 3], "past the table: untouched");
    assert_eq!(m.calls, 2 * 2, "two kept pages, values and scales");

    // V is f32: no scale offsets are written.
    let (mut v, mut vs) = ([0u32; 8], [9u32; 8]);
    bind_region(&cache, &map, &mut m, s, 1, Kv::V, &mut v, &mut vs).unwrap();
    assert_eq!(vs, [9; 8]);

    let mut short = [0u32; 4];
    let before = m.calls;
    assert_eq!(
        bind_region(&cache, &map, &mut m, s, 1, Kv::K, &mut short, &mut ks),
        Err(HalError::BufferTooSmall { needed: 5 })
    );
    assert_eq!(short, [0; 4]);
    let narrow = OffsetMap::new(cache.data_ptr() as usize, 64, DevAddr(0)).unwrap();
    assert_eq!(
        bind_region(&cache, &narrow, &mut m, s, 1, Kv::K, &mut k, &mut ks),
        Err(HalError::Unmapped)
    );
    let mut big = Counting::new(256);
    assert_eq!(
        bind_region(&cache, &map, &mut big, s, 1, Kv::K, &mut k, &mut ks),
        Err(HalError::Misaligned)
    );
    assert_eq!((m.calls, big.calls), (before, 0));
}

#[test]
fn gather_and_ingest_refuse_bad_input_before_any_maintenance() {
    let cfg = config(ElementFormat::Q8_0);
    let mut a = arenas(&cfg, 8);
    let mut cache: KvCache =
        KvCache::new(cfg, a.data.as_uninit_mut(), a.meta.as_uninit_mut()).unwrap();
    let s = cache.create_sequence(SeqMode::Paged).unwrap();
    cache.reserve(s, 12).unwrap();
    let mut m = Counting::new(32);
    let mut stage = Box::new(Aligned([0f32; 12 * ROW]));
    stage.0.copy_from_slice(&rows(1, 12));
    assert_eq!(
        ingest(&mut cache, &mut m, s, 0, Kv::K, 0, &mut stage.0),
        Ok(12)
    );
    assert_eq!(m.calls, 1);
    let snapshot = |c: &KvCache| {
        let mut r = vec![0f32; 12 * ROW];
        c.read(s, 0, Kv::K, 0, &mut r).unwrap();
        r
    };
    let before = snapshot(&cache);

    let bad: [(&str, Ingest, HalError); 6] = [
        (
            "empty",
            Box::new(move |c, m, st| ingest(c, m, s, 0, Kv::K, 0, &mut st[..0])),
            HalError::LengthMismatch,
        ),
        (
            "partial row",
            Box::new(move |c, m, st| ingest(c, m, s, 0, Kv::K, 0, &mut st[..ROW + 8])),
            HalError::LengthMismatch,
        ),
        (
            "misaligned",
            Box::new(move |c, m, st| ingest(c, m, s, 0, Kv::K, 0, &mut st[1..1 + ROW])),
            HalError::Misaligned,
        ),
        (
            "layer",
            Box::new(move |c, m, st| ingest(c, m, s, 2, Kv::K, 0, &mut st[..ROW])),
            HalError::Cache(Error::LayerOutOfRange),
        ),
        (
            "past the end",
            Box::new(move |c, m, st| ingest(c, m, s, 0, Kv::K, 11, &mut st[..2 * ROW])),
            HalError::Cache(Error::PositionOutOfRange),
        ),
        (
            // However far past the end: the same code as `KvCache::write` gives.
            "overflow",
            Box::new(move |c, m, st| ingest(c, m, s, 0, Kv::K, u32::MAX, &mut st[..2 * ROW])),
            HalError::Cache(Error::PositionOutOfRange),
        ),
    ];
    for (what, call, err) in bad {
        assert_eq!(call(&mut cache, &mut m, &mut stage.0), Err(err), "{what}");
        assert_eq!(m.calls, 1, "{what}: no maintenance");
    }
    assert_eq!(snapshot(&cache), before);

    let mut row = vec![0f32; ROW];
    let mut out = Box::new(Aligned([0f32; 12 * ROW]));
    assert_eq!(
        gather(&cache, &mut m, s, 0, Kv::K, 0, &mut out.0, &mut row),
        Ok(12)
    );
    assert_eq!(m.calls, 2);
    // Head-major: head 1 of token 3 is at [1][3][..].
    assert_eq!(&out.0[(12 + 3) * 32..][..32], &before[3 * ROW + 32..][..32]);
    let cases: [(&str, Result<u32, HalError>, HalError); 5] = [
        (
            "short row",
            gather(&cache, &mut m, s, 0, Kv::K, 0, &mut out.0, &mut row[1..]),
            HalError::LengthMismatch,
        ),
        (
            "empty",
            gather(&cache, &mut m, s, 0, Kv::K, 0, &mut out.0[..0], &mut row),
            HalError::LengthMismatch,
        ),
        (
            "misaligned",
            gather(
                &cache,
                &mut m,
                s,
                0,
                Kv::K,
                0,
                &mut out.0[1..1 + ROW],
                &mut row,
            ),
            HalError::Misaligned,
        ),
        (
            "past the end",
            gather(&cache, &mut m, s, 0, Kv::K, 1, &mut out.0, &mut row),
            HalError::Cache(Error::PositionOutOfRange),
        ),
        (
            "layer",
            gather(&cache, &mut m, s, 2, Kv::K, 0, &mut out.0[..ROW], &mut row),
            HalError::Cache(Error::LayerOutOfRange),
        ),
    ];
    for (what, got, err) in cases {
        assert_eq!(got, Err(err), "{what}");
    }
    assert_eq!(m.calls, 2, "no maintenance after a refused gather");
    // A refused gather writes nothing: not `staging`, not `row`.
    out.0.fill(5.0);
    row.fill(6.0);
    for start in [1, 11, u32::MAX] {
        assert_eq!(
            gather(&cache, &mut m, s, 0, Kv::K, start, &mut out.0, &mut row),
            Err(HalError::Cache(Error::PositionOutOfRange))
        );
        assert!(out.0.iter().all(|&x| x == 5.0) && row.iter().all(|&x| x == 6.0));
    }
    // Released positions: the same, and ingest refuses them before the invalidate.
    let w = Window {
        sinks: 0,
        window: 4,
    };
    assert!(cache.slide(s, &w, 12).unwrap() > 0);
    assert_eq!(
        gather(&cache, &mut m, s, 0, Kv::K, 0, &mut out.0[..ROW], &mut row),
        Err(HalError::Cache(Error::PositionOutOfRange))
    );
    assert!(out.0.iter().all(|&x| x == 5.0) && row.iter().all(|&x| x == 6.0));
    assert_eq!(
        ingest(&mut cache, &mut m, s, 0, Kv::K, 0, &mut out.0[..ROW]),
        Err(HalError::Cache(Error::PositionOutOfRange))
    );
    assert_eq!(m.calls, 2, "no maintenance");
}

/// Maintenance that succeeds `left` times, then fails.
struct FailAfter {
    left: usize,
}

impl CacheMaintenance for FailAfter {
    fn line_size(&self) -> usize {
        32
    }
    fn clean(&mut self, _: usize, _: usize) -> Result<(), HalError> {
        self.left = self.left.checked_sub(1).ok_or(HalError::Unsupported)?;
        Ok(())
    }
    fn invalidate(&mut self, a: usize, n: usize) -> Result<(), HalError> {
        self.clean(a, n)
    }
    fn clean_invalidate(&mut self, a: usize, n: usize) -> Result<(), HalError> {
        self.clean(a, n)
    }
}

#[test]
fn views_whose_maintenance_fails_write_no_output() {
    let cfg = config(ElementFormat::Q8_0);
    let mut a = arenas(&cfg, 8);
    let mut cache: KvCache =
        KvCache::new(cfg, a.data.as_uninit_mut(), a.meta.as_uninit_mut()).unwrap();
    let s = cache.create_sequence(SeqMode::Paged).unwrap();
    let gap = cache.create_sequence(SeqMode::Paged).unwrap();
    cache.reserve(s, 4).unwrap();
    cache.reserve(gap, 4).unwrap();
    cache.reserve(s, 8).unwrap(); // two pages apart: two segments per pool
    let junk = Segment {
        cpu: 1,
        dev: DevAddr(1),
        len: 1,
        first_page: 1,
        pages: 1,
    };
    for left in 0..4 {
        let (mut v, mut sc) = ([junk; 4], [junk; 4]);
        let r = read_view(
            &cache,
            &IdentityMap,
            &mut FailAfter { left },
            s,
            0,
            Kv::K,
            &mut v,
            &mut sc,
        );
        assert_eq!(r, Err(HalError::Unsupported), "after {left} cleans");
        assert_eq!((v, sc), ([junk; 4], [junk; 4]), "no segments written");
        let (mut k, mut ks) = ([9u32; 4], [9u32; 4]);
        let r = bind_region(
            &cache,
            &IdentityMap,
            &mut FailAfter { left },
            s,
            0,
            Kv::K,
            &mut k,
            &mut ks,
        );
        assert_eq!(r, Err(HalError::Unsupported), "after {left} cleans");
        assert_eq!((k, ks), ([9; 4], [9; 4]), "no offsets written");
    }
    let (mut v, mut sc) = ([junk; 4], [junk; 4]);
    let r = read_view(
        &cache,
        &IdentityMap,
        &mut FailAfter { left: 4 },
        s,
        0,
        Kv::K,
        &mut v,
        &mut sc,
    );
    assert_eq!(r.map(|r| (r.values, r.scales)), Ok((2, 2)));
}

#[test]
fn buffers_are_checked_before_maintenance() {
    let mut m = Counting::new(32);
    let mut buf = Box::new(Aligned([1f32; 64]));
    let dev = device_input(&IdentityMap, &mut m, &buf.0[..]).unwrap();
    assert_eq!(dev, DevAddr(buf.0.as_ptr() as u64));
    assert_eq!(
        device_input(&IdentityMap, &mut m, &buf.0[1..9]),
        Err(HalError::Misaligned)
    );
    let none = OffsetMap::new(0x10, 0x10, DevAddr(0)).unwrap();
    assert_eq!(
        device_input(&none, &mut m, &buf.0[..8]),
        Err(HalError::Unmapped)
    );
    assert_eq!(
        device_output(&none, &mut m, &mut buf.0[..8]),
        Err(HalError::Unmapped)
    );
    assert_eq!(
        device_output(&IdentityMap, &mut m, &mut buf.0[2..10]),
        Err(HalError::Misaligned)
    );
    assert_eq!(
        take_output(&mut m, &mut buf.0[3..11]),
        Err(HalError::Misaligned)
    );
    assert_eq!(m.calls, 1);
    device_output(&IdentityMap, &mut m, &mut buf.0[..]).unwrap();
    take_output(&mut m, &mut buf.0[..]).unwrap();
    assert_eq!(m.calls, 3);
}
