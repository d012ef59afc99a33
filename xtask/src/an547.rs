//! The Cortex-M55 chat's host side: fetches the model, writes the system prompt's snapshot image
//! with the host build of the same forward pass, encodes the chat script, places all three with
//! QEMU's generic loader beside the firmware (`boards/qemu-an547/src/boot.rs` reads them) and
//! turns the firmware's log back into a transcript (the model's vocabulary, byte-level BPE).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use edgekv::snapshot::RamFlash;
use edgekv::{CacheConfig, ElementFormat, FreeList, HeapArena, KvCache, PageAllocator};
use edgekv_llm::chat::{self, Event, Script, Start};
use edgekv_llm::{Engine, Gguf, Llama, ScratchPlan};

use crate::qemu::{self, Board, Run};

/// Where the boot descriptor goes (start of DDR).
const DESCRIPTOR_AT: u64 = 0x6000_0000;
/// Where the model goes (after the descriptor's 4 KiB).
const MODEL_AT: u64 = 0x6000_1000;
/// Where the snapshot image goes (QSPI flash) and how large it may be.
const IMAGE_AT: u64 = 0x2800_0000;
const IMAGE_MAX: usize = 8 << 20;

/// Tokens per page and per prefill chunk: the firmware's (`boards/qemu-an547/src/memory.rs`;
/// the restore refuses an image of another page size or format).
pub const CHUNK: u16 = 16;

/// The firmware's cache configuration for `model` (q8_0 keys and values, 16-token pages).
pub fn cache_config(model: &Llama<'_>) -> Result<CacheConfig, String> {
    let shape = model.config().shape().map_err(|e| e.to_string())?;
    Ok(CacheConfig::new(shape)
        .with_formats(ElementFormat::Q8_0, ElementFormat::Q8_0)
        .with_page_tokens(CHUNK)
        .with_chunk_tokens(CHUNK)
        .with_sequences(2, 512)
        .with_namespace(model.fingerprint()))
}

/// The model file, fetched into its cache outside the repository if missing
/// (`model/fetch-model.sh`, which says what it downloads; `$EDGEKV_MODEL` names another file).
pub fn model_path(root: &Path) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("EDGEKV_MODEL") {
        return Ok(PathBuf::from(p));
    }
    let mut cmd = Command::new("bash");
    cmd.arg(root.join("model/fetch-model.sh"));
    Ok(PathBuf::from(
        stdout_of(cmd, "model/fetch-model.sh")?.trim(),
    ))
}

/// The Gemma 3 270M model file (Q4_K_M mix), fetched into its cache outside the repository if
/// missing (`model/fetch-gemma.sh`, which says what it downloads; `$EDGEKV_GEMMA` names another
/// file).
pub fn gemma_path(root: &Path) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("EDGEKV_GEMMA") {
        return Ok(PathBuf::from(p));
    }
    let mut cmd = Command::new("bash");
    cmd.arg(root.join("model/fetch-gemma.sh"));
    Ok(PathBuf::from(
        stdout_of(cmd, "model/fetch-gemma.sh")?.trim(),
    ))
}

/// What `cmd` printed on stdout; its stderr goes to ours as it comes (progress, errors).
fn stdout_of(mut cmd: Command, what: &str) -> Result<String, String> {
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}; its message is above)",
            out.status
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A host cache laid out as the firmware's, over heap arenas, with room for `tokens`.
pub struct HostCache {
    config: CacheConfig,
    data: HeapArena,
    meta: HeapArena,
}

impl HostCache {
    /// Arenas for `tokens` positions (plus a page per sequence) of `config`.
    pub fn new(config: CacheConfig, tokens: usize) -> Result<Self, String> {
        let pages = tokens.div_ceil(usize::from(CHUNK)) + 4;
        let plan = config
            .plan_pages(pages, FreeList::META_BITS_PER_PAGE)
            .map_err(|e| e.to_string())?;
        Ok(HostCache {
            config,
            data: HeapArena::new(plan.data_bytes, config.align).map_err(|e| e.to_string())?,
            meta: HeapArena::new(plan.meta.total, edgekv::META_ALIGN).map_err(|e| e.to_string())?,
        })
    }

