//! Writing and reading K/V rows, and attention over a sequence's pages. Buffer lengths are in
//! elements (`float` or `uint16_t` f16 bits), `[n][kv_heads][head_dim]` token-major.

use edgekv::attention::AttentionParams;
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
/// reserved. Rows are converted (rounded to nearest even) or quantized to the page format, as
/// each `EKV_FORMAT_*` states (per group, block or tile of each head row: a row's stored bytes
/// depend on that row alone), after the half's rotation if any. A page shared with another
/// sequence (fork, attached prefix) or published for prefix reuse is copied first
/// (copy-on-write): the write is never seen through another sequence.
///
/// Errors: `EKV_ERR_UNKNOWN_SEQUENCE`, `EKV_ERR_LAYER_OUT_OF_RANGE`, `EKV_ERR_LENGTH_MISMATCH`
/// (`elems` not whole rows), `EKV_ERR_POSITION_OUT_OF_RANGE` (past the reserved positions, or in
/// pages released by `ekv_seq_slide`), `EKV_ERR_OUT_OF_PAGES` (no page for a copy-on-write; writes
/// into positions `ekv_seq_reserve` just reserved never need one, see there). All or nothing: on
/// error no row was written.
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

/// As `ekv_write_f32`, with IEEE binary16 values given as their `uint16_t` bit patterns: stored
/// bit for bit in f16 pages; for other formats widened to f32 exactly first (the same bytes as
/// `ekv_write_f32` of the widened values).
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

/// Writes K and V rows (f32, `elems` each) of one layer for the same positions in one call,
/// converted as `ekv_write_f32` does. Both are checked before either is written: on error
/// neither K nor V changed.
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
/// V, converted (dequantized) from the page format as each `EKV_FORMAT_*` states: f32, f16 and
/// bf16 exactly; int8 `code * scale`, Q4_0 `(code - 8) * d`, Q4_1 `code * d + m`, FP8
/// `e4m3 value * s` (exact in f32); rotated halves rotated back in f32. These are the values
/// `ekv_attention` computes over (see there for the int8-key query rounding). Reserved positions
/// never written read as whatever their page last held (zeros in a fresh arena).
///
/// Errors: `EKV_ERR_UNKNOWN_SEQUENCE`, `EKV_ERR_LAYER_OUT_OF_RANGE`, `EKV_ERR_LENGTH_MISMATCH`
/// (`elems` not whole rows), `EKV_ERR_POSITION_OUT_OF_RANGE` (past the reserved positions, or in
/// pages released by `ekv_seq_slide`); on error `out` is untouched.
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

/// As `ekv_read_f32`, into f16 bit patterns: each value as `ekv_read_f32` gives it, rounded to
/// nearest even (f16 pages: their bits as stored).
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
/// `1 / sqrt(head_dim)` (`1.0f / sqrtf((float)head_dim)`, correctly rounded: the Rust API's
/// default bits).
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

/// A configuration of one group with this page and head size (no rotation).
fn shape_config(page_tokens: u16, head_dim: u16) -> edgekv::CacheConfig {
    let shape = edgekv::Shape {
        layers: 1,
        kv_heads: 1,
        head_dim,
    };
    edgekv::CacheConfig::new(shape).with_page_tokens(page_tokens)
}

/// The `float`s of scratch `ekv_attention` needs without rotated keys:
/// `q_heads x (page_tokens + 4 + 2 x head_dim)` (running maxima and sums, a page of scores, a
/// later key segment's state for rows over 2,048 keys, the query quantized for int8 keys: 16-bit
/// codes and per-group scales). `ekv_cache_scratch_len` answers for a live cache in one query
/// (rotated keys, every layer group, blocks of rows). The scratch's contents on return are
/// unspecified.
#[unsafe(no_mangle)]
pub extern "C" fn ekv_attention_scratch_len(
    q_heads: u16,
    page_tokens: u16,
    head_dim: u16,
) -> usize {
    shape_config(page_tokens, head_dim).scratch_len(q_heads, 1)
}

/// The `float`s of scratch beyond `ekv_attention_scratch_len` (or
/// `ekv_cache_attention_scratch_len`) with which `ekv_attention` computes up to `rows` query rows
/// (at most 8) in one pass over the pages they share: `rows x q_heads x (3 x head_dim +
/// page_tokens + 4)` for two rows or more, else 0. Prefill gets faster (each K and V row read
/// once for all of the block's rows), the results stay those of one row at a time; attention
/// takes the largest block its scratch holds. `ekv_cache_scratch_len` gives the sum for a live
/// cache in one query.
#[unsafe(no_mangle)]
pub extern "C" fn ekv_attention_block_scratch_len(
    q_heads: u16,
    page_tokens: u16,
    head_dim: u16,
    rows: usize,
) -> usize {
    let c = shape_config(page_tokens, head_dim);
    c.scratch_len(q_heads, rows) - c.scratch_len(q_heads, 1)
}

