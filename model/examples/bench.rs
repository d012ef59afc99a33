//! Prefill and decode speed, and time to first token for a 769-token prompt whose first 670
//! tokens are cached vs cold, for edgekv (int8 pages) and, in the same run, candle-transformers'
//! quantized llama (dense f32 KV; reuse = keeping its KV of the first 670 tokens, as llama.cpp
//! does). `cargo run --release --example bench [-- ROUNDS]`; prints medians over the rounds and,
//! for time to first token, the median and range of each round's own cold / warm ratio (its two
//! times are taken seconds apart, so a shared machine's drift between rounds cancels out of it).

use std::time::{Duration, Instant};

use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use edgekv_model::{
    Llama, ReuseAlign, Session, SessionArenas, SessionOptions, Tokenizer, model_path,
};

const PROMPT: usize = 769;
const CACHED: usize = 670;
const DECODE: usize = 64;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Each round's cold / warm ratio: `median (lowest–highest)`.
fn round_ratios(cold: &[Duration], warm: &[Duration]) -> String {
    let mut r: Vec<f64> = cold
        .iter()
        .zip(warm)
        .map(|(c, w)| secs(*c) / secs(*w))
        .collect();
    r.sort_by(f64::total_cmp);
    format!(
        "{:.2}x ({:.2}-{:.2}x)",
        r[r.len() / 2],
        r[0],
        r[r.len() - 1]
    )
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Medians of one configuration's rounds: cold prefill, warm (reusing) prefill, one decode step.
fn report(who: &str, cold: Vec<Duration>, warm: Vec<Duration>, decode: Vec<Duration>, reuse: &str) {
    let per_round = round_ratios(&cold, &warm);
    let (cold, warm) = (median(cold), median(warm));
    let decode = if decode.is_empty() {
        String::new()
    } else {
        format!(", decode {:.1} tok/s", 1.0 / secs(median(decode)))
    };
    println!(
        "{who}: prefill {PROMPT} tokens {:.2} s ({:.1} tok/s){decode}; TTFT cold {:.0} ms, {reuse} {:.0} ms: {:.2}x; per round {per_round}",
        secs(cold),
        PROMPT as f64 / secs(cold),
        secs(cold) * 1e3,
        secs(warm) * 1e3,
        secs(cold) / secs(warm)
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    let path = model_path();
    let model = Llama::load(&path)?;
    let tokenizer = Tokenizer::load(&path)?;
    let text = std::fs::read_to_string("/usr/share/common-licenses/GPL-3")?;
    let tokens = tokenizer.encode(&text)?;
    let prompt = &tokens[..PROMPT];
    let eos = model.config().eos;
    println!(
        "CANDLE_NUM_THREADS={}, {rounds} rounds, medians",
        std::env::var("CANDLE_NUM_THREADS").unwrap_or_default()
    );

    // edgekv: cold prefill + decode, then reuse of the cached 670 tokens.
    for reuse in [ReuseAlign::Page, ReuseAlign::Chunk] {
        let options = SessionOptions {
            reuse,
            pages: 128,
            ..SessionOptions::default()
        };
        let (mut cold_t, mut warm_t, mut dec_t) = (vec![], vec![], vec![]);
        let mut reused = 0;
        for _ in 0..rounds {
            let mut arenas = SessionArenas::new(&model, &options)?;
            let mut s = Session::new(&model, &mut arenas, options)?;
            let t = Instant::now();
            let (seq, r, cold) = s.start(prompt)?;
            cold_t.push(t.elapsed());
            assert_eq!(r, 0);
            let t = Instant::now();
            let out = s.generate(seq, &cold, DECODE, &[])?;
            dec_t.push(t.elapsed() / (out.len() - 1) as u32);
            s.cache_mut().free_sequence(seq)?;

            // A fresh cache that has seen only the first 670 tokens.
            let mut arenas = SessionArenas::new(&model, &options)?;
            let mut s = Session::new(&model, &mut arenas, options)?;
            let (seq, _, _) = s.start(&prompt[..CACHED])?;
            s.cache_mut().free_sequence(seq)?;
            let t = Instant::now();
            let (_, r, warm) = s.start(prompt)?;
            warm_t.push(t.elapsed());
            reused = r;
            assert!(
                same_bits(&warm, &cold),
                "logits after reuse differ from cold"
            );
        }
        report(
            &format!("edgekv int8, prefix index, reuse aligned to {reuse:?}"),
            cold_t,
            warm_t,
            dec_t,
            &format!("bit-identical logits reusing {reused} of {CACHED} cached tokens"),
        );
    }

    // edgekv, one conversation kept (as llama.cpp keeps its sequence): reuse at token granularity.
    let options = SessionOptions {
        pages: 128,
        ..SessionOptions::default()
    };
    let (mut cold_t, mut warm_t) = (vec![], vec![]);
    let mut reused = 0;
    for _ in 0..rounds {
        let mut arenas = SessionArenas::new(&model, &options)?;
        let mut s = Session::new(&model, &mut arenas, options)?;
        let t = Instant::now();
        let (seq, _, cold) = s.start(prompt)?;
        cold_t.push(t.elapsed());
        s.cache_mut().free_sequence(seq)?;

        let mut arenas = SessionArenas::new(&model, &options)?;
        let mut s = Session::new(&model, &mut arenas, options)?;
        let (seq, _, _) = s.start(&prompt[..CACHED])?;
        let t = Instant::now();
        let (kept, warm) = s.continue_prompt(seq, &prompt[..CACHED], prompt)?;
        warm_t.push(t.elapsed());
        reused = kept;
        let same = warm
            .iter()
            .zip(&cold)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "logits after reuse differ from cold");
    }
    let per_round = round_ratios(&cold_t, &warm_t);
    let (cold, warm) = (median(cold_t), median(warm_t));
    println!(
        "edgekv int8, one conversation kept, token granularity: TTFT cold {:.0} ms, reused {reused} of {CACHED} cached tokens {:.0} ms: {:.2}x; per round {per_round}; logits bit-identical",
        secs(cold) * 1e3,
        secs(warm) * 1e3,
        secs(cold) / secs(warm)
    );

    // Peer: candle-transformers' quantized llama on the same prompt.
    let mut file = std::fs::File::open(&path)?;
    let content = candle_core::quantized::gguf_file::Content::read(&mut file)?;
    let mut peer = ModelWeights::from_gguf(content, &mut file, &Device::Cpu)?;
    let run = |m: &mut ModelWeights, ids: &[u32], pos: usize| -> candle_core::Result<Vec<f32>> {
        m.forward(&Tensor::new(ids, &Device::Cpu)?.unsqueeze(0)?, pos)?
            .flatten_all()?
            .to_vec1()
    };
    let (mut cold_t, mut warm_t, mut dec_t) = (vec![], vec![], vec![]);
    for _ in 0..rounds {
        let t = Instant::now();
        let mut l = run(&mut peer, prompt, 0)?;
        cold_t.push(t.elapsed());
        let t = Instant::now();
        for i in 0..DECODE - 1 {
            let next = edgekv_model::argmax(&l);
            if next == eos {
                break;
            }
            l = run(&mut peer, &[next], PROMPT + i)?;
        }
        dec_t.push(t.elapsed() / (DECODE - 1) as u32);
        run(&mut peer, &prompt[..CACHED], 0)?;
        let t = Instant::now();
        run(&mut peer, &prompt[CACHED..], CACHED)?;
        warm_t.push(t.elapsed());
    }
    report(
        "candle-transformers (same run)",
        cold_t,
        warm_t,
        dec_t,
        &format!("its KV of {CACHED} tokens kept"),
    );
    Ok(())
}
