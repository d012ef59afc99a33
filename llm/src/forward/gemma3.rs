//! The `gemma3` forward pass, as llama.cpp's graph (`src/models/gemma3.cpp`) computes it on the
//! CPU:
//!
//! - the token embedding (Q8_0 rows, `q · d`) scaled by `√embed` in f32;
//! - per block: RMSNorm (ε from the file, the weights as stored); Q, K, V projections; RMSNorm
//!   of each query and key head (`attn_q_norm`, `attn_k_norm`); RoPE type NEOX over the whole
//!   head with the layer's base (the file's `rope.freq_base` on global layers, the sliding
//!   layers' base on the others); Q scaled by `1 / √head_dim` after that, attention then at
//!   score scale 1 over the layer's keys (the last [`sliding_window`](Gemma3::sliding_window)
//!   positions on sliding layers: query `i` sees key `j` iff `j ≤ i` and `i − j < window`);
//!   the output projection, RMSNorm (`post_attention_norm`) and the residual add; RMSNorm
//!   (`ffn_norm`), `gelu(gate) · up` with ggml's f16-rounded GELU ([`geglu`]), the down
//!   projection, RMSNorm (`post_ffw_norm`) and the residual add;
//! - the final RMSNorm and the LM head (the tied embedding), no softcapping.
//!
//! Sliding layers pass their window in the attention parameters, so a cache without layer
//! groups computes the same attention (it only keeps every page); a layer-grouped cache
//! configured as [`LlamaConfig::cache_config`](crate::LlamaConfig::cache_config) says also
//! releases the sliding layers' pages as positions leave the window.

use edgekv::SeqId;
use edgekv::attention::AttentionParams;

use super::{Logits, MAX_HEAD_DIM, attend, project};
use crate::config::Gemma3;
use crate::error::{Error, Result};
use crate::kv::KvStore;
use crate::matmul::for_each;
use crate::model::Llama;
use crate::ops::{
    add, embed_q8_0, geglu, rms_norm, rms_norm_in_place, rope_angles, rope_neox, scale,
};
use crate::plan::Parts;

impl Llama<'_> {
    /// One forward call of a `gemma3` model (the checks and the reservation are
    /// [`forward`](Llama::forward)'s).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_gemma3<C: KvStore + ?Sized>(
        &self,
        gemma: &Gemma3,
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
        let embed_scale = libm::sqrtf(e as f32);
        for (&t, x) in tokens.iter().zip(p.x.chunks_exact_mut(e)) {
            embed_q8_0(self.embedding(), t as usize, x);
            scale(x, embed_scale);
        }
        let q_scale = 1.0 / libm::sqrtf(hd as f32);
        let global = AttentionParams::new(c.shape()?, c.heads as u16).with_scale(1.0);
        let sliding = global.with_window(0, gemma.sliding_window);
        for layer in 0..c.layers {
            let missing = Error::Unsupported("missing block");
            let b = self.block(layer).ok_or(missing)?;
            let gn = self.gemma_norms(layer).ok_or(missing)?;
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
            let base = gemma.rope_base(layer, c.rope_base);
            let rows =
                p.q.chunks_exact_mut(q_dim)
                    .zip(p.k.chunks_exact_mut(kv_dim));
            for_each(
                rows.enumerate(),
                3 * (q_dim + kv_dim) + 8 * hd,
                |(i, (q, k))| {
                    let (mut cos, mut sin) = ([0f32; MAX_HEAD_DIM / 2], [0f32; MAX_HEAD_DIM / 2]);
                    let (cos, sin) = (&mut cos[..hd / 2], &mut sin[..hd / 2]);
                    for head in q.chunks_exact_mut(hd) {
                        rms_norm_in_place(head, &gn.q_norm, c.rms_eps);
                    }
                    for head in k.chunks_exact_mut(hd) {
                        rms_norm_in_place(head, &gn.k_norm, c.rms_eps);
                    }
                    rope_angles(start + i as u32, base, hd, cos, sin);
                    rope_neox(q, hd, cos, sin);
                    rope_neox(k, hd, cos, sin);
                    scale(q, q_scale);
                },
            );
            let l = layer as u16;
            cache.write_kv(seq, l, start, &p.k[..n * kv_dim], &p.v[..n * kv_dim])?;
            let params = if gemma.is_global(layer) {
                &global
            } else {
                &sliding
            };
            attend(
                cache,
                seq,
                l,
                start,
                &p.q[..n * q_dim],
                &mut p.attn[..n * q_dim],
                params,
                p.attn_scratch,
            )?;
            project(a, [&b.wo], p.attn, n, p.qs, p.d, p.s, [&mut *p.h]);
            let rows = p.h[..n * e].chunks_exact_mut(e);
            for_each(rows, 2 * e, |h| {
                rms_norm_in_place(h, &gn.post_attn, c.rms_eps)
            });
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
            for_each(rows.zip(p.u.chunks_exact(c.ffn)), 8 * c.ffn, |(g, u)| {
                geglu(g, u)
            });
            project(a, [&b.down], p.g, n, p.qs, p.d, p.s, [&mut *p.h]);
            let rows = p.h[..n * e].chunks_exact_mut(e);
            for_each(rows, 2 * e, |h| {
                rms_norm_in_place(h, &gn.post_ffn, c.rms_eps)
            });
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
