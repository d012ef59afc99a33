//! `gemma3` hyper-parameters, read from GGUF metadata as llama.cpp reads them (its
//! `src/models/gemma3.cpp` and `src/llama-hparams.*`): the sliding window, the layer pattern
//! (every sixth layer global, the default llama.cpp applies when the file names none) and the
//! RoPE base of each layer kind.

use super::{Arch, LlamaConfig, float, uint};
use crate::error::{Error, Result};
use crate::gguf::{Gguf, Value};

/// Layers per period of llama.cpp's default Gemma 3 pattern: the last of every six is global.
pub const GEMMA3_PERIOD: u16 = 6;

/// RoPE base of the sliding-window layers when the file names none (llama.cpp's
/// `rope_freq_base_train_swa` default).
pub const GEMMA3_LOCAL_ROPE_BASE: f32 = 10_000.0;

/// What a `gemma3` model has beyond a llama's dimensions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemma3 {
    /// Positions a sliding-window layer attends to: query `i` sees key `j` iff `j ≤ i` and
    /// `i − j < sliding_window`.
    pub sliding_window: u32,
    /// Layer `l` is global iff `l % period == period − 1` (6: layers 5, 11, 17, …).
    pub period: u16,
    /// RoPE base of the sliding-window layers (the global layers take
    /// [`LlamaConfig::rope_base`]).
    pub local_rope_base: f32,
}

impl Gemma3 {
    /// Whether `layer` attends to every position (else to the last
    /// [`sliding_window`](Self::sliding_window)).
    pub const fn is_global(&self, layer: usize) -> bool {
        let p = self.period as usize;
        layer % p == p - 1
    }

    /// The RoPE base of `layer` (`global` for a global layer, the local base otherwise).
    pub const fn rope_base(&self, layer: usize, global: f32) -> f32 {
        if self.is_global(layer) {
            global
        } else {
            self.local_rope_base
        }
    }

    /// Reads a `gemma3` GGUF's hyper-parameters: dimensions (the head dimension from
    /// `gemma3.attention.key_length`, equal to `value_length`), the RMSNorm epsilon, the RoPE base
    /// (`rope.freq_base`, 10,000 when absent; sliding layers `rope.freq_base_swa`, 10,000 when
    /// absent), `attention.sliding_window` (required) and the token ids. Refused with a precise
    /// error: a missing key ([`MissingMetadata`](Error::MissingMetadata)), a key of the wrong
    /// type ([`BadMetadata`](Error::BadMetadata)), and ([`Unsupported`](Error::Unsupported)) a
    /// layer pattern other than llama.cpp's default period of 6, a softcapping value, scaled
    /// RoPE or RoPE over part of the head, a window of 0, shapes that are not grouped-query
    /// attention.
    ///
    /// # Errors
    ///
    /// As above.
    pub fn config_from_gguf(g: &Gguf<'_>) -> Result<LlamaConfig> {
        let heads = uint(g, "gemma3.attention.head_count")?;
        let kv_heads = uint(g, "gemma3.attention.head_count_kv")?;
        let embed = uint(g, "gemma3.embedding_length")?;
        let head_dim = uint(g, "gemma3.attention.key_length")?;
        if uint(g, "gemma3.attention.value_length")? != head_dim {
            return Err(Error::Unsupported("key and value lengths differ"));
        }
        if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 || embed == 0 {
            return Err(Error::Unsupported("heads and KV heads are not GQA"));
        }
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(Error::Unsupported("odd head dimension"));
        }
        if let Some(v) = g.get("gemma3.rope.dimension_count") {
            let rope = v
                .as_u64()
                .ok_or(Error::BadMetadata("gemma3.rope.dimension_count"))?;
            if rope != head_dim as u64 {
                return Err(Error::Unsupported("RoPE over part of the head"));
            }
        }
        if g.get("gemma3.rope.scaling.type").is_some()
            || g.get("gemma3.rope.scaling.factor").is_some()
        {
            return Err(Error::Unsupported("scaled RoPE"));
        }
        for key in [
            "gemma3.final_logit_softcapping",
            "gemma3.attn_logit_softcapping",
        ] {
            if let Some(v) = g.get(key) {
                if v.as_f32().ok_or(Error::BadMetadata(key))? != 0.0 {
                    return Err(Error::Unsupported("logit softcapping"));
                }
            }
        }
        let period = pattern(g)?;
        let window = uint(g, "gemma3.attention.sliding_window")?;
        let sliding_window = u32::try_from(window)
            .map_err(|_| Error::BadMetadata("gemma3.attention.sliding_window"))?;
        if sliding_window == 0 {
            return Err(Error::Unsupported("a sliding window of 0"));
        }
        let layers = uint(g, "gemma3.block_count")?;
        let ffn = uint(g, "gemma3.feed_forward_length")?;
        if layers == 0 || ffn == 0 {
            return Err(Error::Unsupported("zero layers or FFN size"));
        }
        let base = |key: &'static str| -> Result<f32> {
            match g.get(key) {
                Some(v) => v.as_f32().ok_or(Error::BadMetadata(key)),
                None => Ok(GEMMA3_LOCAL_ROPE_BASE),
            }
        };
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
            rope_base: base("gemma3.rope.freq_base")?,
            rms_eps: float(g, "gemma3.attention.layer_norm_rms_epsilon")?,
            vocab,
            context: uint(g, "gemma3.context_length")?,
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            arch: Arch::Gemma3(Gemma3 {
                sliding_window,
                period,
                local_rope_base: base("gemma3.rope.freq_base_swa")?,
            }),
        })
    }
}

/// The layer pattern: llama.cpp's default period of 6 when the file names none; a pattern key
/// naming that same period is accepted, any other pattern (another period, a per-layer array) is
/// [`Unsupported`](Error::Unsupported).
fn pattern(g: &Gguf<'_>) -> Result<u16> {
    const KEY: &str = "gemma3.attention.sliding_window_pattern";
    match g.get(KEY) {
        None => Ok(GEMMA3_PERIOD),
        Some(Value::Array(_)) => Err(Error::Unsupported("a per-layer sliding-window pattern")),
        Some(v) => match v.as_u64() {
            Some(p) if p == GEMMA3_PERIOD as u64 => Ok(GEMMA3_PERIOD),
            Some(_) => Err(Error::Unsupported("a sliding-window pattern other than 6")),
            None => Err(Error::BadMetadata(KEY)),
        },
    }
}

#[cfg(test)]
#[path = "gemma3_tests.rs"]
mod tests;
