//! The forward pass over a model in place, with K/V in edgekv pages: `llama` here, `gemma3` in
//! [`gemma3`].

mod gemma3;

use edgekv::SeqId;
use edgekv::attention::AttentionParams;

use crate::config::Arch;
use crate::error::{Error, Result};
use crate::kv::KvStore;
use crate::matmul::{Matrix, for_each, matmul_f32, matmul_quant_many, quantize_activation};
use crate::model::Activations;
use crate::model::Llama;
use crate::ops::{add, embed_q8_0, rms_norm, rope, rope_angles, swiglu};
use crate::plan::Parts;
use crate::quant::sums_len;

/// Largest head dimension (RoPE angles live on the stack).
pub const MAX_HEAD_DIM: usize = 256;

/// Which logits a forward call writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// None (prefill of a prompt's leading chunks).
    None,
    /// The last token's row.
    Last,
    /// Every token's row, token-major (teacher forcing).
    All,
}

impl Logits {
    /// Rows of logits a call with `n` tokens writes.
    pub const fn rows(self, n: usize) -> usize {
        match self {
            Logits::None => 0,
            Logits::Last => 1,
            Logits::All => n,
        }
    }
}

/// Quantizes `n` rows of `cols` values to each matrix's activation type (ggml's
/// `vec_dot_type`: Q8_0, Q8_1 or Q8_K) and multiplies (or multiplies the f32 rows, for
/// [`Activations::F32`]): `outs[i] = ms[i] · x`. The matrices share the input `x` (their `cols`
/// are equal), so the rows are quantized once for a run of matrices of one activation type
/// (q, k and v; gate and up), not once per matrix: the same codes either way.
#[allow(clippy::too_many_arguments)]
pub(super) fn project<const M: usize>(
    act: Activations,
    ms: [&Matrix<'_>; M],
    x: &[f32],
    n: usize,
    qs: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
    outs: [&mut [f32]; M],
) {
    if act == Activations::F32 {
        for (m, out) in ms.into_iter().zip(outs) {
            matmul_f32(m, x, n, &mut out[..n * m.rows]);
        }
        return;
    }
    let first = ms[0];
    let at = first.activation();
    if !ms
        .iter()
        .all(|m| m.activation() == at && m.cols == first.cols)
    {
        // Matrices of different activation types: one at a time (one matrix always shares).
        for (m, out) in ms.into_iter().zip(outs) {
            project(act, [m], x, n, qs, d, s, [out]);
        }
        return;
    }
    let Some(at) = at else {
        // F32 weights have no quantized product.
        for (m, out) in ms.into_iter().zip(outs) {
            out[..n * m.rows].fill(0.0);
        }
        return;
    };
    let cols = first.cols;
    let (blocks, sums) = (cols / at.block_values(), sums_len(cols));
    let rows = x[..n * cols].chunks_exact(cols).zip(
        qs[..n * cols]
            .chunks_exact_mut(cols)
            .zip(d[..n * blocks].chunks_exact_mut(blocks)),
    );
    if sums == 0 {
        for_each(rows, 4 * cols, |(row, (q, dd))| {
            quantize_activation(at, row, q, dd, &mut []);
        });
    } else {
        let rows = rows.zip(s[..n * sums].chunks_exact_mut(sums));
        for_each(rows, 4 * cols, |((row, (q, dd)), ss)| {
            quantize_activation(at, row, q, dd, ss);
        });
    }
    let mut i = 0;
    let outs = outs.map(|out| {
        let rows = ms[i].rows;
        i += 1;
        &mut out[..n * rows]
    });
    matmul_quant_many(ms, qs, d, s, n, outs);
}

/// The layer's attention ([`KvStore::attention`]); with the feature `std` and more than one
/// matmul thread ([`set_threads`](crate::matmul::set_threads)), on the matmul threads' team
/// ([`KvStore::attention_workers`]: a prefill's query rows, or a long row's key segments, split
/// between them), with the same bits.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend<C: KvStore + ?Sized>(
    cache: &C,
    seq: SeqId,
    layer: u16,
    start: u32,
    q: &[f32],
    out: &mut [f32],
    params: &AttentionParams,
    scratch: &mut [f32],
) -> Result<()> {
    #[cfg(feature = "std")]
    if crate::matmul::threads() > 1 {
        let done = crate::matmul::with_team(|workers| {
            cache.attention_workers(seq, layer, start, q, out, params, workers)
        });
        if let Some(done) = done {
            return Ok(done?);
        }
    }
    Ok(cache.attention(seq, layer, start, q, out, params, scratch)?)
}

