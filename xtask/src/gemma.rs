//! Gemma 3 270M on the Cortex-M55 (`boards/qemu-an547`, binary `gemma`), the host side: fetches
//! the model (`model/fetch-gemma.sh`), writes the shared document's grouped snapshot image with
//! the host build of the same forward pass over a layer-grouped cache laid out as the
//! firmware's (the 15 sliding-window layers in group 0, window 512; the 3 global layers in group
//! 1; q8_0 pages of 16 tokens in a 16 MiB arena), and runs the firmware with the model, the
//! script and the image placed by QEMU's generic loader ([`loader_args`]). The
//! host's run of the same chat code ([`host_events`]) is what the board must equal, bit for bit.

use std::path::Path;
use std::time::Duration;

use edgekv::snapshot::{RamFlash, SliceFlash};
use edgekv::{CacheConfig, ElementFormat, FreeList, GroupedCache, HeapArena, PageAllocator};
use edgekv_llm::chat::{self, Event, Script};
use edgekv_llm::{Engine, Gguf, Llama, ScratchPlan};

use crate::an547::{self, TurnText};
use crate::qemu::{self, Board, Run};

/// The an547 firmware binary that runs Gemma 3.
pub const GEMMA_BIN: &str = "gemma";
/// Tokens per page and per prefill chunk: the firmware's
/// (`boards/qemu-an547/src/bin/gemma/memory.rs`; the restore refuses an image of another page
/// size, format or window).
pub const CHUNK: u16 = 16;
/// Bytes of the firmware's KV arena (in DDR): the host plans the same pages.
pub const KV_BYTES: usize = 16 << 20;
/// Positions a sequence may have (the firmware's).
pub const MAX_TOKENS: u32 = 1024;
/// Bytes of QSPI flash the image may take.
const IMAGE_MAX: usize = 8 << 20;

/// The firmware's cache configuration for `model`: the model's layer groups
/// ([`LlamaConfig::cache_config`](edgekv_llm::LlamaConfig::cache_config)) with q8_0 keys and
/// values, 16-token pages, two sequences.
pub fn cache_config(model: &Llama<'_>) -> Result<CacheConfig, String> {
    let q8 = ElementFormat::Q8_0;
    Ok(model
        .config()
        .cache_config(q8, q8)
        .map_err(|e| e.to_string())?
        .with_page_tokens(CHUNK)
        .with_chunk_tokens(CHUNK)
        .with_sequences(2, MAX_TOKENS)
        .with_namespace(model.fingerprint()))
}

/// Reads the Gemma 3 model file and parses it; returns its bytes with it (leaked: the model
/// lives for the run).
pub fn load_model(path: &Path) -> Result<(&'static [u8], Llama<'static>), String> {
    let bad = |e: &dyn std::fmt::Display| {
        let fix = if std::env::var_os("EDGEKV_GEMMA").is_some() {
            "unset EDGEKV_GEMMA to use the fetched Gemma 3 270M"
        } else {
            "delete it and run again to fetch it anew"
        };
        format!(
            "{} is not a usable Gemma 3 270M GGUF ({e}): {fix}",
            path.display()
        )
    };
    let bytes: &'static [u8] = std::fs::read(path).map_err(|e| bad(&e))?.leak();
    let gguf = Gguf::parse(bytes).map_err(|e| bad(&e))?;
    let model = Llama::new(&gguf).map_err(|e| bad(&e))?;
    Ok((bytes, model))
}

