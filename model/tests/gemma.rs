//! Gemma 3 270M (`gemma3`) through the no_std forward pass, over a layer-grouped cache with f16
//! pages (15 sliding-window layers releasing pages, 3 global ones), against llama.cpp's own
//! outputs on the same token ids (`tests/gemma_data/`, written by
//! `host-tests/peer/llama_reference.py`: llama-cpp-python 0.3.36 built from its sdist, f16 K/V,
//! flash attention on). Skipped, with a notice, when the model file is missing
//! (`bash model/fetch-gemma.sh` fetches it; `$EDGEKV_GEMMA` names another copy).
//!
//! The teacher-forced check runs the first tokens of GPL-3 (BOS first, past the 512-token
//! window so that the sliding layers' pages are released) and compares, position by position,
//! the top-1 token, the log-probability of the next token (perplexity) and the KL divergence
//! from llama.cpp's distribution (over its top-K tokens and the rest as one bin: a lower bound
//! of the full KL, which `full_gpl3_fidelity` measures exactly on 1,536 tokens, ignored by
//! default: it needs llama.cpp's full logits, written by the same script with `--full`).
//!
//! Measured with `full_gpl3_fidelity` (2026-11-29, 1,536 tokens): f16 pages top-1 agreement
//! 95.05 %, mean KL 7.10e-3 (max 0.375), perplexity 14.854 against llama.cpp's 14.774 with
//! flash attention on (14.853 off; its own off-vs-on mean KL 6.98e-3, top-1 94.66 %); q8_0
//! pages 94.86 %, 9.56e-3 (max 0.459), 14.959; q8_0 pages of Hadamard-rotated rows 95.25 %,
//! 7.38e-3 (max 0.103), 14.855; q4_0 pages 79.10 %, 1.51e-1 (max 3.19), 16.830, rotated 79.17 %,
//! 1.36e-1 (max 2.92), 16.777 (llama.cpp's own q4_0 cache: 77.28 %, 1.69e-1, 16.856). The sliding
//! group held at most 33 pages in each run.

use crate::gemma_common;

use edgekv::{ElementFormat, GroupedCache, Rotation, SeqMode};
use edgekv_llm::{Engine, Logits, Sampling};
use gemma_common::{Stats, gemma, grouped_arenas, held_pages, scratch};

/// Tokens teacher-forced in CI: past the 512-token window by 128.
const CI_TOKENS: usize = 640;

/// Teacher forcing through f16 pages of a grouped cache: top-1 agreement ≥ 94 %, perplexity
/// within 1 % of llama.cpp's, and the sliding layers' group never holding more than
/// ⌈(512 + 16 − 1) / 16⌉ + 1 = 34 pages. The KL committed here is a lower bound (llama.cpp's
/// top 8 tokens and the rest as one bin hold on average 81 % of its mass in the top 8): on
/// these 640 positions it read 5.36e-3 when the exact KL (`full_gpl3_fidelity`) was 7.85e-3, so
/// the bound is held to ≤ 7.0e-3 (the goal for the exact figure, 1.05e-2, divided by
/// that ratio of 1.46, rounded down).
#[test]
fn teacher_forced_gpl3_matches_llama_cpp() {
    let Some(model) = gemma() else { return };
    let r = gemma_common::reference();
    let n = CI_TOKENS.min(r.ids.len());
    assert!(n > 512 + 16, "the reference must pass the window");
    let mut arenas = grouped_arenas(&model, ElementFormat::F16, n);
    let mut cache: GroupedCache = arenas.cache();
    let mut s = scratch(&model, 16);
    let seq = cache.create_sequence(SeqMode::Paged).unwrap();
    let mut stats = Stats::default();
    let mut most = 0;
    let vocab = model.config().vocab;
    let mut logits = vec![0f32; 16 * vocab];
    for start in (0..n).step_by(16) {
        let end = (start + 16).min(n);
        model
            .forward(
                &mut cache,
                seq,
                &r.ids[start..end],
                &mut s,
                Logits::All,
                &mut logits,
            )
            .unwrap();
        most = most.max(held_pages(&cache, 0, seq));
        for (i, row) in logits.chunks_exact(vocab).take(end - start).enumerate() {
            stats.add(&r, n, start + i, row);
        }
    }
    let ours = stats.report("edgekv f16 pages, grouped", &r, n);
    println!("sliding group: at most {most} pages held");
    assert!(most <= 34, "the sliding group held {most} pages");
    assert!(
        held_pages(&cache, 1, seq) == n.div_ceil(16),
        "the global group keeps every page"
    );
    assert!(ours.top1 >= 0.94, "top-1 agreement {}", ours.top1);
    assert!(
        ours.kl_mean <= 7.0e-3,
        "mean KL (top-8 lower bound) {}",
        ours.kl_mean
    );
    let ppl_ref = r.perplexity(n);
    assert!(
        (ours.ppl / ppl_ref - 1.0).abs() <= 0.01,
        "perplexity {} vs llama.cpp's {ppl_ref}",
        ours.ppl
    );
}

