//! Snapshots: round trips across caches, every failure class refused with the cache unchanged,
//! and every single-bit flip of an image detected.

use edgekv::attention::AttentionParams;
use edgekv::snapshot::{HEADER_BYTES, Header, RamFlash, SliceFlash, SnapshotError};
use edgekv::{
    CacheConfig, ConfigError, ElementFormat, Error, HeapArenas, Kv, KvCache, Rotation, SeqId,
    SeqMode, Shape, Stats,
};
use embedded_storage::nor_flash::{ErrorType, NorFlashErrorKind, ReadNorFlash};

const SHAPE: Shape = Shape {
    layers: 2,
    kv_heads: 2,
    head_dim: 32,
};
const ROW: usize = 64;
const FINGERPRINT: u64 = 0x5EED_CAFE_F00D_0001;

fn arenas(cfg: &CacheConfig, pages: usize) -> HeapArenas {
    HeapArenas::for_pages::<edgekv::FreeList>(cfg, pages).unwrap()
}

fn cache(a: &mut HeapArenas, cfg: CacheConfig) -> KvCache<'_> {
    a.cache(cfg).unwrap()
}

fn config(k: ElementFormat, v: ElementFormat) -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(8)
        .with_formats(k, v)
        .with_sequences(4, 128)
}

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

fn tokens(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| 1000 + i * 7 % 513).collect()
}

/// A sequence of `n` tokens with K/V rows in every layer.
fn filled(cache: &mut KvCache<'_>, n: u32) -> SeqId {
    let seq = cache.create_sequence(SeqMode::Paged).unwrap();
    cache.reserve(seq, n).unwrap();
    for layer in 0..SHAPE.layers {
        for kv in [Kv::K, Kv::V] {
            let rows = values(layer as u64 * 2 + kv as u64, n as usize * ROW);
            cache.write(seq, layer, kv, 0, &rows).unwrap();
        }
    }
    seq
}

/// Every stored row and an attention output of every layer, as bits.
fn fingerprint_of(cache: &KvCache<'_>, seq: SeqId) -> Vec<u32> {
    let n = cache.seq_len(seq).unwrap();
    let mut bits = Vec::new();
    let params = AttentionParams::new(SHAPE, 4);
    let mut scratch = vec![0f32; cache.config().scratch_len(4, 1)];
    for layer in 0..SHAPE.layers {
        for kv in [Kv::K, Kv::V] {
            let mut rows = vec![0f32; n as usize * ROW];
            cache.read(seq, layer, kv, 0, &mut rows).unwrap();
            bits.extend(rows.iter().map(|v| v.to_bits()));
        }
        let q = values(99 + layer as u64, 4 * 32);
        let mut out = vec![0f32; 4 * 32];
        cache
            .attention(seq, layer, n - 1, &q, &mut out, &params, &mut scratch)
            .unwrap();
        bits.extend(out.iter().map(|v| v.to_bits()));
    }
    bits
}

/// Snapshot of a 21-token sequence in a fresh cache, as image bytes.
fn image_of(cfg: CacheConfig, n: u32) -> Vec<u8> {
    let mut a = arenas(&cfg, 16);
    let mut c = cache(&mut a, cfg);
    let seq = filled(&mut c, n);
    let mut mem = vec![0u8; 64 * 1024];
    let mut flash = RamFlash::<16, 4096>::new(&mut mem);
    let h = c
        .snapshot(seq, &tokens(n as usize), FINGERPRINT, &mut flash, 0)
        .unwrap();
    mem[..h.image as usize].to_vec()
}

const FORMATS: [(ElementFormat, ElementFormat); 5] = [
    (ElementFormat::F32, ElementFormat::F16),
    (ElementFormat::Q8_0, ElementFormat::Int8 { group: 32 }),
    (
        ElementFormat::Fp8Tile {
            dv: 16,
            tile: 16,
            bf16: true,
        },
        ElementFormat::Bf16,
    ),
    (ElementFormat::Int8 { group: 16 }, ElementFormat::Q8_0),
    (ElementFormat::Q4_1, ElementFormat::Q4_0),
];

