//! Arbitrary bytes restored as a snapshot image (seeded with the parity system prompt's image).
//! Restore must never panic; on success, snapshotting the restored sequence reproduces the
//! image's bytes; on failure the cache is unchanged.
#![no_main]

use edgekv::snapshot::{RamFlash, SliceFlash};
use edgekv::{FreeList, HeapArena, KvCache, META_ALIGN, PageAllocator};
use edgekv_parity::Case;
use edgekv_parity::snapshot::FINGERPRINT;
use libfuzzer_sys::fuzz_target;

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
});
