//! Unit tests of the C ABI, called as C would (raw pointers), for the whole flow and every
//! bad-input class: NULL, wrong sizes, misalignment, overlap, bad handles, stale sequences,
//! re-entry and failing callbacks. Small shapes, so Miri runs them quickly.

use core::ffi::{CStr, c_void};
use core::ptr::{null, null_mut};

use super::*;
use edgekv::quant::{Q4Kind, dequantize_q4, quantize_q4};
use edgekv_hal::HalError;

#[repr(C, align(64))]
struct Aligned<const N: usize>([u8; N]);

impl<const N: usize> Aligned<N> {
    fn new() -> Self {
        Aligned([0; N])
    }
    fn ptr(&mut self) -> *mut c_void {
        self.0.as_mut_ptr().cast()
    }
}

const HEAD_DIM: usize = 4;

fn storage() -> EkvCache {
    EkvCache {
        opaque: [0; core::mem::size_of::<EkvCache>() / 8],
    }
}

fn config() -> EkvConfig {
    let mut c = EkvConfig::default();
    // SAFETY: a valid, writable struct.
    let rc = unsafe { ekv_config_init(&mut c, 2, 1, HEAD_DIM as u16) };
    assert_eq!(rc, EKV_OK);
    c.page_tokens = 4;
    c.max_seqs = 3;
    c.max_seq_tokens = 32;
    c
}

/// A live cache over its own arenas, held through raw pointers only (as C holds them: a Box or
/// reference to the arenas would assert uniqueness over memory the cache borrows).
struct Fixture {
    cache: *mut EkvCache,
    data: *mut c_void,
    meta: *mut c_void,
}

impl Fixture {
    fn new(cfg: &EkvConfig) -> Self {
        let f = Fixture {
            cache: Box::into_raw(Box::new(storage())),
            data: Box::into_raw(Box::new(Aligned::<4096>::new())).cast(),
            meta: Box::into_raw(Box::new(Aligned::<4096>::new())).cast(),
        };
        // SAFETY: storage and arenas stay allocated until `drop`, after the destroy.
        let rc = unsafe { ekv_cache_create(f.cache, cfg, f.data, 4096, f.meta, 4096) };
        assert_eq!(rc, EKV_OK, "{}", msg(rc));
        f
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
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `new`; the cache is destroyed (or already dead)
        // before its memory is freed.
        unsafe {
            let _ = ekv_cache_destroy(self.cache);
            drop(Box::from_raw(self.cache));
            drop(Box::from_raw(self.data.cast::<Aligned<4096>>()));
            drop(Box::from_raw(self.meta.cast::<Aligned<4096>>()));
        }
    }
}

fn msg(rc: EkvStatus) -> &'static str {
    // SAFETY: ekv_strerror returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(ekv_strerror(rc)) }
        .to_str()
        .unwrap()
}

fn rows(n: usize, base: f32) -> Vec<f32> {
    (0..n * HEAD_DIM).map(|i| base + i as f32 * 0.25).collect()
}

#[test]
fn plan_create_write_read_stats_destroy() {
    let cfg = config();
    let mut plan = EkvPlan::default();
    // SAFETY: valid pointers.
    assert_eq!(unsafe { ekv_plan(&cfg, 4096, &mut plan) }, EKV_OK);
    assert!(plan.num_pages > 0 && plan.meta_bytes <= 4096 && plan.data_bytes <= 4096);
    assert!(ekv_cache_storage_size() <= core::mem::size_of::<EkvCache>());
    assert_eq!(ekv_cache_storage_align(), core::mem::align_of::<EkvCache>());
    let f = Fixture::new(&cfg);
    let s = f.seq(5);
    let k = rows(5, 1.0);
    let mut back = vec![0f32; k.len()];
    let mut stats = EkvStats::default();
    // SAFETY: live cache, valid buffers of the stated lengths.
    unsafe {
        assert_eq!(
            ekv_write_f32(f.h(), s, 1, EKV_K, 0, k.as_ptr(), k.len()),
            EKV_OK
        );
        assert_eq!(
            ekv_read_f32(f.h(), s, 1, EKV_K, 0, back.as_mut_ptr(), back.len()),
            EKV_OK
        );
        assert_eq!(ekv_cache_stats(f.h(), &mut stats), EKV_OK);
    }
    assert_eq!(back, k);
    assert_eq!((stats.sequences, stats.tokens, stats.pages_used), (1, 5, 2));
    // f16 round trip through f32 pages.
    let h16: Vec<u16> = [1.5f32, -2.0, 0.5, 8.0]
        .map(|x| half::f16::from_f32(x).to_bits())
        .into();
    let mut o16 = [0u16; 4];
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            ekv_write_f16(f.h(), s, 0, EKV_V, 4, h16.as_ptr(), 4),
            EKV_OK
        );
        assert_eq!(
            ekv_read_f16(f.h(), s, 0, EKV_V, 4, o16.as_mut_ptr(), 4),
            EKV_OK
        );
        assert_eq!(ekv_cache_destroy(f.h()), EKV_OK);
        assert_eq!(ekv_cache_stats(f.h(), &mut stats), EKV_ERR_BAD_HANDLE);
        assert_eq!(ekv_cache_destroy(f.h()), EKV_ERR_BAD_HANDLE);
    }
    assert_eq!(&o16[..], &h16[..]);
}

