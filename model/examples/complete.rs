//! Greedy completion of a prompt: `cargo run --release --example complete -- "Once upon a time"`.
//! Prints the continuation, prefill and decode speed.

use std::time::Instant;

use edgekv_model::{Llama, Session, SessionArenas, SessionOptions, Tokenizer, model_path};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prompt = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "The capital of France is".to_string());
    let path = model_path();
    let model = Llama::load(&path)?;
    let tokenizer = Tokenizer::load(&path)?;
    let options = SessionOptions {
        pages: 128,
        ..SessionOptions::default()
    };
    let mut arenas = SessionArenas::new(&model, &options)?;
    let mut session = Session::new(&model, &mut arenas, options)?;
    let ids = tokenizer.encode(&prompt)?;
    println!("prompt ids: {ids:?}");
    let t0 = Instant::now();
    let (seq, _, logits) = session.start(&ids)?;
    let prefill = t0.elapsed();
    let t1 = Instant::now();
    let out = session.generate(seq, &logits, 32, &[model.config().eos])?;
    let decode = t1.elapsed();
    println!("{}{}", prompt, tokenizer.decode(&out)?);
    println!(
        "prefill {} tokens in {:.0} ms ({:.1} tok/s), decode {} tokens at {:.1} tok/s",
        ids.len(),
        prefill.as_secs_f64() * 1e3,
        ids.len() as f64 / prefill.as_secs_f64(),
        out.len(),
        (out.len() - 1) as f64 / decode.as_secs_f64()
    );
    Ok(())
}