/// The `float`s of scratch `ekv_attention` needs on this cache with `q_heads` query heads
/// (`q_heads x (page_tokens + 4 + 2 x head_dim)` with the cache's `page_tokens` and `head_dim`, and
/// `q_heads x head_dim` more when its keys are rotated; on a grouped cache the most any group
/// needs), written to `out`: `ekv_cache_scratch_len` with `rows` 1.
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
    // SAFETY: forwarded obligations.
    unsafe { ekv_cache_scratch_len(cache, q_heads, 1, out) }
}

/// The one scratch query: the `float`s of scratch with which `ekv_attention` on any layer of
/// this cache (any layer group of a grouped cache, rotated keys included) computes up to `rows`
/// query rows together (`rows` 0 or 1: one at a time, the least it takes; more rows, capped at
/// 8, make prefill faster with the same results), written to `out`.
///
/// Errors: `EKV_ERR_NULL`, `EKV_ERR_BAD_HANDLE`, `EKV_ERR_HEAD_MISMATCH` (`q_heads` not a
/// nonzero multiple of the cache's `kv_heads`).
///
/// # Safety
///
/// As `ekv_cache_attention_scratch_len`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekv_cache_scratch_len(
    cache: *mut EkvCache,
    q_heads: u16,
    rows: usize,
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
            Ok(cfg.scratch_len(q_heads, rows))
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
/// its keys and values in `layer`: query position `t` attends to keys `[0, t]` (or the window's
/// subset, see `ekv_attention_params_t`), query head `h` to KV head
/// `h / (q_heads / kv_heads)`. `q` and `out` are `[n][q_heads][head_dim]` floats (`q_elems`
/// each: `out_elems` must equal `q_elems`); `scratch` holds at least
/// `ekv_cache_scratch_len(cache, q_heads, 1)` floats (more, `ekv_cache_scratch_len(cache,
/// q_heads, rows)`, computes up to 8 rows together). On a grouped cache the layer's group's
/// window applies when the parameters set none.
///
/// Numerics, for a C reference to model:
/// * Keys and values are the stored ones, as `ekv_read_f32` returns them (f16, bf16, FP8 and
///   4-bit pages are dequantized inside the dot products, int8 and 4-bit values as they are
///   accumulated). Rotated keys: each query row is rotated alike; rotated values: each output
///   row is rotated back.
/// * Int8 keys (`EKV_FORMAT_INT8`) score against the query rounded once per row to 16-bit codes
///   per key group: per head and group of `group` values, with `amax = max|x|`, codes
///   `round_half_away_from_zero(x * (32767 / amax))` and group scale `amax / 32767 * scale`
///   (f32); a score is the sum over the groups, in order, of (query scale x key scale) x the
///   exact integer sum of query code x key code. Each query element is so off by up to
///   `amax / 65534` (1.5e-5 of its group's largest magnitude): a dense f32 reference with the
///   exact query differs by about that much (relative errors near 1e-4 are expected), one with
///   the query so rounded agrees within f32 rounding. A group with `amax` below 2^-60 counts as
///   zero; one holding an inf or a NaN gives NaN scores. Other key formats use the f32 query.
/// * Softmax runs online in f32, one rescale per page, with libm's `expf` bits; a weight below
///   2^-60 of the row's largest is 0, and accumulator elements below 2^-125 become zeros of
///   their sign (no subnormals on any target).
/// * Keys are visited in a fixed order, sums run in eight fixed lanes combined in a fixed tree,
///   and a row over 2,048 keys is computed in segments of 2,048 merged in order: a row's result
///   depends only on the row, its position and the keys and values, never on how a prompt is
///   chunked, on the rows computed with it, or on the CPU (x86-64 with or without AVX2/F16C,
///   Cortex-M: the same bits). It is not a sequential f32 loop: compare with a tolerance.
/// * Keys and values at reserved positions never written are whatever their page last held.
///
/// Errors: `EKV_ERR_NULL`, `EKV_ERR_OVERLAP`, `EKV_ERR_INVALID_ARGUMENT` (`reserved` nonzero,
/// sinks without a window), `EKV_ERR_UNKNOWN_SEQUENCE`, `EKV_ERR_LAYER_OUT_OF_RANGE`,
/// `EKV_ERR_HEAD_MISMATCH` (`q_heads` not a nonzero multiple of `kv_heads`),
/// `EKV_ERR_LENGTH_MISMATCH` (`q_elems` not whole rows, `out_elems` != `q_elems`, scratch too
/// short), `EKV_ERR_POSITION_OUT_OF_RANGE` (queries past the reserved positions, or a key the
/// window keeps in a page released by `ekv_seq_slide`). Everything, every key page any query
/// needs included, is checked before anything is computed: on error neither `out` nor
/// `scratch` was written.
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
