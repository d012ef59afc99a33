//! Gemma 3 270M (`gemma3`) loads from its GGUF and is run over a layer-grouped cache; bad input
//! is a precise error. Skipped, with a notice, when the model file is missing
//! (`bash model/fetch-gemma.sh` fetches it; `$EDGEKV_GEMMA` names another copy). The forward
//! pass against llama.cpp's outputs is `model/tests/gemma.rs` (release builds: the forward pass
//! is too slow at this crate's test opt-level).

use std::path::PathBuf;
use std::sync::OnceLock;

use edgekv::{ElementFormat, FreeList, GroupedCache, HeapArena, SeqMode};
use edgekv_llm::{Arch, Error, Gguf, Llama, Logits, ScratchPlan};

/// Where `model/fetch-gemma.sh` puts Gemma 3 270M (`$EDGEKV_GEMMA` overrides).
fn gemma_path() -> PathBuf {
    if let Some(p) = std::env::var_os("EDGEKV_GEMMA") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("EDGEKV_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/edgekv")
        });
    cache.join("gemma3_270m/gemma-3-270m-q4_k_m.gguf")
}

/// The model, or `None` with a loud notice (test skipped) when the file is missing.
fn gemma() -> Option<Llama<'static>> {
    static BYTES: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    let bytes = BYTES.get_or_init(|| {
        let p = gemma_path();
        match std::fs::read(&p) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!(
                    "SKIPPED: Gemma 3 270M not readable at {} ({e}); run `bash model/fetch-gemma.sh`",
                    p.display()
                );
                None
            }
        }
    });
    let g = Gguf::parse(bytes.as_deref()?).expect("Gemma 3 270M parses");
    Some(Llama::new(&g).expect("Gemma 3 270M loads"))
}

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