/// The rotation of each half is in the header (byte 1 of its format entry, at 24 and 32):
/// encoded, decoded, and a value past the known ones is damage.
#[test]
fn header_carries_the_rotations() {
    let cfg = config(ElementFormat::Q4_0, ElementFormat::Q4_1)
        .with_rotations(Rotation::SignedHadamard, Rotation::Hadamard);
    let h = Header::new(&cfg, 21, 7).unwrap();
    let b = h.encode();
    assert_eq!((b[25], b[33]), (2, 1));
    // Version 2: earlier readers refuse it as a version, not as damage.
    assert_eq!(
        u16::from_le_bytes([b[4], b[5]]),
        edgekv::snapshot::VERSION_2
    );
    assert_eq!(h.version(), 2);
    // Without 4-bit pages or rotations: version 1, as before.
    let old = Header::new(&config(ElementFormat::Q8_0, ElementFormat::F16), 21, 7).unwrap();
    assert_eq!((old.version(), old.encode()[4]), (1, 1));
    // A version-1 header claiming a rotation is damage.
    let mut d = b;
    d[4] = 1;
    assert_eq!(Header::decode(&d), Err(SnapshotError::CorruptSnapshot));
    let back = Header::decode(&b).unwrap();
    assert_eq!(back, h);
    assert_eq!(
        (back.k_rotation, back.v_rotation),
        (Rotation::SignedHadamard, Rotation::Hadamard)
    );
    assert!(h.matches(&cfg));
    assert!(!h.matches(&cfg.with_rotations(Rotation::SignedHadamard, Rotation::None)));
    for (at, bad) in [(25, 3u8), (33, 0xFF)] {
        let mut d = b;
        d[at] = bad;
        assert_eq!(Header::decode(&d), Err(SnapshotError::CorruptSnapshot));
    }
}

#[test]
fn restore_reproduces_every_bit_in_another_cache() {
    // Under Miri (slow): one quantized pair.
    let formats = if cfg!(miri) {
        &FORMATS[1..2]
    } else {
        &FORMATS[..]
    };
    for &(k, v) in formats {
        let cfg = config(k, v);
        let mut a = arenas(&cfg, 16);
        let mut src = cache(&mut a, cfg);
        let _other = filled(&mut src, 5); // the snapshotted pages are not the first ones
        let seq = filled(&mut src, 21);
        let want = fingerprint_of(&src, seq);

        let mut mem = vec![0xA5u8; 64 * 1024];
        let mut flash = RamFlash::<16, 4096>::new(&mut mem);
        let toks = tokens(21);
        let h = src
            .snapshot(seq, &toks, FINGERPRINT, &mut flash, 8192)
            .unwrap();
        assert_eq!((h.tokens, h.pages), (21, 3));
        assert_eq!(
            h.image as usize,
            HEADER_BYTES + 4 * 21 + h.payload as usize + 4
        );
        assert_eq!(flash.erases, 1);
        assert_eq!(flash.writes as usize, (h.image as usize).div_ceil(16));
        assert_eq!(&mem[..8192], &[0xA5; 8192][..], "nothing before the offset");
        let end = 8192 + (h.image as usize).div_ceil(4096) * 4096;
        assert!(mem[8192 + h.image as usize..end].iter().all(|&b| b == 0xFF));
        assert!(
            mem[end..].iter().all(|&b| b == 0xA5),
            "nothing after the erased sectors"
        );

        // A cache with another alignment and pool size restores it bit for bit.
        let cfg2 = cfg.with_align(128);
        let mut b = arenas(&cfg2, 7);
        let mut dst = cache(&mut b, cfg2);
        let mut got = vec![0u32; 32];
        let (restored, h2) = dst
            .restore(&mut SliceFlash(&mem), 8192, FINGERPRINT, &mut got)
            .unwrap();
        assert_eq!(h2, h);
        assert_eq!(&got[..21], &toks[..]);
        assert_eq!(fingerprint_of(&dst, restored), want, "{k:?}/{v:?}");
        // Its whole pages were published: a prompt starting with these tokens reuses them.
        let mut prompt = toks.clone();
        prompt.extend([5, 6, 7]);
        assert_eq!(dst.lookup(&prompt).unwrap().tokens, 16);
        let mut scratch = [0u16; 64];
        dst.check_invariants(&mut scratch).unwrap();
    }
}

