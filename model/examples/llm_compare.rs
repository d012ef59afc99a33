//! This crate's forward pass (`edgekv-llm`'s, the code the boards run) against candle-transformers'
//! quantized llama on the same file, in the same run: greedy tokens of a chat prompt,
//! teacher-forced KL / top-1 agreement over the first N tokens of GPL-3 (DESIGN.md's protocol,
//! candle-transformers as the reference; ours with f32 KV pages and prefill chunks of 64), and
//! host tokens/s of both in alternating rounds.
//!
//! `cargo run --release --example llm_compare [-- TOKENS [DECODE]]` (default 2048 and 64).

use std::time::Instant;

use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use edgekv::ElementFormat;
use edgekv_model::{
    Llama, Logits, Session, SessionArenas, SessionOptions, Tokenizer, argmax, fidelity, model_path,
};

/// candle-transformers' model (its own dense f32 K/V cache, reset by loading anew).
fn reference() -> Result<ModelWeights, Box<dyn std::error::Error>> {
    let mut file = std::fs::File::open(model_path())?;
    let content = candle_core::quantized::gguf_file::Content::read(&mut file)?;
    Ok(ModelWeights::from_gguf(content, &mut file, &Device::Cpu)?)
}

/// The reference's last-position logits after `ids` at positions `pos..`.
fn ref_forward(m: &mut ModelWeights, ids: &[u32], pos: usize) -> candle_core::Result<Vec<f32>> {
    m.forward(&Tensor::new(ids, &Device::Cpu)?.unsqueeze(0)?, pos)?
        .flatten_all()?
        .to_vec1()
}

/// The reference: prefill then greedy decode; tokens, prefill and decode seconds.
fn ref_generate(
    prompt: &[u32],
    n: usize,
) -> Result<(Vec<u32>, f64, f64), Box<dyn std::error::Error>> {
    let mut m = reference()?;
    let t0 = Instant::now();
    let mut l = ref_forward(&mut m, prompt, 0)?;
    let prefill = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut out = vec![argmax(&l)];
    while out.len() < n {
        l = ref_forward(&mut m, &out[out.len() - 1..], prompt.len() + out.len() - 1)?;
        out.push(argmax(&l));
    }
    Ok((out, prefill, t1.elapsed().as_secs_f64()))
}

fn options(tokens: usize) -> SessionOptions {
    SessionOptions {
        pages: (tokens / 16 + 8) as u16,
        sequences: 1,
        max_tokens: tokens as u32 + 64,
        ..SessionOptions::default().with_format(ElementFormat::F32)
    }
}

/// Ours: prefill then greedy decode; tokens, prefill and decode seconds.
fn generate(model: &Llama, prompt: &[u32], n: usize) -> edgekv_model::Result<(Vec<u32>, f64, f64)> {
    let opts = options(prompt.len() + n);
    let mut arenas = SessionArenas::new(model, &opts)?;
    let mut s = Session::new(model, &mut arenas, opts)?;
    let seq = s.cache_mut().create_sequence(edgekv::SeqMode::Paged)?;
    let t0 = Instant::now();
    let logits = s.prefill(seq, prompt, Logits::Last)?;
    let prefill = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let out = s.generate(seq, &logits, n, &[])?;
    Ok((out, prefill, t1.elapsed().as_secs_f64()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(2048);
    let decode = args.get(1).copied().unwrap_or(64);
    let path = model_path();
    let model = Llama::load(&path)?;
    let tokenizer = Tokenizer::load(&path)?;
    let vocab = model.config().vocab;

    // Greedy tokens.
    let chat =
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let chat_ids = tokenizer.encode(chat)?;
    let (ours, _, _) = generate(&model, &chat_ids, 32)?;
    let (theirs, _, _) = ref_generate(&chat_ids, 32)?;
    let same = ours.iter().zip(&theirs).take_while(|(a, b)| a == b).count();
    println!(
        "greedy (edgekv-llm):          {:?}",
        tokenizer.decode(&ours)?
    );
    println!(
        "greedy (candle-transformers): {:?}",
        tokenizer.decode(&theirs)?
    );
    println!("greedy agreement: first {same} of 32 tokens identical");

    // Teacher-forced fidelity over GPL-3: the reference one position per call.
    let text = std::fs::read_to_string("/usr/share/common-licenses/GPL-3")?;
    let tokens = tokenizer.encode(&text)?;
    let tokens = &tokens[..n.min(tokens.len())];
    let t = Instant::now();
    let mut m = reference()?;
    let mut theirs = Vec::with_capacity(tokens.len() * vocab);
    for (pos, &t) in tokens.iter().enumerate() {
        theirs.extend(ref_forward(&mut m, &[t], pos)?);
    }
    let t_ref = t.elapsed().as_secs_f64();
    let opts = options(tokens.len());
    let mut arenas = SessionArenas::new(&model, &opts)?;
    let mut s = Session::new(&model, &mut arenas, opts)?;
    let seq = s.cache_mut().create_sequence(edgekv::SeqMode::Paged)?;
    let t = Instant::now();
    let ours = s.prefill(seq, tokens, Logits::All)?;
    let t_ours = t.elapsed().as_secs_f64();
    let f = fidelity::compare_rows(&theirs, &ours, vocab, tokens)?;
    let own = fidelity::compare_rows(&theirs, &theirs, vocab, tokens)?;
    let bits_equal = ours
        .chunks_exact(vocab)
        .zip(theirs.chunks_exact(vocab))
        .filter(|(a, b)| a == b)
        .count();
    let m = tokens.len() as f64;
    println!(
        "teacher-forced {} GPL-3 tokens: mean KL(candle-transformers || edgekv-llm) {:.3e}, max {:.3e}, top-1 agreement {:.2} %, rows bit-identical {bits_equal}, PPL edgekv-llm {:.3} candle-transformers {:.3}; time edgekv-llm {:.1} s ({:.1} tokens/s, chunks of 64), candle-transformers {:.1} s ({:.1} tokens/s, one token per call)",
        tokens.len(),
        f.kl_mean,
        f.kl_max,
        100.0 * f.top1,
        f.perplexity,
        own.perplexity,
        t_ours,
        m / t_ours,
        t_ref,
        m / t_ref
    );

    // Speed: prompt of 128 GPL-3 tokens, then `decode` greedy tokens, two alternating rounds.
    let prompt = &tokens[..128.min(tokens.len())];
    for round in 0..2 {
        let (_, pn, dn) = generate(&model, prompt, decode + 1)?;
        let (_, pc, dc) = ref_generate(prompt, decode + 1)?;
        println!(
            "round {round}: prefill {} tokens: edgekv-llm {:.1} tokens/s, candle-transformers {:.1} tokens/s; decode {decode}: edgekv-llm {:.1} tokens/s, candle-transformers {:.1} tokens/s",
            prompt.len(),
            prompt.len() as f64 / pn,
            prompt.len() as f64 / pc,
            decode as f64 / dn,
            decode as f64 / dc
        );
    }
    Ok(())
}
