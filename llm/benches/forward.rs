//! Host tokens/s of the forward pass with this build's matmul kernels (AVX2 where the CPU has
//! it) against the portable matmuls, in the same process: rounds alternate between the two
//! (`matmul::set_kernels`), each round a cold prefill of a prompt then greedy decode; the
//! medians are printed, and the two runs' tokens must agree (the kernels have the portable
//! bits). One thread.
//!
//! `cargo bench -p edgekv-llm --bench forward -- [rounds] [prompt_tokens] [decode_tokens]`
//! (defaults 3, 128, 64; the model as the tests find it, `model/fetch-model.sh`).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use edgekv::ElementFormat;
use edgekv_llm::matmul::{kernels, set_kernels};
use edgekv_llm::{Engine, Llama, Logits, Sampling};

/// One cold prefill of `prompt` then `decode` greedy tokens: (prefill tokens/s, decode
/// tokens/s, the tokens).
fn round(model: &Llama<'_>, prompt: &[u32], decode: usize) -> (f64, f64, Vec<u32>) {
    let mut arenas = common::Arenas::new(
        common::cache_config(model, ElementFormat::F32, 64),
        (prompt.len() + decode).div_ceil(16) + 4,
    );
    let mut cache = arenas.cache();
    let mut scratch = common::scratch(model, 64);
    let mut engine = Engine::new(model, &mut scratch, 64).unwrap();
    let mut logits = vec![0f32; model.config().vocab];
    let seq = cache.create_sequence(edgekv::SeqMode::Paged).unwrap();
    let t0 = Instant::now();
    engine
        .prefill(&mut cache, seq, prompt, Logits::Last, &mut logits)
        .unwrap();
    let prefill = t0.elapsed().as_secs_f64();
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
    let dec = t1.elapsed().as_secs_f64();
    out.truncate(n);
    (prompt.len() as f64 / prefill, (n - 1) as f64 / dec, out)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let Some(model) = common::model() else {
        eprintln!("forward bench: no model (model/fetch-model.sh)");
        return;
    };
    // `cargo bench` passes `--bench`; numbers only.
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let rounds = args.first().copied().unwrap_or(3);
    let prompt_len = args.get(1).copied().unwrap_or(128);
    let decode = args.get(2).copied().unwrap_or(64);
    let prompt: Vec<u32> = common::HELLO
        .iter()
        .copied()
        .cycle()
        .take(prompt_len)
        .collect();
    let Some(isa) = kernels() else {
        eprintln!("forward bench: no matmul kernels in this build or on this CPU");
        return;
    };
    let (mut kp, mut kd, mut pp, mut pd) = (vec![], vec![], vec![], vec![]);
    let mut tokens = None;
    for r in 0..rounds {
        for on in [true, false] {
            set_kernels(on);
            let (p, d, t) = round(&model, &prompt, decode);
            eprintln!(
                "round {r} {}: prefill {p:.1} tokens/s, decode {d:.1} tokens/s",
                if on { isa } else { "portable" }
            );
            assert_eq!(*tokens.get_or_insert_with(|| t.clone()), t, "tokens differ");
            if on {
                kp.push(p);
                kd.push(d);
            } else {
                pp.push(p);
                pd.push(d);
            }
        }
    }
    set_kernels(true);
    let (kp, kd, pp, pd) = (
        median(&mut kp),
        median(&mut kd),
        median(&mut pp),
        median(&mut pd),
    );
    println!(
        "forward, {prompt_len}-token prompt, {decode} decoded, medians of {rounds} alternating rounds, one thread:"
    );
    println!("  {isa}: prefill {kp:.1} tokens/s, decode {kd:.1} tokens/s");
    println!("  portable: prefill {pp:.1} tokens/s, decode {pd:.1} tokens/s");
    println!(
        "  {isa} / portable: prefill {:.2}x, decode {:.2}x",
        kp / pp,
        kd / pd
    );
}
