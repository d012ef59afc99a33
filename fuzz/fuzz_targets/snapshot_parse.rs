//! Arbitrary bytes restored as a snapshot image, twice: into a `KvCache` of the parity system
//! prompt's configuration (seeded with its image), and into a `GroupedCache` of three layer
//! groups, two of them windowed (seeded with grouped images of `grouped_config`: a sequence of
//! 3 positions, and ones of 13 and 29 that outgrew both windows, written by
//! `GroupedCache::snapshot` position by position). Restore must never panic; on success,
//! snapshotting the restored sequence reproduces the image's bytes (and the restored grouped
//! sequence takes one more position in every layer); on failure the cache is unchanged.
#![no_main]

use edgekv::attention::AttentionParams;
use edgekv::snapshot::{RamFlash, SliceFlash};
use edgekv::{
    CacheConfig, ElementFormat, FreeList, GroupWindow, GroupedCache, HeapArena, KvCache,
    LayerGroup, Layers, META_ALIGN, PageAllocator, Shape,
};
use edgekv_parity::Case;
use edgekv_parity::snapshot::FINGERPRINT;
use libfuzzer_sys::fuzz_target;

const GROUPED_SHAPE: Shape = Shape {
    layers: 4,
    kv_heads: 1,
    head_dim: 32,
};

/// Layers 0 and 2: window 8 with a rollback of 2, q8_0. Layer 1: global, f16. Layer 3: window
/// 6 with 2 sinks, f32.
fn grouped_config() -> CacheConfig {
    CacheConfig::new(GROUPED_SHAPE)
        .with_page_tokens(4)
        .with_sequences(2, 64)
        .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0)
        .with_window(GroupWindow {
            window: 8,
            sinks: 0,
            rollback: 2,
        })
        .with_group(
            LayerGroup::new(Layers::Run { first: 1, count: 1 })
                .with_formats(ElementFormat::F16, ElementFormat::F16),
        )
        .with_group(
            LayerGroup::new(Layers::Every {
                period: 4,
                first: 3,
            })
            .with_window(GroupWindow::new(6, 2)),
        )
}

/// A grouped cache's observable state: every group's stats.
fn grouped_state(cache: &GroupedCache<'_>) -> Vec<edgekv::Stats> {
    (0..cache.group_count())
        .map(|g| cache.group(g).unwrap().stats())
        .collect()
}

fn restore_grouped(data: &[u8]) {
    let cfg = grouped_config();
    let pages = [20, 20, 20];
    let plan = GroupedCache::<FreeList>::plan_pages(&cfg, &pages).unwrap();
    let mut d = HeapArena::new(plan.data_bytes, cfg.align).unwrap();
    let mut m = HeapArena::new(plan.meta_bytes, META_ALIGN).unwrap();
    let mut cache: GroupedCache =
        GroupedCache::with_pages(cfg, &pages, d.as_uninit_mut(), m.as_uninit_mut()).unwrap();
    let before = grouped_state(&cache);
    let mut tokens = vec![0u32; 64];
    let mut scratch = [0u16; 64];
    match cache.restore(&mut SliceFlash(data), 0, FINGERPRINT, &mut tokens) {
        Ok((seq, header)) => {
            let n = header.tokens as usize;
            let mut mem = vec![0u8; (header.image as usize).div_ceil(4096) * 4096];
            let mut flash = RamFlash::<4, 4096>::new(&mut mem);
            let again = cache
                .snapshot(seq, &tokens[..n], FINGERPRINT, &mut flash, 0)
                .unwrap();
            assert_eq!(again, header);
            let len = header.image as usize;
            assert_eq!(
                &mem[..len],
                &data[..len],
                "grouped restore then snapshot is the identity"
            );
            cache.check_invariants(&mut scratch).unwrap();
            // The restored sequence continues: one more position in every layer, attended.
            if cache.reserve(seq, 1).is_ok() {
                let t = header.tokens;
                let row = [0.5f32; 32];
                let params = AttentionParams::new(GROUPED_SHAPE, 1);
                let mut work = vec![0f32; cache.scratch_len(1)];
                let mut out = [0f32; 32];
                for layer in 0..GROUPED_SHAPE.layers {
                    cache.write_kv(seq, layer, t, &row, &row).unwrap();
                    cache
                        .attention(seq, layer, t, &row, &mut out, &params, &mut work)
                        .unwrap();
                }
                cache.check_invariants(&mut scratch).unwrap();
            }
        }
        Err(_) => {
            assert_eq!(grouped_state(&cache), before);
            cache.check_invariants(&mut scratch).unwrap();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let cfg = Case::SnapshotCold.config();
    let plan = cfg
        .plan_pages(4, <FreeList as PageAllocator>::META_BITS_PER_PAGE)
        .unwrap();
    let mut d = HeapArena::new(plan.data_bytes, cfg.align).unwrap();
    let mut m = HeapArena::new(plan.meta.total, META_ALIGN).unwrap();
    let mut cache: KvCache = KvCache::new(cfg, d.as_uninit_mut(), m.as_uninit_mut()).unwrap();
    let before = cache.stats();
    let mut tokens = vec![0u32; 64];
    match cache.restore(&mut SliceFlash(data), 0, FINGERPRINT, &mut tokens) {
        Ok((seq, header)) => {
            let n = header.tokens as usize;
            let mut mem = vec![0u8; (header.image as usize).div_ceil(4096) * 4096];
            let mut flash = RamFlash::<4, 4096>::new(&mut mem);
            let again = cache
                .snapshot(seq, &tokens[..n], FINGERPRINT, &mut flash, 0)
                .unwrap();
            assert_eq!(again, header);
            let len = header.image as usize;
            assert_eq!(
                &mem[..len],
                &data[..len],
                "restore then snapshot is the identity"
            );
        }
        Err(_) => {
            assert_eq!(cache.stats(), before);
            let mut scratch = [0u16; 64];
            cache.check_invariants(&mut scratch).unwrap();
        }
    }
    restore_grouped(data);
});