/// 4-bit pages through the C ABI: Q4_0 K and Q4_1 V plan, store and read back exactly the
/// codec's round trip; a nonzero unused field or a head_dim not a multiple of 32 is refused.
#[test]
fn q4_pages_store_ggml_blocks() {
    const D: usize = 32;
    let mut cfg = EkvConfig::default();
    // SAFETY: a valid, writable struct.
    assert_eq!(unsafe { ekv_config_init(&mut cfg, 1, 1, D as u16) }, EKV_OK);
    (cfg.page_tokens, cfg.max_seqs, cfg.max_seq_tokens) = (4, 2, 16);
    cfg.k_format.kind = EKV_FORMAT_Q4_0;
    cfg.v_format.kind = EKV_FORMAT_Q4_1;
    let mut plan = EkvPlan::default();
    // SAFETY: valid pointers.
    assert_eq!(unsafe { ekv_plan(&cfg, 4096, &mut plan) }, EKV_OK);
    // A page of 4 tokens: 4 x 18 B of K blocks and 4 x 20 B of V blocks, each pool's page
    // rounded up to the 64-byte alignment.
    assert_eq!(plan.page_bytes, 128 + 128);
    let f = Fixture::new(&cfg);
    let s = f.seq(3);
    let x: Vec<f32> = (0..3 * D)
        .map(|i| ((i * 37 % 29) as f32 - 14.0) * 0.3)
        .collect();
    for (kv, kind) in [(EKV_K, Q4Kind::Q4_0), (EKV_V, Q4Kind::Q4_1)] {
        let mut back = vec![0f32; x.len()];
        // SAFETY: live cache, valid buffers of the stated lengths.
        unsafe {
            assert_eq!(
                ekv_write_f32(f.h(), s, 0, kv, 0, x.as_ptr(), x.len()),
                EKV_OK
            );
            assert_eq!(
                ekv_read_f32(f.h(), s, 0, kv, 0, back.as_mut_ptr(), back.len()),
                EKV_OK
            );
        }
        let mut blocks = vec![0u8; kind.bytes_for(x.len()).unwrap()];
        let mut want = vec![0f32; x.len()];
        quantize_q4(kind, &x, &mut blocks).unwrap();
        dequantize_q4(kind, &blocks, &mut want).unwrap();
        assert_eq!(back, want, "{kind:?}");
        assert_ne!(back, x, "{kind:?}: quantized");
    }
    // Rotated V rows read back rotated back: near what was written.
    cfg.v_format.rotation = EKV_ROTATION_SIGNED_HADAMARD;
    let f = Fixture::new(&cfg);
    let s = f.seq(3);
    let mut back = vec![0f32; x.len()];
    // SAFETY: live cache, valid buffers of the stated lengths.
    unsafe {
        assert_eq!(
            ekv_write_f32(f.h(), s, 0, EKV_V, 0, x.as_ptr(), x.len()),
            EKV_OK
        );
        assert_eq!(
            ekv_read_f32(f.h(), s, 0, EKV_V, 0, back.as_mut_ptr(), back.len()),
            EKV_OK
        );
    }
    let err = back
        .iter()
        .zip(&x)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(err > 0.0 && err < 1.5, "rotated Q4_1 error {err}");
    for (rotation, group) in [(3, 0), (0, 32)] {
        (cfg.v_format.rotation, cfg.v_format.group) = (rotation, group);
        // SAFETY: valid pointers.
        let rc = unsafe { ekv_plan(&cfg, 4096, &mut plan) };
        assert_eq!(rc, EKV_ERR_INVALID_ARGUMENT);
    }
    let mut small = config();
    small.k_format.kind = EKV_FORMAT_Q4_1;
    // SAFETY: valid pointers.
    let rc = unsafe { ekv_plan(&small, 4096, &mut plan) };
    assert_eq!(rc, EKV_ERR_INVALID_FORMAT);
}

/// Scratch for a block of rows (`ekv_attention_block_scratch_len`) computes prefill with the
/// bits of one row at a time (rows 10–15: pages 0 and 1 whole for all of them).
#[test]
fn block_scratch_gives_the_one_row_bits() {
    let f = Fixture::new(&config());
    let s = f.seq(16);
    let (k, v) = (rows(16, -0.05), rows(16, 0.2));
    let q: Vec<f32> = (0..6 * HEAD_DIM)
        .map(|i| ((i * 7) % 11) as f32 * 0.1 - 0.5)
        .collect();
    let mut params = EkvAttentionParams::default();
    let one = ekv_attention_scratch_len(1, 4, HEAD_DIM as u16);
    assert_eq!(ekv_attention_block_scratch_len(1, 4, HEAD_DIM as u16, 1), 0);
    let block = ekv_attention_block_scratch_len(1, 4, HEAD_DIM as u16, 6);
    assert_eq!(block, 6 * (3 * HEAD_DIM + 4 + 4));
    let mut outs = [vec![0f32; q.len()], vec![0f32; q.len()]];
    // SAFETY: live cache, valid buffers.
    unsafe {
        assert_eq!(
            ekv_write_kv_f32(f.h(), s, 0, 0, k.as_ptr(), v.as_ptr(), k.len()),
            EKV_OK
        );
        assert_eq!(
            ekv_attention_params_init(&mut params, 1, HEAD_DIM as u16),
            EKV_OK
        );
        for (out, len) in outs.iter_mut().zip([one, one + block]) {
            let mut scratch = vec![0f32; len];
            let rc = ekv_attention(
                f.h(),
                s,
                0,
                10,
                q.as_ptr(),
                q.len(),
                out.as_mut_ptr(),
                out.len(),
                &params,
                scratch.as_mut_ptr(),
                scratch.len(),
            );
            assert_eq!(rc, EKV_OK, "{}", msg(rc));
        }
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&outs[0]), bits(&outs[1]));
}

