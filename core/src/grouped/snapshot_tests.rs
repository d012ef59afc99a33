//! Grouped snapshots: restore then continue equals never having stopped, bit for bit, for
//! sequences longer than the windows; one-group images are `KvCache`'s bytes; restore is all
//! or nothing across groups at every page availability; other groupings and damaged images are
//! precise errors with nothing changed; the snapshot store keeps grouped images.

use super::*;
use crate::alloc::NO_PAGE;
use crate::attention::AttentionParams;
use crate::config::{GroupWindow, LayerGroup, Layers};
use crate::format::ElementFormat;
use crate::sequence::SeqMode;
use crate::shape::{Kv, Shape};
use crate::snapshot::{GroupedHeader, RamFlash, SliceFlash, SnapshotError, SnapshotStore, VERSION};
use std::vec::Vec;

const SHAPE: Shape = Shape {
    layers: 6,
    kv_heads: 1,
    head_dim: 32,
};
const ROW: usize = 32;
const P: u32 = 4;
const FP: u64 = 0x6E0F_5A1D_0000_0003;
/// Positions written before the snapshot (past every window) and after it.
const N: u32 = if cfg!(miri) { 19 } else { 37 };
const M: u32 = if cfg!(miri) { 6 } else { 21 };
const SECTOR: usize = 1024;

/// Layers 1, 3, 4: window 8 with a rollback of 2, q8_0. Layers 2, 5: global, f16. Layer 0:
/// window 6 with 2 sinks, f32.
fn config() -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(P as u16)
        .with_sequences(4, 128)
        .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0)
        .with_window(GroupWindow {
            window: 8,
            sinks: 0,
            rollback: 2,
        })
        .with_group(
            LayerGroup::new(Layers::Every {
                period: 3,
                first: 2,
            })
            .with_formats(ElementFormat::F16, ElementFormat::F16),
        )
        .with_group(
            LayerGroup::new(Layers::Run { first: 0, count: 1 }).with_window(GroupWindow::new(6, 2)),
        )
}

/// Heap memory for arenas, aligned by hand.
struct Mem(Vec<MaybeUninit<u8>>, Vec<MaybeUninit<u8>>, usize, usize);

impl Mem {
    fn for_pages(cfg: &CacheConfig, pages: &[usize]) -> Mem {
        let plan = GroupedCache::<FreeList>::plan_pages(cfg, pages).unwrap();
        Mem(
            std::vec![MaybeUninit::uninit(); plan.data_bytes + 256],
            std::vec![MaybeUninit::uninit(); plan.meta_bytes + 16],
            plan.data_bytes,
            plan.meta_bytes,
        )
    }

    fn cache(&mut self, cfg: CacheConfig, pages: &[usize]) -> GroupedCache<'_> {
        let d = self.0.as_ptr().align_offset(256);
        let m = self.1.as_ptr().align_offset(META_ALIGN);
        let (data, meta) = (&mut self.0[d..d + self.2], &mut self.1[m..m + self.3]);
        GroupedCache::with_pages(cfg, pages, data, meta).unwrap()
    }
}

/// Deterministic pseudo-random values in [-3, 3) (xorshift), by seed.
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * 3.0
        })
        .collect()
}

fn rows(layer: u16, kv: Kv, start: u32, n: u32) -> Vec<f32> {
    (start..start + n)
        .flat_map(|t| values(u64::from(t) << 8 | u64::from(layer) << 1 | kv as u64, ROW))
        .collect()
}

fn tokens(n: u32) -> Vec<u32> {
    (0..n).map(|t| 1000 + t * 7).collect()
}

/// Appends `n` positions, writing every layer's K and V.
fn push(c: &mut GroupedCache<'_>, seq: SeqId, n: u32) -> Result<()> {
    let start = c.reserve(seq, n)?;
    for layer in 0..SHAPE.layers {
        let (k, v) = (rows(layer, Kv::K, start, n), rows(layer, Kv::V, start, n));
        c.write_kv(seq, layer, start, &k, &v)?;
    }
    Ok(())
}

