//! The model's hyper-parameters, read from GGUF metadata: `llama` here, `gemma3` in
//! [`gemma3`].

mod gemma3;

pub use gemma3::Gemma3;

use edgekv::{CacheConfig, ElementFormat, GroupWindow, LayerGroup, Layers};

use crate::error::{Error, Result};
use crate::gguf::{Gguf, Value};

/// The architecture a GGUF names (`general.architecture`), with what only it has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arch {
    /// `llama` (SmolLM2): RMSNorm, RoPE type NORM, SwiGLU FFN.
    Llama,
    /// `gemma3` (Gemma 3): q/k norms, post-attention and post-FFN norms, GELU-gated FFN,
    /// embeddings scaled by `√embed`, NEOX RoPE with a base per layer kind, sliding-window
    /// layers beside global ones.
    Gemma3(Gemma3),
}

/// Llama hyper-parameters as the GGUF states them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LlamaConfig {
    /// Transformer blocks.
    pub layers: usize,
    /// Hidden size.
    pub embed: usize,
    /// Feed-forward hidden size.
    pub ffn: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// RoPE frequency base.
    pub rope_base: f32,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Vocabulary size (rows of the token embedding).
    pub vocab: usize,
    /// Training context length.
    pub context: usize,
    /// Beginning-of-sequence token id.
    pub bos: u32,
    /// End-of-sequence token id (`<|im_end|>` for SmolLM2-Instruct).
    pub eos: u32,
    /// The architecture and its own parameters.
    pub arch: Arch,
}

impl LlamaConfig {
    /// SmolLM2-135M-Instruct, as its GGUF states it (for sizing buffers at compile time).
    pub const SMOLLM2_135M: LlamaConfig = LlamaConfig {
        layers: 30,
        embed: 576,
        ffn: 1536,
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        rope_base: 100_000.0,
        rms_eps: 1e-5,
        vocab: 49_152,
        context: 8192,
        bos: 1,
        eos: 2,
        arch: Arch::Llama,
    };

