//! Decode steps through the software NPU behind the simulated write-back cache are bit-identical
//! to the CPU path — and removing any one maintenance site makes them differ.

use edgekv::attention::{AttentionParams, Window};
use edgekv::{
    CacheConfig, ElementFormat, HeapArena, Kv, KvCache, META_ALIGN, PageAllocator, SeqMode, Shape,
};
use edgekv_hal::{
    AttentionJob, CacheMaintenance, DevAddr, HalError, JobStatus, KvBinding, NpuQueue, Segment,
    SimCache, SimMemory, SoftwareNpu, bind_region, device_input, device_output, gather, ingest,
    read_view, take_output,
};

const LINE: usize = 32;
const SHAPE: Shape = Shape {
    layers: 2,
    kv_heads: 2,
    head_dim: 32,
};
const ROW: usize = 64; // kv_heads × head_dim
const Q_HEADS: u16 = 4;
const Q_ROW: usize = 128; // q_heads × head_dim
const CHUNK: usize = 8; // most rows per step

/// A buffer of whole cache lines.
#[repr(C, align(64))]
struct Aligned<const N: usize>([f32; N]);

impl<const N: usize> Aligned<N> {
    fn boxed() -> Box<Self> {
        Box::new(Aligned([0.0; N]))
    }
}

/// A maintenance site of the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Site {
    /// read_view / bind_region clean the pages.
    PagesClean,
    /// device_input cleans the queries (and gather its staging tensor).
    InputClean,
    /// device_output cleans + invalidates the output before the device writes.
    OutputPrepare,
    /// take_output invalidates the output.
    OutputTake,
    /// ingest invalidates the staging rows.
    StagingInvalidate,
}

const SITES: [Site; 5] = [
    Site::PagesClean,
    Site::InputClean,
    Site::OutputPrepare,
    Site::OutputTake,
    Site::StagingInvalidate,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Clean,
    Invalidate,
    CleanInvalidate,
}

/// The simulated cache with one site's maintenance skipped.
struct Tamper<'m> {
    inner: SimCache<'m>,
    skip: Option<Site>,
    pages: (usize, usize),
    inputs: (usize, usize),
    output: (usize, usize),
    staging: [(usize, usize); 2],
}

fn span<T>(s: &[T]) -> (usize, usize) {
    let a = s.as_ptr() as usize;
    (a, a + std::mem::size_of_val(s))
}

impl Tamper<'_> {
    fn skipped(&self, op: Op, bytes: &[u8]) -> bool {
        let a = bytes.as_ptr() as usize;
        let inside = |(lo, hi): (usize, usize)| lo <= a && a < hi;
        let site = match op {
            Op::Clean if inside(self.pages) => Site::PagesClean,
            Op::Clean if inside(self.inputs) => Site::InputClean,
            Op::CleanInvalidate if inside(self.output) => Site::OutputPrepare,
            Op::Invalidate if inside(self.output) => Site::OutputTake,
            Op::Invalidate if self.staging.iter().any(|&s| inside(s)) => Site::StagingInvalidate,
            _ => panic!("unexpected {op:?} at {a:#x}"),
        };
        self.skip == Some(site)
    }
}

impl CacheMaintenance for Tamper<'_> {
    fn line_size(&self) -> usize {
        self.inner.line_size()
    }
    fn clean(&mut self, a: usize, n: usize) -> Result<(), HalError> {
        self.inner.clean(a, n)
    }
    fn invalidate(&mut self, a: usize, n: usize) -> Result<(), HalError> {
        self.inner.invalidate(a, n)
    }
    fn clean_invalidate(&mut self, a: usize, n: usize) -> Result<(), HalError> {
        self.inner.clean_invalidate(a, n)
    }
    fn clean_slice(&mut self, b: &[u8]) -> Result<(), HalError> {
        if self.skipped(Op::Clean, b) {
            return Ok(());
        }
        self.inner.clean_slice(b)
    }
    fn invalidate_slice(&mut self, b: &mut [u8]) -> Result<(), HalError> {
        if self.skipped(Op::Invalidate, b) {
            return Ok(());
        }
        self.inner.invalidate_slice(b)
    }
    fn clean_invalidate_slice(&mut self, b: &mut [u8]) -> Result<(), HalError> {
        if self.skipped(Op::CleanInvalidate, b) {
            return Ok(());
        }
        self.inner.clean_invalidate_slice(b)
    }
}

