//! Fidelity of quantized KV on real text (DESIGN.md, "Fidelity measurement"): the first 2048
//! tokens of /usr/share/common-licenses/GPL-3, no BOS, teacher-forced in chunks of 64; per KV
//! storage its bytes per token and tokens per MiB (the planner's), perplexity, KL against f32 KV
//! (mean, max) and top-1 agreement: f16, Q8_0, int8 g=64, fp8 E4M3 tiles of 32, Q4_0, Q4_1,
//! Q4_0 with both halves rotated (signed Hadamard), Q8_0 K with Q4_0 V (plain and rotated).
//! `--f32-activations` measures on the low-noise path (matmuls over f32 activations, see
//! `Activations::F32`), where f16 KV's own error is visible. `cargo run --release --example
//! fidelity [-- TOKENS] [--f32-activations]`.

use edgekv::{CacheConfig, ElementFormat, Rotation};
use edgekv_model::{
    Activations, KvStorage, Llama, SessionOptions, Tokenizer, fidelity, model_path,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(2048);
    let low_noise = args.iter().any(|a| a == "--f32-activations");
    let path = model_path();
    let activations = if low_noise {
        Activations::F32
    } else {
        Activations::Quantized
    };
    let model = Llama::load(&path)?.with_activations(activations);
    let text = std::fs::read_to_string("/usr/share/common-licenses/GPL-3")?;
    let tokens = Tokenizer::load(&path)?.encode(&text)?;
    let tokens = &tokens[..n.min(tokens.len())];
    let signed = Rotation::SignedHadamard;
    let plain = |f| KvStorage::from(f);
    let fp8 = ElementFormat::Fp8Tile {
        dv: 64,
        tile: 32,
        bf16: false,
    };
    let (q8, q4_0, q4_1) = (
        ElementFormat::Q8_0,
        ElementFormat::Q4_0,
        ElementFormat::Q4_1,
    );
    let variants = [
        ("f16", plain(ElementFormat::F16)),
        ("int8 g=32 (Q8_0)", plain(q8)),
        ("int8 g=64", plain(ElementFormat::Int8 { group: 64 })),
        ("fp8 E4M3, tile 32", plain(fp8)),
        ("Q4_0", plain(q4_0)),
        ("Q4_1", plain(q4_1)),
        (
            "Q4_0 rotated (K and V)",
            plain(q4_0).rotated(signed, signed),
        ),
        ("Q8_0 K + Q4_0 V", KvStorage::new(q8, q4_0)),
        (
            "Q8_0 K + Q4_0 V rotated",
            KvStorage::new(q8, q4_0).rotated(Rotation::None, signed),
        ),
    ];
    let kinds: Vec<KvStorage> = variants.iter().map(|v| v.1).collect();
    let t = std::time::Instant::now();
    let (reference, figures) = fidelity::compare(
        &model,
        tokens,
        SessionOptions::default(),
        ElementFormat::F32,
        &kinds,
    )?;
    println!(
        "{} tokens of GPL-3, matmul activations {activations:?}, {:.0} s\n\n| KV storage | bytes / token | tokens / MiB | perplexity | mean KL vs f32 | max KL | top-1 agreement |\n|---|---:|---:|---:|---:|---:|---:|",
        tokens.len(),
        t.elapsed().as_secs_f64()
    );
    let shape = model.config().shape()?;
    let per_token = |kv: KvStorage| -> Result<usize, edgekv::ConfigError> {
        let g = CacheConfig::new(shape)
            .with_formats(kv.k, kv.v)
            .geometry()?;
        // The rows' own bytes (the arena adds alignment padding per page and pool).
        let row = g.k_row_bytes + g.k_scale_row_bytes + g.v_row_bytes + g.v_scale_row_bytes;
        Ok(row * usize::from(g.layers))
    };
    let row = |name: &str, kv: KvStorage| -> Result<String, edgekv::ConfigError> {
        let b = per_token(kv)?;
        Ok(format!("| {name} | {b} | {} |", (1 << 20) / b))
    };
    println!(
        "{} {:.3} | — | — | — |",
        row("f32 (reference)", plain(ElementFormat::F32))?,
        reference.perplexity
    );
    for ((name, kv), f) in variants.iter().zip(&figures) {
        println!(
            "{} {:.3} | {:.2e} | {:.2e} | {:.2} % |",
            row(name, *kv)?,
            f.perplexity,
            f.kl_mean,
            f.kl_max,
            100.0 * f.top1
        );
    }
    Ok(())
}
