//! A llama and Gemma 3 forward pass over a GGUF file held in memory, with keys and values in
//! edgekv pages: `no_std`, no allocation, one thread (with the feature `std`, the matmuls' output
//! rows over `matmul::set_threads` threads); unsafe code only in the matmul kernels
//! (`arch`: Helium `asm!` on the Cortex-M55 / M85, AVX2 intrinsics on x86-64, each block with its
//! `// SAFETY:` argument; the portable matmuls, which Miri runs, are their reference bit for bit).
//!
//! - [`gguf`]: a GGUF v3 reader that validates the header, metadata and tensor table in place
//!   and hands out typed views of the weights (no copies); bad files are precise
//!   [`GgufError`]s.
//! - [`Llama`]: the model's configuration and weight views ([`LlamaConfig`] from metadata;
//!   [`Arch`] `llama` or `gemma3`, whose [`Gemma3`] parameters give the sliding window, the layer
//!   pattern and each layer kind's RoPE base; [`LlamaConfig::cache_config`] the cache layout it
//!   needs: one group, or Gemma 3's sliding-window and global layer groups).
//! - [`KvStore`]: the cache the forward pass works over, an [`edgekv::KvCache`] or a
//!   layer-grouped [`edgekv::GroupedCache`].
//! - [`Llama::forward`]: embedding, RMSNorm, RoPE (type NORM), Q/K/V projections, K/V rows into
//!   the cache ([`edgekv::KvCache::write_kv`]), attention over pages
//!   ([`edgekv::KvCache::attention`]), output projection, SwiGLU FFN, residuals, final norm and
//!   the (tied) LM head; for `gemma3` also q/k norms per head, NEOX RoPE with a base per layer
//!   kind, sliding-window attention on five of every six layers, post-attention and post-FFN
//!   norms, a GELU-gated FFN and embeddings scaled by `√embed`, as llama.cpp computes them.
//!   Matmuls follow ggml's CPU reference arithmetic for weights in F32,
//!   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K: each activation row quantized to the
//!   weight type's activation type (Q8_0, Q8_1 or Q8_K, [`quant`]), exact integer block sums,
//!   scales combined in f32 in the generic dot products' order ([`matmul`]).
//! - [`ScratchPlan`]: how many f32s of scratch and logits the caller provides, a `const fn`.
//! - [`Engine`]: prefill in chunks aligned to absolute positions, prefix reuse through the
//!   cache's verified index, decode and generation ([`Sampling`]: greedy or seeded top-k).
//! - [`chat`]: a scripted chat (system prompt restored from a snapshot image, turns continued or
//!   started anew over its reused pages, an optional cold start to compare) reporting each step
//!   with its cost, the same code on the host and on a board.
//!
//! Determinism: fixed operation order, no fused multiply-adds, transcendentals from `libm`, so
//! the same inputs give the same bits on the host and on a Cortex-M. Each token row is computed
//! alone, so chunked prefill and prefix reuse give the same bits as one cold pass.

#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![deny(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::missing_errors_doc)]

mod arch;
pub mod chat;
mod config;
mod error;
mod forward;
pub mod gguf;
mod kv;
pub mod matmul;
mod model;
pub mod ops;
mod plan;
pub mod quant;
mod role;
mod sample;
mod session;
/// The f32 loops around the matmuls on subnormal inputs, as a digest the boards must equal
/// (feature `matmul-check`).
#[cfg(feature = "matmul-check")]
pub mod subnormal_check;

pub use config::{Arch, Gemma3, LlamaConfig};
pub use error::{Error, Result};
pub use forward::{Logits, MAX_HEAD_DIM};
pub use gguf::{Gguf, GgufError};
pub use kv::KvStore;
pub use model::{Activations, Block, GemmaNorms, Llama, MAX_LAYERS, Norm};
pub use plan::ScratchPlan;
pub use role::TensorRole;
pub use sample::{MAX_TOP_K, Pcg32, Sampling, argmax};
pub use session::Engine;