#[test]
fn attention_matches_a_direct_computation() {
    let f = Fixture::new(&config());
    let s = f.seq(3);
    let k = rows(3, -0.5);
    let v = rows(3, 2.0);
    let q = [0.3f32, -0.2, 0.1, 0.4];
    let mut params = EkvAttentionParams::default();
    let mut out = [0f32; HEAD_DIM];
    let mut scratch = vec![0f32; ekv_attention_scratch_len(1, 4, HEAD_DIM as u16)];
    // SAFETY: live cache, valid buffers.
    unsafe {
        assert_eq!(
            ekv_write_kv_f32(f.h(), s, 0, 0, k.as_ptr(), v.as_ptr(), k.len()),
            EKV_OK
        );
        assert_eq!(
            ekv_attention_params_init(&mut params, 1, HEAD_DIM as u16),
            EKV_OK
        );
        let rc = ekv_attention(
            f.h(),
            s,
            0,
            2,
            q.as_ptr(),
            4,
            out.as_mut_ptr(),
            4,
            &params,
            scratch.as_mut_ptr(),
            scratch.len(),
        );
        assert_eq!(rc, EKV_OK, "{}", msg(rc));
    }
    let scores: Vec<f32> = (0..3)
        .map(|j| (0..4).map(|d| q[d] * k[j * 4 + d]).sum::<f32>() * 0.5)
        .collect();
    let mx = scores.iter().cloned().fold(f32::MIN, f32::max);
    let w: Vec<f32> = scores.iter().map(|s| (s - mx).exp()).collect();
    let sum: f32 = w.iter().sum();
    for d in 0..4 {
        let want: f32 = (0..3).map(|j| w[j] * v[j * 4 + d]).sum::<f32>() / sum;
        assert!((out[d] - want).abs() < 1e-5, "{d}: {} vs {want}", out[d]);
    }
    // Bad inputs: scratch short, out overlapping q, window with sinks only, q_heads 0.
    let mut qo = [0.1f32; 8];
    // SAFETY: valid buffers; overlap is what is tested.
    unsafe {
        let sp = scratch.as_mut_ptr();
        let r = ekv_attention(
            f.h(),
            s,
            0,
            2,
            q.as_ptr(),
            4,
            out.as_mut_ptr(),
            4,
            &params,
            sp,
            3,
        );
        assert_eq!(r, EKV_ERR_LENGTH_MISMATCH);
        let p = qo.as_mut_ptr();
        let r = ekv_attention(
            f.h(),
            s,
            0,
            2,
            p,
            4,
            p.add(2),
            4,
            &params,
            sp,
            scratch.len(),
        );
        assert_eq!(r, EKV_ERR_OVERLAP);
        let bad = EkvAttentionParams {
            window_sinks: 1,
            ..params
        };
        let r = ekv_attention(
            f.h(),
            s,
            0,
            2,
            q.as_ptr(),
            4,
            out.as_mut_ptr(),
            4,
            &bad,
            sp,
            scratch.len(),
        );
        assert_eq!(r, EKV_ERR_INVALID_ARGUMENT);
        let bad = EkvAttentionParams {
            q_heads: 0,
            ..params
        };
        let r = ekv_attention(
            f.h(),
            s,
            0,
            2,
            q.as_ptr(),
            4,
            out.as_mut_ptr(),
            4,
            &bad,
            sp,
            scratch.len(),
        );
        assert_eq!(r, EKV_ERR_HEAD_MISMATCH);
        let r = ekv_attention(
            f.h(),
            s,
            0,
            2,
            q.as_ptr(),
            4,
            out.as_mut_ptr(),
            4,
            null(),
            sp,
            scratch.len(),
        );
        assert_eq!(r, EKV_ERR_NULL);
    }
}

#[test]
fn null_pointers_are_errors() {
    let cfg = config();
    let f = Fixture::new(&cfg);
    let s = f.seq(4);
    let mut out: EkvSeq = 0;
    let (mut data, mut meta) = (Aligned::<1024>::new(), Aligned::<1024>::new());
    // SAFETY: NULL is what is tested; everything else is valid.
    unsafe {
        let (d, m) = (data.ptr(), meta.ptr());
        assert_eq!(
            ekv_cache_create(null_mut(), &cfg, d, 1024, m, 1024),
            EKV_ERR_NULL
        );
        let mut st = storage();
        assert_eq!(
            ekv_cache_create(&mut st, null(), d, 1024, m, 1024),
            EKV_ERR_NULL
        );
        assert_eq!(
            ekv_cache_create(&mut st, &cfg, null_mut(), 1024, m, 1024),
            EKV_ERR_NULL
        );
        assert_eq!(ekv_config_init(null_mut(), 1, 1, 4), EKV_ERR_NULL);
        assert_eq!(
            ekv_plan(null(), 4096, &mut EkvPlan::default()),
            EKV_ERR_NULL
        );
        assert_eq!(ekv_plan(&cfg, 4096, null_mut()), EKV_ERR_NULL);
        assert_eq!(
            ekv_seq_create(null_mut(), EKV_SEQ_PAGED, &mut out),
            EKV_ERR_NULL
        );
        assert_eq!(
            ekv_seq_create(f.h(), EKV_SEQ_PAGED, null_mut()),
            EKV_ERR_NULL
        );
        assert_eq!(
            ekv_write_f32(f.h(), s, 0, EKV_K, 0, null(), 4),
            EKV_ERR_NULL
        );
        assert_eq!(
            ekv_read_f32(f.h(), s, 0, EKV_K, 0, null_mut(), 4),
            EKV_ERR_NULL
        );
        assert_eq!(
            ekv_write_kv_f16(f.h(), s, 0, 0, null(), null(), 4),
            EKV_ERR_NULL
        );
        assert_eq!(
            ekv_commit_prompt(f.h(), s, null(), 4, null_mut()),
            EKV_ERR_NULL
        );
        assert_eq!(
            ekv_prefix_lookup(f.h(), null(), 0, null_mut()),
            EKV_ERR_NULL
        );
        assert_eq!(ekv_cache_stats(f.h(), null_mut()), EKV_ERR_NULL);
        assert_eq!(ekv_seq_info(f.h(), s, null_mut()), EKV_ERR_NULL);
        assert_eq!(
            ekv_segments(f.h(), null(), s, 0, 0, null_mut(), 4, &mut 0),
            EKV_ERR_NULL
        );
        // NULL with length 0 is an empty buffer.
        assert_eq!(ekv_write_f32(f.h(), s, 0, EKV_K, 0, null(), 0), EKV_OK);
        // Nothing was created by the failed calls.
        let mut st = EkvStats::default();
        assert_eq!(ekv_cache_stats(f.h(), &mut st), EKV_OK);
        assert_eq!(st.sequences, 1);
    }
}

