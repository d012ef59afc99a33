//! The header's contract, call by call: a failed call writes none of its outputs (issue 22,
//! item 1), `reserve` secures the copy-on-write pages its positions need (item 2), sequence
//! handles are bound to their cache instance (item 3), one mistake gets one code (item 4).

use core::ffi::c_void;
use core::ptr::{null, null_mut};

use super::*;

#[repr(C, align(64))]
struct Aligned<const N: usize>([u8; N]);

const HEAD_DIM: usize = 4;
/// Floats of one token row (one KV head).
const ROW: usize = HEAD_DIM;

fn config() -> EkvConfig {
    let mut c = EkvConfig::default();
    // SAFETY: a valid, writable struct.
    let rc = unsafe { ekv_config_init(&mut c, 2, 1, HEAD_DIM as u16) };
    assert_eq!(rc, EKV_OK);
    c.page_tokens = 4;
    c.max_seqs = 4;
    c.max_seq_tokens = 32;
    c
}

/// Storage and arenas, held through raw pointers only (as C holds them).
struct Mem {
    cache: *mut EkvCache,
    data: *mut c_void,
    meta: *mut c_void,
}

impl Mem {
    fn new() -> Self {
        Mem {
            cache: Box::into_raw(Box::new(EkvCache {
                opaque: [0; EKV_CACHE_STORAGE_WORDS],
            })),
            data: Box::into_raw(Box::new(Aligned::<8192>([0; 8192]))).cast(),
            meta: Box::into_raw(Box::new(Aligned::<4096>([0; 4096]))).cast(),
        }
    }

    /// Creates a cache with `pages` pages (or as many as fit for `None`).
    fn create(&self, cfg: &EkvConfig, pages: Option<usize>) {
        let mut plan = EkvPlan::default();
        let data_bytes = match pages {
            // SAFETY: valid pointers.
            Some(n) => unsafe {
                assert_eq!(ekv_plan_pages(cfg, n, &mut plan), EKV_OK);
                plan.data_bytes
            },
            None => 8192,
        };
        let (cache, data, meta) = (self.cache, self.data, self.meta);
        // SAFETY: storage and arenas stay allocated until `drop`, after the destroy.
        let rc = unsafe { ekv_cache_create(cache, cfg, data, data_bytes, meta, 4096) };
        assert_eq!(rc, EKV_OK);
    }

    fn h(&self) -> *mut EkvCache {
        self.cache
    }

    fn seq(&self, n: u32) -> EkvSeq {
        let mut s = 0;
        // SAFETY: live cache, valid outputs.
        unsafe {
            assert_eq!(ekv_seq_create(self.h(), EKV_SEQ_PAGED, &mut s), EKV_OK);
            assert_eq!(ekv_seq_reserve(self.h(), s, n, null_mut()), EKV_OK);
        }
        s
    }

    fn write(&self, s: EkvSeq, start: u32, n: usize, base: f32) -> EkvStatus {
        let k: Vec<f32> = (0..n * ROW).map(|i| base + i as f32 * 0.5).collect();
        // SAFETY: live cache, valid buffers.
        unsafe {
            let mut rc = EKV_OK;
            for layer in 0..2 {
                rc = ekv_write_kv_f32(self.h(), s, layer, start, k.as_ptr(), k.as_ptr(), k.len());
                if rc != EKV_OK {
                    break;
                }
            }
            rc
        }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `new`; the cache is destroyed before its memory is
        // freed.
        unsafe {
            let _ = ekv_cache_destroy(self.cache);
            drop(Box::from_raw(self.cache));
            drop(Box::from_raw(self.data.cast::<Aligned<8192>>()));
            drop(Box::from_raw(self.meta.cast::<Aligned<4096>>()));
        }
    }
}

/// Succeeds `*ctx` times, then fails (a cache-maintenance callback).
unsafe extern "C" fn fail_after(ctx: *mut c_void, _: *mut c_void, _: usize) -> i32 {
    // SAFETY: ctx is the test's counter.
    let left = unsafe { &mut *ctx.cast::<usize>() };
    if *left == 0 {
        return 3;
    }
    *left -= 1;
    0
}

