//! `cargo chat`: a multi-turn chat on the paged int8 cache, with SmolLM2-135M-Instruct (the
//! default) or Gemma 3 270M (`--model gemma3`), or any GGUF this forward pass runs
//! (`--gguf FILE`).
//!
//! Scripted by default; `cargo chat -- -i` reads user lines from stdin; `--threads N` sets the
//! matmul threads (default: the available parallelism; the same tokens at any count). The prompt
//! is the conversation in the model's chat template (read from the GGUF: ChatML for SmolLM2,
//! Gemma's turns for Gemma 3). Per turn it prints the reply, the conversation tokens reused from
//! the cache, time to first token with reuse and cold (the same prompt in a fresh cache), each
//! layer group's pages, and bytes per token.
//!
//! The Gemma 3 270M file fetched here (`model/fetch-gemma.sh`) is the *pretrained* model: it
//! continues text well and follows chat turns poorly. Its windowed layers show the layer groups
//! at work; bring an instruction-tuned Gemma 3 GGUF with `--gguf` for real answers.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use edgekv_model::{
    Chat, ChatTemplate, Llama, Message, Role, Session, SessionArenas, SessionOptions, Tokenizer,
    gemma_path, model_path, set_threads, threads_arg,
};

const SMOLLM_SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

const SCRIPT: &[&str] = &[
    "What is a KV cache in a language model? Answer in two sentences.",
    "Why does quantizing it to int8 save memory?",
    "Give me a short name for a library that does this on small boards.",
    "Thanks! Now summarize our conversation in one sentence.",
];

/// Tokens a reply may have at most.
const MAX_NEW: usize = 128;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The value after `flag` in `args`, if the flag is there.
fn flag_value<'a>(args: &'a [String], flag: &str) -> Result<Option<&'a str>, String> {
    match args.iter().position(|a| a == flag) {
        None => Ok(None),
        Some(i) => args
            .get(i + 1)
            .map(|v| Some(v.as_str()))
            .ok_or_else(|| format!("{flag} needs a value")),
    }
}

