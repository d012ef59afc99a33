//! The C ABI with arbitrary arguments: sequence handles (live, stale, garbage), enum values,
//! lengths, and pointers that are NULL, misaligned, overlapping each other, or pointing into the
//! cache's own storage and arenas — always into memory that exists, as the ABI's contract
//! requires. Every call must return 0 or a known negative status, and the cache must stay
//! consistent (`ekv_cache_check`).
#![no_main]

use arbitrary::Arbitrary;
use edgekv_capi::*;
use libfuzzer_sys::fuzz_target;

/// Where a pointer argument points.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct Ptr {
    /// 0: NULL, 1–3: a scratch buffer, 4: the data arena, 5: the metadata arena, 6: the cache
    /// storage.
    region: u8,
    /// Byte offset inside the region (may misalign).
    offset: u16,
    /// Elements, cut to what the region holds past the offset.
    len: u16,
}

#[derive(Arbitrary, Debug)]
enum Call {
    Create {
        mode: bool,
    },
    Free(u8),
    Fork(u8),
    Truncate(u8, u16),
    Reserve(u8, u16),
    Slide {
        seq: u8,
        sinks: u16,
        window: u16,
        from: u16,
    },
    WriteF32 {
        seq: u8,
        layer: u16,
        kv: u32,
        start: u16,
        rows: Ptr,
    },
    WriteKvF16 {
        seq: u8,
        layer: u16,
        start: u16,
        k: Ptr,
        v: Ptr,
    },
    ReadF32 {
        seq: u8,
        layer: u16,
        kv: u32,
        start: u16,
        out: Ptr,
    },
    Attention {
        seq: u8,
        layer: u16,
        start: u16,
        q: Ptr,
        out: Ptr,
        scratch: Ptr,
        q_heads: u16,
        sinks: u32,
        window: u32,
    },
    Commit {
        seq: u8,
        tokens: Ptr,
    },
    LookupAttach {
        seq: u8,
        tokens: Ptr,
    },
    Segments {
        seq: u8,
        layer: u16,
        pool: u32,
        out: Ptr,
    },
    Strerror(i32),
    Stats,
    Destroy,
}

#[derive(Arbitrary, Debug)]
struct Input {
    k_format: u8,
    calls: Vec<Call>,
}

struct World {
    /// From `Box::into_raw`: every use goes through this one raw pointer.
    cache: *mut EkvCache,
    data: Vec<u64>,
    meta: Vec<u64>,
    bufs: [Vec<u64>; 3],
    seqs: Vec<EkvSeq>,
}

impl World {
    /// A pointer and an element count of `size`-byte elements inside the chosen region.
    fn ptr(&mut self, p: Ptr, size: usize) -> (*mut u8, usize) {
        let (base, bytes) = match p.region % 7 {
            0 => return (core::ptr::null_mut(), 0),
            r @ 1..=3 => {
                let b = &mut self.bufs[r as usize - 1];
                (b.as_mut_ptr().cast::<u8>(), b.len() * 8)
            }
            4 => (self.data.as_mut_ptr().cast::<u8>(), self.data.len() * 8),
            5 => (self.meta.as_mut_ptr().cast::<u8>(), self.meta.len() * 8),
            _ => (self.cache.cast::<u8>(), core::mem::size_of::<EkvCache>()),
        };
        let off = p.offset as usize % bytes;
        let room = (bytes - off) / size;
        // SAFETY: `off < bytes`: inside the region.
        (unsafe { base.add(off) }, (p.len as usize).min(room))
    }

