//! The llama forward pass with K/V in edgekv pages.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use candle_core::quantized::{QMatMul, gguf_file};
use candle_core::{Device, Module, Tensor};
use edgekv::attention::{AttentionParams, scratch_len};
use edgekv::{KvCache, PageAllocator, SeqId};

use crate::rope::Rope;
use crate::{Error, LlamaConfig, Result};

/// Which logits a forward call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// None (prefill of a prompt's leading chunks).
    None,
    /// The last token's row (generation).
    Last,
    /// Every token's row, token-major (teacher forcing).
    All,
}

struct Block {
    attn_norm: Vec<f32>,
    wq: QMatMul,
    wk: QMatMul,
    wv: QMatMul,
    wo: QMatMul,
    ffn_norm: Vec<f32>,
    gate: QMatMul,
    up: QMatMul,
    down: QMatMul,
}

/// A llama model loaded from GGUF: quantized weights stay quantized (candle's `QMatMul`), the
/// token embedding is dequantized once for lookups and, when the GGUF has no `output.weight`,
/// also serves (quantized) as the LM head.
pub struct Llama {
    config: LlamaConfig,
    embedding: Vec<f32>,
    blocks: Vec<Block>,
    norm: Vec<f32>,
    head: QMatMul,
    rope: Rope,
    fingerprint: u64,
    device: Device,
    /// Threads attention splits query rows over (asked once: the query reads cgroup files).
    threads: usize,
}