/// Deterministic values in [-1, 1) from a seed.
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn le_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[derive(Clone, Copy, Debug)]
enum Bind {
    Segments,
    Region,
}

/// Runs a chunked prefill and decode steps (a sliding window releases pages half way) through
/// the software NPU; returns how many attention outputs differed from the CPU path in any bit.
fn run(k: ElementFormat, v: ElementFormat, bind: Bind, skip: Option<Site>, decode: u32) -> usize {
    let cfg = CacheConfig::new(SHAPE)
        .with_page_tokens(8)
        .with_formats(k, v)
        .with_sequences(2, 64);
    let plan = cfg
        .plan_pages(12, <edgekv::FreeList as PageAllocator>::META_BITS_PER_PAGE)
        .unwrap();
    let mut data = HeapArena::new(plan.data_bytes, cfg.align).unwrap();
    let mut meta = HeapArena::new(plan.meta.total, META_ALIGN).unwrap();
    let mut cache: KvCache = KvCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut()).unwrap();
    // The CPU-only reference: the same rows written directly, no device, no simulation.
    let mut ref_data = HeapArena::new(plan.data_bytes, cfg.align).unwrap();
    let mut ref_meta = HeapArena::new(plan.meta.total, META_ALIGN).unwrap();
    let mut reference: KvCache =
        KvCache::new(cfg, ref_data.as_uninit_mut(), ref_meta.as_uninit_mut()).unwrap();
    let ref_seq = reference.create_sequence(SeqMode::Paged).unwrap();

    let (mut stage_k, mut stage_v) = (Aligned::<{ CHUNK * ROW }>::boxed(), Aligned::boxed());
    let (mut q, mut out) = (
        Aligned::<{ CHUNK * Q_ROW }>::boxed(),
        Aligned::<{ CHUNK * Q_ROW }>::boxed(),
    );
    let sim = SimMemory::new(LINE).unwrap();
    sim.add_region(cache.arena_bytes(), DevAddr(0x6000_0000), 0xA5)
        .unwrap();
    let devs = [0x7000_0000u64, 0x7100_0000, 0x7200_0000, 0x7300_0000];
    for (buf, dev) in [&stage_k.0[..], &stage_v.0, &q.0, &out.0]
        .into_iter()
        .zip(devs)
    {
        sim.add_region(bytemuck::cast_slice(buf), DevAddr(dev), 0x5A)
            .unwrap();
    }
    let mut maint = Tamper {
        inner: sim.cache(),
        skip,
        pages: span(cache.arena_bytes()),
        inputs: span(&q.0),
        output: span(&out.0),
        staging: [span(&stage_k.0), span(&stage_v.0)],
    };
    let mut npu = SoftwareNpu::new(&sim, 2, 2);
    let seq = cache.create_sequence(SeqMode::Paged).unwrap();
    let window = Window {
        sinks: 4,
        window: 8,
    };
    let mut params = AttentionParams::new(SHAPE, Q_HEADS);
    let mut scratch = vec![0f32; cfg.scratch_len(Q_HEADS, 1)];
    let mut mismatches = 0;

    let steps = [CHUNK as u32, 5]
        .into_iter()
        .chain(std::iter::repeat_n(1, decode as usize));
    for (step, n) in steps.enumerate() {
        let pos = cache.reserve(seq, n).unwrap();
        reference.reserve(ref_seq, n).unwrap();
        if pos >= 24 && params.window.is_none() {
            params.window = Some(window);
            cache.slide(seq, &window, pos).unwrap();
            reference.slide(ref_seq, &window, pos).unwrap();
        }
        let rows = n as usize * ROW;
        for layer in 0..SHAPE.layers {
            // The "device" writes this step's K and V rows; the CPU ingests them into pages.
            for (kv, stage, dev) in [
                (Kv::K, &mut stage_k, devs[0]),
                (Kv::V, &mut stage_v, devs[1]),
            ] {
                let seed = (step as u64) << 8 | (layer as u64) << 1 | kv as u64;
                let rows = values(seed, rows);
                reference.write(ref_seq, layer, kv, pos, &rows).unwrap();
                sim.device_write(DevAddr(dev), &le_bytes(&rows)).unwrap();
                ingest(
                    &mut cache,
                    &mut maint,
                    seq,
                    layer,
                    kv,
                    pos,
                    &mut stage.0[..rows.len()],
                )
                .unwrap();
            }
        }
        for layer in 0..SHAPE.layers {
            let qn = n as usize * Q_ROW;
            q.0[..qn].copy_from_slice(&values(1000 + step as u64 * 4 + layer as u64, qn));
            let mut expected = vec![0f32; qn];
            reference
                .attention(
                    ref_seq,
                    layer,
                    pos,
                    &q.0[..qn],
                    &mut expected,
                    &params,
                    &mut scratch,
                )
                .unwrap();

            let q_dev = device_input(&sim, &mut maint, &q.0[..qn]).unwrap();
            out.0[..qn].fill(0.0); // the CPU touches the output buffer before handing it over
            let out_dev = device_output(&sim, &mut maint, &mut out.0[..qn]).unwrap();
            let (mut segs, mut offs) = ([[Segment::default(); 8]; 4], [[0u32; 8]; 4]);
            let kv = match bind {
                Bind::Segments => {
                    let [ks, kss, vs, vss] = &mut segs;
                    let a =
                        read_view(&cache, &sim, &mut maint, seq, layer, Kv::K, ks, kss).unwrap();
                    let b =
                        read_view(&cache, &sim, &mut maint, seq, layer, Kv::V, vs, vss).unwrap();
                    KvBinding::Segments {
                        k: &ks[..a.values],
                        k_scales: &kss[..a.scales],
                        v: &vs[..b.values],
                        v_scales: &vss[..b.scales],
                    }
                }
                Bind::Region => {
                    let [ko, kso, vo, vso] = &mut offs;
                    let r =
                        bind_region(&cache, &sim, &mut maint, seq, layer, Kv::K, ko, kso).unwrap();
                    bind_region(&cache, &sim, &mut maint, seq, layer, Kv::V, vo, vso).unwrap();
                    let pages = r.pages;
                    let scales = |fmt: ElementFormat| if fmt.is_quantized() { pages } else { 0 };
                    KvBinding::Region {
                        base: r.base,
                        k: &ko[..pages],
                        k_scales: &kso[..scales(k)],
                        v: &vo[..pages],
                        v_scales: &vso[..scales(v)],
                    }
                }
            };
            let job = AttentionJob {
                config: cfg,
                kv,
                keys: pos + n,
                start: pos,
                queries: n,
                q: q_dev,
                out: out_dev,
                params,
            };
            let id = npu.submit(&job).unwrap();
            let mut polls = 0;
            while npu.poll(id).unwrap() == JobStatus::Pending {
                polls += 1;
            }
            assert_eq!(polls, 2);
            take_output(&mut maint, &mut out.0[..qn]).unwrap();
            let same = expected
                .iter()
                .zip(&out.0[..qn])
                .all(|(a, b)| a.to_bits() == b.to_bits());
            mismatches += usize::from(!same);
            if skip.is_none() {
                // The CPU path over the ingested pages agrees too.
                let mut cpu = vec![0f32; qn];
                cache
                    .attention(seq, layer, pos, &q.0[..qn], &mut cpu, &params, &mut scratch)
                    .unwrap();
                assert!(
                    cpu.iter()
                        .zip(&expected)
                        .all(|(a, b)| a.to_bits() == b.to_bits())
                );
            }
        }
    }
    if skip.is_none() {
        assert!(params.window.is_some(), "the window released pages");
        assert!(cache.page_table(seq).unwrap().contains(&edgekv::NO_PAGE));
        assert_eq!(sim.stats().dirty_evictions, 0);
    }
    mismatches
}