    fn seq(&self, i: u8) -> EkvSeq {
        // Mostly live handles; sometimes garbage.
        self.seqs
            .get(i as usize % (self.seqs.len() + 1))
            .copied()
            .unwrap_or(u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
}

fn known(status: EkvStatus) -> bool {
    // SAFETY: any value is accepted; the result is a static C string.
    let msg = unsafe { core::ffi::CStr::from_ptr(ekv_strerror(status)) };
    status == EKV_OK || (status < 0 && status != EKV_ERR_UNKNOWN && !msg.is_empty())
}

fuzz_target!(|input: Input| {
    let kinds = [EKV_FORMAT_F32, EKV_FORMAT_F16, EKV_FORMAT_INT8];
    let mut w = World {
        // SAFETY: EkvCache is plain words; zeroed storage is what create expects.
        cache: Box::into_raw(Box::new(unsafe { core::mem::zeroed() })),
        data: vec![0u64; 8192],
        meta: vec![0u64; 1024],
        bufs: [vec![0u64; 512], vec![0u64; 512], vec![0u64; 64]],
        seqs: Vec::new(),
    };
    // SAFETY: plain struct, filled by ekv_config_init.
    let mut cfg: EkvConfig = unsafe { core::mem::zeroed() };
    // SAFETY: valid pointers throughout this block.
    unsafe {
        assert_eq!(ekv_config_init(&mut cfg, 2, 1, 32), EKV_OK);
        cfg.page_tokens = 4;
        cfg.k_format.kind = kinds[input.k_format as usize % kinds.len()];
        if cfg.k_format.kind == EKV_FORMAT_INT8 {
            cfg.k_format.group = 32;
        }
        cfg.max_seqs = 6;
        cfg.max_seq_tokens = 64;
        cfg.allocator = if input.k_format & 0x80 != 0 {
            EKV_ALLOC_BITMAP
        } else {
            EKV_ALLOC_FREE_LIST
        };
        let status = ekv_cache_create(
            w.cache,
            &cfg,
            w.data.as_mut_ptr().cast(),
            w.data.len() * 8,
            w.meta.as_mut_ptr().cast(),
            w.meta.len() * 8,
        );
        assert_eq!(status, EKV_OK, "create");
    }
    let mut live = true;
    for call in input.calls.iter().take(48) {
        let c = w.cache;
        // SAFETY: every pointer comes from `World::ptr` (inside real memory) or is a local.
        let status = unsafe {
            match *call {
                Call::Create { mode } => {
                    let mut s = 0;
                    let r = ekv_seq_create(
                        c,
                        if mode {
                            EKV_SEQ_CONTIGUOUS
                        } else {
                            EKV_SEQ_PAGED
                        },
                        &mut s,
                    );
                    if r == EKV_OK {
                        w.seqs.push(s);
                    }
                    r
                }
                Call::Free(i) => ekv_seq_free(c, w.seq(i)),
                Call::Fork(i) => {
                    let mut s = 0;
                    let r = ekv_seq_fork(c, w.seq(i), &mut s);
                    if r == EKV_OK {
                        w.seqs.push(s);
                    }
                    r
                }
                Call::Truncate(i, n) => ekv_seq_truncate(c, w.seq(i), n as u32),
                Call::Reserve(i, n) => {
                    ekv_seq_reserve(c, w.seq(i), n as u32 % 64, core::ptr::null_mut())
                }
                Call::Slide {
                    seq,
                    sinks,
                    window,
                    from,
                } => ekv_seq_slide(
                    c,
                    w.seq(seq),
                    sinks as u32,
                    window as u32,
                    from as u32,
                    core::ptr::null_mut(),
                ),
                Call::WriteF32 {
                    seq,
                    layer,
                    kv,
                    start,
                    rows,
                } => {
                    let (p, n) = w.ptr(rows, 4);
                    ekv_write_f32(c, w.seq(seq), layer, kv, start as u32, p.cast(), n)
                }
                Call::WriteKvF16 {
                    seq,
                    layer,
                    start,
                    k,
                    v,
                } => {
                    let (pk, nk) = w.ptr(k, 2);
                    let (pv, nv) = w.ptr(v, 2);
                    ekv_write_kv_f16(
                        c,
                        w.seq(seq),
                        layer,
                        start as u32,
                        pk.cast(),
                        pv.cast(),
                        nk.min(nv),
                    )
                }
                Call::ReadF32 {
                    seq,
                    layer,
                    kv,
                    start,
                    out,
                } => {
                    let (p, n) = w.ptr(out, 4);
                    ekv_read_f32(c, w.seq(seq), layer, kv, start as u32, p.cast(), n)
                }
                Call::Attention {
                    seq,
                    layer,
                    start,
                    q,
                    out,
                    scratch,
                    q_heads,
                    sinks,
                    window,
                } => {
                    let (pq, nq) = w.ptr(q, 4);
                    let (po, no) = w.ptr(out, 4);
                    let (ps, ns) = w.ptr(scratch, 4);
                    let params = EkvAttentionParams {
                        q_heads,
                        reserved: 0,
                        scale: 0.125,
                        window_sinks: sinks % 16,
                        window_size: window % 32,
                    };
                    ekv_attention(
                        c,
                        w.seq(seq),
                        layer,
                        start as u32,
                        pq.cast(),
                        nq,
                        po.cast(),
                        no,
                        &params,
                        ps.cast(),
                        ns,
                    )
                }
                Call::Commit { seq, tokens } => {
                    let (p, n) = w.ptr(tokens, 4);
                    ekv_commit_prompt(c, w.seq(seq), p.cast(), n, core::ptr::null_mut())
                }
                Call::LookupAttach { seq, tokens } => {
                    let (p, n) = w.ptr(tokens, 4);
                    let mut hit: EkvPrefixHit = core::mem::zeroed();
                    let r = ekv_prefix_lookup(c, p.cast(), n, &mut hit);
                    if r == EKV_OK {
                        ekv_prefix_attach(c, w.seq(seq), &hit, p.cast(), n, core::ptr::null_mut())
                    } else {
                        r
                    }
                }
                Call::Segments {
                    seq,
                    layer,
                    pool,
                    out,
                } => {
                    let (p, n) = w.ptr(out, core::mem::size_of::<EkvSegment>());
                    let mut count = 0usize;
                    ekv_segments(
                        c,
                        core::ptr::null(),
                        w.seq(seq),
                        layer,
                        pool,
                        p.cast(),
                        n,
                        &mut count,
                    )
                }
                Call::Strerror(s) => {
                    assert!(!ekv_strerror(s).is_null());
                    EKV_OK
                }
                Call::Stats => {
                    let mut st: EkvStats = core::mem::zeroed();
                    ekv_cache_stats(c, &mut st)
                }
                Call::Destroy => {
                    let r = ekv_cache_destroy(c);
                    if r == EKV_OK {
                        live = false;
                    }
                    r
                }
            }
        };
        assert!(known(status), "{call:?} returned {status}");
        // SAFETY: the storage is valid; a destroyed cache reports BAD_HANDLE.
        let check = unsafe { ekv_cache_check(w.cache) };
        if live {
            assert_eq!(check, EKV_OK, "after {call:?}");
        } else {
            assert_eq!(check, EKV_ERR_BAD_HANDLE);
        }
    }
    // SAFETY: from Box::into_raw above, not used after.
    drop(unsafe { Box::from_raw(w.cache) });
});