/// One decode step: a new position written in every layer, then every layer's attention for
/// it; returns the outputs' bits.
fn step(c: &mut GroupedCache<'_>, seq: SeqId) -> Vec<u32> {
    push(c, seq, 1).unwrap();
    let t = c.seq_len(seq).unwrap() - 1;
    let params = AttentionParams::new(SHAPE, 2);
    let mut scratch = std::vec![0f32; c.scratch_len(2)];
    let mut bits = Vec::new();
    for layer in 0..SHAPE.layers {
        let q = values(u64::from(t) * 31 + u64::from(layer) + 7, 2 * ROW);
        let mut out = [0f32; 2 * ROW];
        c.attention(seq, layer, t, &q, &mut out, &params, &mut scratch)
            .unwrap();
        bits.extend(out.map(f32::to_bits));
    }
    bits
}

/// Every position's rows of every layer as `read` gives them (released ones as errors).
fn reads(c: &GroupedCache<'_>, seq: SeqId) -> Vec<core::result::Result<Vec<u32>, Error>> {
    let len = c.seq_len(seq).unwrap();
    let mut all = Vec::new();
    for layer in 0..SHAPE.layers {
        for kv in [Kv::K, Kv::V] {
            for t in 0..len {
                let mut r = [0f32; ROW];
                all.push(
                    c.read(seq, layer, kv, t, &mut r)
                        .map(|()| r.iter().map(|x| x.to_bits()).collect()),
                );
            }
        }
    }
    all
}

/// Each group's page table with page ids reduced to held / released.
fn held(c: &GroupedCache<'_>, seq: SeqId) -> Vec<Vec<bool>> {
    (0..c.group_count())
        .map(|g| {
            let t = c.group(g).unwrap().page_table(seq).unwrap();
            t.iter().map(|&p| p != NO_PAGE).collect()
        })
        .collect()
}

/// Everything observable: per group stats, page states and tables, every sequence's reads.
fn state(c: &GroupedCache<'_>, seqs: &[SeqId]) -> std::string::String {
    let mut scratch = [0u16; 512];
    c.check_invariants(&mut scratch).unwrap();
    let mut s = std::string::String::new();
    for g in 0..c.group_count() {
        let k = c.group(g).unwrap();
        let pages: Vec<_> = (0..k.arena_plan().num_pages)
            .map(|p| k.page_state(p))
            .collect();
        let tables: Vec<_> = seqs
            .iter()
            .map(|&q| k.page_table(q).map(<[_]>::to_vec))
            .collect();
        s += &std::format!("{:?} {pages:?} {tables:?}\n", k.stats());
    }
    for &q in seqs {
        s += &std::format!("{:?}\n", reads(c, q));
    }
    s
}

/// A snapshot of `seq` as bytes (flash of whole sectors).
fn image(c: &GroupedCache<'_>, seq: SeqId) -> (Vec<u8>, GroupedHeader) {
    let n = c.seq_len(seq).unwrap();
    let h = c.snapshot_header(seq, &tokens(n), FP).unwrap();
    let mut mem = std::vec![0u8; (h.image as usize).div_ceil(SECTOR) * SECTOR];
    let got = c
        .snapshot(
            seq,
            &tokens(n),
            FP,
            &mut RamFlash::<8, SECTOR>::new(&mut mem),
            0,
        )
        .unwrap();
    assert_eq!(got, h);
    mem.truncate(h.image as usize);
    (mem, h)
}

const PLENTY: [usize; 3] = [32, 32, 32];

