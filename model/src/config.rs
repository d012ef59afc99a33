//! The model's hyper-parameters, read from GGUF metadata.

use candle_core::quantized::gguf_file::{Content, Value};

use crate::{Error, Result};

/// Llama hyper-parameters as the GGUF states them (SmolLM2-135M: 30 layers, embedding 576, FFN
/// 1536, 9 heads, 3 KV heads, head_dim 64, RoPE base 100000, RMS eps 1e-5, vocabulary 49152).
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
    /// Vocabulary size.
    pub vocab: usize,
    /// Training context length.
    pub context: usize,
    /// Beginning-of-sequence token id.
    pub bos: u32,
    /// End-of-sequence token id (`<|im_end|>` for SmolLM2-Instruct).
    pub eos: u32,
}

fn get<'c>(content: &'c Content, key: &str) -> Result<&'c Value> {
    content
        .metadata
        .get(key)
        .ok_or_else(|| Error::Model(format!("GGUF has no `{key}`")))
}

fn get_u32(content: &Content, key: &str) -> Result<usize> {
    Ok(get(content, key)?.to_u32()? as usize)
}

impl LlamaConfig {
    /// Reads the hyper-parameters of a `llama` GGUF. Other architectures, RoPE that does not cover
    /// the whole head (`rope.dimension_count` ≠ head_dim) and scaled RoPE are refused: this
    /// forward pass implements llama's plain RoPE (llama.cpp's type NORM: pairs of adjacent
    /// elements).
    pub fn from_gguf(content: &Content) -> Result<Self> {
        let arch = get(content, "general.architecture")?.to_string()?;
        if arch != "llama" {
            return Err(Error::Model(format!("architecture `{arch}`, not llama")));
        }
        let heads = get_u32(content, "llama.attention.head_count")?;
        let kv_heads = get_u32(content, "llama.attention.head_count_kv")?;
        let embed = get_u32(content, "llama.embedding_length")?;
        if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 || embed % heads != 0 {
            return Err(Error::Model(format!(
                "{heads} heads, {kv_heads} KV heads, embedding {embed}: not a GQA shape"
            )));
        }
        let head_dim = embed / heads;
        let rope_dim = get_u32(content, "llama.rope.dimension_count")?;
        if rope_dim != head_dim {
            return Err(Error::Model(format!(
                "RoPE over {rope_dim} of {head_dim} dimensions is not supported"
            )));
        }
        if content.metadata.contains_key("llama.rope.scaling.type") {
            return Err(Error::Model("scaled RoPE is not supported".into()));
        }
        let vocab = match content.metadata.get("llama.vocab_size") {
            Some(v) => v.to_u32()? as usize,
            None => get(content, "tokenizer.ggml.tokens")?.to_vec()?.len(),
        };
        Ok(LlamaConfig {
            layers: get_u32(content, "llama.block_count")?,
            embed,
            ffn: get_u32(content, "llama.feed_forward_length")?,
            heads,
            kv_heads,
            head_dim,
            rope_base: match content.metadata.get("llama.rope.freq_base") {
                Some(v) => v.to_f32()?,
                None => 10_000.0,
            },
            rms_eps: get(content, "llama.attention.layer_norm_rms_epsilon")?.to_f32()?,
            vocab,
            context: get_u32(content, "llama.context_length")?,
            bos: get_u32(content, "tokenizer.ggml.bos_token_id")? as u32,
            eos: get_u32(content, "tokenizer.ggml.eos_token_id")? as u32,
        })
    }

    /// The KV shape edgekv pages hold for this model.
    pub fn shape(&self) -> Result<edgekv::Shape> {
        let narrow = |x: usize, what: &str| {
            u16::try_from(x).map_err(|_| Error::Model(format!("{what} {x} exceeds u16")))
        };
        Ok(edgekv::Shape {
            layers: narrow(self.layers, "layers")?,
            kv_heads: narrow(self.kv_heads, "KV heads")?,
            head_dim: narrow(self.head_dim, "head_dim")?,
        })
    }
}
