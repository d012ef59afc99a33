//! edgekv on a Cortex-M0 (thumbv6m: no atomics, no FPU) with 16 KiB of RAM, under QEMU
//! `microbit`.
//!
//! One session over a tiny int8 cache (1 layer, 1 KV head, head_dim 16, 4-token pages, 2 query
//! heads):
//!
//! 1. prompt A (20 tokens) is prefilled in 8-token chunks and published, then freed;
//! 2. prompt B shares A's first 18 tokens: `lookup` finds 16 (chunk-aligned), `attach` shares
//!    those pages, only B's last 8 tokens are prefilled;
//! 3. every attention row of B is checked against a dense f32 computation done here from this
//!    firmware's own int8 reference quantizer and the query rounded to 16-bit codes per group as
//!    int8 keys score it (within [`TOLERANCE`]), and the stored rows must
//!    read back as exactly that reference;
//! 4. a cold prefill of B in another sequence must give the warm outputs bit for bit;
//! 5. a sliding window with sinks releases B's middle pages, and windowed attention is checked
//!    against the dense reference with the same mask.
//!
//! Results go out over semihosting with a CRC-32 of B's outputs; the exit code is 0 when every
//! check passes, 1 on a mismatch, 2 on a cache error, 3 on a HardFault, 101 on a panic.
#![no_std]
#![no_main]

use core::mem::MaybeUninit;

use cortex_m as _; // the critical-section implementation (single core)
use cortex_m_rt::{ExceptionFrame, entry, exception};
use edgekv::attention::{AttentionParams, Window};
use edgekv::prefix::plan_prefill;
use edgekv::{
    ArenaBuf, CacheConfig, ElementFormat, FreeList, Kv, KvCache, PageAllocator, Plan, SeqId,
    SeqMode, Shape,
};
use half::f16;
use semihosting::{println, process};

const HD: usize = 16;
const SHAPE: Shape = Shape {
    layers: 1,
    kv_heads: 1,
    head_dim: HD as u16,
};
const Q_HEADS: u16 = 2;
const Q_ROW: usize = Q_HEADS as usize * HD;
const PAGE_TOKENS: u16 = 4;
const CHUNK: u16 = 8;
/// Values per int8 scale (two scales per row).
const GROUP: usize = 8;
const FORMAT: ElementFormat = ElementFormat::Int8 {
    group: GROUP as u16,
};
const CFG: CacheConfig = CacheConfig::new(SHAPE)
    .with_page_tokens(PAGE_TOKENS)
    .with_chunk_tokens(CHUNK)
    .with_formats(FORMAT, FORMAT)
    .with_sequences(3, 32)
    .with_namespace(0x6d69_6372_6f62_6974);
const PAGES: usize = 16;
const BITS: usize = <FreeList<'static> as PageAllocator<'static>>::META_BITS_PER_PAGE;
const PLAN: Plan = match CFG.plan_pages(PAGES, BITS) {
    Ok(p) => p,
    Err(_) => panic!("plan"),
};
/// Largest difference allowed between paged attention and the dense reference.
const TOLERANCE: f32 = 1e-5;
/// Attention outputs of B, digested (CRC-32/ISO-HDLC over little-endian f32 bytes) and printed.
const B_LEN: usize = 24;

type Arena<const N: usize> = MaybeUninit<ArenaBuf<N>>;