#[test]
fn restore_then_continue_equals_never_having_stopped() {
    let cfg = config();
    let mut m1 = Mem::for_pages(&cfg, &PLENTY);
    let mut a = m1.cache(cfg, &PLENTY);
    let s = a.create_sequence(SeqMode::Paged).unwrap();
    for _ in 0..N {
        step(&mut a, s);
    }
    let (im, h) = image(&a, s);
    assert_eq!(h.version(), VERSION);
    assert_eq!(h.group_count(), 3);
    // The windowed groups released positions, the global one none.
    let g0 = h.group(0).unwrap();
    assert!(g0.first_held > g0.released_from && g0.released_from == 0);
    let g1 = h.group(1).unwrap();
    assert_eq!(
        (g1.released_from, g1.first_held, g1.pages),
        (0, 0, N.div_ceil(P))
    );
    let g2 = h.group(2).unwrap();
    assert_eq!(g2.released_from, P, "after the sinks' page");
    assert!(g2.first_held > P);
    assert_eq!(h.pages, g0.pages + g1.pages + g2.pages);

    let mut m2 = Mem::for_pages(&cfg, &PLENTY);
    let mut b = m2.cache(cfg, &PLENTY);
    let mut toks = std::vec![0u32; 64];
    let (r, got) = b.restore(&mut SliceFlash(&im), 0, FP, &mut toks).unwrap();
    assert_eq!(got, h);
    assert_eq!(&toks[..N as usize], &tokens(N)[..]);
    assert_eq!(held(&b, r), held(&a, s));
    assert_eq!(reads(&b, r), reads(&a, s));
    for g in 0..3 {
        let (x, y) = (a.group(g).unwrap().stats(), b.group(g).unwrap().stats());
        assert_eq!(x.pages_used, y.pages_used, "group {g}");
    }
    // Restoring then snapshotting is the identity.
    assert_eq!(image(&b, r).0, im);
    // Continue both: every attention output and every read the same bits.
    for i in 0..M {
        assert_eq!(
            step(&mut b, r),
            step(&mut a, s),
            "step {i} after the restore"
        );
        assert_eq!(held(&b, r), held(&a, s));
    }
    assert_eq!(reads(&b, r), reads(&a, s));
    // The rollback kept in the base group is kept in the restored sequence too.
    let len = a.seq_len(s).unwrap();
    assert_eq!(a.truncate(s, len - 2), b.truncate(r, len - 2));
    assert_eq!(a.truncate(s, len - 9), b.truncate(r, len - 9));
    assert_eq!(step(&mut b, r), step(&mut a, s));
    let mut scratch = [0u16; 512];
    b.check_invariants(&mut scratch).unwrap();
}

#[test]
fn one_group_images_are_kv_cache_images() {
    // One group with a window: while nothing is released the image is `KvCache`'s, byte for
    // byte (version 1); past the window it is a grouped image of one group.
    let cfg = CacheConfig::new(SHAPE)
        .with_page_tokens(P as u16)
        .with_sequences(4, 128)
        .with_formats(ElementFormat::Q8_0, ElementFormat::F16)
        .with_window(GroupWindow::new(8, 0));
    let mut m1 = Mem::for_pages(&cfg, &[24]);
    let mut g = m1.cache(cfg, &[24]);
    let s = g.create_sequence(SeqMode::Paged).unwrap();
    push(&mut g, s, 7).unwrap();
    let (im, h) = image(&g, s);
    assert_eq!(h.version(), crate::snapshot::VERSION_1);
    let mut mem = std::vec![0u8; im.len().div_ceil(SECTOR) * SECTOR];
    let single = g
        .group(0)
        .unwrap()
        .snapshot(
            s,
            &tokens(7),
            FP,
            &mut RamFlash::<8, SECTOR>::new(&mut mem),
            0,
        )
        .unwrap();
    assert_eq!(&mem[..im.len()], &im[..]);
    assert_eq!(h.single(), Some(single));

    // A `KvCache` and a one-group `GroupedCache` restore it alike.
    let mut m2 = Mem::for_pages(&cfg, &[24]);
    let mut b = m2.cache(cfg, &[24]);
    let mut toks = [0u32; 64];
    let (r, got) = b.restore(&mut SliceFlash(&im), 0, FP, &mut toks).unwrap();
    assert_eq!(got, h);
    assert_eq!(reads(&b, r), reads(&g, s));

    // Past the window: version 3 with one group, restored and continued bit for bit.
    for _ in 0..20 {
        step(&mut g, s);
        step(&mut b, r);
    }
    let (im, h) = image(&g, s);
    assert_eq!((h.version(), h.group_count()), (VERSION, 1));
    assert!(h.group(0).unwrap().first_held > 0);
    // `KvCache` refuses it precisely (and changes nothing).
    let mut m3 = Mem::for_pages(&cfg, &[24]);
    let mut c = m3.cache(cfg, &[24]);
    let before = state(&c, &[]);
    let kv = c.caches[0].as_mut().unwrap();
    assert_eq!(
        kv.restore(&mut SliceFlash(&im), 0, FP, &mut toks).map(drop),
        Err(SnapshotError::GroupedImage)
    );
    assert_eq!(state(&c, &[]), before);
    let (r2, _) = c.restore(&mut SliceFlash(&im), 0, FP, &mut toks).unwrap();
    for i in 0..6 {
        assert_eq!(step(&mut c, r2), step(&mut g, s), "step {i}");
    }
}

