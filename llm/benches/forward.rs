//! Host tokens/s of the forward pass (SmolLM2-135M) in one process, rounds alternating between
//! every configuration: this build's matmul kernels (AVX2 where the CPU has it) or the portable
//! matmuls (`matmul::set_kernels`), tiles of four activation rows or one row at a time
//! (`matmul::set_tiles`), one or two matmul threads (`matmul::set_threads`); each run a cold
//! prefill of the prompt (in calls of 64 tokens: each matmul over 64 activation rows) then
//! greedy decode, the K/V in f16 pages (as the peer's f16 K/V). The medians are printed, and
//! every run's tokens must agree (the same bits in every configuration).
//!
//! Peer: with `EDGEKV_PEER_PYTHON` naming a Python that has llama-cpp-python (0.3.36, built from
//! its sdist), each round also runs `llama_cpp_peer.py` on the same GGUF and prompt ids at one
//! and two threads (f16 K/V, flash attention), between the edgekv runs.
//!
//! `cargo bench -p edgekv-llm --features std --bench forward -- [rounds] [prompt_tokens]
//! [decode_tokens]` (defaults 3, 128, 32; the model as the tests find it,
//! `model/fetch-model.sh`; `EDGEKV_BENCH_MODEL=gemma3`: Gemma 3 270M instead,
//! `model/fetch-gemma.sh`, its layers all global since prompt and decode stay within its
//! 512-token window). `EDGEKV_BENCH_ONLY=<text>` keeps the configurations whose name contains
//! it (e.g. `avx2, tiles of 4 tokens, 1 thread`), for a profiler.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use edgekv::ElementFormat;
use edgekv_llm::matmul::{kernels, set_kernels, set_threads, set_tiles};
use edgekv_llm::{Engine, Llama, Logits, Sampling};

/// One cold prefill of `prompt` then `decode` greedy tokens: (prefill tokens/s, decode
/// tokens/s, the tokens).
fn round(model: &Llama<'_>, prompt: &[u32], decode: usize) -> (f64, f64, Vec<u32>) {
    let mut arenas = common::Arenas::new(
        common::cache_config(model, ElementFormat::F16, 64),
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

/// One configuration and its rounds' rates.
struct Config {
    name: String,
    kernels: bool,
    tiles: bool,
    threads: usize,
    prefill: Vec<f64>,
    decode: Vec<f64>,
}

/// llama.cpp at `threads` through the peer script: (prefill tokens/s, decode tokens/s), or why
/// not.
fn peer(
    python: &str,
    gguf: &Path,
    threads: usize,
    prompt: &[u32],
    decode: usize,
) -> Result<(f64, f64), String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/llama_cpp_peer.py");
    let ids: Vec<String> = prompt.iter().map(u32::to_string).collect();
    let out = Command::new(python)
        .args([script, "--gguf"])
        .arg(gguf)
        .args(["--threads", &threads.to_string()])
        .args(["--decode", &decode.to_string()])
        .args(["--ids", &ids.join(",")])
        .env("OMP_NUM_THREADS", threads.to_string())
        .output()
        .map_err(|e| format!("{python}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |k: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse::<f64>().ok())
    };
    match (field("prefill_tps="), field("decode_tps=")) {
        (Some(p), Some(d)) if out.status.success() => Ok((p, d)),
        _ => Err(format!(
            "peer failed: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

fn main() {
    let gemma = std::env::var("EDGEKV_BENCH_MODEL").is_ok_and(|m| m == "gemma3");
    let (model, gguf, name) = if gemma {
        (common::gemma(), common::gemma_path(), "Gemma 3 270M Q4_K_M")
    } else {
        (common::model(), common::model_path(), "SmolLM2-135M Q4_1")
    };
    let Some(model) = model else {
        eprintln!("forward bench: no model (model/fetch-model.sh, model/fetch-gemma.sh)");
        return;
    };
    // `cargo bench` passes `--bench`; numbers only.
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let rounds = args.first().copied().unwrap_or(3);
    let prompt_len = args.get(1).copied().unwrap_or(128);
    let decode = args.get(2).copied().unwrap_or(32);
    let prompt: Vec<u32> = common::HELLO
        .iter()
        .copied()
        .cycle()
        .take(prompt_len)
        .collect();
    let isa = kernels().unwrap_or("none");
    let mut configs = Vec::new();
    for threads in [1, 2] {
        // The portable loops take one row at a time whatever `set_tiles` says.
        for (kernels, tiles) in [(true, true), (true, false), (false, false)] {
            let name = format!(
                "edgekv {}, {}, {threads} thread{}",
                if kernels { isa } else { "portable" },
                if tiles {
                    "tiles of 4 tokens"
                } else {
                    "one token"
                },
                if threads > 1 { "s" } else { "" },
            );
            configs.push(Config {
                name,
                kernels,
                tiles,
                threads,
                prefill: vec![],
                decode: vec![],
            });
        }
    }
    if let Ok(only) = std::env::var("EDGEKV_BENCH_ONLY") {
        configs.retain(|c| c.name.contains(&only));
    }
    let python = std::env::var("EDGEKV_PEER_PYTHON").ok();
    let mut peers: Vec<(usize, Vec<f64>, Vec<f64>)> = match python {
        Some(_) => vec![(1, vec![], vec![]), (2, vec![], vec![])],
        None => {
            eprintln!("forward bench: no EDGEKV_PEER_PYTHON, llama.cpp not measured");
            vec![]
        }
    };
    let mut tokens = None;
    for r in 0..rounds {
        // Each thread count's peer runs once a round, after that count's first configuration.
        let mut peer_ran = [false; 2];
        for c in configs.iter_mut() {
            set_kernels(c.kernels);
            set_tiles(c.tiles);
            set_threads(c.threads);
            let (p, d, t) = round(&model, &prompt, decode);
            eprintln!(
                "round {r} {}: prefill {p:.1} tokens/s, decode {d:.1} tokens/s",
                c.name
            );
            assert_eq!(*tokens.get_or_insert_with(|| t.clone()), t, "tokens differ");
            c.prefill.push(p);
            c.decode.push(d);
            // The peers between the edgekv runs, so load drift hits both sides alike.
            let k = c.threads - 1;
            if let (Some(python), Some(peer_run)) = (&python, peers.get_mut(k))
                && !std::mem::replace(&mut peer_ran[k], true)
            {
                match peer(python, &gguf, peer_run.0, &prompt, decode) {
                    Ok((p, d)) => {
                        eprintln!(
                            "round {r} llama.cpp, {} thread(s): prefill {p:.1} tokens/s, decode {d:.1} tokens/s",
                            peer_run.0
                        );
                        peer_run.1.push(p);
                        peer_run.2.push(d);
                    }
                    Err(e) => eprintln!("forward bench: {e}"),
                }
            }
        }
    }
    set_kernels(true);
    set_tiles(true);
    set_threads(1);
    println!(
        "forward, {name}, {prompt_len}-token prompt (calls of 64 tokens), {decode} decoded, medians of {rounds} alternating rounds:"
    );
    println!("| configuration | prefill tokens/s | decode tokens/s |");
    println!("|---|---:|---:|");
    for c in &mut configs {
        println!(
            "| {} | {:.1} | {:.1} |",
            c.name,
            median(&mut c.prefill),
            median(&mut c.decode)
        );
    }
    for (threads, p, d) in &mut peers {
        if !p.is_empty() {
            println!(
                "| llama.cpp (f16 K/V, flash attention), {threads} thread{} | {:.1} | {:.1} |",
                if *threads > 1 { "s" } else { "" },
                median(p),
                median(d)
            );
        }
    }
}