const FORMATS: [(ElementFormat, ElementFormat); 3] = [
    (ElementFormat::F32, ElementFormat::F32),
    (ElementFormat::Q8_0, ElementFormat::Int8 { group: 32 }),
    (
        ElementFormat::Fp8Tile {
            dv: 32,
            tile: 16,
            bf16: false,
        },
        ElementFormat::F16,
    ),
];

/// Decode steps after the 13-token prefill (the window releases pages from position 24 on).
const DECODE_STEPS: u32 = 24;

// Under Miri these two take tens of minutes (the attention kernels interpreted); the kernels
// are Miri-checked in the core's tests, and the simulation code here in the tests below.
#[test]
#[cfg_attr(miri, ignore)]
fn npu_steps_are_bit_identical_to_the_cpu_path() {
    for (k, v) in FORMATS {
        for bind in [Bind::Segments, Bind::Region] {
            assert_eq!(
                run(k, v, bind, None, DECODE_STEPS),
                0,
                "{k:?}/{v:?} {bind:?}"
            );
        }
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn every_maintenance_site_is_needed() {
    for (k, v) in FORMATS {
        for site in SITES {
            for bind in [Bind::Segments, Bind::Region] {
                let bad = run(k, v, bind, Some(site), DECODE_STEPS);
                assert!(
                    bad > 0,
                    "{k:?}/{v:?} {bind:?}: skipping {site:?} went unnoticed"
                );
            }
        }
    }
}

#[test]
fn gathered_staging_reaches_the_device_only_when_cleaned() {
    let cfg = CacheConfig::new(SHAPE)
        .with_page_tokens(8)
        .with_sequences(1, 32);
    let plan = cfg
        .plan_pages(4, <edgekv::FreeList as PageAllocator>::META_BITS_PER_PAGE)
        .unwrap();
    let mut data = HeapArena::new(plan.data_bytes, cfg.align).unwrap();
    let mut meta = HeapArena::new(plan.meta.total, META_ALIGN).unwrap();
    let mut cache: KvCache = KvCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut()).unwrap();
    let seq = cache.create_sequence(SeqMode::Paged).unwrap();
    cache.reserve(seq, 11).unwrap();
    let rows = values(7, 11 * ROW);
    cache.write(seq, 1, Kv::V, 0, &rows).unwrap();

    for clean in [true, false] {
        let mut staging = Aligned::<{ 10 * ROW }>::boxed();
        let mut row = vec![0f32; ROW];
        let sim = SimMemory::new(LINE).unwrap();
        sim.add_region(bytemuck::cast_slice(&staging.0), DevAddr(0x1000), 0xEE)
            .unwrap();
        let mut maint = Tamper {
            inner: sim.cache(),
            skip: (!clean).then_some(Site::InputClean),
            pages: (0, 0),
            inputs: span(&staging.0),
            output: (0, 0),
            staging: [(0, 0); 2],
        };
        // Positions 1..11, head-major.
        let n = gather(
            &cache,
            &mut maint,
            seq,
            1,
            Kv::V,
            1,
            &mut staging.0,
            &mut row,
        )
        .unwrap();
        assert_eq!(n, 10);
        let mut seen = vec![0u8; 10 * ROW * 4];
        sim.device_read(DevAddr(0x1000), &mut seen).unwrap();
        let expected: Vec<f32> = (0..2)
            .flat_map(|h| (1..11).flat_map(move |t| (0..32).map(move |d| t * ROW + h * 32 + d)))
            .map(|i| rows[i])
            .collect();
        assert_eq!(seen == le_bytes(&expected), clean);
    }
}

#[test]
fn simulated_memory_refuses_bad_regions_and_ranges() {
    assert!(matches!(SimMemory::new(0), Err(HalError::InvalidLineSize)));
    assert!(matches!(SimMemory::new(24), Err(HalError::InvalidLineSize)));
    let sim = SimMemory::new(LINE).unwrap();
    let a = Aligned::<64>::boxed();
    let b = Aligned::<64>::boxed();
    let bytes: &[u8] = bytemuck::cast_slice(&a.0);
    assert_eq!(
        sim.add_region(&bytes[..0], DevAddr(0), 0),
        Err(HalError::EmptyWindow)
    );
    assert_eq!(
        sim.add_region(&bytes[4..36], DevAddr(0), 0),
        Err(HalError::Misaligned)
    );
    assert_eq!(
        sim.add_region(bytes, DevAddr(u64::MAX - 8), 0),
        Err(HalError::Overflow)
    );
    sim.add_region(bytes, DevAddr(0x1000), 0x11).unwrap();
    assert_eq!(
        sim.add_region(&bytes[64..128], DevAddr(0x9000), 0),
        Err(HalError::Overlap)
    );
    let other: &[u8] = bytemuck::cast_slice(&b.0);
    assert_eq!(
        sim.add_region(other, DevAddr(0x1080), 0),
        Err(HalError::Overlap)
    );
    sim.add_region(other, DevAddr(0x2000), 0x22).unwrap();

    let mut buf = [0u8; 16];
    sim.device_read(DevAddr(0x10f8), &mut buf[..8]).unwrap();
    assert_eq!(buf[..8], [0x11; 8], "device memory starts as the fill");
    assert_eq!(
        sim.device_read(DevAddr(0x10f8), &mut buf),
        Err(HalError::Unmapped)
    );
    assert_eq!(
        sim.device_write(DevAddr(0x3000), &buf),
        Err(HalError::Unmapped)
    );
    assert_eq!(
        sim.device_read(DevAddr(u64::MAX), &mut buf),
        Err(HalError::Overflow)
    );

    use edgekv_hal::AddressMap;
    let cpu = bytes.as_ptr() as usize;
    assert_eq!(sim.to_device(cpu + 32, 32), Ok(DevAddr(0x1020)));
    assert_eq!(sim.to_device(cpu + 32, 256), Err(HalError::Unmapped));

    let mut cache = sim.cache();
    assert_eq!(cache.clean(cpu, 32), Err(HalError::Unsupported));
    assert_eq!(cache.invalidate(cpu, 32), Err(HalError::Unsupported));
    assert_eq!(
        cache.clean_invalidate(cpu + 1, 32),
        Err(HalError::Misaligned)
    );
    let mut outside = Aligned::<8>::boxed();
    let outside: &mut [u8] = bytemuck::cast_slice_mut(&mut outside.0);
    assert_eq!(cache.clean_slice(outside), Err(HalError::Unmapped));
    assert_eq!(
        cache.invalidate_slice(&mut outside[..31]),
        Err(HalError::Misaligned)
    );
    assert_eq!(sim.stats().lines_cleaned, 0);
}

#[test]
fn software_npu_refuses_bad_jobs() {
    let cfg = CacheConfig::new(SHAPE).with_page_tokens(8);
    let sim = SimMemory::new(LINE).unwrap();
    let mut q = Aligned::<{ Q_ROW }>::boxed();
    q.0.fill(0.5);
    let out = Aligned::<{ Q_ROW }>::boxed();
    let pages = Aligned::<{ 8 * ROW }>::boxed(); // one f32 page of K, reused as V
    sim.add_region(bytemuck::cast_slice(&q.0), DevAddr(0x100_0000), 0)
        .unwrap();
    sim.add_region(bytemuck::cast_slice(&out.0), DevAddr(0x200_0000), 0)
        .unwrap();
    sim.add_region(bytemuck::cast_slice(&pages.0), DevAddr(0x300_0000), 0)
        .unwrap();
    let page = Segment {
        cpu: pages.0.as_ptr() as usize,
        dev: DevAddr(0x300_0000),
        len: 8 * ROW * 4,
        first_page: 0,
        pages: 1,
    };
    fn job(
        cfg: CacheConfig,
        segs: &[Segment],
        q_dev: u64,
        params: AttentionParams,
    ) -> AttentionJob<'_> {
        AttentionJob {
            config: cfg,
            kv: KvBinding::Segments {
                k: segs,
                k_scales: &[],
                v: segs,
                v_scales: &[],
            },
            keys: 8,
            start: 7,
            queries: 1,
            q: DevAddr(q_dev),
            out: DevAddr(0x200_0000),
            params,
        }
    }
    let ok = AttentionParams::new(SHAPE, Q_HEADS);
    let one = [page];
    let mut npu = SoftwareNpu::new(&sim, 2, 0);
    let good = npu.submit(&job(cfg, &one, 0x100_0000, ok)).unwrap();
    assert_eq!(npu.poll(good), Ok(JobStatus::Done));
    assert_eq!(
        npu.poll(good),
        Err(HalError::UnknownJob),
        "forgotten after Done"
    );
    assert_eq!(npu.poll(edgekv_hal::JobId(99)), Err(HalError::UnknownJob));

    let bad_len = [Segment { len: 100, ..page }];
    let past = [Segment {
        first_page: 1,
        ..page
    }];
    let cases = [
        (job(cfg, &bad_len, 0x100_0000, ok), HalError::LengthMismatch),
        (job(cfg, &past, 0x100_0000, ok), HalError::LengthMismatch),
        (job(cfg, &one, 0x900_0000, ok), HalError::Unmapped),
        (
            job(cfg, &one, 0x100_0000, AttentionParams::new(SHAPE, 3)),
            HalError::Cache(edgekv::Error::HeadMismatch),
        ),
    ];
    for (j, err) in cases {
        let id = npu.submit(&j).unwrap();
        assert_eq!(npu.poll(id), Err(err));
    }
    npu.submit(&job(cfg, &one, 0x100_0000, ok)).unwrap();
    npu.submit(&job(cfg, &one, 0x100_0000, ok)).unwrap();
    assert_eq!(
        npu.submit(&job(cfg, &one, 0x100_0000, ok)),
        Err(HalError::QueueFull)
    );
}
