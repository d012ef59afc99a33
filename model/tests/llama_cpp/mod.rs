//! llama.cpp's outputs on the same token ids as a test's (files written by
//! `host-tests/peer/llama_reference.py`: llama-cpp-python 0.3.36 built from its sdist, f16 K/V,
//! flash attention on) and the fidelity statistics against them, for Gemma 3 270M
//! (`tests/gemma_data`) and SmolLM2-135M (`tests/smollm2_data`).
#![allow(dead_code)]

use std::path::Path;

fn read(dir: &Path, name: &str) -> Vec<u8> {
    let p = dir.join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

pub fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// llama.cpp's teacher-forced outputs on GPL-3's first tokens (BOS first where the model has one): per position its
/// top-1 id, the log-probability of the next token, and its `k` most likely tokens with their
/// log-probabilities.
pub struct Reference {
    pub ids: Vec<u32>,
    pub top1: Vec<u32>,
    pub next: Vec<f32>,
    pub k: usize,
    pub topk_ids: Vec<u32>,
    pub topk_lp: Vec<f32>,
}

impl Reference {
    /// The files of `dir`.
    pub fn load(dir: &Path) -> Self {
        let ids = u32s(&read(dir, "gpl3.ids"));
        let top1 = u32s(&read(dir, "gpl3.top1"));
        let next = f32s(&read(dir, "gpl3.next"));
        let topk_ids = u32s(&read(dir, "gpl3.topk_ids"));
        let topk_lp = f32s(&read(dir, "gpl3.topk_lp"));
        let n = ids.len();
        assert!(n > 1 && top1.len() == n && next.len() == n - 1);
        assert!(topk_ids.len() % n == 0 && topk_lp.len() == topk_ids.len());
        Reference {
            k: topk_ids.len() / n,
            ids,
            top1,
            next,
            topk_ids,
            topk_lp,
        }
    }

    /// llama.cpp's perplexity over the predictions of tokens `1..n`.
    pub fn perplexity(&self, n: usize) -> f64 {
        let s: f64 = self.next[..n - 1].iter().map(|&l| l as f64).sum();
        (-s / (n - 1) as f64).exp()
    }
}

/// llama.cpp's greedy continuation of a plain-text prompt, with the gap between its two best
/// logits at each step.
pub struct Greedy {
    pub prompt: Vec<u32>,
    pub ids: Vec<u32>,
    pub gaps: Vec<f32>,
}

impl Greedy {
    /// The files of `dir`.
    pub fn load(dir: &Path) -> Self {
        Greedy {
            prompt: u32s(&read(dir, "greedy.prompt")),
            ids: u32s(&read(dir, "greedy.ids")),
            gaps: f32s(&read(dir, "greedy.gaps")),
        }
    }
}

/// `row`'s log-softmax in f64: the maximum's index (the first) and the log-sum-exp.
pub fn log_softmax(row: &[f32]) -> (usize, f64) {
    let mut top = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[top] {
            top = i;
        }
    }
    let m = row[top] as f64;
    let sum: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
    (top, m + sum.ln())
}

/// Fidelity figures accumulated position by position.
#[derive(Default)]
pub struct Stats {
    pub positions: usize,
    pub top1_equal: usize,
    pub logprob_sum: f64,
    pub predictions: usize,
    pub kl_sum: f64,
    pub kl_max: f64,
}

/// The figures of a run.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    pub top1: f64,
    pub kl_mean: f64,
    pub kl_max: f64,
    pub ppl: f64,
}

impl Stats {
    /// Adds position `t` of `n` with our logits `row`, against the committed reference (KL
    /// over llama.cpp's top-K and the rest as one bin).
    pub fn add(&mut self, r: &Reference, n: usize, t: usize, row: &[f32]) {
        let (top, lse) = log_softmax(row);
        let ids = &r.topk_ids[t * r.k..][..r.k];
        let lps = &r.topk_lp[t * r.k..][..r.k];
        let (mut kl, mut p_in, mut q_in) = (0f64, 0f64, 0f64);
        for (&id, &lp) in ids.iter().zip(lps) {
            let (lp, lq) = (lp as f64, row[id as usize] as f64 - lse);
            let p = lp.exp();
            kl += p * (lp - lq);
            p_in += p;
            q_in += lq.exp();
        }
        let (p_out, q_out) = ((1.0 - p_in).max(0.0), (1.0 - q_in).max(1e-300));
        if p_out > 0.0 {
            kl += p_out * (p_out / q_out).ln();
        }
        self.finish(r.top1[t], r.ids[..n].get(t + 1), top, lse, row, kl);
    }

    /// Adds position `t` against llama.cpp's full log-probabilities `ref_lp` (exact KL).
    pub fn add_full(&mut self, ids: &[u32], ref_lp: &[f32], t: usize, row: &[f32]) {
        let (top, lse) = log_softmax(row);
        let (ref_top, _) = log_softmax(ref_lp);
        let mut kl = 0f64;
        for (&lp, &z) in ref_lp.iter().zip(row) {
            let lp = lp as f64;
            kl += lp.exp() * (lp - (z as f64 - lse));
        }
        self.finish(ref_top as u32, ids.get(t + 1), top, lse, row, kl);
    }

    fn finish(
        &mut self,
        ref_top: u32,
        next: Option<&u32>,
        top: usize,
        lse: f64,
        row: &[f32],
        kl: f64,
    ) {
        self.positions += 1;
        self.top1_equal += usize::from(top == ref_top as usize);
        if let Some(&next) = next {
            self.logprob_sum += row[next as usize] as f64 - lse;
            self.predictions += 1;
        }
        self.kl_sum += kl;
        self.kl_max = self.kl_max.max(kl);
    }

    /// The figures, printed beside llama.cpp's perplexity over the same `n` tokens.
    pub fn report(&self, what: &str, r: &Reference, n: usize) -> Figures {
        let f = self.figures();
        println!(
            "{what}: {} positions, top-1 agreement {:.2} %, mean KL {:.3e} (max {:.3e}), \
             perplexity {:.4} (llama.cpp {:.4})",
            self.positions,
            100.0 * f.top1,
            f.kl_mean,
            f.kl_max,
            f.ppl,
            r.perplexity(n)
        );
        f
    }

    pub fn figures(&self) -> Figures {
        Figures {
            top1: self.top1_equal as f64 / self.positions as f64,
            kl_mean: self.kl_sum / self.positions as f64,
            kl_max: self.kl_max,
            ppl: (-self.logprob_sum / self.predictions as f64).exp(),
        }
    }
}