#[test]
fn another_grouping_is_a_precise_error_and_changes_nothing() {
    let cfg = config();
    let mut m1 = Mem::for_pages(&cfg, &PLENTY);
    let mut a = m1.cache(cfg, &PLENTY);
    let s = a.create_sequence(SeqMode::Paged).unwrap();
    for _ in 0..23 {
        push(&mut a, s, 1).unwrap();
    }
    let (im, _) = image(&a, s);

    let base = config();
    let two = CacheConfig::new(SHAPE)
        .with_page_tokens(P as u16)
        .with_sequences(4, 128)
        .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0)
        .with_window(GroupWindow {
            window: 8,
            sinks: 0,
            rollback: 2,
        })
        .with_group(
            LayerGroup::new(Layers::Every {
                period: 3,
                first: 2,
            })
            .with_formats(ElementFormat::F16, ElementFormat::F16),
        );
    let mut layers = base;
    layers.groups = crate::config::LayerGroups::new()
        .with(*base.groups.get(0).unwrap())
        .with(
            LayerGroup::new(Layers::Run { first: 1, count: 1 }).with_window(GroupWindow::new(6, 2)),
        );
    let mut window = base;
    window.window = Some(GroupWindow {
        window: 8,
        sinks: 0,
        rollback: 3,
    });
    let mut format = base;
    format.k_format = ElementFormat::F16;
    let mut page = base;
    page.page_tokens = 2 * P as u16;
    let cases = [
        ("group count", two, SnapshotError::GroupCountMismatch),
        ("layers", layers, SnapshotError::GroupLayersMismatch),
        ("window", window, SnapshotError::GroupWindowMismatch),
        ("format", format, SnapshotError::GroupFormatMismatch),
        ("page size", page, SnapshotError::ConfigMismatch),
    ];
    for (what, cfg, err) in cases {
        let pages = &PLENTY[..cfg.group_count()];
        let mut mem = Mem::for_pages(&cfg, pages);
        let mut c = mem.cache(cfg, pages);
        let live = c.create_sequence(SeqMode::Paged).unwrap();
        push(&mut c, live, 5).unwrap();
        let before = state(&c, &[live]);
        let mut toks = [0u32; 64];
        let got = c.restore(&mut SliceFlash(&im), 0, FP, &mut toks);
        assert_eq!(got.map(drop), Err(err), "{what}");
        assert_eq!(state(&c, &[live]), before, "{what}");
    }

    // A one-group image (version 1) in a cache of three groups.
    let one = CacheConfig::new(SHAPE)
        .with_page_tokens(P as u16)
        .with_sequences(4, 128);
    let mut m2 = Mem::for_pages(&one, &[16]);
    let mut k = m2.cache(one, &[16]);
    let q = k.create_sequence(SeqMode::Paged).unwrap();
    push(&mut k, q, 6).unwrap();
    let (old, h) = image(&k, q);
    assert_eq!(h.version(), crate::snapshot::VERSION_1);
    let mut toks = [0u32; 64];
    let before = state(&a, &[s]);
    assert_eq!(
        a.restore(&mut SliceFlash(&old), 0, FP, &mut toks).map(drop),
        Err(SnapshotError::GroupCountMismatch)
    );
    assert_eq!(
        a.restore(&mut SliceFlash(&im), 0, FP ^ 1, &mut toks)
            .map(drop),
        Err(SnapshotError::FingerprintMismatch)
    );
    assert_eq!(
        a.restore(&mut SliceFlash(&im), 0, FP, &mut toks[..22])
            .map(drop),
        Err(SnapshotError::Cache(Error::LengthMismatch))
    );
    assert_eq!(state(&a, &[s]), before);
}

