//! Teacher forcing for fidelity work, any model `edgekv-llm` runs (SmolLM2, Gemma 3):
//!
//! ```text
//! cargo run --release --bin teacher-force -- --gguf FILE --tokens IDS.json --out DIR \
//!     [--kv FORMATS] [--positions P,...]
//! ```
//!
//! `IDS.json` is a JSON array of token ids (BOS included if the model wants one). `--kv` is one
//! page format for K and V, or `K/V`: f32, f16 (default), bf16, q8_0, q4_0, q4_1. Writes into
//! DIR: `next_logprob.npy` (f32, the log-probability of each next token: one per position but
//! the last), `top1.npy` (u32, the most likely next token at every position), and for every
//! position P named `logits_P.npy` (f32, the full row). Prints the perplexity.

use std::path::{Path, PathBuf};

use edgekv::ElementFormat;
use edgekv_model::{Llama, teacher_force};

/// A page format by name.
fn format(name: &str) -> Result<ElementFormat, String> {
    Ok(match name {
        "f32" => ElementFormat::F32,
        "f16" => ElementFormat::F16,
        "bf16" => ElementFormat::Bf16,
        "q8_0" => ElementFormat::Q8_0,
        "q4_0" => ElementFormat::Q4_0,
        "q4_1" => ElementFormat::Q4_1,
        other => return Err(format!("unknown page format `{other}`")),
    })
}

/// Writes a one-dimensional array as `.npy`.
fn write_npy<T: npyz::AutoSerialize + Copy>(path: &Path, data: &[T]) -> std::io::Result<()> {
    npyz::to_file_1d(path, data.iter().copied())
}

const USAGE: &str =
    "usage: teacher-force --gguf FILE --tokens IDS.json --out DIR [--kv K[/V]] [--positions P,...]";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (mut gguf, mut tokens, mut out, mut kv, mut positions) =
        (None, None, None, String::from("f16"), Vec::new());
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--gguf" => gguf = Some(PathBuf::from(value)),
            "--tokens" => tokens = Some(PathBuf::from(value)),
            "--out" => out = Some(PathBuf::from(value)),
            "--kv" => kv = value,
            "--positions" => {
                positions = value
                    .split(',')
                    .map(|p| p.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("--positions {value}: {e}"))?
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
    }
    let (Some(gguf), Some(tokens), Some(out)) = (gguf, tokens, out) else {
        return Err(USAGE.into());
    };
    let (k, v) = kv.split_once('/').unwrap_or((&kv, &kv));
    let formats = (format(k)?, format(v)?);
    let ids: Vec<u32> = serde_json::from_str(&std::fs::read_to_string(&tokens)?)
        .map_err(|e| format!("{}: not a JSON array of token ids: {e}", tokens.display()))?;
    let model = Llama::load(&gguf)?;
    let run = teacher_force(&model, &ids, formats, &positions)?;
    std::fs::create_dir_all(&out)?;
    write_npy(&out.join("next_logprob.npy"), &run.next_logprob)?;
    write_npy(&out.join("top1.npy"), &run.top1)?;
    for (p, row) in &run.logits {
        write_npy(&out.join(format!("logits_{p}.npy")), row)?;
    }
    println!(
        "{} tokens, K/V pages {kv}: perplexity {:.4}; wrote {}",
        ids.len(),
        run.perplexity(),
        out.display()
    );
    Ok(())
}
