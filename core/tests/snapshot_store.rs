//! The snapshot store against power loss: a save cut after every erase or program operation
//! (the cut operation torn as NOR flash tears it) always leaves the last committed image
//! restorable, bit for bit; damaged images and records fall back to older ones; writes rotate
//! over the slots; bad geometry is refused.

use edgekv::snapshot::{Commit, PowerCutFlash, RamFlash, SnapshotError, SnapshotStore};
use edgekv::{CacheConfig, ElementFormat, HeapArenas, Kv, KvCache, SeqId, SeqMode, Shape};
use embedded_storage::nor_flash::NorFlashErrorKind;

const SHAPE: Shape = Shape {
    layers: 2,
    kv_heads: 2,
    head_dim: 32,
};
const ROW: usize = 64;
const FINGERPRINT: u64 = 0x5EED_CAFE_F00D_0002;
const WRITE: usize = 16;
const SECTOR: usize = 4096;
/// Two slots of four sectors.
const SLOT: u32 = 4 * SECTOR as u32;
const REGION: usize = 2 * SLOT as usize;

fn config() -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(8)
        .with_formats(ElementFormat::F16, ElementFormat::Q8_0)
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

fn tokens(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| seed * 100 + i).collect()
}

/// A sequence of `n` tokens whose rows depend on `seed`.
fn filled(cache: &mut KvCache<'_>, seed: u64, n: u32) -> SeqId {
    let seq = cache.create_sequence(SeqMode::Paged).unwrap();
    cache.reserve(seq, n).unwrap();
    for layer in 0..SHAPE.layers {
        for kv in [Kv::K, Kv::V] {
            let rows = values(seed * 16 + layer as u64 * 2 + kv as u64, n as usize * ROW);
            cache.write(seq, layer, kv, 0, &rows).unwrap();
        }
    }
    seq
}

/// Every stored row of `seq`, as bits.
fn rows_of(cache: &KvCache<'_>, seq: SeqId) -> Vec<u32> {
    let n = cache.seq_len(seq).unwrap() as usize;
    let mut bits = Vec::new();
    for layer in 0..SHAPE.layers {
        for kv in [Kv::K, Kv::V] {
            let mut rows = vec![0f32; n * ROW];
            cache.read(seq, layer, kv, 0, &mut rows).unwrap();
            bits.extend(rows.iter().map(|v| v.to_bits()));
        }
    }
    bits
}

/// A committed image of sequence `seed` (`n` tokens) in `mem`, saved through `store`.
fn save(mem: &mut [u8], store: &SnapshotStore, seed: u64, n: u32) -> Commit {
    let cfg = config();
    let mut a = HeapArenas::for_pages::<edgekv::FreeList>(&cfg, 16).unwrap();
    let mut cache: KvCache = a.cache(cfg).unwrap();
    let seq = filled(&mut cache, seed, n);
    let mut flash = RamFlash::<WRITE, SECTOR>::new(mem);
    let (_, commit) = store
        .save(
            &cache,
            seq,
            &tokens(seed as u32, n as usize),
            FINGERPRINT,
            &mut flash,
        )
        .unwrap();
    commit
}

/// What a fresh cache restores from `mem`: the tokens and rows, with the commit.
fn restored(
    mem: &mut [u8],
    store: &SnapshotStore,
) -> Result<(Vec<u32>, Vec<u32>, Commit), SnapshotError> {
    let cfg = config();
    let mut a = HeapArenas::for_pages::<edgekv::FreeList>(&cfg, 16).unwrap();
    let mut cache: KvCache = a.cache(cfg).unwrap();
    let mut flash = RamFlash::<WRITE, SECTOR>::new(mem);
    let mut toks = vec![0u32; 128];
    let before = cache.stats();
    match store.restore(&mut cache, FINGERPRINT, &mut flash, &mut toks) {
        Ok((seq, header, commit)) => {
            toks.truncate(header.tokens as usize);
            Ok((toks, rows_of(&cache, seq), commit))
        }
        Err(e) => {
            assert_eq!(cache.stats(), before, "a failed restore changed the cache");
            Err(e)
        }
    }
}

/// The tokens and rows sequence `seed` of `n` tokens holds.
fn expected(seed: u64, n: u32) -> (Vec<u32>, Vec<u32>) {
    let cfg = config();
    let mut a = HeapArenas::for_pages::<edgekv::FreeList>(&cfg, 16).unwrap();
    let mut cache: KvCache = a.cache(cfg).unwrap();
    let seq = filled(&mut cache, seed, n);
    (tokens(seed as u32, n as usize), rows_of(&cache, seq))
}