    /// Reads the hyper-parameters of a `llama` or `gemma3` GGUF (for `gemma3` see
    /// [`Gemma3::config_from_gguf`]). Refused: another architecture
    /// ([`WrongArchitecture`](Error::WrongArchitecture)), a missing key
    /// ([`MissingMetadata`](Error::MissingMetadata)) or one of the wrong type
    /// ([`BadMetadata`](Error::BadMetadata)), shapes that are not grouped-query attention with
    /// even head dimensions, RoPE over part of the head or scaled RoPE
    /// ([`Unsupported`](Error::Unsupported)). The vocabulary size comes from the token
    /// embedding's shape (checked by [`Llama::new`](crate::Llama::new)).
    ///
    /// # Errors
    ///
    /// [`WrongArchitecture`](Error::WrongArchitecture), [`MissingMetadata`](Error::MissingMetadata),
    /// [`BadMetadata`](Error::BadMetadata), [`Unsupported`](Error::Unsupported), as above.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Self> {
        let arch = g
            .get("general.architecture")
            .ok_or(Error::MissingMetadata("general.architecture"))?;
        match arch.as_bytes() {
            Some(b"llama") => {}
            Some(b"gemma3") => return Gemma3::config_from_gguf(g),
            _ => return Err(Error::WrongArchitecture),
        }
        let heads = uint(g, "llama.attention.head_count")?;
        let kv_heads = uint(g, "llama.attention.head_count_kv")?;
        let embed = uint(g, "llama.embedding_length")?;
        if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 || embed % heads != 0 {
            return Err(Error::Unsupported(
                "heads, KV heads and embedding are not GQA",
            ));
        }
        let head_dim = embed / heads;
        if head_dim % 2 != 0 {
            return Err(Error::Unsupported("odd head dimension"));
        }
        if let Some(v) = g.get("llama.rope.dimension_count") {
            let rope = v
                .as_u64()
                .ok_or(Error::BadMetadata("llama.rope.dimension_count"))?;
            if rope != head_dim as u64 {
                return Err(Error::Unsupported("RoPE over part of the head"));
            }
        }
        if g.get("llama.rope.scaling.type").is_some() {
            return Err(Error::Unsupported("scaled RoPE"));
        }
        let layers = uint(g, "llama.block_count")?;
        let ffn = uint(g, "llama.feed_forward_length")?;
        if layers == 0 || ffn == 0 {
            return Err(Error::Unsupported("zero layers or FFN size"));
        }
        let rope_base = match g.get("llama.rope.freq_base") {
            Some(v) => v
                .as_f32()
                .ok_or(Error::BadMetadata("llama.rope.freq_base"))?,
            None => 10_000.0,
        };
        let rms_eps = float(g, "llama.attention.layer_norm_rms_epsilon")?;
        let vocab = match g.get("tokenizer.ggml.tokens") {
            Some(Value::Array(a)) => {
                usize::try_from(a.len()).map_err(|_| Error::BadMetadata("tokenizer.ggml.tokens"))?
            }
            Some(_) => return Err(Error::BadMetadata("tokenizer.ggml.tokens")),
            None => 0,
        };
        let id = |key: &'static str| -> Result<u32> {
            let v = uint(g, key)?;
            u32::try_from(v).map_err(|_| Error::BadMetadata(key))
        };
        Ok(LlamaConfig {
            layers,
            embed,
            ffn,
            heads,
            kv_heads,
            head_dim,
            rope_base,
            rms_eps,
            vocab,
            context: uint(g, "llama.context_length")?,
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            arch: Arch::Llama,
        })
    }

    /// Query row width (`heads × head_dim`).
    pub const fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    /// K or V row width (`kv_heads × head_dim`).
    pub const fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// The KV shape edgekv pages hold for this model.
    /// A `const fn`, so static buffers can be planned from a known configuration.
    ///
    /// # Errors
    ///
    /// [`Unsupported`](Error::Unsupported) when layers, KV heads or the head dimension exceed `u16`.
    pub const fn shape(&self) -> Result<edgekv::Shape> {
        let max = u16::MAX as usize;
        if self.layers > max || self.kv_heads > max || self.head_dim > max {
            return Err(Error::Unsupported("dims past u16"));
        }
        Ok(edgekv::Shape {
            layers: self.layers as u16,
            kv_heads: self.kv_heads as u16,
            head_dim: self.head_dim as u16,
        })
    }
}

impl LlamaConfig {
    /// The cache configuration this model's layers need, with `k` and `v` pages: every layer
    /// alike for `llama`; for `gemma3` the sliding-window layers in the base group (window
    /// [`Gemma3::sliding_window`], no sinks, pages released as positions leave it) and the
    /// global layers (every [`Gemma3::period`]-th) in a second group keeping every position,
    /// both with these formats (an `edgekv::GroupedCache` holds it). Page size, sequences,
    /// chunk and namespace are the caller's to set.
    ///
    /// # Errors
    ///
    /// As [`LlamaConfig::shape`].
    pub fn cache_config(&self, k: ElementFormat, v: ElementFormat) -> Result<CacheConfig> {
        let base = CacheConfig::new(self.shape()?).with_formats(k, v);
        Ok(match self.arch {
            Arch::Llama => base,
            Arch::Gemma3(g) => base
                .with_window(GroupWindow::new(g.sliding_window, 0))
                .with_group(
                    LayerGroup::new(Layers::Every {
                        period: g.period,
                        first: g.period - 1,
                    })
                    .with_formats(k, v),
                ),
        })
    }
}

pub(crate) fn uint(g: &Gguf<'_>, key: &'static str) -> Result<usize> {
    let v = g.get(key).ok_or(Error::MissingMetadata(key))?;
    v.as_u64()
        .and_then(|v| usize::try_from(v).ok())
        .ok_or(Error::BadMetadata(key))
}

pub(crate) fn float(g: &Gguf<'_>, key: &'static str) -> Result<f32> {
    let v = g.get(key).ok_or(Error::MissingMetadata(key))?;
    v.as_f32().ok_or(Error::BadMetadata(key))
}