    /// The cache.
    pub fn cache(&mut self) -> Result<KvCache<'_, FreeList<'_>>, String> {
        KvCache::new(
            self.config,
            self.data.as_uninit_mut(),
            self.meta.as_uninit_mut(),
        )
        .map_err(|e| e.to_string())
    }
}

/// Scratch for the firmware's chunk of rows.
pub fn scratch(model: &Llama<'_>) -> Result<Vec<f32>, String> {
    let plan =
        ScratchPlan::new(model.config(), usize::from(CHUNK), CHUNK).map_err(|e| e.to_string())?;
    Ok(vec![0.0; plan.scratch])
}

/// Runs `f` with the host build of the forward pass over a cache laid out as the firmware's
/// (room for `tokens` positions), its scratch and one row of logits.
fn with_host_engine<R>(
    model: &Llama<'_>,
    tokens: usize,
    f: impl for<'c> FnOnce(
        &mut Engine<'_, '_, '_>,
        &mut KvCache<'c, FreeList<'c>>,
        &mut [f32],
    ) -> Result<R, String>,
) -> Result<R, String> {
    let mut host = HostCache::new(cache_config(model)?, tokens)?;
    let mut cache = host.cache()?;
    let mut scratch = scratch(model)?;
    let mut engine =
        Engine::new(model, &mut scratch, u32::from(CHUNK)).map_err(|e| e.to_string())?;
    let mut logits = vec![0f32; model.config().vocab];
    f(&mut engine, &mut cache, &mut logits)
}

/// The system prompt's snapshot image: `system` prefilled by the host build of the forward pass
/// into a cache laid out as the firmware's.
pub fn system_image(model: &Llama<'_>, system: &[u32]) -> Result<Vec<u8>, String> {
    let mut mem = vec![0xffu8; IMAGE_MAX];
    let header = with_host_engine(model, system.len(), |engine, cache, logits| {
        let mut flash = RamFlash::<16, 4096>::new(&mut mem);
        chat::write_system_image(engine, cache, system, logits, &mut flash, 0)
            .map_err(|e| format!("system prompt image: {e}"))
    })?;
    mem.truncate(header.image as usize);
    Ok(mem)
}

/// The QEMU arguments that load the model, the encoded `script` and the system prompt's snapshot
/// `image` (both written under `target/an547/`) for the firmware.
pub fn loader_args(
    root: &Path,
    model_path: &Path,
    image: Vec<u8>,
    script: &Script<'_>,
) -> Result<Vec<String>, String> {
    loader_args_in(&root.join("target/an547"), model_path, image, script)
}

/// [`loader_args`] with the files written under `dir` (each firmware its own, so runs of
/// several at once do not overwrite each other's files).
pub fn loader_args_in(
    dir: &Path,
    model_path: &Path,
    image: Vec<u8>,
    script: &Script<'_>,
) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut words = vec![0u32; chat::wire::encoded_len(script)];
    chat::wire::encode(script, &mut words).map_err(|e| e.to_string())?;
    let model_len = std::fs::metadata(model_path)
        .map_err(|e| format!("{}: {e}", model_path.display()))?
        .len();
    let script_at = (MODEL_AT + model_len).next_multiple_of(4096);
    let script_bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let fields = [
        u32::from_le_bytes(*b"EKVB"),
        1,
        MODEL_AT as u32,
        u32::try_from(model_len).map_err(|_| "model past 4 GiB")?,
        script_at as u32,
        script_bytes.len() as u32,
        IMAGE_AT as u32,
        image.len() as u32,
    ];
    let descriptor: Vec<u8> = fields.iter().flat_map(|w| w.to_le_bytes()).collect();
    let files = [
        ("boot.bin", descriptor, DESCRIPTOR_AT),
        ("script.bin", script_bytes, script_at),
        ("system.ekvs", image, IMAGE_AT),
    ];
    let mut args = Vec::new();
    let mut load = |file: &Path, addr: u64| {
        args.push("-device".to_string());
        args.push(format!(
            "loader,file={},addr={addr:#x},force-raw=on",
            file.display()
        ));
    };
    load(model_path, MODEL_AT);
    for (name, bytes, addr) in files {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        load(&path, addr);
    }
    Ok(args)
}

