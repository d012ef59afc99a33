//! Shared by the model tests: the model (loaded once per test binary), the tokenizer, real text.
#![allow(dead_code)]

use std::sync::OnceLock;

use edgekv_model::{Llama, Logits, Session, SessionArenas, SessionOptions, Tokenizer, model_path};

pub fn model() -> &'static Llama {
    static MODEL: OnceLock<Llama> = OnceLock::new();
    MODEL.get_or_init(|| {
        Llama::load(model_path()).unwrap_or_else(|e| panic!("{e} (run model/fetch-model.sh first)"))
    })
}

pub fn tokenizer() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| Tokenizer::load(model_path()).expect("tokenizer"))
}

/// The first `n` tokens of the GPL-3 text (DESIGN.md's fidelity text).
pub fn gpl_tokens(n: usize) -> Vec<u32> {
    let text = std::fs::read_to_string("/usr/share/common-licenses/GPL-3").expect("GPL-3 text");
    let ids = tokenizer().encode(&text).expect("encode");
    assert!(ids.len() >= n, "GPL-3 has {} tokens", ids.len());
    ids[..n].to_vec()
}

/// A ChatML prompt.
pub fn chat_prompt(user: &str) -> Vec<u32> {
    tokenizer()
        .encode(&format!(
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
        ))
        .expect("encode")
}

/// Options sized for tests: `pages` pages, 2 sequences.
pub fn options(pages: u16) -> SessionOptions {
    SessionOptions {
        pages,
        sequences: 2,
        ..SessionOptions::default()
    }
}

/// Last-token logits of `prompt` prefilled cold (fresh cache) with `options`.
pub fn cold_logits(options: SessionOptions, prompt: &[u32]) -> Vec<f32> {
    let mut arenas = SessionArenas::new(model(), &options).expect("arenas");
    let mut s = Session::new(model(), &mut arenas, options).expect("session");
    let seq = s
        .cache_mut()
        .create_sequence(edgekv::SeqMode::Paged)
        .expect("sequence");
    s.prefill(seq, prompt, Logits::Last).expect("prefill")
}

pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}
