//! The model: configuration and typed views of every weight, in place in the GGUF.

use core::fmt::Write;

use crate::config::{Arch, LlamaConfig};
use crate::error::{Error, Result};
use crate::gguf::{Gguf, Tensor, TensorType};
use crate::matmul::Matrix;
use crate::role::TensorRole;

/// Blocks the model may have (views are kept in a fixed array: no allocation).
pub const MAX_LAYERS: usize = 48;

/// A norm weight vector (F32 in the file, read in place).
#[derive(Debug, Clone, Copy)]
pub struct Norm<'a> {
    bytes: &'a [u8],
}

impl<'a> Norm<'a> {
    /// A norm over `bytes` (little-endian f32s), for tests.
    #[cfg(test)]
    pub(crate) fn from_bytes(bytes: &'a [u8]) -> Self {
        Norm { bytes }
    }

    /// Element `i`.
    #[inline]
    pub fn get(&self, i: usize) -> f32 {
        let b = &self.bytes[4 * i..4 * i + 4];
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / 4
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// One transformer block's weights.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    /// RMSNorm before attention.
    pub attn_norm: Norm<'a>,
    /// Query projection (`embed → heads × head_dim`).
    pub wq: Matrix<'a>,
    /// Key projection.
    pub wk: Matrix<'a>,
    /// Value projection.
    pub wv: Matrix<'a>,
    /// Attention output projection.
    pub wo: Matrix<'a>,
    /// RMSNorm before the FFN.
    pub ffn_norm: Norm<'a>,
    /// FFN gate (`embed → ffn`).
    pub gate: Matrix<'a>,
    /// FFN up.
    pub up: Matrix<'a>,
    /// FFN down (`ffn → embed`).
    pub down: Matrix<'a>,
}

/// The norms a Gemma 3 block has beyond a llama block's (F32 in the file, used as stored: the
/// converter folded Gemma's `1 + w` into them).
#[derive(Debug, Clone, Copy)]
pub struct GemmaNorms<'a> {
    /// RMSNorm of each query head (`head_dim`).
    pub q_norm: Norm<'a>,
    /// RMSNorm of each key head (`head_dim`).
    pub k_norm: Norm<'a>,
    /// RMSNorm of the attention output, before the residual add.
    pub post_attn: Norm<'a>,
    /// RMSNorm of the FFN output, before the residual add.
    pub post_ffn: Norm<'a>,
}

/// A llama model over a GGUF in memory: the configuration and views of every weight. Nothing is
/// copied; `'a` is the file's lifetime.
#[derive(Debug, Clone)]
pub struct Llama<'a> {
    config: LlamaConfig,
    blocks: [Option<Block<'a>>; MAX_LAYERS],
    gemma: [Option<GemmaNorms<'a>>; MAX_LAYERS],
    embedding: Matrix<'a>,
    output_norm: Norm<'a>,
    head: Matrix<'a>,
    fingerprint: u64,
    activations: Activations,
}

/// How the matmuls take their activation rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activations {
    /// Quantized to each weight type's activation type (Q8_0, Q8_1, or Q8_K for the K-quants)
    /// with integer dot products, as ggml's CPU backend computes them: the model's numerics,
    /// host and board.
    #[default]
    Quantized,
    /// In f32, against the dequantized weights, in eight fixed lanes (a reference that does not
    /// round activations to 8 bits, so that small KV errors are not buried under flipped
    /// activation roundings; same bits on every target, several times slower).
    F32,
}

/// A tensor name built on the stack (`blk.NN.` + suffix).
struct Name {
    buf: [u8; 64],
    len: usize,
}

impl Write for Name {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(core::fmt::Error)?;
        self.buf
            .get_mut(self.len..end)
            .ok_or(core::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

fn find<'a>(g: &Gguf<'a>, layer: Option<u16>, role: TensorRole) -> Result<Tensor<'a>> {
    let missing = Error::MissingTensor { layer, role };
    let mut name = Name {
        buf: [0; 64],
        len: 0,
    };
    match layer {
        Some(l) => write!(name, "blk.{l}.{}", role.name()),
        None => name.write_str(role.name()),
    }
    .map_err(|_| missing)?;
    let name = core::str::from_utf8(&name.buf[..name.len]).map_err(|_| missing)?;
    g.tensor(name).ok_or(missing)
}

fn matrix<'a>(
    g: &Gguf<'a>,
    layer: Option<u16>,
    role: TensorRole,
    cols: usize,
    rows: usize,
) -> Result<Matrix<'a>> {
    let t = find(g, layer, role)?;
    let bad = Error::TensorMismatch { layer, role };
    if t.ty == TensorType::F32 {
        return Err(bad);
    }
    Matrix::new(&t, cols, rows).ok_or(bad)
}

fn norm<'a>(g: &Gguf<'a>, layer: Option<u16>, role: TensorRole, len: usize) -> Result<Norm<'a>> {
    let t = find(g, layer, role)?;
    if t.ty != TensorType::F32 || t.dims != [len, 1, 1, 1] {
        return Err(Error::TensorMismatch { layer, role });
    }
    Ok(Norm { bytes: t.data })
}