#[test]
fn wrong_sizes_and_values_are_errors() {
    let f = Fixture::new(&config());
    let s = f.seq(4);
    let k = rows(4, 0.0);
    let mut table = [0u16; 1];
    let mut count = 0usize;
    // SAFETY: live cache, valid buffers (lengths are what is tested).
    unsafe {
        assert_eq!(
            ekv_write_f32(f.h(), s, 0, EKV_K, 0, k.as_ptr(), 3),
            EKV_ERR_LENGTH_MISMATCH
        );
        assert_eq!(
            ekv_write_f32(f.h(), s, 0, EKV_K, 1, k.as_ptr(), k.len()),
            EKV_ERR_POSITION_OUT_OF_RANGE
        );
        assert_eq!(
            ekv_write_f32(f.h(), s, 2, EKV_K, 0, k.as_ptr(), 4),
            EKV_ERR_LAYER_OUT_OF_RANGE
        );
        assert_eq!(
            ekv_write_f32(f.h(), s, 0, 2, 0, k.as_ptr(), 4),
            EKV_ERR_INVALID_ARGUMENT
        );
        assert_eq!(ekv_seq_create(f.h(), 9, &mut 0), EKV_ERR_INVALID_ARGUMENT);
        assert_eq!(
            ekv_write_f32(f.h(), s, 0, EKV_K, 0, k.as_ptr(), usize::MAX / 2),
            EKV_ERR_BAD_LENGTH
        );
        assert_eq!(
            ekv_seq_reserve(f.h(), s, 100, null_mut()),
            EKV_ERR_SEQUENCE_FULL
        );
        let r = ekv_seq_page_table(f.h(), s, table.as_mut_ptr(), 0, &mut count);
        assert_eq!((r, count), (EKV_ERR_BUFFER_TOO_SMALL, 1));
        // A contiguous sequence needs the bitmap allocator.
        assert_eq!(
            ekv_seq_create(f.h(), EKV_SEQ_CONTIGUOUS, &mut 0),
            EKV_ERR_CONTIGUOUS_UNSUPPORTED
        );
    }
    let mut cfg = config();
    cfg.k_format = EkvFormat {
        kind: 17,
        ..EkvFormat::default()
    };
    let mut plan = EkvPlan::default();
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(ekv_plan(&cfg, 4096, &mut plan), EKV_ERR_INVALID_ARGUMENT);
        cfg.k_format = EkvFormat {
            kind: EKV_FORMAT_INT8,
            group: 3,
            ..EkvFormat::default()
        };
        assert_eq!(ekv_plan(&cfg, 4096, &mut plan), EKV_ERR_INVALID_FORMAT);
        cfg.k_format = EkvFormat {
            kind: EKV_FORMAT_F32,
            group: 3,
            ..EkvFormat::default()
        };
        assert_eq!(ekv_plan(&cfg, 4096, &mut plan), EKV_ERR_INVALID_ARGUMENT);
        let mut cfg = config();
        cfg.page_tokens = 3;
        assert_eq!(
            ekv_plan(&cfg, 4096, &mut plan),
            EKV_ERR_PAGE_TOKENS_NOT_POWER_OF_TWO
        );
        assert_eq!(ekv_plan(&config(), 10, &mut plan), EKV_ERR_ARENA_TOO_SMALL);
    }
}

#[test]
fn misaligned_pointers_are_errors() {
    let cfg = config();
    let f = Fixture::new(&cfg);
    let s = f.seq(4);
    let mut bytes = [0u32; 9];
    let odd = bytes.as_mut_ptr().cast::<u8>().wrapping_add(1);
    // SAFETY: misaligned pointers are rejected before any access.
    unsafe {
        assert_eq!(
            ekv_write_f32(f.h(), s, 0, EKV_K, 0, odd.cast(), 4),
            EKV_ERR_MISALIGNED_POINTER
        );
        assert_eq!(
            ekv_read_f16(f.h(), s, 0, EKV_K, 0, odd.cast(), 4),
            EKV_ERR_MISALIGNED_POINTER
        );
        assert_eq!(
            ekv_cache_stats(odd.cast(), &mut EkvStats::default()),
            EKV_ERR_MISALIGNED_POINTER
        );
        let mut st = storage();
        let (mut d, mut m) = (Aligned::<2048>::new(), Aligned::<2048>::new());
        let dp = d.ptr().cast::<u8>().wrapping_add(8).cast();
        let r = ekv_cache_create(&mut st, &cfg, dp, 2000, m.ptr(), 2048);
        assert_eq!(r, EKV_ERR_MISALIGNED_ARENA);
    }
}

#[test]
fn bad_handles_are_errors() {
    let cfg = config();
    let mut zero = storage();
    let f = Fixture::new(&cfg);
    // A bitwise copy of a live cache (moved storage) is not a live cache.
    let mut copy = storage();
    // SAFETY: both are valid storage; a byte copy (padding inside a live cache is uninit, so
    // the copy must not be typed as integers); no call is running.
    unsafe { core::ptr::copy_nonoverlapping(f.cache, &mut copy, 1) };
    let mut stats = EkvStats::default();
    // SAFETY: the handles point to readable storage.
    unsafe {
        assert_eq!(ekv_cache_stats(&mut zero, &mut stats), EKV_ERR_BAD_HANDLE);
        assert_eq!(ekv_cache_stats(&mut copy, &mut stats), EKV_ERR_BAD_HANDLE);
        assert_eq!(ekv_cache_check(f.h()), EKV_OK);
        // Creating over a live cache is refused.
        let (d, m) = (f.data, f.meta);
        assert_eq!(
            ekv_cache_create(f.h(), &cfg, d, 4096, m, 4096),
            EKV_ERR_BUSY
        );
        assert_eq!(ekv_cache_destroy(f.h()), EKV_OK);
        assert_eq!(
            ekv_seq_create(f.h(), EKV_SEQ_PAGED, &mut 0),
            EKV_ERR_BAD_HANDLE
        );
        // Destroyed storage can be used again.
        assert_eq!(ekv_cache_create(f.h(), &cfg, d, 4096, m, 4096), EKV_OK);
    }
}