/// `im` with `bytes` written at `at` and the CRC recomputed (so that only the header's own
/// checks can refuse it).
fn patched(im: &[u8], at: usize, bytes: &[u8]) -> Vec<u8> {
    let mut im = im.to_vec();
    im[at..at + bytes.len()].copy_from_slice(bytes);
    let n = im.len() - 4;
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&im[..n]);
    im[n..].copy_from_slice(&crc.to_le_bytes());
    im
}

#[test]
fn damaged_images_are_precise_errors_and_change_nothing() {
    let cfg = config();
    let mut m1 = Mem::for_pages(&cfg, &PLENTY);
    let mut a = m1.cache(cfg, &PLENTY);
    let s = a.create_sequence(SeqMode::Paged).unwrap();
    for _ in 0..23 {
        push(&mut a, s, 1).unwrap();
    }
    let (im, h) = image(&a, s);
    let (g0, g2) = (64, 64 + 2 * 48);
    let entry = |g: usize, field: usize| 64 + g * 48 + field;
    let first_held = h.group(0).unwrap().first_held;
    let mut cut = im.clone();
    cut.truncate(im.len() - 3);
    let mut flipped = im.clone();
    flipped[im.len() / 2] ^= 0x10;
    let cases: Vec<(&str, Vec<u8>, SnapshotError)> = std::vec![
        ("truncated", cut, SnapshotError::Truncated),
        ("header cut", im[..100].to_vec(), SnapshotError::Truncated),
        ("payload bit", flipped, SnapshotError::CrcMismatch),
        (
            "no groups",
            patched(&im, 24, &[0, 0]),
            SnapshotError::CorruptSnapshot
        ),
        (
            "five groups",
            patched(&im, 24, &[5, 0]),
            SnapshotError::CorruptSnapshot
        ),
        (
            "header bytes",
            patched(&im, 6, &[64, 0]),
            SnapshotError::CorruptSnapshot
        ),
        (
            "pad",
            patched(&im, 30, &[1]),
            SnapshotError::CorruptSnapshot
        ),
        (
            "token count",
            patched(&im, 40, &[24]),
            SnapshotError::CorruptSnapshot
        ),
        (
            "version",
            patched(&im, 4, &[4]),
            SnapshotError::UnsupportedVersion
        ),
        (
            "base group not rest",
            patched(&im, g0, &[1]),
            SnapshotError::CorruptGroupEntry
        ),
        (
            "listed group rest",
            patched(&im, g2, &[0]),
            SnapshotError::CorruptGroupEntry
        ),
        (
            "layers overlap",
            patched(&im, entry(2, 2), &[2]),
            SnapshotError::CorruptGroupEntry
        ),
        (
            "layer count",
            patched(&im, entry(1, 6), &[3]),
            SnapshotError::CorruptGroupEntry
        ),
        (
            "format code",
            patched(&im, entry(1, 8), &[9]),
            SnapshotError::CorruptGroupEntry
        ),
        (
            "window 0",
            patched(&im, entry(2, 24), &[0]),
            SnapshotError::CorruptGroupEntry
        ),
        // Sinks past the first released position; 3 sinks would still release from 4 on:
        // a valid entry of another window.
        (
            "sinks",
            patched(&im, entry(2, 28), &[5]),
            SnapshotError::CorruptGroupEntry
        ),
        (
            "other sinks",
            patched(&im, entry(2, 28), &[3]),
            SnapshotError::GroupWindowMismatch
        ),
        (
            "released not whole pages",
            patched(&im, entry(0, 40), &(first_held - 1).to_le_bytes()),
            SnapshotError::CorruptGroupEntry,
        ),
        (
            "released inside the window",
            patched(&im, entry(0, 40), &(first_held + P).to_le_bytes()),
            SnapshotError::CorruptGroupEntry,
        ),
        (
            "released in a global group",
            patched(&im, entry(1, 40), &P.to_le_bytes()),
            SnapshotError::CorruptGroupEntry,
        ),
        (
            "pages",
            patched(&im, entry(1, 44), &[1]),
            SnapshotError::CorruptGroupEntry
        ),
        (
            "pages total",
            patched(&im, 44, &[1]),
            SnapshotError::CorruptSnapshot
        ),
    ];
    let live = s;
    let before = state(&a, &[live]);
    let mut toks = [0u32; 64];
    for (what, bad, err) in cases {
        let got = a.restore(&mut SliceFlash(&bad), 0, FP, &mut toks);
        assert_eq!(got.map(drop), Err(err), "{what}");
        assert_eq!(state(&a, &[live]), before, "{what}");
        if err == SnapshotError::CorruptGroupEntry {
            let header = GroupedHeader::decode(&bad[..h.header_bytes()]);
            assert_eq!(header, Err(err), "{what}: the header alone");
        }
    }
    // Every single-bit flip of the header and group entries is caught.
    let bits = if cfg!(miri) {
        0..16
    } else {
        0..h.header_bytes() * 8
    };
    for bit in bits {
        let mut bad = im.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        let got = a.restore(&mut SliceFlash(&bad), 0, FP, &mut toks);
        assert!(got.is_err(), "bit {bit}");
    }
    assert_eq!(state(&a, &[live]), before);
}