#[test]
fn a_power_cut_at_every_operation_of_a_save_keeps_the_last_commit() {
    // Both slots committed: the save goes over the older image (slot 0), the newer (slot 1)
    // must survive every cut, and the older must never come back.
    let store = SnapshotStore::new(0, SLOT, 2).unwrap();
    let mut base = vec![0xFFu8; REGION];
    save(&mut base, &store, 1, 21);
    let old = save(&mut base, &store, 4, 25);
    assert_eq!(old.slot, 1);
    let old_data = expected(4, 25);
    let new_data = expected(2, 30);

    // The new image's save, uncut: how many operations it takes.
    let cfg = config();
    let mut a = HeapArenas::for_pages::<edgekv::FreeList>(&cfg, 16).unwrap();
    let mut cache: KvCache = a.cache(cfg).unwrap();
    let seq = filled(&mut cache, 2, 30);
    let toks = tokens(2, 30);
    let mut mem = base.clone();
    let mut flash = PowerCutFlash::<WRITE, SECTOR>::new(&mut mem);
    store
        .save(&cache, seq, &toks, FINGERPRINT, &mut flash)
        .unwrap();
    let total = flash.ops;
    assert!(
        total > 100,
        "a save of 30 tokens took only {total} operations"
    );

    let (mut kept, mut took_new) = (0, 0);
    for cut in 0..total {
        for tear in 0..2u64 {
            let mut mem = base.clone();
            let mut flash = PowerCutFlash::<WRITE, SECTOR>::new(&mut mem);
            flash.cut_at(Some(cut), u64::from(cut) << 8 | tear);
            let r = store.save(&cache, seq, &toks, FINGERPRINT, &mut flash);
            assert!(
                matches!(r, Err(SnapshotError::Flash(_))),
                "cut at {cut}: {r:?}"
            );
            // Power back: a fresh cache restores the last committed image, whole.
            let (t, rows, commit) = restored(&mut mem, &store)
                .unwrap_or_else(|e| panic!("cut at {cut}, tear {tear}: nothing restored: {e}"));
            if commit == old {
                assert_eq!((t, rows), old_data, "cut at {cut}: old image damaged");
                kept += 1;
            } else {
                // Only a cut inside the record's program can leave it intact (its bits were all
                // cleared before the cut): then it is the new image, whole.
                assert_eq!((t, rows), new_data, "cut at {cut}: new image incomplete");
                assert_eq!(cut, total - 1, "cut at {cut}: committed before the record");
                took_new += 1;
            }
        }
    }
    eprintln!(
        "{total} operations per save; cuts kept the old image {kept} times, the new {took_new}"
    );
    assert!(kept >= 2 * (total - 1), "kept {kept}, new {took_new}");
}

#[test]
fn saves_after_a_cut_commit_and_rotate_over_the_slots() {
    let store = SnapshotStore::new(SECTOR as u32, SLOT, 3).unwrap();
    let mut mem = vec![0xFFu8; SECTOR + 3 * SLOT as usize];
    let mut slots = Vec::new();
    for seed in 1..=7u64 {
        let c = save(&mut mem, &store, seed, 9 + seed as u32);
        assert_eq!(c.sequence, seed);
        slots.push(c.slot);
        let (t, rows, commit) = restored(&mut mem, &store).unwrap();
        assert_eq!(commit, c);
        assert_eq!((t, rows), expected(seed, 9 + seed as u32));
    }
    assert_eq!(slots, [0, 1, 2, 0, 1, 2, 0]);
    let mut flash = RamFlash::<WRITE, SECTOR>::new(&mut mem);
    assert_eq!(
        store.latest(&mut flash).unwrap().map(|c| c.sequence),
        Some(7)
    );
}

