//! How much caller memory the forward pass needs, and how it is carved up.

use crate::config::LlamaConfig;
use crate::error::{Error, Result};
use crate::quant::BLOCK;

/// The caller buffers of a forward pass of up to `rows` tokens per call: `scratch` f32s
/// (activations, quantized activation rows, attention scratch) and `logits` f32s per returned
/// row. Computed by [`ScratchPlan::new`], a `const fn`, so static buffers can be sized at compile
/// time:
///
/// ```
/// use edgekv_llm::{LlamaConfig, ScratchPlan};
/// const PLAN: ScratchPlan = match ScratchPlan::new(&LlamaConfig::SMOLLM2_135M, 16, 16) {
///     Ok(p) => p,
///     Err(_) => panic!("plan"),
/// };
/// static SCRATCH_F32S: usize = PLAN.scratch; // e.g. `static mut SCRATCH: [f32; PLAN.scratch]`
/// assert_eq!(PLAN.logits_per_row, 49_152);
/// // 16 rows of 6,240 f32s; attention scratch 1,908 (1,332, and a query row rotated for rotated
/// // K) and 15,264 for a block of 8 query rows
/// assert_eq!(PLAN.scratch_bytes, 468_048);
/// # let _ = SCRATCH_F32S;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScratchPlan {
    /// Token rows per forward call.
    pub rows: usize,
    /// f32s of scratch.
    pub scratch: usize,
    /// f32s of logits per returned row (the vocabulary).
    pub logits_per_row: usize,
    /// Bytes of scratch (`4 × scratch`).
    pub scratch_bytes: usize,
}

/// f32s per token row of each part, in the order they are carved from the scratch buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowParts {
    pub(crate) embed: usize,
    pub(crate) q: usize,
    pub(crate) kv: usize,
    pub(crate) ffn: usize,
    /// Widest matmul input (for the quantized activation rows).
    pub(crate) widest: usize,
}

impl RowParts {
    pub(crate) const fn of(c: &LlamaConfig) -> Self {
        let q = c.heads * c.head_dim;
        let mut widest = c.embed;
        if c.ffn > widest {
            widest = c.ffn;
        }
        if q > widest {
            widest = q;
        }
        RowParts {
            embed: c.embed,
            q,
            kv: c.kv_heads * c.head_dim,
            ffn: c.ffn,
            widest,
        }
    }
}

const fn add(a: usize, b: usize) -> Result<usize> {
    match a.checked_add(b) {
        Some(v) => Ok(v),
        None => Err(Error::Unsupported("sizes overflow")),
    }
}

const fn mul(a: usize, b: usize) -> Result<usize> {
    match a.checked_mul(b) {
        Some(v) => Ok(v),
        None => Err(Error::Unsupported("sizes overflow")),
    }
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Err(e),
        }
    };
}

impl ScratchPlan {
    /// The plan for `config`, up to `rows` tokens per call, with a cache of `page_tokens`-token
    /// pages. Per row: the residual, the normed row and the attention output (`embed`, `embed`,
    /// `q_dim`), Q, K and V, gate and up (`ffn` each), the quantized activation row (`widest /
    /// 4` f32s of codes plus two f32s per 32 values: Q8_0 / Q8_1 scales and sums, or Q8_K's
    /// scale per 256 values and i16 sums per 16 values in the same room); plus one attention
    /// scratch (`heads × (page_tokens + 4 + 3 · head_dim)`: `edgekv::CacheConfig::scratch_len`
    /// and a rotated query row) with room for a block of `min(rows, BLOCK_ROWS)` query rows
    /// computed together (`CacheConfig::scratch_len` with rows: faster prefill, the same
    /// bits; see [`with_attention_rows`](Self::with_attention_rows) for less memory). Zero rows,
    /// a model wider than `u16` heads or sizes past `usize` are errors.
    ///
    /// # Errors
    ///
    /// [`Unsupported`](Error::Unsupported) for zero rows or page size, more than `u16` heads,
    /// widths that are not whole 32-blocks, or sizes that overflow `usize`.
    pub const fn new(config: &LlamaConfig, rows: usize, page_tokens: u16) -> Result<Self> {
        Self::with_attention_rows(config, rows, page_tokens, rows)
    }