/// A flash readable only in aligned 8-byte units.
struct Coarse<'a>(&'a [u8]);

impl ErrorType for Coarse<'_> {
    type Error = NorFlashErrorKind;
}

impl ReadNorFlash for Coarse<'_> {
    const READ_SIZE: usize = 8;
    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        embedded_storage::nor_flash::check_read(self, offset, bytes.len())?;
        bytes.copy_from_slice(&self.0[offset as usize..][..bytes.len()]);
        Ok(())
    }
    fn capacity(&self) -> usize {
        self.0.len()
    }
}

#[test]
fn restore_reads_coarse_flash_at_any_offset() {
    let cfg = config(ElementFormat::Q8_0, ElementFormat::Q8_0);
    let image = image_of(cfg, 13);
    let mut mem = vec![0u8; 3 + image.len()];
    mem[3..].copy_from_slice(&image);
    mem.resize(mem.len().div_ceil(8) * 8, 0);
    let mut a = arenas(&cfg, 8);
    let mut c = cache(&mut a, cfg);
    let mut toks = [0u32; 13];
    let (seq, _) = c
        .restore(&mut Coarse(&mem), 3, FINGERPRINT, &mut toks)
        .unwrap();
    assert_eq!(c.seq_len(seq), Ok(13));
    assert_eq!(&toks[..], &tokens(13)[..]);
}

/// Everything observable about the pool and sequences.
fn state(c: &KvCache<'_>) -> (Stats, usize, usize) {
    (c.stats(), c.pool().free_pages(), c.pool().cached_pages())
}

