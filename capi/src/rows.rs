//! Writing and reading K/V rows, and attention over a sequence's pages. Buffer lengths are in
//! elements (`float` or `uint16_t` f16 bits), `[n][kv_heads][head_dim]` token-major.

use edgekv::attention::{AttentionParams, block_scratch_len, scratch_len, scratch_len_for};
use edgekv::{Element, SeqId};
use half::f16;

use super::handle::{EkvCache, Handle, dispatch};
use super::ptr::{Buf, disjoint, input};
use super::status::{
    EKV_ERR_HEAD_MISMATCH, EKV_ERR_INVALID_ARGUMENT, EkvStatus, Fail, Res, status,
};
use super::types::{EkvAttentionParams, EkvSeq, parse_kv};

/// Element types of the C buffers and their Rust element type.
pub(crate) trait CElem: Copy {
    /// The Rust element.
    type E: Element;
    /// The C buffer seen as Rust elements.
    fn view(s: &[Self]) -> &[Self::E];
    /// The C output buffer seen as Rust elements.
    fn view_mut(s: &mut [Self]) -> &mut [Self::E];
}

impl CElem for f32 {
    type E = f32;
    fn view(s: &[f32]) -> &[f32] {
        s
    }
    fn view_mut(s: &mut [f32]) -> &mut [f32] {
        s
    }
}

impl CElem for u16 {
    type E = f16;
    fn view(s: &[u16]) -> &[f16] {
        // Same size and alignment: cannot fail.
        bytemuck::cast_slice(s)
    }
    fn view_mut(s: &mut [u16]) -> &mut [f16] {
        bytemuck::cast_slice_mut(s)
    }
}

/// Writes rows of one layer's K or V.
///
/// # Safety
///
/// `cache` NULL or readable storage; `rows` NULL (with 0) or `elems` readable elements.
unsafe fn write<T: CElem>(
    cache: *mut EkvCache,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    start: u32,
    rows: *const T,
    elems: usize,
) -> EkvStatus {
    let r = (|| {
        let kv = parse_kv(kv)?;
        let rows = Buf::input(rows, elems)?;
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        h.with(|c, a| {
            let [s, d, m] = a.spans();
            disjoint(&[rows.span(), s, d, m])?;
            // SAFETY: readable by the caller's obligation, outside the cache's memory.
            let rows = T::view(unsafe { rows.get() });
            Ok(dispatch!(c, c => c.write(SeqId::from_raw(seq), layer, kv, start, rows))?)
        })
    })();
    status(r)
}

/// Writes K and V rows of one layer for the same positions (both checked before either is
/// written).
///
/// # Safety
///
/// As [`write`], for `k` and `v`.
unsafe fn write_kv<T: CElem>(
    cache: *mut EkvCache,
    seq: EkvSeq,
    layer: u16,
    start: u32,
    k: *const T,
    v: *const T,
    elems: usize,
) -> EkvStatus {
    let r = (|| {
        let (k, v) = (Buf::input(k, elems)?, Buf::input(v, elems)?);
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        h.with(|c, a| {
            let [s, d, m] = a.spans();
            disjoint(&[k.span(), s, d, m])?;
            disjoint(&[v.span(), s, d, m])?;
            // SAFETY: readable by the caller's obligation, outside the cache's memory (K and
            // V may overlap each other: both are only read).
            let (k, v) = unsafe { (T::view(k.get()), T::view(v.get())) };
            let seq = SeqId::from_raw(seq);
            Ok(dispatch!(c, c => c.write_kv(seq, layer, start, k, v))?)
        })
    })();
    status(r)
}

/// Reads rows of one layer's K or V.
///
/// # Safety
///
/// `cache` NULL or readable storage; `out` NULL (with 0) or `elems` writable elements.
unsafe fn read<T: CElem>(
    cache: *mut EkvCache,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    start: u32,
    out: *mut T,
    elems: usize,
) -> EkvStatus {
    let r = (|| {
        let kv = parse_kv(kv)?;
        let out = Buf::output(out, elems)?;
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        h.with(|c, a| {
            let [s, d, m] = a.spans();
            disjoint(&[out.span(), s, d, m])?;
            // SAFETY: writable by the caller's obligation, outside the cache's memory.
            let out = T::view_mut(unsafe { out.get_mut() });
            Ok(dispatch!(c, c => c.read(SeqId::from_raw(seq), layer, kv, start, out))?)
        })
    })();
    status(r)
}