fn failing(ctx: *mut usize) -> EkvMaintenance {
    EkvMaintenance {
        ctx: ctx.cast(),
        line_size: 32,
        clean: Some(fail_after),
        invalidate: Some(fail_after),
        clean_invalidate: Some(fail_after),
    }
}

const SEG: EkvSegment = EkvSegment {
    cpu: 7,
    dev: 7,
    len: 7,
    first_page: 7,
    pages: 7,
};

#[test]
fn failed_calls_write_no_output() {
    let m = Mem::new();
    m.create(&config(), None);
    let s = m.seq(16); // pages 0..4
    assert_eq!(m.write(s, 0, 16, 1.0), EKV_OK);
    let mut released = 0u16;
    // SAFETY: live cache, valid buffers of the stated lengths throughout.
    unsafe {
        // Window 4 for queries from position 13: pages 0 and 1 go.
        assert_eq!(ekv_seq_slide(m.h(), s, 0, 4, 13, &mut released), EKV_OK);
        assert_eq!(released, 2);

        // Attention needing a released key: neither `out` nor `scratch` is written.
        let mut p = EkvAttentionParams::default();
        assert_eq!(
            ekv_attention_params_init(&mut p, 2, HEAD_DIM as u16),
            EKV_OK
        );
        let q = [0.5f32; 3 * 2 * HEAD_DIM];
        let mut out = [9.0f32; 3 * 2 * HEAD_DIM];
        let mut scratch = [-1.0f32; 64];
        let rc = ekv_attention(
            m.h(),
            s,
            0,
            13,
            q.as_ptr(),
            q.len(),
            out.as_mut_ptr(),
            out.len(),
            &p,
            scratch.as_mut_ptr(),
            scratch.len(),
        );
        assert_eq!(rc, EKV_ERR_POSITION_OUT_OF_RANGE);
        assert!(out.iter().all(|&x| x == 9.0) && scratch.iter().all(|&x| x == -1.0));
        // The same queries under the window that released the pages succeed.
        p.window_size = 4;
        let rc = ekv_attention(
            m.h(),
            s,
            0,
            13,
            q.as_ptr(),
            q.len(),
            out.as_mut_ptr(),
            out.len(),
            &p,
            scratch.as_mut_ptr(),
            scratch.len(),
        );
        assert_eq!(rc, EKV_OK);

        // Reading or gathering released positions: nothing written.
        let mut back = [9.0f32; 2 * ROW];
        let rc = ekv_read_f32(m.h(), s, 0, EKV_K, 2, back.as_mut_ptr(), back.len());
        assert_eq!(rc, EKV_ERR_POSITION_OUT_OF_RANGE);
        assert!(back.iter().all(|&x| x == 9.0));
        #[repr(C, align(32))]
        struct Staging([f32; 16]);
        let mut st = Staging([9.0; 16]);
        let mut row = [9.0f32; ROW];
        let mut rows = 77u32;
        for start in [0, 6, u32::MAX] {
            let rc = ekv_gather_f32(
                m.h(),
                null(),
                s,
                0,
                EKV_K,
                start,
                st.0.as_mut_ptr(),
                16,
                row.as_mut_ptr(),
                ROW,
                &mut rows,
            );
            assert_eq!(rc, EKV_ERR_POSITION_OUT_OF_RANGE, "gather at {start}");
            assert!(st.0.iter().all(|&x| x == 9.0) && row.iter().all(|&x| x == 9.0));
            assert_eq!(rows, 77);
        }

        // A view whose maintenance fails (at once, or after some lines): no segments, no
        // counts, no offsets, no region.
        let t = m.seq(12);
        for ok_calls in [0usize, 1, 2] {
            let mut left = ok_calls;
            let bad = failing(&mut left);
            let (mut vals, mut scs) = ([SEG; 4], [SEG; 4]);
            let (mut nv, mut ns) = (77usize, 77usize);
            let rc = ekv_read_view(
                m.h(),
                null(),
                &bad,
                t,
                1,
                EKV_V,
                vals.as_mut_ptr(),
                4,
                scs.as_mut_ptr(),
                4,
                &mut nv,
                &mut ns,
            );
            assert_eq!(rc, EKV_ERR_MAINTENANCE);
            assert_eq!((vals, scs, nv, ns), ([SEG; 4], [SEG; 4], 77, 77));
            let mut left = ok_calls;
            let bad = failing(&mut left);
            let mut offsets = [7u32; 4];
            let mut region = EkvRegion {
                base: 7,
                cpu: 7,
                len: 7,
                pages: 7,
            };
            let before = region;
            let rc = ekv_bind_region(
                m.h(),
                null(),
                &bad,
                t,
                1,
                EKV_K,
                offsets.as_mut_ptr(),
                4,
                null_mut(),
                0,
                &mut region,
            );
            assert_eq!(rc, EKV_ERR_MAINTENANCE);
            assert_eq!((offsets, region), ([7; 4], before));
        }

        // Unknown sequences: counts untouched too.
        let mut n = 77usize;
        let mut segs = [SEG; 2];
        let rc = ekv_segments(m.h(), null(), 0xdead, 0, 0, segs.as_mut_ptr(), 2, &mut n);
        assert_eq!((rc, n, segs), (EKV_ERR_UNKNOWN_SEQUENCE, 77, [SEG; 2]));
        let mut table = [7u16; 4];
        let rc = ekv_seq_page_table(m.h(), 0xdead, table.as_mut_ptr(), 4, &mut n);
        assert_eq!((rc, n, table), (EKV_ERR_UNKNOWN_SEQUENCE, 77, [7; 4]));

        // Ingest into released positions: refused before the invalidate.
        let mut calls = 0usize;
        let counting = EkvMaintenance {
            ctx: (&raw mut calls).cast(),
            line_size: 32,
            clean: Some(count_down),
            invalidate: Some(count_down),
            clean_invalidate: Some(count_down),
        };
        let rc = ekv_ingest_f32(
            m.h(),
            &counting,
            s,
            0,
            EKV_V,
            4,
            st.0.as_mut_ptr(),
            8,
            &mut rows,
        );
        assert_eq!((rc, calls, rows), (EKV_ERR_POSITION_OUT_OF_RANGE, 0, 77));
    }
}