#[test]
fn stale_sequences_are_errors() {
    let f = Fixture::new(&config());
    let old = f.seq(4);
    // SAFETY: live cache, valid outputs.
    unsafe {
        assert_eq!(ekv_seq_free(f.h(), old), EKV_OK);
        assert_eq!(ekv_seq_free(f.h(), old), EKV_ERR_UNKNOWN_SEQUENCE);
        let new = f.seq(4);
        assert_eq!(new & 0xffff, old & 0xffff, "slot reused");
        assert_eq!(
            ekv_seq_reserve(f.h(), old, 1, null_mut()),
            EKV_ERR_UNKNOWN_SEQUENCE
        );
        let mut info = EkvSeqInfo::default();
        assert_eq!(
            ekv_seq_info(f.h(), old, &mut info),
            EKV_ERR_UNKNOWN_SEQUENCE
        );
        assert_eq!(ekv_seq_info(f.h(), new, &mut info), EKV_OK);
        assert_eq!(
            ekv_seq_info(f.h(), 0xdead_beef, &mut info),
            EKV_ERR_UNKNOWN_SEQUENCE
        );
    }
}

#[test]
fn overlapping_buffers_are_errors() {
    let cfg = config();
    let f = Fixture::new(&cfg);
    let s = f.seq(4);
    let inside = f.data.cast::<f32>();
    let mut st = storage();
    let mut buf = Aligned::<4096>::new();
    // SAFETY: overlap is rejected before any reference is made.
    unsafe {
        assert_eq!(
            ekv_write_f32(f.h(), s, 0, EKV_K, 0, inside, 4),
            EKV_ERR_OVERLAP
        );
        assert_eq!(
            ekv_read_f32(f.h(), s, 0, EKV_K, 0, f.h().cast(), 4),
            EKV_ERR_OVERLAP
        );
        let p = buf.ptr();
        assert_eq!(
            ekv_cache_create(&mut st, &cfg, p, 4096, p, 4096),
            EKV_ERR_OVERLAP
        );
    }
}

static mut REENTRY_TARGET: *mut EkvCache = null_mut();
static mut REENTRY_RESULT: EkvStatus = 1;

unsafe extern "C" fn reenter(_: *mut c_void, _: *mut c_void, _: usize) -> i32 {
    let mut stats = EkvStats::default();
    // SAFETY: single-threaded use inside one test; the handle is live.
    unsafe { REENTRY_RESULT = ekv_cache_stats(REENTRY_TARGET, &mut stats) };
    0
}

unsafe extern "C" fn fail(_: *mut c_void, _: *mut c_void, _: usize) -> i32 {
    -1
}

unsafe extern "C" fn count(ctx: *mut c_void, addr: *mut c_void, len: usize) -> i32 {
    assert_eq!(addr.addr() % 32, 0);
    assert_eq!(len % 32, 0);
    // SAFETY: ctx is the test's counter.
    unsafe { *ctx.cast::<usize>() += 1 };
    0
}

fn maint(f: EkvMaintFn, ctx: *mut c_void) -> EkvMaintenance {
    EkvMaintenance {
        ctx,
        line_size: 32,
        clean: Some(f),
        invalidate: Some(f),
        clean_invalidate: Some(f),
    }
}

#[test]
fn device_views_callbacks_reentry_and_failure() {
    let f = Fixture::new(&config());
    let s = f.seq(9); // three pages
    let mut segs = [EkvSegment::default(); 4];
    let mut scales = [EkvSegment::default(); 1];
    let (mut nv, mut ns, mut n) = (0usize, 0usize, 0usize);
    let mut offsets = [0u32; 3];
    let mut region = EkvRegion::default();
    let mut cleaned = 0usize;
    let counting = maint(count, (&raw mut cleaned).cast());
    // SAFETY: live cache, valid buffers and callbacks.
    unsafe {
        let r = ekv_segments(
            f.h(),
            null(),
            s,
            1,
            EKV_POOL_V_VALUES,
            segs.as_mut_ptr(),
            4,
            &mut n,
        );
        assert_eq!((r, n), (EKV_OK, 1));
        assert_eq!((segs[0].pages, segs[0].first_page), (3, 0));
        assert_eq!(segs[0].dev, segs[0].cpu as u64);
        let r = ekv_segments(
            f.h(),
            null(),
            s,
            1,
            EKV_POOL_V_VALUES,
            segs.as_mut_ptr(),
            0,
            &mut n,
        );
        assert_eq!((r, n), (EKV_ERR_BUFFER_TOO_SMALL, 1));
        let r = ekv_read_view(
            f.h(),
            null(),
            &counting,
            s,
            0,
            EKV_K,
            segs.as_mut_ptr(),
            4,
            scales.as_mut_ptr(),
            1,
            &mut nv,
            &mut ns,
        );
        assert_eq!((r, nv, ns, cleaned), (EKV_OK, 1, 0, 1));
        let off = EkvAddressMap {
            kind: EKV_MAP_OFFSET,
            window: EkvMapEntry {
                cpu_base: f.data.addr(),
                len: 4096,
                dev_base: 0x1000,
            },
            entries: null(),
            n_entries: 0,
        };
        let r = ekv_bind_region(
            f.h(),
            &off,
            &counting,
            s,
            0,
            EKV_V,
            offsets.as_mut_ptr(),
            3,
            null_mut(),
            0,
            &mut region,
        );
        assert_eq!(r, EKV_OK, "{}", msg(r));
        assert_eq!((region.base, region.pages, cleaned), (0x1000, 3, 4));
        let r = ekv_bind_region(
            f.h(),
            &off,
            null(),
            s,
            0,
            EKV_V,
            offsets.as_mut_ptr(),
            2,
            null_mut(),
            0,
            &mut region,
        );
        assert_eq!((r, region.pages), (EKV_ERR_BUFFER_TOO_SMALL, 3));
        // A callback that calls back into the same cache gets EKV_ERR_BUSY.
        REENTRY_TARGET = f.h();
        let re = maint(reenter, null_mut());
        let r = ekv_read_view(
            f.h(),
            null(),
            &re,
            s,
            0,
            EKV_K,
            segs.as_mut_ptr(),
            4,
            null_mut(),
            0,
            &mut nv,
            &mut ns,
        );
        assert_eq!((r, REENTRY_RESULT), (EKV_OK, EKV_ERR_BUSY));
        // A failing callback stops the view.
        let bad = maint(fail, null_mut());
        let r = ekv_read_view(
            f.h(),
            null(),
            &bad,
            s,
            0,
            EKV_K,
            segs.as_mut_ptr(),
            4,
            null_mut(),
            0,
            &mut nv,
            &mut ns,
        );
        assert_eq!(r, EKV_ERR_MAINTENANCE);
        let mut odd = maint(fail, null_mut());
        odd.line_size = 48;
        let r = ekv_read_view(
            f.h(),
            null(),
            &odd,
            s,
            0,
            EKV_K,
            segs.as_mut_ptr(),
            4,
            null_mut(),
            0,
            &mut nv,
            &mut ns,
        );
        assert_eq!(r, EKV_ERR_INVALID_LINE_SIZE);
        // Gather then ingest through a staging tensor of whole lines (8 floats = 32 bytes).
        let k = rows(8, 3.0);
        assert_eq!(
            ekv_write_f32(f.h(), s, 1, EKV_K, 0, k.as_ptr(), k.len()),
            EKV_OK
        );
        #[repr(C, align(32))]
        struct Staging([f32; 8]);
        let mut st = Staging([0.0; 8]);
        let mut row = [0f32; HEAD_DIM];
        let mut got = 0u32;
        let r = ekv_gather_f32(
            f.h(),
            null(),
            s,
            1,
            EKV_K,
            0,
            st.0.as_mut_ptr(),
            8,
            row.as_mut_ptr(),
            4,
            &mut got,
        );
        assert_eq!((r, got), (EKV_OK, 2));
        assert_eq!(&st.0[..], &k[..8]);
        st.0 = [9.0; 8];
        let r = ekv_ingest_f32(
            f.h(),
            null(),
            s,
            0,
            EKV_V,
            6,
            st.0.as_mut_ptr(),
            8,
            &mut got,
        );
        assert_eq!((r, got), (EKV_OK, 2));
        let mut back = [0f32; 8];
        assert_eq!(
            ekv_read_f32(f.h(), s, 0, EKV_V, 6, back.as_mut_ptr(), 8),
            EKV_OK
        );
        assert_eq!(back, [9.0; 8]);
        let r = ekv_gather_f32(
            f.h(),
            null(),
            s,
            1,
            EKV_K,
            0,
            st.0.as_mut_ptr(),
            7,
            row.as_mut_ptr(),
            4,
            &mut got,
        );
        assert_eq!(r, EKV_ERR_SHAPE_MISMATCH);
        let table = EkvAddressMap {
            kind: EKV_MAP_TABLE,
            window: EkvMapEntry::default(),
            entries: null(),
            n_entries: 2,
        };
        let r = ekv_segments(f.h(), &table, s, 0, 0, segs.as_mut_ptr(), 4, &mut n);
        assert_eq!(r, EKV_ERR_NULL);
    }
}