/// Reads the model file and parses it; returns its bytes with it (leaked: the model lives for
/// the run).
pub fn load_model(path: &Path) -> Result<(&'static [u8], Llama<'static>), String> {
    let bad = |e: &dyn std::fmt::Display| {
        let fix = if std::env::var_os("EDGEKV_MODEL").is_some() {
            "unset EDGEKV_MODEL to use the fetched SmolLM2-135M"
        } else {
            "delete it and run again to fetch it anew"
        };
        format!(
            "{} is not a usable SmolLM2-135M GGUF ({e}): {fix}",
            path.display()
        )
    };
    let bytes: &'static [u8] = std::fs::read(path).map_err(|e| bad(&e))?.leak();
    let gguf = Gguf::parse(bytes).map_err(|e| bad(&e))?;
    let model = Llama::new(&gguf).map_err(|e| bad(&e))?;
    Ok((bytes, model))
}

/// The chat events of a firmware log line (costs in instructions), as [`chat::run`] reported
/// them on the board.
pub fn event(line: &str) -> Option<Event> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| w.get(i).and_then(|s| s.parse::<u64>().ok());
    let hex = |i: usize| w.get(i).and_then(|s| u32::from_str_radix(s, 16).ok());
    match w.first().copied()? {
        "restored" => Some(Event::Restored {
            tokens: num(1)? as u32,
            cost: num(4)?,
        }),
        "first" => Some(Event::First {
            start: match *w.get(1)? {
                "cold" => Start::Cold,
                "restored" => Start::Restored,
                "continued" => Start::Continued,
                "reused" => Start::Reused,
                _ => return None,
            },
            turn: num(3)? as usize,
            prefilled: num(5)? as u32,
            reused: num(7)? as u32,
            token: num(9)? as u32,
            crc: hex(11)?,
            cost: num(13)?,
        }),
        "token" => Some(Event::Token {
            turn: num(2)? as usize,
            token: num(4)? as u32,
            crc: hex(6)?,
            cost: num(8)?,
        }),
        "end" => Some(Event::End {
            turn: num(2)? as usize,
            generated: num(4)? as u32,
            context: num(6)? as u32,
        }),
        "pages" => Some(Event::Pages {
            turn: num(2)? as usize,
            group: num(4)? as usize,
            pages: chat::GroupPages {
                held: u16::try_from(num(6)?).ok()?,
                released: u16::try_from(num(8)?).ok()?,
                cached: u16::try_from(num(10)?).ok()?,
                free: u16::try_from(num(12)?).ok()?,
            },
        }),
        _ => None,
    }
}

/// Runs the an547 firmware `elf` with `script`, each log line handed to `line`.
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
        "demo: writing the system prompt's snapshot image: {} tokens prefilled by the host build of \
         the same forward pass (about 15 s) ...",
        script.system.len()
    );
    let image = system_image(model, script.system)?;
    let args = loader_args(root, model_path, image, script)?;
    eprintln!(
        "demo: image written in {:.0} s; starting the Cortex-M55 on qemu-system-arm -machine mps3-an547 \
         (the restore and the first answer take about 40 s, the whole chat about 2.5 minutes) ...",
        started.elapsed().as_secs_f64()
    );
    qemu::run_with(Board::An547, elf, &args, timeout, line)
}

/// One turn of a chat the task runner hands the board: the user's words (for the transcript),
/// the turn's token ids (chat markup included), tokens to generate at most and whether it starts
/// a new conversation.
#[derive(Debug, Clone)]
pub struct TurnText {
    /// The user's words.
    pub user: String,
    /// The turn's token ids.
    pub ids: Vec<u32>,
    /// Tokens to generate at most.
    pub max_new: u32,
    /// Starts a new conversation over the system prompt's reused pages.
    pub new_conversation: bool,
}

/// The demo's turns ([`crate::chat_script`]: text and ids checked against `model/`'s
/// tokenizer).
pub fn demo_turns() -> Vec<TurnText> {
    crate::chat_script::TURNS
        .iter()
        .map(|&(text, ids, max_new, new_conversation)| TurnText {
            user: user_words(text).to_string(),
            ids: ids.to_vec(),
            max_new,
            new_conversation,
        })
        .collect()
}

