//! Fidelity of quantized KV on real text (DESIGN.md, "Fidelity measurement"): the first 2048
//! tokens of /usr/share/common-licenses/GPL-3, no BOS, teacher-forced in chunks of 64; perplexity,
//! KL against f16 KV (mean, max) and top-1 agreement for f32, int8 g=32 (Q8_0), int8 g=64, fp8
//! E4M3 (tiles of 32 and of 64 values, f32 scales). `cargo run --release --example fidelity
//! [-- TOKENS]`.

use edgekv::ElementFormat;
use edgekv_model::{Llama, SessionOptions, Tokenizer, fidelity, model_path};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2048);
    let path = model_path();
    let model = Llama::load(&path)?;
    let text = std::fs::read_to_string("/usr/share/common-licenses/GPL-3")?;
    let tokens = Tokenizer::load(&path)?.encode(&text)?;
    let tokens = &tokens[..n.min(tokens.len())];
    let formats = [
        ("f32", ElementFormat::F32),
        ("int8 g=32 (Q8_0)", ElementFormat::Int8 { group: 32 }),
        ("int8 g=64", ElementFormat::Int8 { group: 64 }),
        (
            "fp8 E4M3, tile 32",
            ElementFormat::Fp8Tile {
                dv: 64,
                tile: 32,
                bf16: false,
            },
        ),
        (
            "fp8 E4M3, tile 64",
            ElementFormat::Fp8Tile {
                dv: 64,
                tile: 64,
                bf16: false,
            },
        ),
    ];
    let kinds: Vec<ElementFormat> = formats.iter().map(|f| f.1).collect();
    let t = std::time::Instant::now();
    let (reference, figures) = fidelity::compare(
        &model,
        tokens,
        SessionOptions::default(),
        ElementFormat::F16,
        &kinds,
    )?;
    println!(
        "{} tokens of GPL-3, {:.0} s\n\n| KV format | perplexity | mean KL vs f16 | max KL | top-1 agreement |\n|---|---|---|---|---|",
        tokens.len(),
        t.elapsed().as_secs_f64()
    );
    println!(
        "| f16 (reference) | {:.3} | — | — | — |",
        reference.perplexity
    );
    for ((name, _), f) in formats.iter().zip(&figures) {
        println!(
            "| {name} | {:.3} | {:.2e} | {:.2e} | {:.2} % |",
            f.perplexity,
            f.kl_mean,
            f.kl_max,
            100.0 * f.top1
        );
    }
    Ok(())
}