/// Counts calls in `*ctx` (going down from 0: wrapping) and succeeds.
unsafe extern "C" fn count_down(ctx: *mut c_void, _: *mut c_void, _: usize) -> i32 {
    // SAFETY: ctx is the test's counter.
    unsafe { *ctx.cast::<usize>() += 1 };
    0
}

#[test]
fn one_mistake_one_code() {
    let m = Mem::new();
    m.create(&config(), None);
    let s = m.seq(5);
    #[repr(C, align(32))]
    struct Staging([f32; 8]);
    let mut st = Staging([1.0; 8]);
    let rows = [1.0f32; 2 * ROW];
    // SAFETY: live cache, valid buffers.
    unsafe {
        // Past max_seq_tokens, however far: SEQUENCE_FULL (empty or not).
        for n in [28, 1000, u32::MAX - 4, u32::MAX] {
            let rc = ekv_seq_reserve(m.h(), s, n, null_mut());
            assert_eq!(rc, EKV_ERR_SEQUENCE_FULL, "reserve {n}");
        }
        // Rows past the sequence, however far: POSITION_OUT_OF_RANGE for write, read, ingest
        // and gather alike.
        for start in [4, 5, u32::MAX - 1, u32::MAX] {
            let rc = ekv_write_f32(m.h(), s, 0, EKV_K, start, rows.as_ptr(), rows.len());
            assert_eq!(rc, EKV_ERR_POSITION_OUT_OF_RANGE, "write at {start}");
            let rc = ekv_ingest_f32(
                m.h(),
                null(),
                s,
                0,
                EKV_K,
                start,
                st.0.as_mut_ptr(),
                8,
                null_mut(),
            );
            assert_eq!(rc, EKV_ERR_POSITION_OUT_OF_RANGE, "ingest at {start}");
            let mut row = [0f32; ROW];
            let rc = ekv_gather_f32(
                m.h(),
                null(),
                s,
                0,
                EKV_K,
                start,
                st.0.as_mut_ptr(),
                8,
                row.as_mut_ptr(),
                ROW,
                null_mut(),
            );
            assert_eq!(rc, EKV_ERR_POSITION_OUT_OF_RANGE, "gather at {start}");
        }
    }
}

