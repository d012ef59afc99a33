//! The forward pass: `edgekv-llm`'s (the code the boards run) over the model file held in memory.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use edgekv::SeqId;
use edgekv_llm::{Gguf, KvStore, ScratchPlan};

use crate::{Error, LlamaConfig, Result};

pub use edgekv_llm::{Activations, Logits};

/// Token rows per call of the inner forward pass: longer calls are run in pieces of this many
/// rows (every row is computed alone, so the split does not change the bits), which bounds the
/// scratch to about 1.6 MB for SmolLM2-135M.
pub(crate) const ROWS_PER_PIECE: usize = 64;

/// A llama model loaded from GGUF: `edgekv-llm`'s forward pass over the file's bytes in place
/// (weights stay quantized where they are; matmuls as ggml's CPU reference computes them).
pub struct Llama {
    inner: edgekv_llm::Llama<'static>,
    file: &'static [u8],
}

impl std::fmt::Debug for Llama {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llama")
            .field("config", self.config())
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

/// The bytes of a model file, read once per process and kept for its lifetime (as a
/// memory-mapped file would be): loading the same file again shares them.
fn file_bytes(path: &Path) -> Result<&'static [u8]> {
    static FILES: Mutex<Vec<(PathBuf, &'static [u8])>> = Mutex::new(Vec::new());
    let missing = |e: std::io::Error| {
        Error::Model(format!(
            "cannot open {} ({e}); run model/fetch-model.sh",
            path.display()
        ))
    };
    let key = path.canonicalize().map_err(missing)?;
    let mut files = FILES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, bytes)) = files.iter().find(|(p, _)| *p == key) {
        return Ok(bytes);
    }
    let bytes: &'static [u8] = std::fs::read(&key).map_err(missing)?.leak();
    files.push((key, bytes));
    Ok(bytes)
}

impl Llama {
    /// Loads a llama GGUF (read into memory once per process). Other architectures, tensor types
    /// and shapes, partial or scaled RoPE are refused with the reader's precise error.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Self::from_bytes(file_bytes(path.as_ref())?)
    }

    /// The model in a GGUF file's bytes.
    pub fn from_bytes(bytes: &'static [u8]) -> Result<Self> {
        let gguf = Gguf::parse(bytes).map_err(edgekv_llm::Error::from)?;
        Ok(Llama {
            inner: edgekv_llm::Llama::new(&gguf)?,
            file: bytes,
        })
    }

    /// The GGUF file's bytes (its metadata: tokenizer, chat template).
    pub fn file(&self) -> &'static [u8] {
        self.file
    }

    /// This model with its matmuls' activations `a`: [`Activations::F32`] is the low-noise
    /// reference for fidelity measurements (the default, quantized, is the model's numerics).
    pub fn with_activations(self, a: Activations) -> Self {
        Llama {
            inner: self.inner.with_activations(a),
            file: self.file,
        }
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        self.inner.config()
    }

    /// A 64-bit fingerprint of the model (file length, header, metadata and tensor table): the
    /// prefix namespace of caches for this model.
    pub fn fingerprint(&self) -> u64 {
        self.inner.fingerprint()
    }

    /// The `no_std` model this wraps (the boards' type).
    pub fn inner(&self) -> &edgekv_llm::Llama<'static> {
        &self.inner
    }

    /// Runs `tokens` at positions `[len, len + n)` of `seq`, where `len` is the sequence's
    /// length: writes each layer's K (after RoPE) and V rows into the cache (an
    /// [`edgekv::KvCache`], or an [`edgekv::GroupedCache`] for models with windowed layers),
    /// attends over the cache's pages, and returns the requested logits (`vocab` f32 per row).
    /// Each token row is computed alone, so splitting a prompt across calls gives the same bits.
    ///
    /// All or nothing: on an error the sequence is truncated back to `len`.
    pub fn forward<C: KvStore + ?Sized>(
        &self,
        cache: &mut C,
        seq: SeqId,
        tokens: &[u32],
        logits: Logits,
    ) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(edgekv_llm::Error::Empty.into());
        }
        let start = cache.seq_len(seq)?;
        let rows = tokens.len().min(ROWS_PER_PIECE);
        let plan = ScratchPlan::new(self.config(), rows, cache.page_tokens())?;
        let mut scratch = vec![0f32; plan.scratch];
        let vocab = plan.logits_per_row;
        let mut out = vec![0f32; logits.rows(tokens.len()) * vocab];
        let pieces = tokens.len().div_ceil(rows);
        for (i, piece) in tokens.chunks(rows).enumerate() {
            let (want, at) = match logits {
                Logits::All => (Logits::All, i * rows * vocab),
                Logits::Last if i + 1 == pieces => (Logits::Last, 0),
                _ => (Logits::None, 0),
            };
            let r = self
                .inner
                .forward(cache, seq, piece, &mut scratch, want, &mut out[at..]);
            if let Err(e) = r {
                // Earlier pieces were written; their positions are within the sequence.
                let _ = cache.truncate(seq, start);
                return Err(e.into());
            }
        }
        Ok(out)
    }
}
