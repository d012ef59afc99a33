//! Host tokens/s of the no_std forward pass: prefill of a prompt and greedy decode.
//!
//! `cargo run --release -p edgekv-llm --example bench -- [prompt_tokens] [decode_tokens]`

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use edgekv::ElementFormat;
use edgekv_llm::{Engine, Logits, Sampling};

fn main() {
    let Some(model) = common::model() else {
        return;
    };
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let prompt_len = args.first().copied().unwrap_or(128);
    let decode = args.get(1).copied().unwrap_or(64);
    let vocab = model.config().vocab;
    // A deterministic prompt: HELLO repeated.
    let prompt: Vec<u32> = common::HELLO
        .iter()
        .copied()
        .cycle()
        .take(prompt_len)
        .collect();
    let mut arenas = common::Arenas::new(
        common::cache_config(&model, ElementFormat::F32, 64),
        (prompt_len + decode).div_ceil(16) + 4,
    );
    let mut cache = arenas.cache();
    let mut scratch = common::scratch(&model, 64);
    let mut engine = Engine::new(&model, &mut scratch, 64).unwrap();
    let mut logits = vec![0f32; vocab];
    let seq = cache.create_sequence(edgekv::SeqMode::Paged).unwrap();
    let t0 = Instant::now();
    engine
        .prefill(&mut cache, seq, &prompt, Logits::Last, &mut logits)
        .unwrap();
    let prefill = t0.elapsed();
    let mut out = vec![0u32; decode + 1];
    let t1 = Instant::now();
    let n = engine
        .generate(
            &mut cache,
            seq,
            &mut logits,
            &mut Sampling::Greedy,
            &[],
            &mut out,
        )
        .unwrap();
    let dec = t1.elapsed();
    println!(
        "edgekv-llm: prefill {prompt_len} tokens in {:.3} s ({:.1} tokens/s), decode {} tokens in {:.3} s ({:.1} tokens/s)",
        prefill.as_secs_f64(),
        prompt_len as f64 / prefill.as_secs_f64(),
        n - 1,
        dec.as_secs_f64(),
        (n - 1) as f64 / dec.as_secs_f64()
    );
    println!("first tokens: {:?}", &out[..n.min(16)]);
}