impl<'a> Llama<'a> {
    /// The model in `gguf`: reads the configuration ([`LlamaConfig::from_gguf`]) and finds every
    /// weight with the shape it implies. The vocabulary is the token embedding's row count (a
    /// tokenizer list of another length is [`BadMetadata`](Error::BadMetadata)). The token
    /// embedding must be Q8_0 (it is read row by row for lookups); when `output.weight` is absent
    /// the embedding is also the LM head (tied).
    ///
    /// # Errors
    ///
    /// As [`LlamaConfig::from_gguf`]; [`TooManyLayers`](Error::TooManyLayers) past the layer limit;
    /// [`TensorMismatch`](Error::TensorMismatch) for a weight that is missing or has the wrong type or
    /// shape; [`BadMetadata`](Error::BadMetadata) for a vocabulary that disagrees with the embedding.
    pub fn new(gguf: &Gguf<'a>) -> Result<Self> {
        let mut config = LlamaConfig::from_gguf(gguf)?;
        let c = &config;
        if c.layers > MAX_LAYERS {
            return Err(Error::TooManyLayers(c.layers));
        }
        let emb = find(gguf, None, TensorRole::TokenEmbedding)?;
        let emb_bad = Error::TensorMismatch {
            layer: None,
            role: TensorRole::TokenEmbedding,
        };
        if emb.ty != TensorType::Q8_0 || emb.n_dims != 2 || emb.dims[0] != c.embed {
            return Err(emb_bad);
        }
        let vocab = emb.dims[1];
        if c.vocab != 0 && c.vocab != vocab {
            return Err(Error::BadMetadata("tokenizer.ggml.tokens"));
        }
        if u32::try_from(vocab).is_err() {
            return Err(emb_bad);
        }
        config.vocab = vocab;
        let c = config;
        let embedding = Matrix::new(&emb, c.embed, vocab).ok_or(emb_bad)?;
        let head = match gguf.tensor(TensorRole::Output.name()) {
            Some(_) => matrix(gguf, None, TensorRole::Output, c.embed, vocab)?,
            None => embedding,
        };
        let output_norm = norm(gguf, None, TensorRole::OutputNorm, c.embed)?;
        let mut blocks = [None; MAX_LAYERS];
        let mut gemma = [None; MAX_LAYERS];
        if let Arch::Gemma3(_) = c.arch {
            for (i, slot) in gemma.iter_mut().take(c.layers).enumerate() {
                let l = Some(i as u16);
                use TensorRole::*;
                *slot = Some(GemmaNorms {
                    q_norm: norm(gguf, l, AttnQNorm, c.head_dim)?,
                    k_norm: norm(gguf, l, AttnKNorm, c.head_dim)?,
                    post_attn: norm(gguf, l, AttnPostNorm, c.embed)?,
                    post_ffn: norm(gguf, l, FfnPostNorm, c.embed)?,
                });
            }
        }
        let (e, q, kv, f) = (c.embed, c.q_dim(), c.kv_dim(), c.ffn);
        for (i, slot) in blocks.iter_mut().take(c.layers).enumerate() {
            let l = Some(i as u16);
            use TensorRole::*;
            *slot = Some(Block {
                attn_norm: norm(gguf, l, AttnNorm, e)?,
                wq: matrix(gguf, l, AttnQ, e, q)?,
                wk: matrix(gguf, l, AttnK, e, kv)?,
                wv: matrix(gguf, l, AttnV, e, kv)?,
                wo: matrix(gguf, l, AttnOutput, q, e)?,
                ffn_norm: norm(gguf, l, FfnNorm, e)?,
                gate: matrix(gguf, l, FfnGate, e, f)?,
                up: matrix(gguf, l, FfnUp, e, f)?,
                down: matrix(gguf, l, FfnDown, f, e)?,
            });
        }
        // Namespace for the prefix index: the file's length and header/metadata bytes.
        let bytes = gguf.bytes();
        let head_bytes = &bytes[..gguf.data_offset().min(bytes.len())];
        let fingerprint =
            edgekv::prefix::namespace(&[&(bytes.len() as u64).to_le_bytes(), head_bytes]);
        Ok(Llama {
            config: c,
            blocks,
            gemma,
            embedding,
            output_norm,
            head,
            fingerprint,
            activations: Activations::Quantized,
        })
    }

    /// This model with its matmuls' activations `a` (what the boards run is
    /// [`Activations::Quantized`], the default).
    pub fn with_activations(mut self, a: Activations) -> Self {
        self.activations = a;
        self
    }

    /// How the matmuls take their activations.
    pub fn activations(&self) -> Activations {
        self.activations
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// A 64-bit fingerprint of the model (file length, header, metadata and tensor table): the
    /// prefix-index namespace and snapshot fingerprint for caches of this model.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Block `i`'s weights.
    pub fn block(&self, i: usize) -> Option<&Block<'a>> {
        self.blocks.get(i)?.as_ref()
    }

    /// Block `i`'s Gemma 3 norms (`None` for a llama model).
    pub fn gemma_norms(&self, i: usize) -> Option<&GemmaNorms<'a>> {
        self.gemma.get(i)?.as_ref()
    }

    /// The token embedding (Q8_0, `vocab` rows of `embed`).
    pub fn embedding(&self) -> &Matrix<'a> {
        &self.embedding
    }

    /// The final norm.
    pub fn output_norm(&self) -> &Norm<'a> {
        &self.output_norm
    }

    /// The LM head (the embedding when tied).
    pub fn head(&self) -> &Matrix<'a> {
        &self.head
    }
}
