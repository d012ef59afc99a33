//! Saves cut by power loss at any operation (torn as NOR flash tears), bit flips and restores on
//! a two-slot snapshot store, checked against a model: with no flip since the last save a restore
//! gives the last committed image (or, after a cut save, possibly the new one) bit for bit; after
//! flips it gives some image that was committed, or `NoImage` — never other data, never a panic,
//! and a failed restore leaves the cache unchanged.
#![no_main]

use arbitrary::Arbitrary;
use edgekv::snapshot::{PowerCutFlash, SnapshotError, SnapshotStore};
use edgekv::{CacheConfig, ElementFormat, FreeList, HeapArenas, Kv, KvCache, SeqMode, Shape};
use libfuzzer_sys::fuzz_target;

const SHAPE: Shape = Shape {
    layers: 1,
    kv_heads: 1,
    head_dim: 32,
};
const WRITE: usize = 8;
const SECTOR: usize = 1024;
/// Two sectors: up to 16 tokens fit.
const SLOT: u32 = 2 * SECTOR as u32;
const FINGERPRINT: u64 = 0xF022_5702_E000_0001;

#[derive(Arbitrary, Debug)]
enum Op {
    /// Saves an image of `1 + tokens % 16` tokens whose values come from `seed`, the power cut
    /// at operation `cut` (if any), torn as `tear` says.
    Save {
        seed: u8,
        tokens: u8,
        cut: Option<u16>,
        tear: u64,
    },
    /// XORs `mask` into byte `at` of the region (damage while the power is off).
    Flip { at: u16, mask: u8 },
    /// Restores into a fresh cache and checks the result.
    Restore,
}

/// An image's identity: (seed, tokens).
type Image = (u8, u32);

fn config() -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(8)
        .with_formats(ElementFormat::F16, ElementFormat::Q8_0)
        .with_sequences(2, 16)
}

fn tokens((seed, n): Image) -> Vec<u32> {
    (0..n).map(|i| u32::from(seed) * 1000 + i).collect()
}

fn filled(cache: &mut KvCache<'_>, (seed, n): Image) -> edgekv::SeqId {
    let seq = cache.create_sequence(SeqMode::Paged).unwrap();
    cache.reserve(seq, n).unwrap();
    for kv in [Kv::K, Kv::V] {
        let rows: Vec<f32> = (0..n as usize * 32)
            .map(|i| ((i * 31 + usize::from(seed) * 7 + kv as usize) % 97) as f32 / 8.0 - 6.0)
            .collect();
        cache.write(seq, 0, kv, 0, &rows).unwrap();
    }
    seq
}

fn rows(cache: &KvCache<'_>, seq: edgekv::SeqId) -> Vec<u32> {
    let n = cache.seq_len(seq).unwrap() as usize;
    let mut out = Vec::new();
    for kv in [Kv::K, Kv::V] {
        let mut r = vec![0f32; n * 32];
        cache.read(seq, 0, kv, 0, &mut r).unwrap();
        out.extend(r.iter().map(|v| v.to_bits()));
    }
    out
}

/// The tokens and rows image `img` restores to.
fn expected(img: Image) -> (Vec<u32>, Vec<u32>) {
    let mut a = HeapArenas::for_pages::<FreeList>(&config(), 4).unwrap();
    let mut cache: KvCache = a.cache(config()).unwrap();
    let seq = filled(&mut cache, img);
    (tokens(img), rows(&cache, seq))
}

fuzz_target!(|ops: Vec<Op>| {
    let store = SnapshotStore::new(0, SLOT, 2).unwrap();
    let mut mem = vec![0xFFu8; 2 * SLOT as usize];
    // Every image ever committed (or possibly committed by a cut save), those the next restore
    // may give while nothing was flipped, and whether one of those was surely committed (a save
    // that returned `Ok`; a cut save may or may not have committed).
    let mut committed: Vec<Image> = Vec::new();
    let mut acceptable: Vec<Image> = Vec::new();
    let mut sure = false;
    let mut flipped = false;
    for op in ops.into_iter().take(24) {
        match op {
            Op::Save {
                seed,
                tokens: t,
                cut,
                tear,
            } => {
                let img = (seed, 1 + u32::from(t % 16));
                let mut a = HeapArenas::for_pages::<FreeList>(&config(), 4).unwrap();
                let mut cache: KvCache = a.cache(config()).unwrap();
                let seq = filled(&mut cache, img);
                let mut flash = PowerCutFlash::<WRITE, SECTOR>::new(&mut mem);
                flash.cut_at(cut.map(u32::from), tear);
                match store.save(&cache, seq, &tokens(img), FINGERPRINT, &mut flash) {
                    Ok(_) => {
                        acceptable = vec![img];
                        sure = true;
                    }
                    Err(SnapshotError::Flash(_)) if cut.is_some() => acceptable.push(img),
                    // A damaged newest record can make the sequence number overflow.
                    Err(SnapshotError::CorruptSnapshot) if flipped => {}
                    Err(e) => panic!("save without a cut failed: {e}"),
                }
                committed.push(img);
            }
            Op::Flip { at, mask } => {
                let len = mem.len();
                mem[usize::from(at) % len] ^= mask;
                flipped |= mask != 0;
            }
            Op::Restore => {
                let mut a = HeapArenas::for_pages::<FreeList>(&config(), 4).unwrap();
                let mut cache: KvCache = a.cache(config()).unwrap();
                let before = cache.stats();
                let mut flash = PowerCutFlash::<WRITE, SECTOR>::new(&mut mem);
                let mut toks = vec![0u32; 16];
                match store.restore(&mut cache, FINGERPRINT, &mut flash, &mut toks) {
                    Ok((seq, header, _)) => {
                        toks.truncate(header.tokens as usize);
                        let got = (toks, rows(&cache, seq));
                        let pool = if flipped { &committed } else { &acceptable };
                        assert!(
                            pool.iter().any(|&img| expected(img) == got),
                            "restored data that was never committed"
                        );
                    }
                    Err(e) => {
                        assert_eq!(e, SnapshotError::NoImage);
                        assert!(flipped || !sure, "lost a committed image");
                        assert_eq!(cache.stats(), before);
                    }
                }
            }
        }
    }
});
