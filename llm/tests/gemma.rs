//! Gemma 3 270M (`gemma3`) loads from its GGUF and is run over a layer-grouped cache; bad input
//! is a precise error. Skipped, with a notice, when the model file is missing
//! (`bash model/fetch-gemma.sh` fetches it; `$EDGEKV_GEMMA` names another copy). The forward
//! pass against llama.cpp's outputs is `model/tests/gemma.rs` (release builds: the forward pass
//! is too slow at this crate's test opt-level).

mod common;
use common::gemma;

use edgekv::{ElementFormat, FreeList, GroupedCache, HeapArena, SeqMode};
use edgekv_llm::{Arch, Error, Logits, ScratchPlan};

#[test]
fn config_is_read_from_the_gguf() {
    let Some(model) = gemma() else { return };
    let c = model.config();
    assert_eq!(
        (c.layers, c.embed, c.ffn, c.heads, c.kv_heads, c.head_dim),
        (18, 640, 2048, 4, 1, 256)
    );
    assert_eq!((c.vocab, c.bos, c.eos), (262_144, 2, 1));
    assert_eq!((c.rope_base, c.rms_eps), (1e6, 1e-6));
    let Arch::Gemma3(g) = c.arch else {
        panic!("not gemma3: {:?}", c.arch)
    };
    assert_eq!(
        (g.sliding_window, g.period, g.local_rope_base),
        (512, 6, 1e4)
    );
    let global: Vec<usize> = (0..18).filter(|&l| g.is_global(l)).collect();
    assert_eq!(global, [5, 11, 17]);
    let cfg = c
        .cache_config(ElementFormat::F16, ElementFormat::F16)
        .unwrap();
    assert_eq!(cfg.layer_group(5), Some((1, 0)));
    assert_eq!(cfg.layer_group(4), Some((0, 4)));
    assert_eq!(cfg.layer_group(17), Some((1, 2)));
    for l in 0..18 {
        assert!(model.gemma_norms(l).is_some(), "block {l}'s norms");
    }
}

/// Bad input is a precise error and changes nothing: a token past the vocabulary, more rows than
/// the scratch was planned for.
#[test]
fn bad_input_is_refused() {
    let Some(model) = gemma() else { return };
    let config = model
        .config()
        .cache_config(ElementFormat::F16, ElementFormat::F16)
        .unwrap()
        .with_page_tokens(16)
        .with_sequences(1, 64);
    let plan = GroupedCache::<FreeList>::plan_pages(&config, &[4, 4]).unwrap();
    let mut data = HeapArena::new(plan.data_bytes, config.align).unwrap();
    let mut meta = HeapArena::new(plan.meta_bytes, edgekv::META_ALIGN).unwrap();
    let mut cache: GroupedCache =
        GroupedCache::with_pages(config, &[4, 4], data.as_uninit_mut(), meta.as_uninit_mut())
            .unwrap();
    let mut s = vec![0f32; ScratchPlan::new(model.config(), 16, 16).unwrap().scratch];
    let seq = cache.create_sequence(SeqMode::Paged).unwrap();
    let mut out = vec![0f32; model.config().vocab];
    let r = model.forward(
        &mut cache,
        seq,
        &[2, 262_144],
        &mut s,
        Logits::Last,
        &mut out,
    );
    assert_eq!(r, Err(Error::TokenOutOfRange(262_144)));
    let r = model.forward(&mut cache, seq, &[2; 200], &mut s, Logits::Last, &mut out);
    assert_eq!(r, Err(Error::TooManyRows));
    assert_eq!(cache.seq_len(seq), Ok(0));
}