/// A cache whose group `g` has exactly `k` pages free after a scenario (another live sequence,
/// and in every group a published prompt's cached pages), the others plenty; restores `im`.
fn restore_with_pages(im: &[u8], used: &[usize], g: usize, k: usize) {
    let cfg = config();
    let mut pages = PLENTY;
    pages[g] = used[g] + k;
    let mut mem = Mem::for_pages(&cfg, &pages);
    let mut c = mem.cache(cfg, &pages);
    let seqs = scenario(&mut c);
    assert_eq!(c.group(g).unwrap().pool().available(), k);
    let before = state(&c, &seqs);
    let need = GroupedHeader::decode(&im[..64 + 3 * 48])
        .unwrap()
        .group(g)
        .unwrap()
        .pages as usize;
    let mut toks = [0u32; 64];
    match c.restore(&mut SliceFlash(im), 0, FP, &mut toks) {
        Err(e) => {
            assert_eq!(
                e,
                SnapshotError::Cache(Error::OutOfPages),
                "group {g}, {k} pages"
            );
            assert!(k < need, "group {g}, {k} pages: refused with enough");
            assert_eq!(state(&c, &seqs), before, "group {g}, {k} pages");
        }
        Ok((r, _)) => {
            assert!(k >= need, "group {g}, {k} pages: restored with too few");
            state(&c, &[seqs[0], r]);
        }
    }
}

