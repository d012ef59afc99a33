//! Teacher forcing: a token sequence run through the forward pass with its K/V in edgekv pages
//! of a chosen format, every position's logits reduced to what fidelity work compares (the
//! log-probability of the next token, the most likely token) plus the full rows of chosen
//! positions. Any model `edgekv-llm` runs (llama, Gemma 3: its sliding-window layers in their
//! own group of a [`GroupedCache`], releasing pages).

use edgekv::{ElementFormat, FreeList, GroupedCache, HeapArena, SeqMode};
use edgekv_llm::{Engine, Logits, ScratchPlan};

use crate::fidelity::log_softmax;
use crate::session::argmax;
use crate::{Error, Llama, Result};

/// Positions per page and per prefill call.
const PAGE_TOKENS: u16 = 16;
const CHUNK: usize = 64;

/// What [`teacher_force`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct TeacherForced {
    /// At every position but the last: the log-probability (natural log, softmax in f64) the
    /// model gives the token that follows.
    pub next_logprob: Vec<f32>,
    /// At every position: the most likely next token (the lowest id on ties).
    pub top1: Vec<u32>,
    /// The full logit rows of the positions asked for, in the order asked.
    pub logits: Vec<(usize, Vec<f32>)>,
}

impl TeacherForced {
    /// Perplexity over the next-token predictions.
    pub fn perplexity(&self) -> f64 {
        let n = self.next_logprob.len().max(1) as f64;
        (-self.next_logprob.iter().map(|&l| l as f64).sum::<f64>() / n).exp()
    }
}

/// Runs `tokens` through `model` from an empty cache whose K and V pages are `k` and `v`
/// (every layer group), in prefill calls of 64 tokens aligned to absolute positions (so the
/// bits equal any other chunking), and keeps the full logits of `positions`.
///
/// # Errors
///
/// No tokens, a token or position out of range, a format the model's head size cannot take,
/// any forward-pass or cache error.
pub fn teacher_force(
    model: &Llama,
    tokens: &[u32],
    (k, v): (ElementFormat, ElementFormat),
    positions: &[usize],
) -> Result<TeacherForced> {
    let model = model.inner();
    let c = model.config();
    if tokens.is_empty() {
        return Err(Error::Model("no tokens to teacher-force".into()));
    }
    if let Some(&t) = tokens.iter().find(|&&t| t as usize >= c.vocab) {
        return Err(Error::Model(format!(
            "token {t} is outside the vocabulary of {}",
            c.vocab
        )));
    }
    if let Some(&p) = positions.iter().find(|&&p| p >= tokens.len()) {
        return Err(Error::Model(format!(
            "position {p} is past the {} tokens",
            tokens.len()
        )));
    }
    let pages_needed = tokens.len().div_ceil(PAGE_TOKENS as usize) + 1;
    let config = c
        .cache_config(k, v)?
        .with_page_tokens(PAGE_TOKENS)
        .with_chunk_tokens(PAGE_TOKENS)
        .with_sequences(
            1,
            tokens.len().next_multiple_of(PAGE_TOKENS as usize) as u32,
        )
        .with_namespace(model.fingerprint());
    let pages = vec![pages_needed; config.group_count()];
    let plan = GroupedCache::<FreeList>::plan_pages(&config, &pages)?;
    let mut data = HeapArena::new(plan.data_bytes, config.align)?;
    let mut meta = HeapArena::new(plan.meta_bytes, edgekv::META_ALIGN)?;
    let mut cache: GroupedCache<'_, FreeList<'_>> =
        GroupedCache::with_pages(config, &pages, data.as_uninit_mut(), meta.as_uninit_mut())?;
    let mut scratch = vec![0f32; ScratchPlan::new(c, CHUNK, PAGE_TOKENS)?.scratch];
    let mut engine = Engine::new(model, &mut scratch, CHUNK as u32)?;
    let seq = cache.create_sequence(SeqMode::Paged)?;
    let mut out = TeacherForced {
        next_logprob: Vec::with_capacity(tokens.len() - 1),
        top1: Vec::with_capacity(tokens.len()),
        logits: Vec::new(),
    };
    let mut rows = vec![0f32; CHUNK * c.vocab];
    for (chunk_index, chunk) in tokens.chunks(CHUNK).enumerate() {
        let rows = &mut rows[..chunk.len() * c.vocab];
        engine.prefill(&mut cache, seq, chunk, Logits::All, rows)?;
        for (i, row) in rows.chunks_exact(c.vocab).enumerate() {
            let at = chunk_index * CHUNK + i;
            out.top1.push(argmax(row));
            if let Some(&next) = tokens.get(at + 1) {
                out.next_logprob
                    .push(log_softmax(row)[next as usize] as f32);
            }
        }
        for &p in positions {
            if p / CHUNK == chunk_index {
                let row = &rows[(p % CHUNK) * c.vocab..][..c.vocab];
                out.logits.push((p, row.to_vec()));
            }
        }
    }
    // In the order asked (chunks met them in position order).
    out.logits
        .sort_by_key(|(p, _)| positions.iter().position(|q| q == p).unwrap_or(usize::MAX));
    Ok(out)
}