impl std::fmt::Debug for Llama {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llama")
            .field("config", &self.config)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// Bytes of the file's start hashed into the fingerprint (header, metadata and tokenizer).
const FINGERPRINT_BYTES: u64 = 4 << 20;

impl Llama {
    /// Loads a llama GGUF on the CPU. RoPE tables cover the GGUF's context length.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let mut file = File::open(path).map_err(|e| {
            Error::Model(format!(
                "cannot open {} ({e}); run model/fetch-model.sh",
                path.display()
            ))
        })?;
        let content = gguf_file::Content::read(&mut file)?;
        let config = LlamaConfig::from_gguf(&content)?;
        let device = Device::Cpu;
        let mut r = Reader {
            content: &content,
            file: &mut file,
            device: &device,
        };
        let embedding = r.vector("token_embd.weight")?;
        if embedding.len() != config.vocab * config.embed {
            return Err(Error::Model("token_embd.weight has the wrong size".into()));
        }
        let norm = r.vector("output_norm.weight")?;
        let mut blocks = Vec::with_capacity(config.layers);
        for i in 0..config.layers {
            let attn_norm = r.vector(&format!("blk.{i}.attn_norm.weight"))?;
            let ffn_norm = r.vector(&format!("blk.{i}.ffn_norm.weight"))?;
            let mut mm = |name: &str| r.matmul(&format!("blk.{i}.{name}.weight"));
            blocks.push(Block {
                attn_norm,
                wq: mm("attn_q")?,
                wk: mm("attn_k")?,
                wv: mm("attn_v")?,
                wo: mm("attn_output")?,
                ffn_norm,
                gate: mm("ffn_gate")?,
                up: mm("ffn_up")?,
                down: mm("ffn_down")?,
            });
        }
        let head_name = if content.tensor_infos.contains_key("output.weight") {
            "output.weight"
        } else {
            "token_embd.weight"
        };
        let head = r.matmul(head_name)?;
        let rope = Rope::new(config.head_dim, config.rope_base, config.context);
        let fingerprint = fingerprint(&mut file)?;
        Ok(Llama {
            config,
            embedding,
            blocks,
            norm,
            head,
            rope,
            fingerprint,
            device,
            threads: std::thread::available_parallelism().map_or(1, |t| t.get()),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// A 64-bit fingerprint of the model file (its length and first 4 MiB: header, metadata,
    /// vocabulary): the prefix namespace of caches for this model.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Runs `tokens` at positions `[len, len + n)` of `seq`, where `len` is the sequence's
    /// length: reserves the positions, writes each layer's K (after RoPE) and V rows into the
    /// cache, attends over the cache's pages, and returns the requested logits (`vocab` f32 per
    /// row). Each token row is computed alone, so splitting a prompt across calls gives the same
    /// bits.
    ///
    /// All or nothing: on an error the sequence is truncated back to `len`.
    pub fn forward<'a, A: PageAllocator<'a> + Sync>(
        &self,
        cache: &mut KvCache<'a, A>,
        seq: SeqId,
        tokens: &[u32],
        logits: Logits,
    ) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(Error::Input("no tokens".into()));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= self.config.vocab) {
            return Err(Error::Input(format!(
                "token id {t} is outside the vocabulary ({})",
                self.config.vocab
            )));
        }
        let start = cache.seq_len(seq)?;
        if start as usize + tokens.len() > self.rope.positions() {
            return Err(Error::Input(format!(
                "positions up to {} exceed the model's context of {}",
                start as usize + tokens.len(),
                self.rope.positions()
            )));
        }
        let n = u32::try_from(tokens.len()).map_err(|_| Error::Input("too many tokens".into()))?;
        cache.reserve(seq, n)?;
        self.run(cache, seq, start, tokens, logits)
            .inspect_err(|_| {
                // The positions were reserved above, so this truncate is within the sequence.
                let _ = cache.truncate(seq, start);
            })
    }

    fn run<'a, A: PageAllocator<'a> + Sync>(
        &self,
        cache: &mut KvCache<'a, A>,
        seq: SeqId,
        start: u32,
        tokens: &[u32],
        logits: Logits,
    ) -> Result<Vec<f32>> {
        let c = &self.config;
        let (n, e) = (tokens.len(), c.embed);
        let (q_row, kv_row) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        let mut x = Vec::with_capacity(n * e);
        for &t in tokens {
            x.extend_from_slice(&self.embedding[t as usize * e..][..e]);
        }
        let mut h = vec![0f32; n * e];
        let mut attn = vec![0f32; n * q_row];
        let params = AttentionParams::new(c.shape()?, c.heads as u16);
        for (layer, b) in self.blocks.iter().enumerate() {
            rms_norm(&x, &b.attn_norm, c.rms_eps, &mut h);
            let ht = Tensor::from_slice(&h, (n, e), &self.device)?;
            let mut q = matmul(&b.wq, &ht)?;
            let mut k = matmul(&b.wk, &ht)?;
            let v = matmul(&b.wv, &ht)?;
            for (i, (qr, kr)) in q
                .chunks_exact_mut(q_row)
                .zip(k.chunks_exact_mut(kv_row))
                .enumerate()
            {
                let pos = start as usize + i;
                self.rope.apply(qr, pos);
                self.rope.apply(kr, pos);
            }
            cache.write_kv(seq, layer as u16, start, &k, &v)?;
            attend(
                self.threads,
                cache,
                seq,
                layer as u16,
                start,
                &q,
                &mut attn,
                &params,
                q_row,
            )?;
            let o = matmul(&b.wo, &Tensor::from_slice(&attn, (n, q_row), &self.device)?)?;
            add(&mut x, &o);
            rms_norm(&x, &b.ffn_norm, c.rms_eps, &mut h);
            let ht = Tensor::from_slice(&h, (n, e), &self.device)?;
            let mut g = matmul(&b.gate, &ht)?;
            let u = matmul(&b.up, &ht)?;
            for (g, u) in g.iter_mut().zip(&u) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
            let d = matmul(&b.down, &Tensor::from_slice(&g, (n, c.ffn), &self.device)?)?;
            add(&mut x, &d);
        }
        let rows = match logits {
            Logits::None => return Ok(Vec::new()),
            Logits::Last => &x[(n - 1) * e..],
            Logits::All => &x[..],
        };
        let m = rows.len() / e;
        let mut normed = vec![0f32; rows.len()];
        rms_norm(rows, &self.norm, c.rms_eps, &mut normed);
        matmul(
            &self.head,
            &Tensor::from_slice(&normed, (m, e), &self.device)?,
        )
    }
}