/// Why the session failed.
enum Failure {
    Cache(edgekv::Error),
    Mismatch(&'static str),
}

impl From<edgekv::Error> for Failure {
    fn from(e: edgekv::Error) -> Self {
        Failure::Cache(e)
    }
}

impl From<edgekv::ConfigError> for Failure {
    fn from(e: edgekv::ConfigError) -> Self {
        Failure::Cache(e.into())
    }
}

#[entry]
fn main() -> ! {
    // Both arenas are statics (in .bss), taken once.
    let data = cortex_m::singleton!(: Arena<{ PLAN.data_bytes }> = MaybeUninit::uninit())
        .expect("data arena taken once");
    let meta = cortex_m::singleton!(: Arena<{ PLAN.meta.total }> = MaybeUninit::uninit())
        .expect("meta arena taken once");
    println!(
        "edgekv microbit: int8 g{} pages of {} tokens, {} pages, data {} B + meta {} B",
        GROUP, PAGE_TOKENS, PAGES, PLAN.data_bytes, PLAN.meta.total
    );
    match session(ArenaBuf::from_uninit(data), ArenaBuf::from_uninit(meta)) {
        Ok(crc) => {
            println!("crc32 {:08x}", crc);
            println!("PASS");
            process::exit(0)
        }
        Err(Failure::Mismatch(what)) => {
            println!("FAIL: {}", what);
            process::exit(1)
        }
        Err(Failure::Cache(e)) => {
            println!("FAIL: cache error: {}", e);
            process::exit(2)
        }
    }
}

/// The whole session; returns the CRC of B's attention outputs.
fn session(data: &mut [MaybeUninit<u8>], meta: &mut [MaybeUninit<u8>]) -> Result<u32, Failure> {
    let mut cache: KvCache = KvCache::new(CFG, data, meta)?;
    let a: [u32; 20] = core::array::from_fn(|i| 1000 + i as u32);
    let b: [u32; B_LEN] = core::array::from_fn(|i| if i < 18 { a[i] } else { 2000 + i as u32 });
    let params = AttentionParams::new(SHAPE, Q_HEADS);
    let mut max_err = 0f32;

    // 1. A, cold: prefill, publish, free (its full chunks stay cached).
    let sa = cache.create_sequence(SeqMode::Paged)?;
    prefill(&mut cache, sa, &a, 0, &params, &mut max_err, None)?;
    let published = cache.commit_prompt(sa, &a)?;
    cache.free_sequence(sa)?;
    let s = cache.stats();
    println!(
        "A: {} tokens, {} pages published, {} cached",
        a.len(),
        published,
        s.pages_cached
    );

    // 2. B, warm: reuse A's first chunks.
    let hit = cache.lookup(&b)?;
    let sb = cache.create_sequence(SeqMode::Paged)?;
    let from = cache.attach(sb, &hit, &b)?;
    println!(
        "B: lookup matched {} tokens, reuses {} ({} pages), prefills {}..{}",
        hit.matched,
        hit.tokens,
        hit.pages,
        from,
        b.len()
    );
    if from != 16 || hit.pages != 4 {
        return Err(Failure::Mismatch("prefix hit"));
    }
    let mut warm = [0f32; (B_LEN - 16) * Q_ROW];
    prefill(
        &mut cache,
        sb,
        &b,
        from,
        &params,
        &mut max_err,
        Some(&mut warm),
    )?;

    // 3. Stored rows are exactly the reference quantizer's; every row of B (reused pages
    //    included) against the dense reference; digest.
    let mut row = [0f32; HD];
    for (pos, &tok) in b.iter().enumerate() {
        for kv in [Kv::K, Kv::V] {
            cache.read(sb, 0, kv, pos as u32, &mut row)?;
            if row != dequant_ref(&kv_row(tok, pos, kv)) {
                return Err(Failure::Mismatch(
                    "stored row differs from the int8 reference",
                ));
            }
        }
    }
    let mut crc = Crc32::new();
    let (mut q, mut out, mut scratch) = ([0f32; Q_ROW], [0f32; Q_ROW], [0f32; SCRATCH]);
    for t in 0..B_LEN {
        query_row(t, &mut q);
        cache.attention(sb, 0, t as u32, &q, &mut out, &params, &mut scratch)?;
        max_err = max_err.max(check_row(&b, t, &q, &out, None)?);
        crc.update_f32(&out);
    }

    // 4. B, cold, in a second sequence: the same bits as warm for the recomputed rows.
    let sc = cache.create_sequence(SeqMode::Paged)?;
    let mut cold = [0f32; (B_LEN - 16) * Q_ROW];
    prefill(
        &mut cache,
        sc,
        &b,
        0,
        &params,
        &mut max_err,
        Some(&mut cold),
    )?;
    let same = warm
        .iter()
        .zip(&cold)
        .all(|(w, c)| w.to_bits() == c.to_bits());
    println!(
        "B warm vs cold rows 16..24: {}",
        if same { "bit-identical" } else { "DIFFER" }
    );
    if !same {
        return Err(Failure::Mismatch("warm and cold prefill differ"));
    }
    cache.free_sequence(sc)?;

    // 5. Sliding window: 4 sinks + the last 8 positions, from position 23 on.
    let window = Window {
        sinks: 4,
        window: 8,
    };
    let released = cache.slide(sb, &window, (B_LEN - 1) as u32)?;
    let wparams = params.with_window(window.sinks, window.window);
    query_row(B_LEN - 1, &mut q);
    cache.attention(
        sb,
        0,
        (B_LEN - 1) as u32,
        &q,
        &mut out,
        &wparams,
        &mut scratch,
    )?;
    max_err = max_err.max(check_row(&b, B_LEN - 1, &q, &out, Some(window))?);
    let s = cache.stats();
    println!(
        "slide: released {} pages; used {}, cached {}, free {}, registered {}",
        released, s.pages_used, s.pages_cached, s.pages_free, s.pages_registered
    );
    if released != 3 {
        return Err(Failure::Mismatch(
            "slide released an unexpected number of pages",
        ));
    }
    println!(
        "max |paged - dense| = {:e} (tolerance {:e})",
        max_err, TOLERANCE
    );
    Ok(crc.finish())
}

const SCRATCH: usize = CFG.scratch_len(Q_HEADS, 1);

/// Prefills `prompt[from..]` of `seq` in chunks aligned to C: reserve, write K/V, attend the
/// chunk's queries, check them against the dense reference, optionally keep the outputs.
fn prefill(
    cache: &mut KvCache,
    seq: SeqId,
    prompt: &[u32],
    from: u32,
    params: &AttentionParams,
    max_err: &mut f32,
    mut keep: Option<&mut [f32]>,
) -> Result<(), Failure> {
    let mut q = [0f32; CHUNK as usize * Q_ROW];
    let mut out = [0f32; CHUNK as usize * Q_ROW];
    let mut scratch = [0f32; SCRATCH];
    for chunk in plan_prefill(from, prompt.len() as u32, CFG.chunk()) {
        let first = cache.reserve(seq, chunk.end - chunk.start)? as usize;
        let n = (chunk.end - chunk.start) as usize;
        for i in 0..n {
            let pos = first + i;
            let (k, v) = (
                kv_row(prompt[pos], pos, Kv::K),
                kv_row(prompt[pos], pos, Kv::V),
            );
            cache.write_kv(seq, 0, pos as u32, &k, &v)?;
            query_row(pos, &mut q[i * Q_ROW..(i + 1) * Q_ROW]);
        }
        let (q, out) = (&q[..n * Q_ROW], &mut out[..n * Q_ROW]);
        cache.attention(seq, 0, first as u32, q, out, params, &mut scratch)?;
        for i in 0..n {
            let rows = i * Q_ROW..(i + 1) * Q_ROW;
            let err = check_row(
                prompt,
                first + i,
                &q[rows.clone()],
                &out[rows.clone()],
                None,
            )?;
            *max_err = max_err.max(err);
            // Rows from the warm start (16) on are kept.
            if let (Some(keep), Some(k)) = (keep.as_deref_mut(), (first + i).checked_sub(16)) {
                keep[k * Q_ROW..][..Q_ROW].copy_from_slice(&out[rows]);
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Inputs: deterministic, integer-derived, exactly representable in f32
// ---------------------------------------------------------------------------------------------

/// A 32-bit integer hash (lowbias32).
fn mix(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

/// A value in [-2, 2) in steps of 1/64.
fn value(seed: u32) -> f32 {
    ((mix(seed) & 0xff) as i32 - 128) as f32 / 64.0
}

/// The K or V row of `token` at `pos` (a stand-in for a model: a shared prefix has shared rows).
fn kv_row(token: u32, pos: usize, kv: Kv) -> [f32; HD] {
    let salt = if kv == Kv::K {
        0x4b00_0000
    } else {
        0x5600_0000
    };
    core::array::from_fn(|d| value(mix(token ^ salt) ^ ((pos as u32) << 8 | d as u32)))
}

/// The query row (all heads) at `pos`.
fn query_row(pos: usize, q: &mut [f32]) {
    for (j, x) in q.iter_mut().enumerate() {
        *x = value(0x5100_0000 ^ (pos as u32) << 8 ^ j as u32);
    }
}

// ---------------------------------------------------------------------------------------------
// Dense reference, written independently of edgekv's kernels
// ---------------------------------------------------------------------------------------------

/// Quantizes a row to int8 (groups of [`GROUP`], ggml Q8_0 math: `d = amax / 127`, codes
/// `round(x / d)` half away from zero, scale stored as f16) and dequantizes it again.
fn dequant_ref(x: &[f32; HD]) -> [f32; HD] {
    let mut y = [0f32; HD];
    for (xs, ys) in x.chunks_exact(GROUP).zip(y.chunks_exact_mut(GROUP)) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(libm::fabsf(*v)));
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let scale = f16::from_f32(d).to_f32();
        for (y, x) in ys.iter_mut().zip(xs) {
            *y = f32::from(libm::roundf(x * id) as i8) * scale;
        }
    }
    y
}

/// The query as int8 keys score it: each group of [`GROUP`] values rounded to 16-bit codes of its
/// largest magnitude (`round(x · 32767 / amax) · amax / 32767`).
fn query_ref(q: &[f32]) -> [f32; HD] {
    let mut y = [0f32; HD];
    for (xs, ys) in q.chunks_exact(GROUP).zip(y.chunks_exact_mut(GROUP)) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(libm::fabsf(*v)));
        if amax > 0.0 {
            for (y, x) in ys.iter_mut().zip(xs) {
                *y = libm::roundf(x * (32767.0 / amax)) * (amax / 32767.0);
            }
        }
    }
    y
}

/// Checks one attention row of query position `t` over `prompt`'s keys against a two-pass dense
/// softmax; returns the largest difference, or a mismatch past [`TOLERANCE`].
fn check_row(
    prompt: &[u32],
    t: usize,
    q: &[f32],
    out: &[f32],
    window: Option<Window>,
) -> Result<f32, Failure> {
    let scale = 1.0 / libm::sqrtf(HD as f32);
    let keeps = |j: usize| window.is_none_or(|w| w.keeps(t as u32, j as u32));
    let mut err = 0f32;
    for (qh, oh) in q.chunks_exact(HD).zip(out.chunks_exact(HD)) {
        let qh = query_ref(qh);
        let score = |j: usize| {
            let k = dequant_ref(&kv_row(prompt[j], j, Kv::K));
            scale * qh.iter().zip(&k).map(|(a, b)| a * b).sum::<f32>()
        };
        let max = (0..=t)
            .filter(|&j| keeps(j))
            .map(score)
            .fold(f32::NEG_INFINITY, f32::max);
        let (mut sum, mut acc) = (0f32, [0f32; HD]);
        for j in (0..=t).filter(|&j| keeps(j)) {
            let w = libm::expf(score(j) - max);
            sum += w;
            let v = dequant_ref(&kv_row(prompt[j], j, Kv::V));
            for (a, v) in acc.iter_mut().zip(&v) {
                *a += w * v;
            }
        }
        for (a, o) in acc.iter().zip(oh) {
            let e = libm::fabsf(a / sum - o);
            if e > TOLERANCE || e.is_nan() {
                println!("row {} differs from the dense reference by {:e}", t, e);
                return Err(Failure::Mismatch(
                    "attention differs from the dense reference",
                ));
            }
            err = err.max(e);
        }
    }
    Ok(err)
}

/// CRC-32/ISO-HDLC (zlib's), the `crc` crate's table-less variant: no table in flash.
static CRC32: crc::Crc<u32, crc::NoTable> =
    crc::Crc::<u32, crc::NoTable>::new(&crc::CRC_32_ISO_HDLC);

/// A running CRC-32 of little-endian f32 bytes.
#[derive(Clone)]
struct Crc32(crc::Digest<'static, u32, crc::NoTable>);

impl Crc32 {
    fn new() -> Self {
        Crc32(CRC32.digest())
    }

    fn update_f32(&mut self, xs: &[f32]) {
        for x in xs {
            self.0.update(&x.to_le_bytes());
        }
    }

    fn finish(&self) -> u32 {
        self.0.clone().finalize()
    }
}

// SAFETY (of the `unsafe fn` cortex-m-rt requires for this handler): it only reports and exits.
#[exception]
unsafe fn HardFault(ef: &ExceptionFrame) -> ! {
    println!("HardFault at pc {:#010x}", ef.pc());
    process::exit(3)
}
