//! The roles of a model's tensors: what the model reads and what errors name, below both.

/// Which tensor of the model (for errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorRole {
    /// `token_embd.weight` (Q8_0 or F32... only Q8_0 is read).
    TokenEmbedding,
    /// `output_norm.weight`.
    OutputNorm,
    /// `output.weight` (absent: the embedding is the LM head).
    Output,
    /// `blk.N.attn_norm.weight`.
    AttnNorm,
    /// `blk.N.attn_q.weight`.
    AttnQ,
    /// `blk.N.attn_k.weight`.
    AttnK,
    /// `blk.N.attn_v.weight`.
    AttnV,
    /// `blk.N.attn_output.weight`.
    AttnOutput,
    /// `blk.N.ffn_norm.weight`.
    FfnNorm,
    /// `blk.N.ffn_gate.weight`.
    FfnGate,
    /// `blk.N.ffn_up.weight`.
    FfnUp,
    /// `blk.N.ffn_down.weight`.
    FfnDown,
    /// `blk.N.attn_q_norm.weight` (Gemma 3: RMSNorm of each query head).
    AttnQNorm,
    /// `blk.N.attn_k_norm.weight` (Gemma 3: RMSNorm of each key head).
    AttnKNorm,
    /// `blk.N.post_attention_norm.weight` (Gemma 3: RMSNorm of the attention output).
    AttnPostNorm,
    /// `blk.N.post_ffw_norm.weight` (Gemma 3: RMSNorm of the FFN output).
    FfnPostNorm,
}

impl TensorRole {
    /// The GGUF name's suffix (after `blk.N.` for block tensors).
    pub const fn name(self) -> &'static str {
        match self {
            TensorRole::TokenEmbedding => "token_embd.weight",
            TensorRole::OutputNorm => "output_norm.weight",
            TensorRole::Output => "output.weight",
            TensorRole::AttnNorm => "attn_norm.weight",
            TensorRole::AttnQ => "attn_q.weight",
            TensorRole::AttnK => "attn_k.weight",
            TensorRole::AttnV => "attn_v.weight",
            TensorRole::AttnOutput => "attn_output.weight",
            TensorRole::FfnNorm => "ffn_norm.weight",
            TensorRole::FfnGate => "ffn_gate.weight",
            TensorRole::FfnUp => "ffn_up.weight",
            TensorRole::FfnDown => "ffn_down.weight",
            TensorRole::AttnQNorm => "attn_q_norm.weight",
            TensorRole::AttnKNorm => "attn_k_norm.weight",
            TensorRole::AttnPostNorm => "post_attention_norm.weight",
            TensorRole::FfnPostNorm => "post_ffw_norm.weight",
        }
    }
}