#[test]
fn prefix_commit_lookup_attach() {
    let f = Fixture::new(&config());
    let prompt: Vec<u32> = (100..110).collect();
    let s = f.seq(10);
    let mut published = 0u16;
    let mut hit = EkvPrefixHit::default();
    let mut attached = 0u32;
    // SAFETY: live cache, valid buffers.
    unsafe {
        let p = prompt.as_ptr();
        assert_eq!(ekv_commit_prompt(f.h(), s, p, 10, &mut published), EKV_OK);
        assert_eq!(published, 2);
        assert_eq!(ekv_prefix_lookup(f.h(), p, 10, &mut hit), EKV_OK);
        assert_eq!((hit.tokens, hit.pages), (8, 2));
        let mut t = 0;
        assert_eq!(ekv_seq_create(f.h(), EKV_SEQ_PAGED, &mut t), EKV_OK);
        let stale = EkvPrefixHit {
            tokens: 4,
            pages: 1,
            ..hit
        };
        assert_eq!(
            ekv_prefix_attach(f.h(), t, &stale, p, 10, &mut attached),
            EKV_ERR_STALE_HIT
        );
        assert_eq!(
            ekv_prefix_attach(f.h(), t, &hit, p, 10, &mut attached),
            EKV_OK
        );
        assert_eq!(attached, 8);
        assert_eq!(
            ekv_prefix_attach(f.h(), t, &hit, p, 10, &mut attached),
            EKV_ERR_SEQUENCE_NOT_EMPTY
        );
        let mut kept = 0;
        let other: Vec<u32> = (100..106).chain(0..6).collect();
        assert_eq!(
            ekv_reuse_prefix(f.h(), s, p, 10, other.as_ptr(), 12, &mut kept),
            EKV_OK
        );
        assert_eq!(kept, 4);
    }
    // Without an index.
    let mut cfg = config();
    cfg.prefix_index = 0;
    let g = Fixture::new(&cfg);
    // SAFETY: as above.
    unsafe {
        let r = ekv_prefix_lookup(g.h(), prompt.as_ptr(), 10, &mut hit);
        assert_eq!(r, EKV_ERR_NO_PREFIX_INDEX);
    }
}