    /// [`new`](Self::new) with attention's block of query rows (see `edgekv::attention::
    /// block_scratch_len`) at most `attention_rows` rows: 1 takes the least memory (each row
    /// alone: `min(rows, BLOCK_ROWS) · heads · (3 · head_dim + page_tokens + 4)` f32s fewer), up
    /// to `edgekv::attention::BLOCK_ROWS` the fastest prefill. The same results either way.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub const fn with_attention_rows(
        config: &LlamaConfig,
        rows: usize,
        page_tokens: u16,
        attention_rows: usize,
    ) -> Result<Self> {
        if rows == 0 || config.heads > u16::MAX as usize || page_tokens == 0 {
            return Err(Error::Unsupported("zero rows, pages or too many heads"));
        }
        if config.embed % BLOCK != 0 || config.ffn % BLOCK != 0 {
            return Err(Error::Unsupported("widths are not whole 32-blocks"));
        }
        let p = RowParts::of(config);
        let mut per_row = tri!(add(p.embed, p.embed));
        per_row = tri!(add(per_row, p.q));
        per_row = tri!(add(per_row, p.q));
        per_row = tri!(add(per_row, tri!(mul(p.kv, 2))));
        per_row = tri!(add(per_row, tri!(mul(p.ffn, 2))));
        per_row = tri!(add(per_row, p.widest / 4 + 2 * (p.widest / BLOCK)));
        let block = if attention_rows < rows {
            attention_rows
        } else {
            rows
        };
        let attn =
            scratch_config(config.head_dim, page_tokens).scratch_len(config.heads as u16, block);
        let scratch = tri!(add(tri!(mul(per_row, rows)), attn));
        let scratch_bytes = tri!(mul(scratch, 4));
        Ok(ScratchPlan {
            rows,
            scratch,
            logits_per_row: config.vocab,
            scratch_bytes,
        })
    }

    /// How many rows per call a scratch buffer of `len` f32s allows (0 if not even one), with
    /// attention's least scratch (what attention is left beyond that goes to its block of rows).
    pub const fn rows_for(config: &LlamaConfig, len: usize, page_tokens: u16) -> usize {
        let one = match ScratchPlan::with_attention_rows(config, 1, page_tokens, 1) {
            Ok(p) => p,
            Err(_) => return 0,
        };
        let two = match ScratchPlan::with_attention_rows(config, 2, page_tokens, 1) {
            Ok(p) => p,
            Err(_) => return 0,
        };
        let per_row = two.scratch - one.scratch;
        let fixed = one.scratch - per_row;
        if len < one.scratch {
            0
        } else {
            (len - fixed) / per_row
        }
    }
}

/// The scratch buffer carved into its parts for `n` rows.
pub(crate) struct Parts<'s> {
    pub(crate) x: &'s mut [f32],
    pub(crate) h: &'s mut [f32],
    pub(crate) q: &'s mut [f32],
    pub(crate) attn: &'s mut [f32],
    pub(crate) k: &'s mut [f32],
    pub(crate) v: &'s mut [f32],
    pub(crate) g: &'s mut [f32],
    pub(crate) u: &'s mut [f32],
    pub(crate) qs: &'s mut [i8],
    pub(crate) d: &'s mut [f32],
    pub(crate) s: &'s mut [f32],
    pub(crate) attn_scratch: &'s mut [f32],
}

fn take<'s>(buf: &mut &'s mut [f32], n: usize) -> Result<&'s mut [f32]> {
    let b = core::mem::take(buf);
    let (head, tail) = b
        .split_at_mut_checked(n)
        .ok_or(Error::BufferTooSmall { needed: n })?;
    *buf = tail;
    Ok(head)
}

impl<'s> Parts<'s> {
    /// Splits `scratch` for `n` rows (at most what it was planned for); attention gets the rest
    /// (at least its one-row scratch; more makes room for a block of rows).
    pub(crate) fn new(
        c: &LlamaConfig,
        n: usize,
        page_tokens: u16,
        scratch: &'s mut [f32],
    ) -> Result<Self> {
        let plan = ScratchPlan::with_attention_rows(c, n, page_tokens, 1)?;
        if scratch.len() < plan.scratch {
            return Err(
                if ScratchPlan::rows_for(c, scratch.len(), page_tokens) == 0 {
                    Error::BufferTooSmall {
                        needed: ScratchPlan::new(c, 1, page_tokens)?.scratch,
                    }
                } else {
                    Error::TooManyRows
                },
            );
        }
        let p = RowParts::of(c);
        let blocks = p.widest / BLOCK;
        let mut rest = scratch;
        let x = take(&mut rest, n * p.embed)?;
        let h = take(&mut rest, n * p.embed)?;
        let q = take(&mut rest, n * p.q)?;
        let attn = take(&mut rest, n * p.q)?;
        let k = take(&mut rest, n * p.kv)?;
        let v = take(&mut rest, n * p.kv)?;
        let g = take(&mut rest, n * p.ffn)?;
        let u = take(&mut rest, n * p.ffn)?;
        let codes = take(&mut rest, n * p.widest / 4)?;
        let d = take(&mut rest, n * blocks)?;
        let s = take(&mut rest, n * blocks)?;
        let attn_scratch = rest;
        Ok(Parts {
            x,
            h,
            q,
            attn,
            k,
            v,
            g,
            u,
            qs: bytemuck::cast_slice_mut(codes),
            d,
            s,
            attn_scratch,
        })
    }
}

/// A configuration whose attention scratch is the most any cache of this head and page size
/// needs (keys rotated: one rotated query row more), so that caches with or without rotation
/// work.
const fn scratch_config(head_dim: usize, page_tokens: u16) -> edgekv::CacheConfig {
    let shape = edgekv::Shape {
        layers: 1,
        kv_heads: 1,
        head_dim: head_dim as u16,
    };
    edgekv::CacheConfig::new(shape)
        .with_page_tokens(page_tokens)
        .with_rotations(edgekv::Rotation::Hadamard, edgekv::Rotation::None)
}
