//! The no_std forward pass of `edgekv-llm` against this crate's candle path, on the same file,
//! in the same run, with the same KV page format (f32) and prefill chunk (64):
//! greedy tokens of a chat prompt, teacher-forced KL / top-1 agreement over the first N tokens of
//! GPL-3 (DESIGN.md's protocol, candle as the reference), and host tokens/s of both.
//!
//! `cargo run --release --example llm_compare [-- TOKENS [DECODE]]` (default 512 and 64).

use std::time::Instant;

use edgekv::ElementFormat;
use edgekv_model::{Llama, Logits, Session, SessionArenas, SessionOptions, Tokenizer, model_path};

fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
    let log_z = max + sum.ln();
    row.iter().map(|&v| v as f64 - log_z).collect()
}

/// The new pass with its own cache.
struct NewPass<'m> {
    model: &'m edgekv_llm::Llama<'static>,
    data: edgekv::HeapArena,
    meta: edgekv::HeapArena,
    config: edgekv::CacheConfig,
    scratch: Vec<f32>,
}

impl<'m> NewPass<'m> {
    fn new(model: &'m edgekv_llm::Llama<'static>, tokens: usize) -> Self {
        let config = edgekv::CacheConfig::new(model.config().shape().unwrap())
            .with_formats(ElementFormat::F32, ElementFormat::F32)
            .with_page_tokens(16)
            .with_sequences(2, tokens as u32 + 64)
            .with_namespace(model.fingerprint());
        let plan = config
            .plan_pages(
                tokens.div_ceil(16) + 8,
                <edgekv::FreeList as edgekv::PageAllocator>::META_BITS_PER_PAGE,
            )
            .unwrap();
        NewPass {
            model,
            data: edgekv::HeapArena::new(plan.data_bytes, config.align).unwrap(),
            meta: edgekv::HeapArena::new(plan.meta.total, edgekv::META_ALIGN).unwrap(),
            config,
            scratch: vec![
                0.0;
                edgekv_llm::ScratchPlan::new(model.config(), 64, 16)
                    .unwrap()
                    .scratch
            ],
        }
    }

    /// Teacher-forced logits of every position (chunks of 64).
    fn all_logits(&mut self, tokens: &[u32]) -> Vec<f32> {
        let mut cache: edgekv::KvCache<'_, edgekv::FreeList<'_>> = edgekv::KvCache::new(
            self.config,
            self.data.as_uninit_mut(),
            self.meta.as_uninit_mut(),
        )
        .unwrap();
        let mut engine = edgekv_llm::Engine::new(self.model, &mut self.scratch, 64).unwrap();
        let seq = cache.create_sequence(edgekv::SeqMode::Paged).unwrap();
        let mut out = vec![0f32; tokens.len() * self.model.config().vocab];
        engine
            .prefill(&mut cache, seq, tokens, edgekv_llm::Logits::All, &mut out)
            .unwrap();
        out
    }

    /// Prefill then greedy decode; returns tokens, prefill and decode seconds.
    fn generate(&mut self, prompt: &[u32], n: usize) -> (Vec<u32>, f64, f64) {
        let mut cache: edgekv::KvCache<'_, edgekv::FreeList<'_>> = edgekv::KvCache::new(
            self.config,
            self.data.as_uninit_mut(),
            self.meta.as_uninit_mut(),
        )
        .unwrap();
        let mut engine = edgekv_llm::Engine::new(self.model, &mut self.scratch, 64).unwrap();
        let seq = cache.create_sequence(edgekv::SeqMode::Paged).unwrap();
        let mut logits = vec![0f32; self.model.config().vocab];
        let t0 = Instant::now();
        engine
            .prefill(
                &mut cache,
                seq,
                prompt,
                edgekv_llm::Logits::Last,
                &mut logits,
            )
            .unwrap();
        let prefill = t0.elapsed().as_secs_f64();
        let mut out = vec![0u32; n];
        let t1 = Instant::now();
        let k = engine
            .generate(
                &mut cache,
                seq,
                &mut logits,
                &mut edgekv_llm::Sampling::Greedy,
                &[],
                &mut out,
            )
            .unwrap();
        out.truncate(k);
        (out, prefill, t1.elapsed().as_secs_f64())
    }
}

