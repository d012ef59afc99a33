//! Shared by the Gemma 3 tests: the model file, a grouped cache, llama.cpp's reference data
//! (`tests/gemma_data`).
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use edgekv::{
    CacheConfig, ElementFormat, FreeList, GroupWindow, GroupedCache, HeapArena, LayerGroup, Layers,
    NO_PAGE, PageAllocator, Rotation, SeqId,
};
use edgekv_llm::{Arch, Gguf, Llama, ScratchPlan};

pub use crate::llama_cpp::{Greedy, Reference, Stats, f32s, u32s};

pub use edgekv_model::gemma_path;

/// The model, or `None` with a loud notice (test skipped) when the file is missing.
pub fn gemma() -> Option<Llama<'static>> {
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

/// Arenas of a grouped cache for one sequence of up to `tokens` positions.
pub struct GroupedArenas {
    config: CacheConfig,
    pages: [usize; 2],
    data: HeapArena,
    meta: HeapArena,
}

/// The model's grouped cache configuration with `format` pages of 16 tokens (prefill chunks
/// of 16), two sequences (one of up to `tokens` positions, another sharing its prefix): the
/// sliding group gets the pages its window needs (36: the window, a chunk and a partial page),
/// the global group every page (and two for a second sequence).
pub fn grouped_arenas(model: &Llama<'_>, format: ElementFormat, tokens: usize) -> GroupedArenas {
    let config = model.config().cache_config(format, format).unwrap();
    grouped_arenas_for(model, config, tokens)
}

/// [`grouped_arenas`] with K and V rows stored rotated (`rotation` in both groups).
pub fn grouped_arenas_rotated(
    model: &Llama<'_>,
    format: ElementFormat,
    rotation: Rotation,
    tokens: usize,
) -> GroupedArenas {
    let Arch::Gemma3(g) = model.config().arch else {
        panic!("not gemma3")
    };
    let config = CacheConfig::new(model.config().shape().unwrap())
        .with_formats(format, format)
        .with_rotations(rotation, rotation)
        .with_window(GroupWindow::new(g.sliding_window, 0))
        .with_group(
            LayerGroup::new(Layers::Every {
                period: g.period,
                first: g.period - 1,
            })
            .with_formats(format, format)
            .with_rotations(rotation, rotation),
        );
    grouped_arenas_for(model, config, tokens)
}

fn grouped_arenas_for(model: &Llama<'_>, config: CacheConfig, tokens: usize) -> GroupedArenas {
    let config = config
        .with_page_tokens(16)
        .with_chunk_tokens(16)
        .with_sequences(2, tokens.next_multiple_of(16) as u32)
        .with_namespace(model.fingerprint());
    let global = tokens.div_ceil(16);
    let pages = [36.min(global + 2), global + 2];
    let plan = GroupedCache::<FreeList>::plan_pages(&config, &pages).unwrap();
    GroupedArenas {
        config,
        pages,
        data: HeapArena::new(plan.data_bytes, config.align).unwrap(),
        meta: HeapArena::new(plan.meta_bytes, edgekv::META_ALIGN).unwrap(),
    }
}

impl GroupedArenas {
    pub fn cache(&mut self) -> GroupedCache<'_> {
        GroupedCache::with_pages(
            self.config,
            &self.pages,
            self.data.as_uninit_mut(),
            self.meta.as_uninit_mut(),
        )
        .unwrap()
    }
}

/// Pages `seq` holds in group `g` (released entries not counted).
pub fn held_pages<'a, A: PageAllocator<'a>>(
    c: &GroupedCache<'a, A>,
    g: usize,
    seq: SeqId,
) -> usize {
    let table = c.group(g).unwrap().page_table(seq).unwrap();
    table.iter().filter(|&&p| p != NO_PAGE).count()
}

/// Scratch for `rows` rows per call with 16-token pages.
pub fn scratch(model: &Llama<'_>, rows: usize) -> Vec<f32> {
    vec![0.0; ScratchPlan::new(model.config(), rows, 16).unwrap().scratch]
}

/// Where `host-tests/peer/llama_reference.py` wrote llama.cpp's outputs for Gemma 3 270M.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gemma_data")
}

/// llama.cpp's teacher-forced outputs for Gemma 3 270M.
pub fn reference() -> Reference {
    Reference::load(&data_dir())
}

/// llama.cpp's greedy continuation for Gemma 3 270M.
pub fn greedy() -> Greedy {
    Greedy::load(&data_dir())
}