/// Writes `elems` f32 values (`n` whole token rows of `kv_heads x head_dim`) to positions
/// `[start, start + n)` of layer `layer`'s K or V (`EKV_K` / `EKV_V`); positions must be
/// reserved. Rows are converted (rounded to nearest even) or quantized to the page format;
/// shared pages are copied first.
///
/// # Safety
///
/// `cache` is NULL or points to readable `ekv_cache_t` storage; `rows` is NULL (with `elems`
/// 0) or points to `elems` readable `float`s outside the cache's storage and arenas.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_write_f32(
    cache: *mut EkvCache,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    start: u32,
    rows: *const f32,
    elems: usize,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe { write(cache, seq, layer, kv, start, rows, elems) }
}

/// As `ekv_write_f32`, with IEEE binary16 values given as their `uint16_t` bit patterns.
///
/// # Safety
///
/// As `ekv_write_f32`, for `uint16_t`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_write_f16(
    cache: *mut EkvCache,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    start: u32,
    rows: *const u16,
    elems: usize,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe { write(cache, seq, layer, kv, start, rows, elems) }
}

/// Writes K and V rows (f32, `elems` each) of one layer for the same positions in one call.
///
/// # Safety
///
/// As `ekv_write_f32`, for both `k` and `v`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_write_kv_f32(
    cache: *mut EkvCache,
    seq: EkvSeq,
    layer: u16,
    start: u32,
    k: *const f32,
    v: *const f32,
    elems: usize,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe { write_kv(cache, seq, layer, start, k, v, elems) }
}

/// As `ekv_write_kv_f32`, with f16 bit patterns.
///
/// # Safety
///
/// As `ekv_write_kv_f32`, for `uint16_t`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_write_kv_f16(
    cache: *mut EkvCache,
    seq: EkvSeq,
    layer: u16,
    start: u32,
    k: *const u16,
    v: *const u16,
    elems: usize,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe { write_kv(cache, seq, layer, start, k, v, elems) }
}

/// Reads `elems` f32 values (whole rows) of positions `[start, start + n)` of one layer's K or
/// V, converted (dequantized) from the page format.
///
/// # Safety
///
/// `cache` as `ekv_write_f32`; `out` is NULL (with `elems` 0) or points to `elems` writable
/// `float`s outside the cache's storage and arenas.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_read_f32(
    cache: *mut EkvCache,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    start: u32,
    out: *mut f32,
    elems: usize,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe { read(cache, seq, layer, kv, start, out, elems) }
}

/// As `ekv_read_f32`, into f16 bit patterns.
///
/// # Safety
///
/// As `ekv_read_f32`, for `uint16_t`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_read_f16(
    cache: *mut EkvCache,
    seq: EkvSeq,
    layer: u16,
    kv: u32,
    start: u32,
    out: *mut u16,
    elems: usize,
) -> EkvStatus {
    // SAFETY: forwarded obligations.
    unsafe { read(cache, seq, layer, kv, start, out, elems) }
}

/// Fills `params` for full causal attention with `q_heads` query heads and scale
/// `1 / sqrt(head_dim)`.
///
/// # Safety
///
/// `params` (required) is NULL or writable for an `ekv_attention_params_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_attention_params_init(
    params: *mut EkvAttentionParams,
    q_heads: u16,
    head_dim: u16,
) -> EkvStatus {
    status(super::ptr::Out::new(params).map(|out| {
        let shape = edgekv::Shape {
            layers: 1,
            kv_heads: 1,
            head_dim,
        };
        let p = EkvAttentionParams {
            q_heads,
            reserved: 0,
            // The core's default (libm's sqrtf): the same bits as a Rust caller gets.
            scale: AttentionParams::new(shape, q_heads).scale,
            window_sinks: 0,
            window_size: 0,
        };
        // SAFETY: checked, writable by the caller's obligation.
        unsafe { out.set(p) }
    }))
}

/// The `float`s of scratch `ekv_attention` needs without rotated keys:
/// `q_heads x (page_tokens + 4 + 2 x head_dim)` (running maxima and sums, a page of scores, a
/// later key segment's state for rows over 2,048 keys, the query quantized for int8 keys). `ekv_cache_attention_scratch_len` answers for a cache, rotated
/// keys included (`q_heads x head_dim` more).
#[unsafe(no_mangle)]
pub extern "C" fn ekv_attention_scratch_len(
    q_heads: u16,
    page_tokens: u16,
    head_dim: u16,
) -> usize {
    scratch_len(q_heads, page_tokens, head_dim)
}