#[test]
fn bad_images_are_refused_with_the_cache_unchanged() {
    let cfg = config(ElementFormat::Q8_0, ElementFormat::F16);
    let image = image_of(cfg, 21);
    let mut a = arenas(&cfg, 8);
    let mut c = cache(&mut a, cfg);
    // Some history: a live sequence and published, cached pages.
    let live = filled(&mut c, 9);
    let old = filled(&mut c, 16);
    c.commit_prompt(old, &tokens(16)).unwrap();
    c.free_sequence(old).unwrap();
    let before = state(&c);
    let live_bits = fingerprint_of(&c, live);

    let patched = |at: usize, byte: u8| {
        let mut im = image.clone();
        im[at] = byte;
        im
    };
    let mut toks = [0u32; 64];
    let cases: Vec<(&str, Vec<u8>, u64, CacheConfig, SnapshotError)> = vec![
        ("empty", vec![], FINGERPRINT, cfg, SnapshotError::Truncated),
        (
            "header cut",
            image[..40].to_vec(),
            FINGERPRINT,
            cfg,
            SnapshotError::Truncated,
        ),
        (
            "payload cut",
            image[..image.len() - 5].to_vec(),
            FINGERPRINT,
            cfg,
            SnapshotError::Truncated,
        ),
        (
            "magic",
            patched(0, b'X'),
            FINGERPRINT,
            cfg,
            SnapshotError::BadMagic,
        ),
        (
            "version",
            patched(4, 9),
            FINGERPRINT,
            cfg,
            SnapshotError::UnsupportedVersion,
        ),
        (
            "version 3 (a grouped image's)",
            patched(4, 3),
            FINGERPRINT,
            cfg,
            SnapshotError::GroupedImage,
        ),
        (
            "token count",
            patched(40, 22),
            FINGERPRINT,
            cfg,
            SnapshotError::CorruptSnapshot,
        ),
        (
            "format code",
            patched(24, 9),
            FINGERPRINT,
            cfg,
            SnapshotError::CorruptSnapshot,
        ),
        (
            "payload bit",
            patched(HEADER_BYTES + 200, image[HEADER_BYTES + 200] ^ 1),
            FINGERPRINT,
            cfg,
            SnapshotError::CrcMismatch,
        ),
        (
            "fingerprint",
            image.clone(),
            FINGERPRINT ^ 1,
            cfg,
            SnapshotError::FingerprintMismatch,
        ),
    ];
    for (what, im, fp, _, err) in &cases {
        let got = c.restore(&mut SliceFlash(im), 0, *fp, &mut toks);
        assert_eq!(got.map(|r| r.1), Err(*err), "{what}");
        assert_eq!(state(&c), before, "{what}");
    }

    // Another shape / format / page size: each its own cache.
    let others = [
        ("format", config(ElementFormat::Q8_0, ElementFormat::F32)),
        (
            "rotation",
            config(ElementFormat::Q8_0, ElementFormat::F16)
                .with_rotations(Rotation::None, Rotation::Hadamard),
        ),
        (
            "page size",
            config(ElementFormat::Q8_0, ElementFormat::F16).with_page_tokens(16),
        ),
        (
            "shape",
            CacheConfig::new(Shape { layers: 3, ..SHAPE })
                .with_page_tokens(8)
                .with_formats(ElementFormat::Q8_0, ElementFormat::F16),
        ),
    ];
    for (what, other) in others {
        let mut b = arenas(&other, 8);
        let mut d = cache(&mut b, other);
        let before = state(&d);
        let got = d.restore(&mut SliceFlash(&image), 0, FINGERPRINT, &mut toks);
        assert_eq!(
            got.map(|r| r.1),
            Err(SnapshotError::ConfigMismatch),
            "{what}"
        );
        assert_eq!(state(&d), before);
    }

    // Valid image, but no room: of 8 pages `live` holds 2, the hog 4, 2 are cached; 3 needed.
    let _hog = filled(&mut c, 32);
    let before = state(&c);
    assert_eq!(
        c.restore(&mut SliceFlash(&image), 0, FINGERPRINT, &mut toks)
            .map(|r| r.1),
        Err(SnapshotError::Cache(Error::OutOfPages))
    );
    assert_eq!(state(&c), before);
    // Token buffer too short.
    assert_eq!(
        c.restore(&mut SliceFlash(&image), 0, FINGERPRINT, &mut toks[..20])
            .map(|r| r.1),
        Err(SnapshotError::Cache(Error::LengthMismatch))
    );
    assert_eq!(state(&c), before);
    assert_eq!(fingerprint_of(&c, live), live_bits);
    let mut scratch = [0u16; 64];
    c.check_invariants(&mut scratch).unwrap();
}

#[test]
fn snapshot_refuses_bad_requests_before_erasing() {
    let cfg = config(ElementFormat::Q8_0, ElementFormat::Q8_0);
    let mut a = arenas(&cfg, 16);
    let mut c = cache(&mut a, cfg);
    let seq = filled(&mut c, 30);
    let toks = tokens(30);
    let mut mem = vec![0u8; 8192];
    let mut flash = RamFlash::<16, 4096>::new(&mut mem);
    let cases = [
        (
            "tokens",
            c.snapshot(seq, &toks[1..], 0, &mut flash, 0),
            SnapshotError::Cache(Error::LengthMismatch),
        ),
        (
            "unaligned offset",
            c.snapshot(seq, &toks, 0, &mut flash, 16),
            SnapshotError::FlashBounds,
        ),
        (
            "past the end",
            c.snapshot(seq, &toks, 0, &mut flash, 8192),
            SnapshotError::FlashBounds,
        ),
    ];
    for (what, got, err) in cases {
        assert_eq!(got.map(|h| h.image), Err(err), "{what}");
    }
    let mut small = vec![0u8; 4096];
    let mut tiny = RamFlash::<16, 4096>::new(&mut small);
    assert_eq!(
        c.snapshot(seq, &toks, 0, &mut tiny, 0).map(|h| h.image),
        Err(SnapshotError::FlashBounds),
        "image larger than the flash"
    );
    let mut wide = vec![0u8; 65536];
    let mut wide = RamFlash::<512, 4096>::new(&mut wide);
    assert_eq!(
        c.snapshot(seq, &toks, 0, &mut wide, 0).map(|h| h.image),
        Err(SnapshotError::FlashBounds),
        "write size above 256"
    );
    assert_eq!((flash.erases, tiny.erases, wide.erases), (0, 0, 0));
    let freed = c.create_sequence(SeqMode::Paged).unwrap();
    c.free_sequence(freed).unwrap();
    assert_eq!(
        c.snapshot(freed, &[], 0, &mut flash, 0).map(|h| h.image),
        Err(SnapshotError::Cache(Error::UnknownSequence))
    );
    // A sequence with released pages cannot be saved.
    let w = edgekv::attention::Window {
        sinks: 4,
        window: 8,
    };
    c.slide(seq, &w, 29).unwrap();
    assert_eq!(
        c.snapshot(seq, &toks, 0, &mut flash, 0).map(|h| h.image),
        Err(SnapshotError::WindowedSequence)
    );
}