#[test]
fn reserve_secures_the_copy_on_write_of_a_shared_tail() {
    // 6 pages: the parent's 3 (12 positions), the fork's copy of none (a full tail), then a
    // hog takes all but `avail`.
    for avail in 0..3usize {
        let m = Mem::new();
        m.create(&config(), Some(6));
        let parent = m.seq(12);
        assert_eq!(m.write(parent, 0, 12, 2.0), EKV_OK);
        let mut fork = 0;
        let mut first = 0u32;
        // SAFETY: live cache, valid outputs.
        unsafe {
            assert_eq!(ekv_seq_fork(m.h(), parent, &mut fork), EKV_OK);
            // Into the shared second page: the fork's tail is the parent's.
            assert_eq!(ekv_seq_truncate(m.h(), fork, 6), EKV_OK);
            let hog = m.seq(0);
            let mut stats = EkvStats::default();
            assert_eq!(ekv_cache_stats(m.h(), &mut stats), EKV_OK);
            let take = (stats.pages_free as usize - avail) as u32 * 4;
            assert_eq!(ekv_seq_reserve(m.h(), hog, take, null_mut()), EKV_OK);
            // Reserve 3 (6..9): the copy of page 1 plus page 2 = 2 pages.
            let rc = ekv_seq_reserve(m.h(), fork, 3, &mut first);
            if avail < 2 {
                assert_eq!(rc, EKV_ERR_OUT_OF_PAGES, "avail {avail}");
                let mut info = EkvSeqInfo::default();
                assert_eq!(ekv_seq_info(m.h(), fork, &mut info), EKV_OK);
                assert_eq!((info.len, info.pages), (6, 2), "unchanged");
            } else {
                assert_eq!((rc, first), (EKV_OK, 6));
                // Secured: the write into the reserved positions cannot run out of pages.
                assert_eq!(m.write(fork, 6, 3, 5.0), EKV_OK);
                let mut back = [0f32; ROW];
                assert_eq!(
                    ekv_read_f32(m.h(), parent, 1, EKV_V, 6, back.as_mut_ptr(), ROW),
                    EKV_OK
                );
                assert_eq!(
                    back[0],
                    2.0 + 6.0 * ROW as f32 * 0.5,
                    "the parent keeps its row"
                );
            }
        }
    }
}

#[test]
fn handles_are_bound_to_their_cache_instance() {
    let m = Mem::new();
    let cfg = config();
    m.create(&cfg, None);
    let old = m.seq(3);
    // SAFETY: live cache; destroyed and re-created in the same storage and arenas.
    unsafe {
        assert_eq!(ekv_cache_destroy(m.h()), EKV_OK);
    }
    m.create(&cfg, None);
    let new = m.seq(3);
    assert_ne!(old, new, "another cache instance, another handle");
    let mut info = EkvSeqInfo::default();
    // SAFETY: live cache, valid output.
    unsafe {
        assert_eq!(
            ekv_seq_info(m.h(), old, &mut info),
            EKV_ERR_UNKNOWN_SEQUENCE
        );
        assert_eq!(ekv_seq_free(m.h(), old), EKV_ERR_UNKNOWN_SEQUENCE);
        assert_eq!(ekv_seq_info(m.h(), new, &mut info), EKV_OK);
    }
    // A handle of another live cache is refused as well.
    let other = Mem::new();
    other.create(&cfg, None);
    let theirs = other.seq(1);
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            ekv_seq_info(m.h(), theirs, &mut info),
            EKV_ERR_UNKNOWN_SEQUENCE
        );
    }
}

