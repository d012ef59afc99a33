//! `cargo chat`: a multi-turn chat with SmolLM2-135M-Instruct on the paged int8 cache.
//!
//! Scripted by default; `cargo chat -- -i` reads user lines from stdin; `--threads N` sets the
//! matmul threads (default: the available parallelism; the same tokens at any count). Per turn it prints the
//! reply, the conversation tokens reused from the prefix cache, time to first token with reuse
//! and cold (the same prompt in a fresh cache), pages used and cached, and bytes per token.

use std::io::{BufRead, Write};
use std::time::Duration;

use edgekv_model::{
    Chat, Llama, Session, SessionArenas, SessionOptions, Tokenizer, model_path, set_threads,
    threads_arg,
};

const SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

const SCRIPT: &[&str] = &[
    "What is a KV cache in a language model? Answer in two sentences.",
    "Why does quantizing it to int8 save memory?",
    "Give me a short name for a library that does this on small boards.",
    "Thanks! Now summarize our conversation in one sentence.",
];

fn turn_text(role: &str, text: &str) -> String {
    format!("<|im_start|>{role}\n{text}<|im_end|>\n")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let interactive = args.iter().any(|a| a == "-i" || a == "--interactive");
    let threads = threads_arg(&args)?;
    set_threads(threads);
    let path = model_path();
    let model = Llama::load(&path)?;
    let tokenizer = Tokenizer::load(&path)?;
    let options = SessionOptions {
        pages: 256,
        ..SessionOptions::default()
    };
    let mut arenas = SessionArenas::new(&model, &options)?;
    let mut session = Session::new(&model, &mut arenas, options)?;
    let f32_bytes =
        model.config().layers * 2 * model.config().kv_heads * model.config().head_dim * 4;
    println!(
        "SmolLM2-135M-Instruct, KV pages {:?}/{:?}, {} tokens per page, {} B per token ({:.2}x less than f32's {f32_bytes} B), {threads} matmul thread(s)",
        options.k_format,
        options.v_format,
        options.page_tokens,
        session.bytes_per_token(),
        f32_bytes as f64 / session.bytes_per_token() as f64
    );
    let mut chat = Chat::new();
    let mut conversation = turn_text("system", SYSTEM);
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
        conversation += &turn_text("user", &user);
        conversation += "<|im_start|>assistant\n";
        let ids = tokenizer.encode(&conversation)?;
        let report = session.chat_turn(&mut chat, &ids, 128)?;
        let reply = tokenizer.decode(&report.generated)?;
        println!("smollm> {}", reply.trim());

        // The same prompt in a fresh cache: the cold time to first token.
        let mut cold_arenas = SessionArenas::new(&model, &options)?;
        let mut cold = Session::new(&model, &mut cold_arenas, options)?;
        let cold_report = cold.chat_turn(&mut Chat::new(), &ids, 1)?;
        let decode_tps = report.generated.len().saturating_sub(1) as f64
            / report.decode_time.as_secs_f64().max(1e-9);
        println!(
            "  [turn {turn}] prompt {} tokens, reused {} ({:.0}%), first token {:.0} ms reused vs {:.0} ms cold ({:.1}x), {} tokens at {decode_tps:.1} tok/s, pages used {} / cached {}, {} B per token",
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
            session.bytes_per_token(),
        );
        conversation += &reply;
        conversation += "<|im_end|>\n";
    }
    Ok(())
}