fn candle_generate(model: &Llama, prompt: &[u32], n: usize) -> (Vec<u32>, f64, f64) {
    let options = SessionOptions {
        pages: ((prompt.len() + n) / 16 + 8) as u16,
        sequences: 2,
        ..SessionOptions::default().with_format(ElementFormat::F32)
    };
    let mut arenas = SessionArenas::new(model, &options).unwrap();
    let mut s = Session::new(model, &mut arenas, options).unwrap();
    let seq = s
        .cache_mut()
        .create_sequence(edgekv::SeqMode::Paged)
        .unwrap();
    let t0 = Instant::now();
    let logits = s.prefill(seq, prompt, Logits::Last).unwrap();
    let prefill = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let out = s.generate(seq, &logits, n, &[]).unwrap();
    (out, prefill, t1.elapsed().as_secs_f64())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(512);
    let decode = args.get(1).copied().unwrap_or(64);
    let path = model_path();
    let candle = Llama::load(&path)?;
    let tokenizer = Tokenizer::load(&path)?;
    let bytes: &'static [u8] = Box::leak(std::fs::read(&path)?.into_boxed_slice());
    let gguf = edgekv_llm::Gguf::parse(bytes).map_err(|e| e.to_string())?;
    let new = edgekv_llm::Llama::new(&gguf).map_err(|e| e.to_string())?;
    let vocab = new.config().vocab;

    println!(
        "HELLO ids: {:?}",
        tokenizer.encode("Hello, world! The quick brown fox.")?
    );
    let chat =
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let chat_ids = tokenizer.encode(chat)?;
    println!("chat prompt ids: {chat_ids:?}");

    // Greedy tokens.
    let mut mine = NewPass::new(&new, n.max(chat_ids.len() + decode) + 128);
    let (g_new, _, _) = mine.generate(&chat_ids, 32);
    let (g_candle, _, _) = candle_generate(&candle, &chat_ids, 32);
    let same = g_new
        .iter()
        .zip(&g_candle)
        .take_while(|(a, b)| a == b)
        .count();
    println!(
        "greedy (edgekv-llm): {g_new:?}\n  {:?}",
        tokenizer.decode(&g_new)?
    );
    println!(
        "greedy (candle):     {g_candle:?}\n  {:?}",
        tokenizer.decode(&g_candle)?
    );
    println!("greedy agreement: first {same} of 32 tokens identical");

    // Teacher-forced fidelity over GPL-3.
    let text = std::fs::read_to_string("/usr/share/common-licenses/GPL-3")?;
    let tokens = tokenizer.encode(&text)?;
    let tokens = &tokens[..n.min(tokens.len())];
    let t = Instant::now();
    let a = mine.all_logits(tokens);
    let t_new = t.elapsed().as_secs_f64();
    let options = SessionOptions {
        pages: (tokens.len() / 16 + 8) as u16,
        sequences: 1,
        ..SessionOptions::default().with_format(ElementFormat::F32)
    };
    let mut arenas = SessionArenas::new(&candle, &options)?;
    let mut s = Session::new(&candle, &mut arenas, options)?;
    let seq = s.cache_mut().create_sequence(edgekv::SeqMode::Paged)?;
    let t = Instant::now();
    let b = s.prefill(seq, tokens, Logits::All)?;
    let t_candle = t.elapsed().as_secs_f64();
    let (mut kl_sum, mut kl_max, mut agree, mut nll_a, mut nll_b, mut bits_equal) =
        (0f64, 0f64, 0usize, 0f64, 0f64, 0usize);
    for i in 0..tokens.len() {
        let (ra, rb) = (&a[i * vocab..][..vocab], &b[i * vocab..][..vocab]);
        let (la, lb) = (log_softmax(ra), log_softmax(rb));
        let kl: f64 = lb.iter().zip(&la).map(|(&p, &q)| p.exp() * (p - q)).sum();
        kl_sum += kl;
        kl_max = kl_max.max(kl);
        agree += usize::from(edgekv_llm::argmax(ra) == edgekv_model::argmax(rb));
        bits_equal += usize::from(ra == rb);
        if let Some(&next) = tokens.get(i + 1) {
            nll_a -= la[next as usize];
            nll_b -= lb[next as usize];
        }
    }
    let m = tokens.len() as f64;
    println!(
        "teacher-forced {} GPL-3 tokens (f32 KV pages, chunks of 64): mean KL(candle || edgekv-llm) {:.3e}, max {:.3e}, top-1 agreement {:.2} %, rows bit-identical {}, PPL edgekv-llm {:.3} candle {:.3}; time edgekv-llm {:.1} s ({:.1} tokens/s), candle {:.1} s ({:.1} tokens/s)",
        tokens.len(),
        kl_sum / m,
        kl_max,
        100.0 * agree as f64 / m,
        bits_equal,
        (nll_a / (m - 1.0)).exp(),
        (nll_b / (m - 1.0)).exp(),
        t_new,
        m / t_new,
        t_candle,
        m / t_candle
    );

    // Speed: prompt of 128 GPL-3 tokens, then `decode` greedy tokens, two alternating rounds.
    let prompt = &tokens[..128.min(tokens.len())];
    for round in 0..2 {
        let (_, pn, dn) = mine.generate(prompt, decode + 1);
        let (_, pc, dc) = candle_generate(&candle, prompt, decode + 1);
        println!(
            "round {round}: prefill {} tokens: edgekv-llm {:.1} tokens/s, candle {:.1} tokens/s; decode {decode}: edgekv-llm {:.1} tokens/s, candle {:.1} tokens/s",
            prompt.len(),
            prompt.len() as f64 / pn,
            prompt.len() as f64 / pc,
            decode as f64 / dn,
            decode as f64 / dc
        );
    }
    Ok(())
}