/// Greedy continuation of a plain-text prompt equals llama.cpp's until the first position where
/// llama.cpp's two best logits are within 0.1 of each other (a near-tie either may break; on this
/// prompt the 15th token, where llama.cpp's gap is 0.079 and ours picks its runner-up).
#[test]
fn greedy_continuation_equals_llama_cpp() {
    let Some(model) = gemma() else { return };
    let g = gemma_common::greedy();
    let mut arenas = grouped_arenas(&model, ElementFormat::F16, g.prompt.len() + g.ids.len());
    let mut cache: GroupedCache = arenas.cache();
    let mut s = scratch(&model, 16);
    let mut engine = Engine::new(&model, &mut s, 16).unwrap();
    let mut logits = vec![0f32; model.config().vocab];
    let (seq, reused) = engine.start(&mut cache, &g.prompt, &mut logits).unwrap();
    assert_eq!(reused, 0);
    let mut ours = vec![0u32; g.ids.len()];
    let made = engine
        .generate(
            &mut cache,
            seq,
            &mut logits,
            &mut Sampling::Greedy,
            &[],
            &mut ours,
        )
        .unwrap();
    assert_eq!(made, g.ids.len());
    let near_tie = g
        .gaps
        .iter()
        .position(|&gap| gap < 0.1)
        .unwrap_or(g.ids.len());
    println!(
        "greedy: {} tokens, llama.cpp's first near-tie at {near_tie}; ours {:?}",
        g.ids.len(),
        &ours
    );
    assert!(
        near_tie >= 8,
        "llama.cpp's continuation ties early ({near_tie})"
    );
    assert_eq!(
        ours[..near_tie],
        g.ids[..near_tie],
        "greedy continuation differs"
    );
}

/// Where the full reference is (`$EDGEKV_GEMMA_FULL`, else `gemma3_270m/reference` beside the
/// model): `full.ids` (u32) and `full.logprobs` (f32, one row of the vocabulary per position),
/// written by `host-tests/peer/llama_reference.py --full DIR`.
fn full_dir() -> std::path::PathBuf {
    std::env::var_os("EDGEKV_GEMMA_FULL")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| gemma_common::gemma_path().with_file_name("reference"))
}