/// The `float`s of scratch beyond `ekv_attention_scratch_len` (or
/// `ekv_cache_attention_scratch_len`) with which `ekv_attention` computes up to `rows` query rows
/// (at most 8) in one pass over the pages they share: `rows x q_heads x (3 x head_dim +
/// page_tokens + 4)` for two rows or more, else 0. Prefill gets faster (each K and V row read
/// once for all of the block's rows), the results stay those of one row at a time; attention
/// takes the largest block its scratch holds.
#[unsafe(no_mangle)]
pub extern "C" fn ekv_attention_block_scratch_len(
    q_heads: u16,
    page_tokens: u16,
    head_dim: u16,
    rows: usize,
) -> usize {
    block_scratch_len(q_heads, page_tokens, head_dim, rows)
}

/// The `float`s of scratch `ekv_attention` needs on this cache with `q_heads` query heads
/// (`q_heads x (page_tokens + 4 + 2 x head_dim)` with the cache's `page_tokens` and `head_dim`, and
/// `q_heads x head_dim` more when its keys are rotated), written to `out`.
///
/// Errors: `EKV_ERR_NULL`, `EKV_ERR_BAD_HANDLE`, `EKV_ERR_HEAD_MISMATCH` (`q_heads` not a
/// nonzero multiple of the cache's `kv_heads`).
///
/// # Safety
///
/// `cache` is NULL or points to readable `ekv_cache_t` storage; `out` (required) is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_cache_attention_scratch_len(
    cache: *mut EkvCache,
    q_heads: u16,
    out: *mut usize,
) -> EkvStatus {
    // SAFETY: the caller's obligation (see `# Safety`).
    let h = unsafe { Handle::new(cache) };
    // SAFETY: `out` is NULL or writable (see `# Safety`).
    status(unsafe {
        super::cache::query(h, out, |c| {
            let cfg = *dispatch!(c, c => c.config());
            let kv_heads = cfg.shape.kv_heads;
            if q_heads == 0 || q_heads % kv_heads != 0 {
                return Err(Fail(EKV_ERR_HEAD_MISMATCH));
            }
            Ok(scratch_len_for(&cfg, q_heads))
        })
    })
}

/// The Rust parameters of C attention parameters.
fn rust_params(p: &EkvAttentionParams, head_dim: u16) -> Res<AttentionParams> {
    let shape = edgekv::Shape {
        layers: 1,
        kv_heads: 1,
        head_dim,
    };
    let base = AttentionParams::new(shape, p.q_heads).with_scale(p.scale);
    match (p.reserved, p.window_size, p.window_sinks) {
        (0, 0, 0) => Ok(base),
        (0, w, s) if w > 0 => Ok(base.with_window(s, w)),
        _ => Err(Fail(EKV_ERR_INVALID_ARGUMENT)),
    }
}

/// Causal attention of `n` query rows at absolute positions `[start, start + n)` of `seq` over
/// its keys and values in `layer`. `q` and `out` are `[n][q_heads][head_dim]` floats (`q_elems`
/// each: `out_elems` must equal `q_elems`); `scratch` holds at least
/// `ekv_attention_scratch_len(q_heads, page_tokens, head_dim)` floats (more, by
/// `ekv_attention_block_scratch_len`, computes several rows together). Results do not depend on how a
/// prompt is chunked.
///
/// # Safety
///
/// `cache` as `ekv_write_f32`; `q`, `out`, `scratch` NULL (with length 0) or valid for their
/// lengths, `out` and `scratch` writable; `out` and `scratch` must not overlap each other, `q`,
/// or the cache's storage and arenas (checked: `EKV_ERR_OVERLAP`); `params` NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_attention(
    cache: *mut EkvCache,
    seq: EkvSeq,
    layer: u16,
    start: u32,
    q: *const f32,
    q_elems: usize,
    out: *mut f32,
    out_elems: usize,
    params: *const EkvAttentionParams,
    scratch: *mut f32,
    scratch_elems: usize,
) -> EkvStatus {
    let r = (|| {
        // SAFETY: forwarded obligation; copied out at once.
        let p = *unsafe { input(params) }?;
        let q = Buf::input(q, q_elems)?;
        let out = Buf::output(out, out_elems)?;
        let scratch = Buf::output(scratch, scratch_elems)?;
        // SAFETY: the caller's obligation (see `# Safety`).
        let h = unsafe { Handle::new(cache) };
        h.with(|c, a| {
            let [s, d, m] = a.spans();
            disjoint(&[out.span(), scratch.span(), q.span(), s, d, m])?;
            // SAFETY: valid by the caller's obligation; pairwise disjoint and outside the
            // cache's memory (checked above).
            let (q, out, scratch) = unsafe { (q.get(), out.get_mut(), scratch.get_mut()) };
            let seq = SeqId::from_raw(seq);
            dispatch!(c, c => {
                let p = rust_params(&p, c.config().shape.head_dim)?;
                Ok(c.attention(seq, layer, start, q, out, &p, scratch)?)
            })
        })
    })();
    status(r)
}
