//! The forward pass (`edgekv-llm`'s) against candle-transformers' quantized llama, an independent
//! test-only reference, by DESIGN.md's fidelity protocol: teacher-forced over real text, mean
//! KL(reference ‖ ours) and top-1 agreement.
//!
//! The two cannot agree bit for bit: both round every activation row to 8 bits before each matmul
//! (ggml's Q8_1 / Q8_0), so any last-bit difference upstream (RMSNorm's formula, RoPE tables,
//! SiLU's `exp`, candle's dense softmax against edgekv's paged online softmax) can flip a rounding,
//! and 30 layers amplify the flips — llama.cpp's own two f16 attention kernels differ by a mean KL
//! of 3.9e-3 and agree on 95.85 % of top-1 tokens. The goals (issue 18) are mean KL ≤ 5e-3 and
//! top-1 ≥ 95 % over 2048 GPL-3 tokens: `examples/llm_compare.rs` measured 4.09e-3 and 95.31 %.
//! This test runs the first 256 tokens (measured 5.08e-3, 94.92 %: the opening of the licence is
//! harder to predict, and 256 positions move top-1 by ±1.4 % per standard error), so its bounds
//! are 7.5e-3 and 93 %.
//! Greedy decoding: the reference's continuation, teacher-forced through our pass, must give the
//! same next token wherever the reference is not at a near-tie (top-2 gap < 0.75 logits; the
//! largest gap measured at a disagreement was 0.51).

use crate::common;
use common::{chat_prompt, gpl_tokens, model, options, tokenizer};

use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use edgekv::ElementFormat;
use edgekv_model::{Logits, Session, SessionArenas, argmax, fidelity, model_path};

fn reference() -> ModelWeights {
    let mut file = std::fs::File::open(model_path()).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
    ModelWeights::from_gguf(content, &mut file, &Device::Cpu).unwrap()
}

/// The reference's last-position logits after `ids` at positions `pos..`.
fn ref_forward(m: &mut ModelWeights, ids: &[u32], pos: usize) -> Vec<f32> {
    let x = Tensor::new(ids, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    m.forward(&x, pos)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn top2_gap(l: &[f32]) -> f32 {
    let mut v: Vec<f32> = l.to_vec();
    v.sort_by(|a, b| b.total_cmp(a));
    v[0] - v[1]
}

/// Largest top-2 gap of the reference at which our greedy token may differ from its.
const NEAR_TIE: f32 = 0.75;

#[test]
fn teacher_forced_gpl3_is_within_the_fidelity_goals() {
    let tokens = gpl_tokens(256);
    // The reference gives the last position's logits only: one position per call.
    let mut r = reference();
    let mut theirs = Vec::new();
    for (pos, &t) in tokens.iter().enumerate() {
        theirs.extend(ref_forward(&mut r, &[t], pos));
    }
    // Ours with f32 pages (the reference keeps f32 K/V), chunks of 64.
    let opts = options(16).with_format(ElementFormat::F32);
    let mut arenas = SessionArenas::new(model(), &opts).unwrap();
    let mut s = Session::new(model(), &mut arenas, opts).unwrap();
    let seq = s
        .cache_mut()
        .create_sequence(edgekv::SeqMode::Paged)
        .unwrap();
    let ours = s.prefill(seq, &tokens, Logits::All).unwrap();
    let vocab = model().config().vocab;
    let f = fidelity::compare_rows(&theirs, &ours, vocab, &tokens).unwrap();
    let own = fidelity::compare_rows(&theirs, &theirs, vocab, &tokens).unwrap();
    eprintln!(
        "{} GPL-3 tokens: mean KL(candle-transformers || edgekv-llm) {:.3e} (max {:.3e}), top-1 {:.2} %, perplexity ours {:.3} reference {:.3}",
        tokens.len(),
        f.kl_mean,
        f.kl_max,
        100.0 * f.top1,
        f.perplexity,
        own.perplexity
    );
    assert!(f.kl_mean <= 7.5e-3, "{f:?}");
    assert!(f.top1 >= 0.93, "{f:?}");
    assert!((f.perplexity / own.perplexity - 1.0).abs() < 0.02, "{f:?}");
}

#[test]
fn greedy_continuations_agree_except_at_near_ties() {
    let prompts = [
        chat_prompt("What is the capital of France?"),
        chat_prompt("Write a haiku about memory."),
        tokenizer()
            .encode("The quick brown fox jumps over the lazy dog. The dog")
            .unwrap(),
    ];
    let mut r = reference();
    let m = model();
    let eos = m.config().eos;
    for (i, p) in prompts.iter().enumerate() {
        // The reference's greedy continuation and its top-2 gap at each step.
        let (mut theirs, mut gaps) = (Vec::new(), Vec::new());
        let mut l = ref_forward(&mut r, p, 0);
        loop {
            let t = argmax(&l);
            theirs.push(t);
            gaps.push(top2_gap(&l));
            if t == eos || theirs.len() == 32 {
                break;
            }
            l = ref_forward(&mut r, &[t], p.len() + theirs.len() - 1);
        }
        let opts = options(16).with_format(ElementFormat::F32);
        let mut arenas = SessionArenas::new(m, &opts).unwrap();
        let mut s = Session::new(m, &mut arenas, opts).unwrap();
        // Teacher-forced: our next token after each of the reference's prefixes.
        let (seq, _, mut logits) = s.start(p).unwrap();
        let mut near_ties = 0;
        for (k, &t) in theirs.iter().enumerate() {
            let ours = argmax(&logits);
            if ours != t {
                assert!(
                    gaps[k] < NEAR_TIE,
                    "prompt {i}, token {k}: ours {ours}, reference {t}, reference top-2 gap {}",
                    gaps[k]
                );
                near_ties += 1;
            }
            if k + 1 < theirs.len() {
                logits = s.decode(seq, t).unwrap();
            }
        }
        eprintln!(
            "prompt {i}: {} reference tokens, ours differs at {near_ties} (all near-ties)",
            theirs.len()
        );
    }
}