/// The protocol on the first 1,536 GPL-3 tokens (BOS first): exact mean / max KL from
/// llama.cpp's full distributions, top-1 agreement and perplexity, pages of a grouped cache in
/// `$EDGEKV_GEMMA_KV` (`f16`, the default, `q8_0`, `q4_0`, or `q8_0-hadamard` /
/// `q4_0-hadamard`: rows rotated before quantization). Ignored by default (a few minutes in
/// release; needs the full reference): `cargo test --release --test integration
/// gemma::full_gpl3_fidelity -- --ignored --nocapture` in `model/`.
#[test]
#[ignore]
fn full_gpl3_fidelity() {
    let Some(model) = gemma() else { return };
    let dir = full_dir();
    let (Ok(ids), Ok(lp)) = (
        std::fs::read(dir.join("full.ids")),
        std::fs::File::open(dir.join("full.logprobs")),
    ) else {
        eprintln!("SKIPPED: no full reference in {}", dir.display());
        return;
    };
    use std::io::Read;
    let ids = gemma_common::u32s(&ids);
    let mut lp = std::io::BufReader::new(lp);
    let n = ids.len();
    let vocab = model.config().vocab;
    let kv = std::env::var("EDGEKV_GEMMA_KV").unwrap_or_else(|_| "f16".into());
    let (format, rotation) = match kv.as_str() {
        "f16" => (ElementFormat::F16, Rotation::None),
        "q8_0" => (ElementFormat::Q8_0, Rotation::None),
        "q8_0-hadamard" => (ElementFormat::Q8_0, Rotation::Hadamard),
        "q4_0" => (ElementFormat::Q4_0, Rotation::None),
        "q4_0-hadamard" => (ElementFormat::Q4_0, Rotation::Hadamard),
        other => panic!("EDGEKV_GEMMA_KV={other}: f16, q8_0, q8_0-hadamard, q4_0 or q4_0-hadamard"),
    };
    let mut arenas = gemma_common::grouped_arenas_rotated(&model, format, rotation, n);
    let mut cache: GroupedCache = arenas.cache();
    let mut s = scratch(&model, 16);
    let seq = cache.create_sequence(SeqMode::Paged).unwrap();
    let mut stats = Stats::default();
    let mut logits = vec![0f32; 16 * vocab];
    let mut bytes = vec![0u8; 4 * vocab];
    let mut most = 0;
    for start in (0..n).step_by(16) {
        let end = (start + 16).min(n);
        model
            .forward(
                &mut cache,
                seq,
                &ids[start..end],
                &mut s,
                Logits::All,
                &mut logits,
            )
            .unwrap();
        most = most.max(held_pages(&cache, 0, seq));
        for (i, row) in logits.chunks_exact(vocab).take(end - start).enumerate() {
            lp.read_exact(&mut bytes).unwrap();
            let reference = gemma_common::f32s(&bytes);
            stats.add_full(&ids, &reference, start + i, row);
            if start + i + 1 == CI_TOKENS {
                let f = stats.figures();
                println!(
                    "first {CI_TOKENS} positions: top-1 {:.2} %, exact mean KL {:.3e}, \
                     perplexity over them {:.4}",
                    100.0 * f.top1,
                    f.kl_mean,
                    f.ppl
                );
            }
        }
    }
    let f = stats.figures();
    println!(
        "full GPL-3, {n} tokens, {kv} pages (grouped, sliding group at most {most} pages): \
         top-1 agreement {:.2} %, mean KL {:.3e}, max KL {:.3e}, perplexity {:.4}",
        100.0 * f.top1,
        f.kl_mean,
        f.kl_max,
        f.ppl
    );
}

/// The forward pass over a plain `KvCache` (every layer keeping every position, the window
/// passed in the attention parameters) gives the bits of the grouped cache's on a prompt
/// shorter than the window; a second request for the same prompt reuses its first chunk from the
/// grouped cache's prefix index (every group) and gives the same bits; so does a run on two
/// threads.
#[test]
fn plain_cache_equals_grouped_cache() {
    let Some(model) = gemma() else { return };
    let prompt = gemma_common::greedy().prompt;
    let vocab = model.config().vocab;
    let mut s = scratch(&model, 16);
    let mut grouped = vec![0f32; vocab];
    let mut arenas = grouped_arenas(&model, ElementFormat::F16, prompt.len());
    let mut cache: GroupedCache = arenas.cache();
    let mut engine = Engine::new(&model, &mut s, 16).unwrap();
    engine.start(&mut cache, &prompt, &mut grouped).unwrap();
    let mut again = vec![0f32; vocab];
    let (_, reused) = engine.start(&mut cache, &prompt, &mut again).unwrap();
    assert_eq!(reused, 16);
    assert!(again == grouped, "reuse differs from the cold prefill");
    let config = edgekv::CacheConfig::new(model.config().shape().unwrap())
        .with_formats(ElementFormat::F16, ElementFormat::F16)
        .with_page_tokens(16)
        .with_chunk_tokens(16)
        .with_sequences(1, 64)
        .with_namespace(model.fingerprint());
    let mut arenas = edgekv::HeapArenas::for_pages::<edgekv::FreeList>(&config, 4).unwrap();
    let mut plain = arenas.cache::<edgekv::FreeList>(config).unwrap();
    let mut one = vec![0f32; vocab];
    engine.start(&mut plain, &prompt, &mut one).unwrap();
    assert!(
        one == grouped,
        "a plain KvCache differs from the grouped cache"
    );
    // The same bits with the matmuls and the per-token steps shared by two threads.
    edgekv_llm::matmul::set_threads(2);
    let mut arenas = grouped_arenas(&model, ElementFormat::F16, prompt.len());
    let mut cache: GroupedCache = arenas.cache();
    let mut two = vec![0f32; vocab];
    engine.start(&mut cache, &prompt, &mut two).unwrap();
    edgekv_llm::matmul::set_threads(1);
    assert!(two == grouped, "two threads differ from one");
}
