//! Attention over pages: causal, grouped-query, online softmax, dequantization fused into the dot
//! products, optional sliding window with attention sinks. See
//! [`KvCache::attention`](crate::KvCache::attention).
//!
//! Results are a function of the query row, its absolute position and the keys alone: keys are
//! visited in a fixed order (page by page, one softmax rescale per page), every sum runs in fixed
//! lanes or is an exact integer sum, `exp` has `libm::expf`'s bits (see `exp`) and no subnormal
//! number reaches the softmax state (see `floor`), so chunked and unchunked prefill give
//! identical bits, on the host and on a Cortex-M alike, with or without vector floats. On x86-64
//! with AVX2 and F16C the same source runs built for those instructions, again with the same
//! bits.
//!
//! The tree: `params` (what to compute), `page` (the loop over a sequence's pages and, per page,
//! scores, online softmax and weighted values), `kernels` (dot products and scaled accumulations
//! straight from page bytes, with each format's decoders from `crate::format`), `query` (the
//! query row quantized per key group for int8 keys: scores from exact integer sums), `exp` (the
//! exponential), `floor` (the weight and state floors). The ISA builds of the page loop are
//! chosen in `crate::arch`; the entry point, which resolves a sequence's pages, is
//! [`KvCache::attention`](crate::KvCache::attention).

#[cfg(not(feature = "small-code"))]
mod block;
mod dispatch;
#[cfg(not(feature = "small-code"))]
mod fast;
pub(crate) mod page;
mod params;
#[cfg(not(feature = "small-code"))]
mod scores;
#[cfg(feature = "small-code")]
mod small;

// `block_len`: the row blocks' scratch (not in `small-code` builds, whose rows go one by one,
// but for the threads of `std` builds).
pub use params::{AttentionParams, BLOCK_ROWS, Window};
#[cfg_attr(
    all(feature = "small-code", not(feature = "std")),
    allow(unused_imports)
)]
pub(crate) use params::{block_len, group_scratch_len};
#[allow(deprecated)]
pub use params::{block_scratch_len, scratch_len, scratch_len_for, scratch_len_rows};

/// Rows of a block (`attention::block`); one in `small-code` builds.
const fn block_rows() -> usize {
    #[cfg(not(feature = "small-code"))]
    return block::MAX_ROWS;
    #[cfg(feature = "small-code")]
    return 1;
}
