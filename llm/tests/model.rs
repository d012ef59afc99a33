//! SmolLM2-135M-Instruct through the no_std forward pass (skipped with a notice when the model
//! file is missing; `bash model/fetch-model.sh` fetches it).

mod common;

use common::{Arenas, HELLO, cache_config, model, scratch};
use edgekv::snapshot::RamFlash;
use edgekv::{ElementFormat, SeqMode};
use edgekv_llm::{Engine, Logits, Pcg32, Sampling, argmax};

/// The chat prompt "What is the capital of France?" in ChatML, as `model/`'s tokenizer gives it.
const CHAT: [u32; 16] = [
    1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198,
];

/// Greedy continuation of [`CHAT`] from `model/`'s candle path (`examples/llm_compare.rs`, f32
/// pages): "The capital of France is Paris.<|im_end|>\n<|im_end|><|im_start|>system\n…".
const CHAT_GREEDY_CANDLE: [u32; 32] = [
    504, 3575, 282, 4649, 314, 7042, 30, 2, 198, 2, 1, 9690, 198, 2, 198, 1, 4093, 198, 57, 5248,
    3946, 288, 7198, 253, 725, 1406, 281, 260, 2342, 30, 339, 3543,
];

/// A longer prompt: HELLO repeated, then the chat prompt.
fn long_prompt(n: usize) -> Vec<u32> {
    HELLO.iter().copied().cycle().take(n).collect()
}

#[test]
fn prompts_of_several_lengths_give_finite_logits() {
    let Some(model) = model() else { return };
    let vocab = model.config().vocab;
    let mut arenas = Arenas::new(cache_config(&model, ElementFormat::F32, 64), 32);
    let mut cache = arenas.cache();
    let mut s = scratch(&model, 64);
    let mut engine = Engine::new(&model, &mut s, 64).unwrap();
    for n in [1, 9, 40, 100] {
        let seq = cache.create_sequence(SeqMode::Paged).unwrap();
        let mut out = vec![0f32; vocab];
        engine
            .prefill(&mut cache, seq, &long_prompt(n), Logits::Last, &mut out)
            .unwrap();
        assert!(out.iter().all(|v| v.is_finite()), "{n} tokens");
        let spread = out.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v))
            - out.iter().fold(f32::INFINITY, |m, &v| m.min(v));
        assert!(spread > 1.0, "{n} tokens: logits nearly constant");
        cache.free_sequence(seq).unwrap();
    }
}

#[test]
fn chunked_prefill_equals_one_pass_bit_for_bit() {
    let Some(model) = model() else { return };
    let vocab = model.config().vocab;
    let prompt = long_prompt(70);
    let mut arenas = Arenas::new(cache_config(&model, ElementFormat::Q8_0, 64), 32);
    let mut cache = arenas.cache();
    // One pass of 70 rows.
    let mut s = scratch(&model, 70);
    let a = cache.create_sequence(SeqMode::Paged).unwrap();
    let mut one = vec![0f32; 70 * vocab];
    model
        .forward(&mut cache, a, &prompt, &mut s, Logits::All, &mut one)
        .unwrap();
    // Chunks of 16 through the engine, and uneven pieces by hand.
    let mut engine = Engine::new(&model, &mut s, 16).unwrap();
    let b = cache.create_sequence(SeqMode::Paged).unwrap();
    let mut chunked = vec![0f32; 70 * vocab];
    engine
        .prefill(&mut cache, b, &prompt, Logits::All, &mut chunked)
        .unwrap();
    assert!(one == chunked, "chunks of 16 differ from one pass");
    let c = cache.create_sequence(SeqMode::Paged).unwrap();
    let mut last = vec![0f32; vocab];
    let mut at = 0;
    for piece in [1usize, 5, 17, 33, 14] {
        model
            .forward(
                &mut cache,
                c,
                &prompt[at..at + piece],
                &mut s,
                Logits::Last,
                &mut last,
            )
            .unwrap();
        at += piece;
        assert!(
            last == one[(at - 1) * vocab..at * vocab],
            "piece ending at {at}"
        );
    }
}

#[test]
fn prefix_reuse_equals_cold_bit_for_bit() {
    let Some(model) = model() else { return };
    let vocab = model.config().vocab;
    let base = long_prompt(100);
    let mut second = base[..80].to_vec();
    second.extend_from_slice(&CHAT);
    let mut arenas = Arenas::new(cache_config(&model, ElementFormat::Q8_0, 32), 48);
    let mut cache = arenas.cache();
    let mut s = scratch(&model, 32);
    let mut engine = Engine::new(&model, &mut s, 32).unwrap();
    let mut out = vec![0f32; vocab];
    let (first, reused) = engine.start(&mut cache, &base, &mut out).unwrap();
    assert_eq!(reused, 0);
    cache.free_sequence(first).unwrap();
    let mut warm = vec![0f32; vocab];
    let (seq, reused) = engine.start(&mut cache, &second, &mut warm).unwrap();
    assert_eq!(reused, 64, "two whole chunks of 32 reused");
    let warm_first = warm.clone();
    // Decode a few tokens on the warm sequence.
    let mut warm_tokens = [0u32; 6];
    engine
        .generate(
            &mut cache,
            seq,
            &mut warm,
            &mut Sampling::Greedy,
            &[],
            &mut warm_tokens,
        )
        .unwrap();
    // Cold: a fresh cache.

    let mut arenas = Arenas::new(cache_config(&model, ElementFormat::Q8_0, 32), 48);
    let mut cache = arenas.cache();
    let mut cold = vec![0f32; vocab];
    let (cseq, reused) = engine.start(&mut cache, &second, &mut cold).unwrap();
    assert_eq!(reused, 0);
    assert!(warm_first == cold, "first logits: reused and cold differ");
    let mut cold_tokens = [0u32; 6];
    engine
        .generate(
            &mut cache,
            cseq,
            &mut cold,
            &mut Sampling::Greedy,
            &[],
            &mut cold_tokens,
        )
        .unwrap();
    assert_eq!(warm_tokens, cold_tokens);
    // The last decode's logits bit for bit: `warm` and `cold` now hold the logits after the
    // fifth generated token.
    assert!(warm == cold, "reused and cold logits differ");
}