/// Tensors of an open GGUF file.
struct Reader<'c> {
    content: &'c gguf_file::Content,
    file: &'c mut File,
    device: &'c Device,
}

impl Reader<'_> {
    fn matmul(&mut self, name: &str) -> Result<QMatMul> {
        let t = self.content.tensor(self.file, name, self.device)?;
        Ok(QMatMul::from_qtensor(t)?)
    }

    fn vector(&mut self, name: &str) -> Result<Vec<f32>> {
        let t = self.content.tensor(self.file, name, self.device)?;
        Ok(t.dequantize(self.device)?.flatten_all()?.to_vec1::<f32>()?)
    }
}

/// Fingerprint of a model file: xxh3 (edgekv's namespace hash) over its length and first bytes.
fn fingerprint(file: &mut File) -> Result<u64> {
    let len = file.seek(SeekFrom::End(0))?;
    file.seek(SeekFrom::Start(0))?;
    let mut head = Vec::new();
    file.take(FINGERPRINT_BYTES).read_to_end(&mut head)?;
    Ok(edgekv::prefix::namespace(&[&len.to_le_bytes(), &head]))
}

fn matmul(w: &QMatMul, x: &Tensor) -> Result<Vec<f32>> {
    Ok(w.forward(x)?.flatten_all()?.to_vec1::<f32>()?)
}

fn add(x: &mut [f32], y: &[f32]) {
    for (x, y) in x.iter_mut().zip(y) {
        *x += y;
    }
}

/// RMSNorm of each row (candle's formula: f32 sum of squares in order, `x / sqrt(mean + eps) × w`).
fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let d = weight.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let sum2: f32 = xr.iter().map(|v| v * v).sum();
        let m = (sum2 / d as f32 + eps).sqrt();
        for ((o, &v), &w) in or.iter_mut().zip(xr).zip(weight) {
            *o = v / m * w;
        }
    }
}

/// Attention of `n` query rows, split over the CPU's threads by rows (each row is computed alone,
/// so the split never changes the bits).
#[allow(clippy::too_many_arguments)]
fn attend<'a, A: PageAllocator<'a> + Sync>(
    threads: usize,
    cache: &KvCache<'a, A>,
    seq: SeqId,
    layer: u16,
    start: u32,
    q: &[f32],
    out: &mut [f32],
    params: &AttentionParams,
    q_row: usize,
) -> Result<()> {
    let n = q.len() / q_row;
    let scratch = scratch_len(params.q_heads, cache.config().page_tokens);
    let parts = if n >= 8 { threads.min(n) } else { 1 };
    if parts == 1 {
        let mut s = vec![0f32; scratch];
        cache.attention(seq, layer, start, q, out, params, &mut s)?;
        return Ok(());
    }
    let rows = n.div_ceil(parts);
    std::thread::scope(|scope| {
        let jobs: Vec<_> = q
            .chunks(rows * q_row)
            .zip(out.chunks_mut(rows * q_row))
            .enumerate()
            .map(|(i, (q, out))| {
                scope.spawn(move || {
                    let mut s = vec![0f32; scratch];
                    let at = start + (i * rows) as u32;
                    cache.attention(seq, layer, at, q, out, params, &mut s)
                })
            })
            .collect();
        jobs.into_iter().try_for_each(|j| match j.join() {
            Ok(r) => r.map_err(Error::from),
            Err(_) => Err(Error::Model("an attention thread panicked".into())),
        })
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::rms_norm;

    #[test]
    fn rms_norm_scales_each_row_alone() {
        let x = [3.0, 4.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0];
        let w = [1.0, 2.0, 1.0, 1.0];
        let mut out = [0.0; 8];
        rms_norm(&x, &w, 0.0, &mut out);
        // Row 1: mean square 25 / 4, rms 2.5.
        assert_eq!(&out[..4], &[1.2, 3.2, 0.0, 0.0]);
        assert_eq!(&out[4..], &[1.0, 2.0, 1.0, 1.0]);
    }
}