#[test]
fn snapshot_and_restore_through_a_ram_buffer() {
    let src = Mem::new();
    src.create(&config(), None);
    let s = src.seq(6);
    assert_eq!(src.write(s, 0, 6, 3.0), EKV_OK);
    let tokens: Vec<u32> = (100..106).collect();
    let mut need = 0usize;
    // SAFETY: live caches, valid buffers of the stated lengths throughout.
    unsafe {
        assert_eq!(ekv_snapshot_size(src.h(), s, &mut need), EKV_OK);
        let mut buf = vec![0x77u8; need];
        let mut got = 0usize;
        // Too small: the size needed, the buffer untouched.
        let rc = ekv_snapshot_to_buffer(
            src.h(),
            s,
            tokens.as_ptr(),
            6,
            9,
            buf.as_mut_ptr().cast(),
            need - 1,
            &mut got,
        );
        assert_eq!((rc, got), (EKV_ERR_BUFFER_TOO_SMALL, need));
        assert!(buf.iter().all(|&b| b == 0x77));
        let rc = ekv_snapshot_to_buffer(
            src.h(),
            s,
            tokens.as_ptr(),
            5,
            9,
            buf.as_mut_ptr().cast(),
            need,
            &mut got,
        );
        assert_eq!(rc, EKV_ERR_LENGTH_MISMATCH);
        assert!(buf.iter().all(|&b| b == 0x77));
        let rc = ekv_snapshot_to_buffer(
            src.h(),
            s,
            tokens.as_ptr(),
            6,
            9,
            buf.as_mut_ptr().cast(),
            need,
            &mut got,
        );
        assert_eq!((rc, got), (EKV_OK, need));

        let dst = Mem::new();
        dst.create(&config(), None);
        let (mut back, mut n, mut seq) = ([0u32; 8], 77usize, 77 as EkvSeq);
        let restore =
            |fp: u64, bytes: &[u8], back: &mut [u32; 8], n: &mut usize, seq: &mut EkvSeq| {
                ekv_restore_from_buffer(
                    dst.h(),
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    fp,
                    back.as_mut_ptr(),
                    8,
                    n,
                    seq,
                )
            };
        assert_eq!(
            restore(8, &buf, &mut back, &mut n, &mut seq),
            EKV_ERR_FINGERPRINT_MISMATCH
        );
        let mut bad = buf.clone();
        bad[need - 9] ^= 1;
        assert_eq!(
            restore(9, &bad, &mut back, &mut n, &mut seq),
            EKV_ERR_CRC_MISMATCH
        );
        assert_eq!(
            restore(9, &buf[..need - 1], &mut back, &mut n, &mut seq),
            EKV_ERR_TRUNCATED
        );
        assert_eq!((back, n, seq), ([0; 8], 77, 77), "no output on error");
        assert_eq!(restore(9, &buf, &mut back, &mut n, &mut seq), EKV_OK);
        assert_eq!((&back[..6], n), (&tokens[..], 6));
        let (mut a, mut b) = ([0f32; 6 * ROW], [0f32; 6 * ROW]);
        assert_eq!(
            ekv_read_f32(src.h(), s, 1, EKV_V, 0, a.as_mut_ptr(), a.len()),
            EKV_OK
        );
        assert_eq!(
            ekv_read_f32(dst.h(), seq, 1, EKV_V, 0, b.as_mut_ptr(), b.len()),
            EKV_OK
        );
        assert_eq!(a, b);
    }
}

#[test]
fn abi_version_and_per_cache_scratch() {
    assert_eq!(ekv_abi_version(), 3);
    let m = Mem::new();
    m.create(&config(), None);
    let mut n = 0usize;
    // SAFETY: live cache, valid output.
    unsafe {
        assert_eq!(ekv_cache_attention_scratch_len(m.h(), 2, &mut n), EKV_OK);
        assert_eq!(n, ekv_attention_scratch_len(2, 4, HEAD_DIM as u16));
        assert_eq!(
            ekv_cache_attention_scratch_len(m.h(), 0, &mut n),
            EKV_ERR_HEAD_MISMATCH
        );
        assert_eq!(
            ekv_cache_attention_scratch_len(m.h(), 2, null_mut()),
            EKV_ERR_NULL
        );
    }
}