/// The user's words of a turn's ChatML text.
fn user_words(text: &str) -> &str {
    let after = text.rsplit("<|im_start|>user\n").next().unwrap_or(text);
    after.split("<|im_end|>").next().unwrap_or(after)
}

/// Turns for the user's own `questions`, one conversation continuing the system prompt,
/// tokenized on the host by `model/`'s tokenizer (`cargo run --release --bin tokenize` in
/// `model/`: its first build compiles candle and the tokenizer, a few minutes).
pub fn asked_turns(root: &Path, questions: &[String]) -> Result<Vec<TurnText>, String> {
    let texts: Vec<String> = questions
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let close = if i == 0 {
                ""
            } else {
                "<|im_end|>\n<|im_start|>user\n"
            };
            format!("{close}{q}<|im_end|>\n<|im_start|>assistant\n")
        })
        .collect();
    eprintln!(
        "demo: tokenizing the questions with model/'s tokenizer (cargo run --release --bin tokenize in model/; \
         its first build compiles the tokenizers crate, about four minutes) ..."
    );
    let mut cmd = crate::qemu::board_cargo(&root.join("model"));
    cmd.args(["run", "--release", "--bin", "tokenize", "--"])
        .args(&texts);
    let stdout = stdout_of(cmd, "the tokenizer (cargo run --bin tokenize in model/)")?;
    let ids: Vec<Vec<u32>> = stdout
        .lines()
        .filter_map(|l| l.split_once("ids: "))
        .map(|(_, list)| {
            list.trim_matches(|c| c == '[' || c == ']')
                .split(',')
                .filter(|t| !t.trim().is_empty())
                .map(|t| {
                    t.trim()
                        .parse::<u32>()
                        .map_err(|e| format!("token id {t:?}: {e}"))
                })
                .collect::<Result<Vec<u32>, String>>()
        })
        .collect::<Result<_, _>>()?;
    if ids.len() != questions.len() {
        return Err(format!(
            "tokenizer printed {} lines for {} questions",
            ids.len(),
            questions.len()
        ));
    }
    Ok(questions
        .iter()
        .zip(ids)
        .map(|(q, ids)| TurnText {
            user: q.clone(),
            ids,
            max_new: 32,
            new_conversation: false,
        })
        .collect())
}

/// The [`chat::Turn`]s of `turns`.
pub fn script_turns(turns: &[TurnText]) -> Vec<chat::Turn<'_>> {
    turns
        .iter()
        .map(|t| chat::Turn {
            prompt: &t.ids,
            max_new: t.max_new,
            new_conversation: t.new_conversation,
        })
        .collect()
}

/// [`chat::run`] on the host over a cache laid out as the firmware's, restoring `image`: the
/// events the board must reproduce (costs zero).
pub fn host_events(
    model: &Llama<'_>,
    script: &Script<'_>,
    image: &[u8],
) -> Result<Vec<Event>, String> {
    let longest = script
        .turns
        .iter()
        .map(|t| t.prompt.len() + t.max_new as usize)
        .sum::<usize>();
    let tokens = script.system.len() + longest + 2 * usize::from(CHUNK);
    let mut prompt = vec![0u32; tokens];
    let mut events = Vec::new();
    with_host_engine(model, 2 * tokens, |engine, cache, logits| {
        chat::run(
            engine,
            cache,
            script,
            &mut edgekv::snapshot::SliceFlash(image),
            chat::Buffers {
                logits,
                prompt: &mut prompt,
            },
            &mut || 0,
            &mut |e| events.push(e),
        )
        .map_err(|e| format!("host chat: {e}"))
    })?;
    Ok(events)
}

/// `e` with its cost set to zero (to compare board and host events).
pub fn without_cost(e: Event) -> Event {
    match e {
        Event::Restored { tokens, .. } => Event::Restored { tokens, cost: 0 },
        Event::First {
            turn,
            start,
            prefilled,
            reused,
            token,
            crc,
            ..
        } => Event::First {
            turn,
            start,
            prefilled,
            reused,
            token,
            crc,
            cost: 0,
        },
        Event::Token {
            turn, token, crc, ..
        } => Event::Token {
            turn,
            token,
            crc,
            cost: 0,
        },
        other @ (Event::End { .. } | Event::Pages { .. }) => other,
    }
}