/// The model file: `--gguf FILE`, else `--model smollm2` (the default) or `--model gemma3`.
fn model_file(args: &[String]) -> Result<(PathBuf, &'static str), String> {
    if let Some(f) = flag_value(args, "--gguf")? {
        return Ok((PathBuf::from(f), "GGUF"));
    }
    match flag_value(args, "--model")?.unwrap_or("smollm2") {
        "smollm2" => Ok((model_path(), "SmolLM2-135M-Instruct")),
        "gemma3" => Ok((gemma_path(), "Gemma 3 270M (pretrained)")),
        other => Err(format!(
            "--model {other}: expected smollm2 or gemma3 (or --gguf FILE)"
        )),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let interactive = args.iter().any(|a| a == "-i" || a == "--interactive");
    let threads = threads_arg(&args)?;
    set_threads(threads);
    let (path, name) = model_file(&args)?;
    let model = Llama::load(&path)?;
    let gguf = edgekv_llm::Gguf::parse(model.file())?;
    let template = ChatTemplate::from_gguf(&gguf)?;
    let tokenizer = Tokenizer::from_gguf(&gguf)?;
    let mut stop = vec![model.config().eos];
    stop.extend(tokenizer.token_id(template.end_of_turn()));
    // One conversation and a spare sequence (a turn that starts over).
    let options = SessionOptions {
        pages: 256,
        sequences: 2,
        ..SessionOptions::default()
    };
    let mut arenas = SessionArenas::new(&model, &options)?;
    let group_pages = arenas.group_pages().to_vec();
    let all_global = all_global_bytes(&model, &options)?;
    let mut session = Session::new(&model, &mut arenas, options)?;
    let c = model.config();
    let f32_bytes = c.layers * 2 * c.kv_heads * c.head_dim * 4;
    println!(
        "{name}, {template:?} template, KV pages {:?}/{:?}, {} tokens per page, {} B per token ({:.2}x less than f32's {f32_bytes} B), {threads} matmul thread(s)",
        options.k_format,
        options.v_format,
        options.page_tokens,
        session.bytes_per_token(),
        f32_bytes as f64 / session.bytes_per_token() as f64
    );
    let groups = session.cache().group_count();
    if groups > 1 {
        println!(
            "{groups} layer groups of {group_pages:?} pages: KV arena {:.1} MB for {} tokens of context (every layer global: {:.1} MB)",
            arenas_mb(session.cache().grouped_plan().data_bytes),
            usize::from(options.pages) * usize::from(options.page_tokens),
            arenas_mb(all_global),
        );
    }
    let mut chat = Chat::new();
    let mut messages: Vec<(Role, String)> = Vec::new();
    if template == ChatTemplate::ChatMl {
        messages.push((Role::System, SMOLLM_SYSTEM.to_string()));
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    for turn in 1.. {
        let user = if interactive {
            print!("\nyou> ");
            std::io::stdout().flush()?;
            match lines.next() {
                Some(line) => line?,
                None => break,
            }
        } else {
            match SCRIPT.get(turn - 1) {
                Some(s) => s.to_string(),
                None => break,
            }
        };
        if !interactive {
            println!("\nyou> {user}");
        }
        messages.push((Role::User, user));
        let rendered: Vec<Message<'_>> = messages
            .iter()
            .map(|(role, text)| Message { role: *role, text })
            .collect();
        // The BOS the GGUF asks for (Gemma's), then the conversation with its control tokens.
        let mut ids: Vec<u32> = tokenizer.bos().into_iter().collect();
        ids.extend(tokenizer.encode(&template.render(&rendered, true))?);
        let report = session.chat_turn_until(&mut chat, &ids, MAX_NEW, &stop)?;
        let reply = tokenizer.decode(&report.generated)?;
        println!("model> {}", reply.trim());

        // The same prompt in a fresh cache: the cold time to first token.
        let mut cold_arenas = SessionArenas::new(&model, &options)?;
        let mut cold = Session::new(&model, &mut cold_arenas, options)?;
        let cold_report = cold.chat_turn_until(&mut Chat::new(), &ids, 1, &stop)?;
        let decode_tps = report.generated.len().saturating_sub(1) as f64
            / report.decode_time.as_secs_f64().max(1e-9);
        println!(
            "  [turn {turn}] prompt {} tokens, reused {} ({:.0}%), first token {:.0} ms reused vs {:.0} ms cold ({:.1}x), {} tokens at {decode_tps:.1} tok/s, pages used {} / cached {} (by group {:?}), {} B per token",
            report.prompt_tokens,
            report.reused_tokens,
            100.0 * report.reused_tokens as f64 / report.prompt_tokens as f64,
            ms(report.time_to_first_token),
            ms(cold_report.time_to_first_token),
            cold_report.time_to_first_token.as_secs_f64()
                / report.time_to_first_token.as_secs_f64(),
            report.generated.len(),
            report.pages_used,
            report.pages_cached,
            session_pages(&session),
            session.bytes_per_token(),
        );
        messages.push((Role::Assistant, reply));
    }
    Ok(())
}

/// Pages each layer group holds for sequences (used).
fn session_pages(session: &Session<'_, '_>) -> Vec<u16> {
    let cache = session.cache();
    (0..cache.group_count())
        .filter_map(|g| cache.group(g))
        .map(|c| c.stats().pages_used)
        .collect()
}

/// Bytes the same pages would take with every layer global (no windowed group).
fn all_global_bytes(
    model: &Llama,
    options: &SessionOptions,
) -> Result<usize, Box<dyn std::error::Error>> {
    let config = options.cache_config(model)?.without_windows();
    let pages = vec![usize::from(options.pages); config.group_count()];
    let plan = edgekv::GroupedCache::<edgekv::FreeList>::plan_pages(&config, &pages)?;
    Ok(plan.data_bytes)
}

fn arenas_mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}