#[test]
fn snapshot_restore_continues_bit_for_bit() {
    let Some(model) = model() else { return };
    let vocab = model.config().vocab;
    let system = long_prompt(48);
    let mut arenas = Arenas::new(cache_config(&model, ElementFormat::Q8_0, 16), 16);
    let mut cache = arenas.cache();
    let mut s = scratch(&model, 16);
    let mut engine = Engine::new(&model, &mut s, 16).unwrap();
    let mut out = vec![0f32; vocab];
    let (seq, _) = engine.start(&mut cache, &system, &mut out).unwrap();
    let mut mem = vec![0xffu8; 1 << 21];
    let mut flash = RamFlash::<16, 4096>::new(&mut mem);
    cache
        .snapshot(seq, &system, model.fingerprint(), &mut flash, 0)
        .unwrap();
    // Continue on the original.
    let mut direct = vec![0f32; vocab];
    engine.decode(&mut cache, seq, 378, &mut direct).unwrap();

    // Restore into a fresh cache and continue the same way.
    let mut arenas = Arenas::new(cache_config(&model, ElementFormat::Q8_0, 16), 16);
    let mut cache = arenas.cache();
    let mut tokens = vec![0u32; 64];
    let (rseq, header) = cache
        .restore(&mut flash, 0, model.fingerprint(), &mut tokens)
        .unwrap();
    assert_eq!(header.tokens as usize, system.len());
    assert_eq!(&tokens[..system.len()], &system[..]);
    let mut restored = vec![0f32; vocab];
    engine.decode(&mut cache, rseq, 378, &mut restored).unwrap();
    assert!(direct == restored, "restored KV continues differently");
}

#[test]
fn greedy_chat_tokens_match_the_candle_path() {
    let Some(model) = model() else { return };
    let vocab = model.config().vocab;
    let mut arenas = Arenas::new(cache_config(&model, ElementFormat::F32, 64), 8);
    let mut cache = arenas.cache();
    let mut s = scratch(&model, 64);
    let mut engine = Engine::new(&model, &mut s, 64).unwrap();
    let seq = cache.create_sequence(SeqMode::Paged).unwrap();
    let mut logits = vec![0f32; vocab];
    engine
        .prefill(&mut cache, seq, &CHAT, Logits::Last, &mut logits)
        .unwrap();
    assert_eq!(argmax(&logits), CHAT_GREEDY_CANDLE[0]);
    let mut out = [0u32; 32];
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
    assert_eq!(n, 32);
    assert_eq!(out, CHAT_GREEDY_CANDLE);
}

#[test]
fn seeded_sampling_repeats() {
    let Some(model) = model() else { return };
    let vocab = model.config().vocab;
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mut arenas = Arenas::new(cache_config(&model, ElementFormat::Q8_0, 64), 8);
        let mut cache = arenas.cache();
        let mut s = scratch(&model, 64);
        let mut engine = Engine::new(&model, &mut s, 64).unwrap();
        let mut logits = vec![0f32; vocab];
        let (seq, _) = engine.start(&mut cache, &CHAT, &mut logits).unwrap();
        let mut sampling = Sampling::TopK {
            k: 40,
            temperature: 0.8,
            rng: Pcg32::new(1234, 1),
        };
        let mut out = [0u32; 12];
        engine
            .generate(&mut cache, seq, &mut logits, &mut sampling, &[2], &mut out)
            .unwrap();
        runs.push(out);
    }
    assert_eq!(runs[0], runs[1]);
}

/// FNV-1a over the logits' bits: the digest a board run compares with the host's.
fn digest(logits: &[f32]) -> u64 {
    logits.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, v| {
        v.to_bits()
            .to_le_bytes()
            .iter()
            .fold(h, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
    })
}

/// Logits of HELLO (int8 pages, chunks of 64) and 4 greedy steps: a fixed digest, so any change
/// of the arithmetic shows (and the board build has a value to match).
#[test]
fn hello_logit_digest_is_stable() {
    let Some(model) = model() else { return };
    let vocab = model.config().vocab;
    let mut arenas = Arenas::new(cache_config(&model, ElementFormat::Q8_0, 64), 4);
    let mut cache = arenas.cache();
    let mut s = scratch(&model, 64);
    let mut engine = Engine::new(&model, &mut s, 64).unwrap();
    let mut logits = vec![0f32; vocab];
    let (seq, _) = engine.start(&mut cache, &HELLO, &mut logits).unwrap();
    let first = digest(&logits);
    let mut out = [0u32; 5];
    engine
        .generate(
            &mut cache,
            seq,
            &mut logits,
            &mut Sampling::Greedy,
            &[],
            &mut out,
        )
        .unwrap();
    let last = digest(&logits);
    println!("HELLO digests: first {first:#018x}, after 4 steps {last:#018x}, tokens {out:?}");
    assert_eq!((first, last, out), HELLO_DIGESTS);
}

/// Recorded on x86-64 (host build of this crate); since 2026-11-24 with int8 keys scored against
/// 16-bit query codes (the same tokens as the f32 path before).
const HELLO_DIGESTS: (u64, u64, [u32; 5]) = (
    0xe4c6_4c96_ddf5_a048,
    0x62ed_f34d_2f5c_7afe,
    [909, 506, 253, 2365, 6354],
);