#[test]
fn every_error_has_a_distinct_code_and_message() {
    use edgekv::ConfigError as C;
    use edgekv::Error as E;
    use edgekv::snapshot::SnapshotError as S;
    use embedded_storage::nor_flash::NorFlashErrorKind;
    let config = [
        C::ZeroSize,
        C::PageTokensNotPowerOfTwo,
        C::InvalidAlignment,
        C::Overflow,
        C::ArenaTooSmall,
        C::MisalignedArena,
        C::InvalidFormat,
        C::InvalidChunkSize,
        C::FormatDisabled,
    ];
    let core = [
        E::OutOfPages,
        E::NoContiguousRun,
        E::ContiguousUnsupported,
        E::TooManySequences,
        E::UnknownSequence,
        E::SequenceFull,
        E::PositionOutOfRange,
        E::LayerOutOfRange,
        E::LengthMismatch,
        E::TruncateBeyondLength,
        E::InvalidPage,
        E::NoPrefixIndex,
        E::NotPaged,
        E::SequenceNotEmpty,
        E::PromptMismatch,
        E::StaleHit,
        E::HeadMismatch,
    ];
    let snapshot = [
        S::WindowedSequence,
        S::BadMagic,
        S::UnsupportedVersion,
        S::CorruptSnapshot,
        S::Truncated,
        S::CrcMismatch,
        S::FingerprintMismatch,
        S::ConfigMismatch,
        S::FlashBounds,
        S::Flash(NorFlashErrorKind::Other),
    ];
    let hal = [
        HalError::Unmapped,
        HalError::Overflow,
        HalError::Misaligned,
        HalError::InvalidLineSize,
        HalError::EmptyWindow,
        HalError::Overlap,
        HalError::BufferTooSmall { needed: 1 },
        HalError::LengthMismatch,
        HalError::Unsupported,
        HalError::UnknownJob,
        HalError::QueueFull,
    ];
    let own = [
        EKV_ERR_NULL,
        EKV_ERR_BAD_HANDLE,
        EKV_ERR_MISALIGNED_POINTER,
        EKV_ERR_INVALID_ARGUMENT,
        EKV_ERR_OVERLAP,
        EKV_ERR_BUSY,
        EKV_ERR_MAINTENANCE,
        EKV_ERR_BAD_LENGTH,
        EKV_ERR_NOT_REGISTERED,
    ];
    let mut codes: Vec<EkvStatus> = config.iter().map(|&e| status::config_code(e)).collect();
    codes.extend(core.iter().map(|&e| status::core_code(e)));
    codes.extend(snapshot.iter().map(|&e| status::snapshot_code(e)));
    codes.extend(hal.iter().map(|&e| status::hal_code(e)));
    codes.extend(own);
    let mut msgs: Vec<&str> = codes.iter().map(|&c| msg(c)).collect();
    assert!(codes.iter().all(|&c| c < 0 && c != EKV_ERR_UNKNOWN));
    codes.sort_unstable();
    codes.dedup();
    let cases = config.len() + core.len() + snapshot.len() + hal.len() + own.len();
    assert_eq!(codes.len(), cases);
    msgs.sort_unstable();
    msgs.dedup();
    assert_eq!(msgs.len(), codes.len());
    assert!(!msgs.contains(&"not an edgekv status code"));
    assert_eq!(msg(12345), "not an edgekv status code");
    assert_eq!(
        status::hal_code(HalError::Cache(E::StaleHit)),
        EKV_ERR_STALE_HIT
    );
    // A wrapped error keeps its own code, whichever type carries it.
    for c in config {
        let code = status::config_code(c);
        assert_eq!(status::core_code(E::Config(c)), code);
        assert_eq!(status::snapshot_code(S::from(c)), code);
        assert_eq!(status::hal_code(HalError::from(c)), code);
    }
    for e in core {
        assert_eq!(status::snapshot_code(S::Cache(e)), status::core_code(e));
    }
    let kinds = [
        NorFlashErrorKind::NotAligned,
        NorFlashErrorKind::OutOfBounds,
        NorFlashErrorKind::Other,
    ];
    for kind in kinds {
        assert_eq!(status::snapshot_code(S::Flash(kind)), EKV_ERR_FLASH);
    }
}

#[test]
fn bitmap_cache_in_one_buffer_with_contiguous_sequences() {
    let mut cfg = config();
    cfg.allocator = EKV_ALLOC_BITMAP;
    cfg.k_format = EkvFormat {
        kind: EKV_FORMAT_INT8,
        group: 4,
        ..EkvFormat::default()
    };
    let mut plan = EkvPlan::default();
    let mut st = storage();
    let mut buf = Aligned::<8192>::new();
    let mut s = 0;
    let mut info = EkvSeqInfo::default();
    // SAFETY: valid buffers; the cache lives within this scope.
    unsafe {
        assert_eq!(ekv_plan_split(&cfg, 8192, &mut plan), EKV_OK);
        assert_eq!(
            ekv_cache_create_split(&mut st, &cfg, buf.ptr(), 8192),
            EKV_OK
        );
        assert_eq!(ekv_seq_create(&mut st, EKV_SEQ_CONTIGUOUS, &mut s), EKV_OK);
        assert_eq!(ekv_seq_reserve(&mut st, s, 5, null_mut()), EKV_OK);
        assert_eq!(ekv_seq_info(&mut st, s, &mut info), EKV_OK);
        assert_eq!((info.len, info.mode), (5, EKV_SEQ_CONTIGUOUS as u16));
        let k = rows(5, 1.0);
        assert_eq!(
            ekv_write_f32(&mut st, s, 0, EKV_K, 0, k.as_ptr(), k.len()),
            EKV_OK
        );
        let mut back = vec![0f32; k.len()];
        assert_eq!(
            ekv_read_f32(&mut st, s, 0, EKV_K, 0, back.as_mut_ptr(), 20),
            EKV_OK
        );
        for (a, b) in k.iter().zip(&back) {
            assert!((a - b).abs() < 0.05, "{a} vs {b}");
        }
        let mut fork = 0;
        assert_eq!(ekv_seq_fork(&mut st, s, &mut fork), EKV_OK);
        assert_eq!(ekv_seq_truncate(&mut st, fork, 2), EKV_OK);
        assert_eq!(
            ekv_seq_truncate(&mut st, fork, 3),
            EKV_ERR_TRUNCATE_BEYOND_LENGTH
        );
        let mut pf = EkvPlan::default();
        assert_eq!(ekv_plan_for(&cfg, 8, 2, &mut pf), EKV_OK);
        assert_eq!(pf.num_pages, 4);
    }
}

#[cfg(feature = "ethosu")]
mod ethosu_hooks {
    use super::*;
    use crate::ethosu::{
        self, EthosuHooks, Registration, ethosu_address_remap, ethosu_flush_dcache,
        ethosu_invalidate_dcache,
    };
    use edgekv_hal::{CacheMaintenance, DevAddr, NoCache, OffsetMap};
    use std::sync::Mutex;

