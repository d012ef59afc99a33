//! Feature `std`: the forward pass's logits are the same bits at 1, 2 and 3 matmul threads
//! (`matmul::set_threads`), for a prefill with every row of logits (the LM head over several
//! activation rows) and for decode steps, with the matmul tiles on and off.

mod common;

use common::{Arenas, HELLO, cache_config, model, scratch};
use edgekv::ElementFormat;
use edgekv_llm::matmul::{set_threads, set_tiles};
use edgekv_llm::{Engine, Logits, Sampling};

/// Logits of a 24-token prompt (every row) and of 3 greedy steps.
fn logits(model: &edgekv_llm::Llama<'_>) -> Vec<u32> {
    let vocab = model.config().vocab;
    let prompt: Vec<u32> = HELLO.iter().copied().cycle().take(24).collect();
    let mut arenas = Arenas::new(cache_config(model, ElementFormat::Q8_0, 64), 4);
    let mut cache = arenas.cache();
    let mut s = scratch(model, 64);
    let mut engine = Engine::new(model, &mut s, 64).unwrap();
    let seq = cache.create_sequence(edgekv::SeqMode::Paged).unwrap();
    let mut all = vec![0f32; prompt.len() * vocab];
    engine
        .prefill(&mut cache, seq, &prompt, Logits::All, &mut all)
        .unwrap();
    let mut last = all[(prompt.len() - 1) * vocab..].to_vec();
    let mut out = [0u32; 4];
    engine
        .generate(
            &mut cache,
            seq,
            &mut last,
            &mut Sampling::Greedy,
            &[],
            &mut out,
        )
        .unwrap();
    all.iter().chain(&last).map(|v| v.to_bits()).collect()
}

#[test]
fn logits_are_the_same_bits_at_any_thread_count() {
    let Some(model) = model() else { return };
    set_threads(1);
    let one = logits(&model);
    for threads in [2, 3] {
        set_threads(threads);
        assert!(logits(&model) == one, "{threads} threads");
    }
    set_tiles(false);
    let untiled = logits(&model);
    set_tiles(true);
    set_threads(1);
    assert!(untiled == one, "tiles off");
}