/// A live sequence of 10 positions and a published prompt of 8 (cached after its free).
fn scenario(c: &mut GroupedCache<'_>) -> Vec<SeqId> {
    let old = c.create_sequence(SeqMode::Paged).unwrap();
    push(c, old, 8).unwrap();
    c.commit_prompt(old, &tokens(8)).unwrap();
    c.free_sequence(old).unwrap();
    let live = c.create_sequence(SeqMode::Paged).unwrap();
    push(c, live, 10).unwrap();
    std::vec![live]
}

#[test]
fn restore_is_all_or_nothing_at_every_page_availability_of_each_group() {
    let cfg = config();
    let mut m1 = Mem::for_pages(&cfg, &PLENTY);
    let mut a = m1.cache(cfg, &PLENTY);
    let s = a.create_sequence(SeqMode::Paged).unwrap();
    for _ in 0..29 {
        push(&mut a, s, 1).unwrap();
    }
    let (im, h) = image(&a, s);
    let used: Vec<usize> = {
        let mut mem = Mem::for_pages(&cfg, &PLENTY);
        let mut c = mem.cache(cfg, &PLENTY);
        scenario(&mut c);
        (0..3)
            .map(|g| c.group(g).unwrap().stats().pages_used as usize)
            .collect()
    };
    for g in 0..3 {
        let need = h.group(g).unwrap().pages as usize;
        let levels: Vec<usize> = if cfg!(miri) {
            std::vec![need - 1, need]
        } else {
            (0..=need + 1).collect()
        };
        for k in levels {
            restore_with_pages(&im, &used, g, k);
        }
    }
    // No free sequence slot: refused in every group, nothing changed.
    let mut mem = Mem::for_pages(&cfg, &PLENTY);
    let mut c = mem.cache(cfg, &PLENTY);
    let seqs: Vec<SeqId> = (0..4)
        .map(|_| c.create_sequence(SeqMode::Paged).unwrap())
        .collect();
    let before = state(&c, &seqs);
    let mut toks = [0u32; 64];
    assert_eq!(
        c.restore(&mut SliceFlash(&im), 0, FP, &mut toks).map(drop),
        Err(SnapshotError::Cache(Error::TooManySequences))
    );
    assert_eq!(state(&c, &seqs), before);
}

#[test]
fn the_store_keeps_grouped_images() {
    let cfg = config();
    let mut m1 = Mem::for_pages(&cfg, &PLENTY);
    let mut a = m1.cache(cfg, &PLENTY);
    let s = a.create_sequence(SeqMode::Paged).unwrap();
    for _ in 0..N {
        step(&mut a, s);
    }
    let n = a.seq_len(s).unwrap();
    let slot = 64 * SECTOR as u32;
    let mut mem = std::vec![0xFFu8; 2 * slot as usize];
    let mut flash = RamFlash::<8, SECTOR>::new(&mut mem);
    let store = SnapshotStore::new(0, slot, 2).unwrap();
    let (h, commit) = store
        .save_grouped(&a, s, &tokens(n), FP, &mut flash)
        .unwrap();
    assert_eq!(h.version(), VERSION);
    assert_eq!(commit.image, h.image);

    let mut m2 = Mem::for_pages(&cfg, &PLENTY);
    let mut b = m2.cache(cfg, &PLENTY);
    let mut toks = [0u32; 64];
    let (r, got, c2) = store
        .restore_grouped(&mut b, FP, &mut flash, &mut toks)
        .unwrap();
    assert_eq!((got, c2), (h, commit));
    for i in 0..M.min(8) {
        assert_eq!(step(&mut b, r), step(&mut a, s), "step {i}");
    }
    // A `KvCache`'s store restore meets a grouped image: refused as such, not skipped as damage.
    let one = CacheConfig::new(SHAPE).with_page_tokens(P as u16);
    let mut m3 = Mem::for_pages(&one, &[32]);
    let mut k = m3.cache(one, &[32]);
    let kv = k.caches[0].as_mut().unwrap();
    assert_eq!(
        store.restore(kv, FP, &mut flash, &mut toks).map(drop),
        Err(SnapshotError::GroupedImage)
    );
}