    /// Records maintenance calls (cloned by the hooks, so it writes to a shared log).
    #[derive(Clone)]
    struct Log;
    static CALLS: Mutex<Vec<(char, usize, usize)>> = Mutex::new(Vec::new());

    impl CacheMaintenance for Log {
        fn line_size(&self) -> usize {
            32
        }
        fn clean(&mut self, a: usize, l: usize) -> Result<(), HalError> {
            edgekv_hal::line_aligned(a, l, 32)?;
            CALLS.lock().unwrap().push(('c', a, l));
            Ok(())
        }
        fn invalidate(&mut self, a: usize, l: usize) -> Result<(), HalError> {
            edgekv_hal::line_aligned(a, l, 32)?;
            CALLS.lock().unwrap().push(('i', a, l));
            Ok(())
        }
        fn clean_invalidate(&mut self, a: usize, l: usize) -> Result<(), HalError> {
            edgekv_hal::line_aligned(a, l, 32)?;
            CALLS.lock().unwrap().push(('x', a, l));
            Ok(())
        }
    }

    static HOOKS: EthosuHooks<Log, OffsetMap> = EthosuHooks::new(Log).with_region(
        2,
        match OffsetMap::new(0x2000_0000, 0x1000, DevAddr(0x6000_0000)) {
            Ok(m) => m,
            Err(_) => panic!(),
        },
    );
    static REG: Registration = Registration::new(&HOOKS);

    fn take() -> Vec<(char, usize, usize)> {
        core::mem::take(&mut *CALLS.lock().unwrap())
    }

    unsafe extern "C" fn c_count(ctx: *mut c_void, _: *mut c_void, _: usize) -> i32 {
        // SAFETY: ctx is a static counter of the test.
        unsafe { *ctx.cast::<usize>() += 1 };
        0
    }

    static mut C_CALLS: usize = 0;

    #[test]
    fn hooks_route_to_the_registration() {
        // One test: the registration is global.
        ethosu::unregister();
        let _ = ethosu::take_last_error();
        ethosu_flush_dcache(null_mut(), 0);
        assert_eq!(ekv_ethosu_last_error(), EKV_ERR_NOT_REGISTERED);
        assert_eq!(ethosu_address_remap(0x1234, 0), 0x1234);
        assert_eq!(ekv_ethosu_last_error(), EKV_ERR_NOT_REGISTERED);
        ethosu::register(&REG);
        // Unaligned flush: expanded to lines. Unaligned invalidate: edges clean+invalidated.
        let p = core::ptr::without_provenance_mut::<u32>(0x2000_0010);
        ethosu_flush_dcache(p, 0x40);
        assert_eq!(take(), [('c', 0x2000_0000, 0x60)]);
        ethosu_invalidate_dcache(p, 0x40);
        assert_eq!(
            take(),
            [
                ('x', 0x2000_0000, 32),
                ('i', 0x2000_0020, 32),
                ('x', 0x2000_0040, 32)
            ]
        );
        ethosu_invalidate_dcache(core::ptr::without_provenance_mut(0x2000_0004), 8);
        assert_eq!(take(), [('x', 0x2000_0000, 32)]);
        ethosu_invalidate_dcache(core::ptr::without_provenance_mut(0x2000_0000), 64);
        assert_eq!(take(), [('i', 0x2000_0000, 64)]);
        assert_eq!(ekv_ethosu_last_error(), EKV_OK);
        // Whole-cache requests without whole-cache operations are recorded.
        ethosu_flush_dcache(null_mut(), 0);
        assert_eq!(ekv_ethosu_last_error(), EKV_ERR_UNSUPPORTED);
        assert_eq!(ethosu_address_remap(0x2000_0040, 2), 0x6000_0040);
        assert_eq!(ethosu_address_remap(0x2000_0040, 1), 0x2000_0040);
        assert_eq!(ethosu_address_remap(0x3000_0000, 2), 0x3000_0000);
        assert_eq!(ekv_ethosu_last_error(), EKV_ERR_UNMAPPED);
        // The same through the C registration.
        let mut hooks = EkvEthosuHooks {
            maint: null(),
            clean_all: None,
            clean_invalidate_all: None,
            ctx: null_mut(),
            regions: [EkvAddressMap {
                kind: EKV_MAP_IDENTITY,
                window: EkvMapEntry::default(),
                entries: null(),
                n_entries: 0,
            }; 8],
        };
        hooks.regions[0] = EkvAddressMap {
            kind: EKV_MAP_OFFSET,
            window: EkvMapEntry {
                cpu_base: 0x1000,
                len: 0x100,
                dev_base: 0x9000,
            },
            ..hooks.regions[0]
        };
        let m = maint(c_count, (&raw mut C_CALLS).cast());
        hooks.maint = &m;
        // SAFETY: `hooks` and `m` outlive the registration (unregistered below).
        assert_eq!(unsafe { ekv_ethosu_register(&hooks) }, EKV_OK);
        ethosu_flush_dcache(core::ptr::without_provenance_mut(0x1010), 8);
        ethosu_invalidate_dcache(core::ptr::without_provenance_mut(0x1000), 64);
        // SAFETY: single-threaded access in this test.
        assert_eq!(unsafe { C_CALLS }, 2);
        assert_eq!(ethosu_address_remap(0x1010, 0), 0x9010);
        assert_eq!(ekv_ethosu_last_error(), EKV_OK);
        let bad = EkvMaintenance { line_size: 3, ..m };
        let bad_hooks = EkvEthosuHooks {
            maint: &bad,
            ..hooks
        };
        // SAFETY: valid hooks (rejected, so never registered).
        let rc = unsafe { ekv_ethosu_register(&bad_hooks) };
        assert_eq!(rc, EKV_ERR_INVALID_LINE_SIZE);
        // SAFETY: NULL unregisters.
        assert_eq!(unsafe { ekv_ethosu_register(null()) }, EKV_OK);
        assert_eq!(ethosu::flush(0x1000, 32), Err(EKV_ERR_NOT_REGISTERED));
        let _ = NoCache::new();
    }
}