#[test]
fn every_single_bit_flip_of_a_4k_image_is_detected() {
    let cfg = config(ElementFormat::F32, ElementFormat::Q8_0);
    let image = image_of(cfg, 8); // one page: 5284 bytes
    assert!(image.len() >= 4096, "image of {} bytes", image.len());
    let mut a = arenas(&cfg, 8);
    let mut c = cache(&mut a, cfg);
    let before = state(&c);
    let mut toks = [0u32; 64];
    // Under Miri a sample of the bits; natively all of them.
    let step = if cfg!(miri) { 997 } else { 1 };
    let mut flipped = image.clone();
    let mut tried = 0;
    for bit in (0..image.len() * 8).step_by(step) {
        flipped[bit / 8] ^= 1 << (bit % 8);
        let got = c.restore(&mut SliceFlash(&flipped), 0, FINGERPRINT, &mut toks);
        assert!(got.is_err(), "flip of bit {bit} went unnoticed");
        flipped[bit / 8] ^= 1 << (bit % 8);
        tried += 1;
    }
    assert!(tried >= if cfg!(miri) { 32 } else { 4096 * 8 });
    assert_eq!(state(&c), before);
    // The unflipped image restores.
    let (seq, h) = c
        .restore(&mut SliceFlash(&image), 0, FINGERPRINT, &mut toks)
        .unwrap();
    assert_eq!(c.seq_len(seq), Ok(h.tokens));
}

#[test]
fn header_round_trips_and_rejects_inconsistency() {
    let cfg = config(ElementFormat::Q8_0, ElementFormat::F16);
    let h = Header::new(&cfg, 21, 7).unwrap();
    assert_eq!(Header::decode(&h.encode()), Ok(h));
    assert!(h.matches(&cfg));
    let mut b = h.encode();
    b[48] ^= 4; // payload size
    assert_eq!(Header::decode(&b), Err(SnapshotError::CorruptSnapshot));
    let mut b = h.encode();
    b[60] = 1; // reserved
    assert_eq!(Header::decode(&b), Err(SnapshotError::CorruptSnapshot));
}

#[test]
fn a_header_claiming_a_huge_shape_is_corrupt_not_a_panic() {
    // Found by fuzzing (snapshot_parse): sizes of a damaged header overflowed u64.
    let mut b = Header::new(&config(ElementFormat::Q8_0, ElementFormat::F16), 21, 7)
        .unwrap()
        .encode();
    for at in [16, 18, 20, 22] {
        b[at..at + 2].copy_from_slice(&0xFFFFu16.to_le_bytes());
    }
    assert_eq!(Header::decode(&b), Err(SnapshotError::CorruptSnapshot));
    let shape = Shape {
        layers: u16::MAX,
        kv_heads: u16::MAX,
        head_dim: u16::MAX,
    };
    let huge = CacheConfig::new(shape).with_page_tokens(1 << 15);
    assert!(matches!(
        Header::new(&huge, u32::MAX, 0),
        Err(ConfigError::Overflow | ConfigError::InvalidFormat | ConfigError::ZeroSize)
    ));
}