impl Llama<'_> {
    /// Runs `tokens` at positions `[len, len + n)` of `seq` (its current length `len`): reserves
    /// the positions, writes every layer's K (after RoPE) and V rows into the cache
    /// ([`KvStore::write_kv`]), attends over the pages ([`KvStore::attention`]) and writes the
    /// requested logits into `logits` (`vocab` f32s per row, token-major). `scratch` is sized by
    /// [`ScratchPlan`](crate::ScratchPlan) for at least `n` rows with the cache's page size.
    ///
    /// Every token row is computed alone (matmuls quantize and multiply row by row, norms and
    /// RoPE are per row, attention computes each query row alone), so splitting a prompt over
    /// calls gives the same bits.
    ///
    /// All or nothing: on an error the sequence is truncated back to `len`.
    ///
    /// # Errors
    ///
    /// [`Empty`](Error::Empty), [`TokenOutOfRange`](Error::TokenOutOfRange),
    /// [`ContextFull`](Error::ContextFull), [`BufferTooSmall`](Error::BufferTooSmall) /
    /// [`TooManyRows`](Error::TooManyRows) (scratch or logits), [`Kv`](Error::Kv).
    pub fn forward<C: KvStore + ?Sized>(
        &self,
        cache: &mut C,
        seq: SeqId,
        tokens: &[u32],
        scratch: &mut [f32],
        logits: Logits,
        out: &mut [f32],
    ) -> Result<()> {
        let c = self.config();
        if tokens.is_empty() {
            return Err(Error::Empty);
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= c.vocab) {
            return Err(Error::TokenOutOfRange(t));
        }
        if c.head_dim > MAX_HEAD_DIM {
            return Err(Error::Unsupported("head dimension above 256"));
        }
        let n = tokens.len();
        let start = cache.seq_len(seq)?;
        let end = u32::try_from(n)
            .ok()
            .and_then(|n| start.checked_add(n))
            .ok_or(Error::ContextFull)?;
        if end as usize > c.context {
            return Err(Error::ContextFull);
        }
        let need = logits.rows(n) * c.vocab;
        if out.len() < need {
            return Err(Error::BufferTooSmall { needed: need });
        }
        let page_tokens = cache.page_tokens();
        let parts = Parts::new(c, n, page_tokens, scratch)?;
        cache.reserve(seq, end - start)?;
        let out = &mut out[..need];
        match c.arch {
            Arch::Llama => self.run(cache, seq, start, tokens, parts, logits, out),
            Arch::Gemma3(g) => self.run_gemma3(&g, cache, seq, start, tokens, parts, logits, out),
        }
        .inspect_err(|_| {
            // The positions were reserved above, so this truncate is within the sequence.
            let _ = cache.truncate(seq, start);
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn run<C: KvStore + ?Sized>(
        &self,
        cache: &mut C,
        seq: SeqId,
        start: u32,
        tokens: &[u32],
        p: Parts<'_>,
        logits: Logits,
        out: &mut [f32],
    ) -> Result<()> {
        let (c, a) = (self.config(), self.activations());
        let (n, e, hd) = (tokens.len(), c.embed, c.head_dim);
        let (q_dim, kv_dim) = (c.q_dim(), c.kv_dim());
        for (&t, x) in tokens.iter().zip(p.x.chunks_exact_mut(e)) {
            embed_q8_0(self.embedding(), t as usize, x);
        }
        let params = AttentionParams::new(c.shape()?, c.heads as u16);
        for layer in 0..c.layers {
            let b = self
                .block(layer)
                .ok_or(Error::Unsupported("missing block"))?;
            let rows = p.x.chunks_exact(e).zip(p.h.chunks_exact_mut(e));
            for_each(rows, 2 * e, |(x, h)| {
                rms_norm(x, &b.attn_norm, c.rms_eps, h)
            });
            project(
                a,
                [&b.wq, &b.wk, &b.wv],
                p.h,
                n,
                p.qs,
                p.d,
                p.s,
                [&mut *p.q, &mut *p.k, &mut *p.v],
            );
            let rows =
                p.q.chunks_exact_mut(q_dim)
                    .zip(p.k.chunks_exact_mut(kv_dim));
            for_each(rows.enumerate(), q_dim + kv_dim + 8 * hd, |(i, (q, k))| {
                let (mut cos, mut sin) = ([0f32; MAX_HEAD_DIM / 2], [0f32; MAX_HEAD_DIM / 2]);
                let (cos, sin) = (&mut cos[..hd / 2], &mut sin[..hd / 2]);
                rope_angles(start + i as u32, c.rope_base, hd, cos, sin);
                rope(q, hd, cos, sin);
                rope(k, hd, cos, sin);
            });
            let l = layer as u16;
            cache.write_kv(seq, l, start, &p.k[..n * kv_dim], &p.v[..n * kv_dim])?;
            attend(
                cache,
                seq,
                l,
                start,
                &p.q[..n * q_dim],
                &mut p.attn[..n * q_dim],
                &params,
                p.attn_scratch,
            )?;
            project(a, [&b.wo], p.attn, n, p.qs, p.d, p.s, [&mut *p.h]);
            add(&mut p.x[..n * e], &p.h[..n * e]);
            let rows = p.x.chunks_exact(e).zip(p.h.chunks_exact_mut(e));
            for_each(rows, 2 * e, |(x, h)| rms_norm(x, &b.ffn_norm, c.rms_eps, h));
            project(
                a,
                [&b.gate, &b.up],
                p.h,
                n,
                p.qs,
                p.d,
                p.s,
                [&mut *p.g, &mut *p.u],
            );
            let rows = p.g[..n * c.ffn].chunks_exact_mut(c.ffn);
            for_each(rows.zip(p.u.chunks_exact(c.ffn)), 4 * c.ffn, |(g, u)| {
                swiglu(g, u)
            });
            project(a, [&b.down], p.g, n, p.qs, p.d, p.s, [&mut *p.h]);
            add(&mut p.x[..n * e], &p.h[..n * e]);
        }
        let first = match logits {
            Logits::None => return Ok(()),
            Logits::Last => n - 1,
            Logits::All => 0,
        };
        let m = n - first;
        for (x, h) in p.x[first * e..n * e]
            .chunks_exact(e)
            .zip(p.h.chunks_exact_mut(e))
        {
            rms_norm(x, self.output_norm(), c.rms_eps, h);
        }
        project(a, [self.head()], p.h, m, p.qs, p.d, p.s, [out]);
        Ok(())
    }
}