#[test]
fn damaged_images_and_records_fall_back_to_older_commits() {
    let store = SnapshotStore::new(0, SLOT, 2).unwrap();
    let mut mem = vec![0xFFu8; REGION];
    let first = save(&mut mem, &store, 1, 12);
    let second = save(&mut mem, &store, 2, 17);
    assert_eq!((first.slot, second.slot), (0, 1));

    // A bit flip inside the newest image: the older image is restored.
    let mut bad = mem.clone();
    bad[second.slot as usize * SLOT as usize + 100] ^= 0x10;
    let (t, rows, c) = restored(&mut bad, &store).unwrap();
    assert_eq!(c, first);
    assert_eq!((t, rows), expected(1, 12));

    // A bit flip in the newest record: the same.
    let mut bad = mem.clone();
    bad[2 * SLOT as usize - 20] ^= 0x01;
    assert_eq!(restored(&mut bad, &store).unwrap().2, first);

    // Both images damaged: nothing to restore, the cache unchanged.
    let mut bad = mem.clone();
    bad[100] ^= 0x10;
    bad[SLOT as usize + 100] ^= 0x10;
    assert_eq!(
        restored(&mut bad, &store).unwrap_err(),
        SnapshotError::NoImage
    );

    // An empty region.
    let mut empty = vec![0xFFu8; REGION];
    assert_eq!(
        restored(&mut empty, &store).unwrap_err(),
        SnapshotError::NoImage
    );

    // Another fingerprint is refused, not skipped.
    let cfg = config();
    let mut a = HeapArenas::for_pages::<edgekv::FreeList>(&cfg, 16).unwrap();
    let mut cache: KvCache = a.cache(cfg).unwrap();
    let mut flash = RamFlash::<WRITE, SECTOR>::new(&mut mem);
    let mut toks = vec![0u32; 64];
    assert_eq!(
        store
            .restore(&mut cache, FINGERPRINT ^ 1, &mut flash, &mut toks)
            .unwrap_err(),
        SnapshotError::FingerprintMismatch
    );
}

#[test]
fn bad_geometry_and_oversized_images_are_refused_without_a_write() {
    for (offset, slot, slots) in [
        (0, SLOT, 1),
        (0, 0, 2),
        (0, SLOT, 9),
        (u32::MAX - 10, SLOT, 2),
    ] {
        assert_eq!(
            SnapshotStore::new(offset, slot, slots),
            Err(SnapshotError::FlashBounds),
            "{offset} {slot} {slots}"
        );
    }
    let cfg = config();
    let mut a = HeapArenas::for_pages::<edgekv::FreeList>(&cfg, 16).unwrap();
    let mut cache: KvCache = a.cache(cfg).unwrap();
    let seq = filled(&mut cache, 3, 100);
    let toks = tokens(3, 100);
    let mut mem = vec![0xFFu8; REGION];
    for store in [
        // Misaligned offset and slot size; region past the flash.
        SnapshotStore::new(16, SLOT, 2).unwrap(),
        SnapshotStore::new(0, SLOT + 16, 2).unwrap(),
        SnapshotStore::new(0, SLOT, 3).unwrap(),
        // 100 tokens do not fit a slot of one sector.
        SnapshotStore::new(0, SECTOR as u32, 2).unwrap(),
    ] {
        let mut flash = RamFlash::<WRITE, SECTOR>::new(&mut mem);
        assert_eq!(
            store.save(&cache, seq, &toks, FINGERPRINT, &mut flash),
            Err(SnapshotError::FlashBounds)
        );
        assert_eq!((flash.erases, flash.writes), (0, 0));
    }
}

#[test]
fn a_read_error_at_every_read_of_a_restore_is_returned_with_the_cache_unchanged() {
    let store = SnapshotStore::new(0, SLOT, 2).unwrap();
    let mut mem = vec![0xFFu8; REGION];
    save(&mut mem, &store, 1, 12);
    save(&mut mem, &store, 2, 17);
    let cfg = config();
    let mut a = HeapArenas::for_pages::<edgekv::FreeList>(&cfg, 16).unwrap();
    let mut cache: KvCache = a.cache(cfg).unwrap();
    // A sequence already in the cache, so "unchanged" covers its pages too.
    let other = filled(&mut cache, 9, 5);
    let rows = rows_of(&cache, other);
    let before = cache.stats();
    let mut toks = vec![0u32; 64];
    let mut flash = PowerCutFlash::<WRITE, SECTOR>::new(&mut mem);
    let (seq, ..) = store
        .restore(&mut cache, FINGERPRINT, &mut flash, &mut toks)
        .unwrap();
    let total = flash.reads;
    cache.free_sequence(seq).unwrap();
    // The restored image's whole chunks stay published (cached) for reuse: that is the state
    // every failed restore below must leave as it is.
    assert_eq!(cache.stats().pages_used, before.pages_used);
    let before = cache.stats();
    assert!(before.pages_cached > 0);
    assert!(total > 50, "a restore took only {total} reads");
    for k in 0..total {
        flash.fail_read(Some(k));
        let r = store.restore(&mut cache, FINGERPRINT, &mut flash, &mut toks);
        assert_eq!(
            r.map(|(_, h, c)| (h, c)),
            Err(SnapshotError::Flash(NorFlashErrorKind::Other)),
            "read {k} of {total} failed"
        );
        assert_eq!(cache.stats(), before, "read {k}");
        assert_eq!(rows_of(&cache, other), rows, "read {k}");
        let mut scratch = [0u16; 64];
        cache.check_invariants(&mut scratch).unwrap();
    }
}