/// Runs `f` with the host build of the forward pass over a grouped cache planned as the
/// firmware's (the same pages in each group), its scratch and one row of logits.
fn with_host_engine<R>(
    model: &Llama<'_>,
    f: impl for<'c> FnOnce(
        &mut Engine<'_, '_, '_>,
        &mut GroupedCache<'c, FreeList<'c>>,
        &mut [f32],
    ) -> Result<R, String>,
) -> Result<R, String> {
    let config = cache_config(model)?;
    let plan = config
        .plan_groups(KV_BYTES, FreeList::META_BITS_PER_PAGE)
        .map_err(|e| e.to_string())?;
    let mut data = HeapArena::new(plan.data_bytes, config.align).map_err(|e| e.to_string())?;
    let mut meta =
        HeapArena::new(plan.meta_bytes, edgekv::META_ALIGN).map_err(|e| e.to_string())?;
    let mut cache: GroupedCache<'_, FreeList<'_>> =
        GroupedCache::new(config, data.as_uninit_mut(), meta.as_uninit_mut())
            .map_err(|e| e.to_string())?;
    let rows = usize::from(CHUNK);
    let plan = ScratchPlan::new(model.config(), rows, CHUNK).map_err(|e| e.to_string())?;
    let mut scratch = vec![0f32; plan.scratch];
    let mut engine =
        Engine::new(model, &mut scratch, u32::from(CHUNK)).map_err(|e| e.to_string())?;
    let mut logits = vec![0f32; model.config().vocab];
    f(&mut engine, &mut cache, &mut logits)
}

/// The shared document's grouped snapshot image: `document` prefilled by the host build of the
/// forward pass into a cache laid out as the firmware's.
pub fn document_image(model: &Llama<'_>, document: &[u32]) -> Result<Vec<u8>, String> {
    let mut mem = vec![0xffu8; IMAGE_MAX];
    let header = with_host_engine(model, |engine, cache, logits| {
        let mut flash = RamFlash::<16, 4096>::new(&mut mem);
        chat::write_system_image(engine, cache, document, logits, &mut flash, 0)
            .map_err(|e| format!("document image: {e}"))
    })?;
    mem.truncate(header.image as usize);
    Ok(mem)
}

/// [`chat::run`] on the host over a grouped cache laid out as the firmware's, restoring
/// `image`: the events the board must reproduce (costs zero).
pub fn host_events(
    model: &Llama<'_>,
    script: &Script<'_>,
    image: &[u8],
) -> Result<Vec<Event>, String> {
    let longest = script.turns.iter().map(|t| t.prompt.len()).max();
    let mut prompt = vec![0u32; script.system.len() + longest.unwrap_or(0)];
    let mut events = Vec::new();
    with_host_engine(model, |engine, cache, logits| {
        chat::run(
            engine,
            cache,
            script,
            &mut SliceFlash(image),
            chat::Buffers {
                logits,
                prompt: &mut prompt,
            },
            &mut || 0,
            &mut |e| events.push(e),
        )
        .map_err(|e| format!("host run: {e}"))
    })?;
    Ok(events)
}

/// The demo's requests ([`crate::gemma_script`]: text and ids checked against `model/`'s
/// tokenizer).
pub fn demo_requests() -> Vec<TurnText> {
    crate::gemma_script::REQUESTS
        .iter()
        .map(|&(text, ids, max_new, new_conversation)| TurnText {
            user: text.to_string(),
            ids: ids.to_vec(),
            max_new,
            new_conversation,
        })
        .collect()
}

/// The QEMU arguments that load the model, the encoded `script` and the document's `image`
/// (written under `target/an547-gemma/`) for the firmware.
pub fn loader_args(
    root: &Path,
    model_path: &Path,
    image: Vec<u8>,
    script: &Script<'_>,
) -> Result<Vec<String>, String> {
    an547::loader_args_in(&root.join("target/an547-gemma"), model_path, image, script)
}

/// Runs the Gemma firmware `elf` with `script`, each log line handed to `line`.
pub fn run(
    root: &Path,
    elf: &Path,
    (model_path, model): (&Path, &Llama<'_>),
    script: &Script<'_>,
    timeout: Duration,
    line: &mut dyn FnMut(&str),
) -> Result<Run, String> {
    let started = std::time::Instant::now();
    eprintln!(
        "demo: writing the shared document's grouped snapshot image: {} tokens prefilled by the host \
         build of the same forward pass ...",
        script.system.len()
    );
    let image = document_image(model, script.system)?;
    let args = loader_args(root, model_path, image, script)?;
    eprintln!(
        "demo: image written in {:.0} s; starting the Cortex-M55 on qemu-system-arm -machine mps3-an547 \
         (a Gemma token is several hundred million emulated instructions: a few seconds each) ...",
        started.elapsed().as_secs_f64()
    );
    qemu::run_with(Board::An547, elf, &args, timeout, line)
}
