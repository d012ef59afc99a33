//! Task runner (the xtask pattern), reached through the cargo aliases in `.cargo/config.toml`.
//! It is a small std-only crate, so the first `cargo demo` or `cargo test-all` on a fresh machine
//! compiles only it (and `defmt-decoder`) before doing its own set-up:
//!
//! - `cargo demo` — the main job: adds the rustup target, installs QEMU if missing (apt, as
//!   root), builds the Cortex-M55 firmware (`boards/qemu-an547`), fetches SmolLM2-135M, writes
//!   the system prompt's snapshot image with the host build of the forward pass and runs the chat
//!   on QEMU mps3-an547 (`-icount`), printing the transcript and per-turn instruction counts as
//!   they arrive. `cargo demo --cold` first prefills the system prompt cold, to compare (adds
//!   about five minutes); `cargo demo --ask "QUESTION"` (repeatable) asks your own questions,
//!   tokenized on the host by `model/`'s tokenizer; `cargo demo --model gemma3` runs Gemma 3 270M
//!   instead (binary `gemma`: a shared document restored from a grouped snapshot image, continued
//!   past its 512-token window, then reused by a second request; about ten minutes);
//!   `cargo demo --parity` runs the Cortex-M4 parity firmware
//!   (`boards/qemu-an386`); `cargo demo --host` the host-only synthetic session.
//! - `cargo test-all [--only STAGE] [--skip STAGE]...` — every check CI runs, in stages (see
//!   `checks.rs`); a table of the stages run and their seconds is printed just before the final
//!   nextest run, whose summary stays the last line. `--no-miri`, `--no-targets`, `--no-fuzz` and
//!   `--no-model` are kept as shorthands for `--skip miri`, `--skip no-std --skip boards`,
//!   `--skip fuzz` and `--skip model`.
//! - `cargo xtask setup` — only the set-up stage (targets, components, pinned nightly with Miri,
//!   cargo-fuzz, QEMU).
//! - `cargo xtask fuzz [SECONDS]` — every cargo-fuzz target in `fuzz/` from its seed corpus.
//! - `cargo xtask recursion` — no cycle through edgekv's code in the direct call graphs of the
//!   built Cortex-M4, Cortex-M55 and micro:bit firmware (`llvm-objdump`).
//! - `cargo xtask size` — .text / .data / .bss of each board firmware and the core's share.
//! - `cargo xtask qemu BOARD ELF` — the boards' cargo runner: runs ELF on BOARD's QEMU machine
//!   (`an386`, `microbit`; `an547` needs the `chat` feature, `cargo xtask-chat qemu ...`, and
//!   runs the demo chat), decodes its log and exits with the firmware's code.

mod checks;
mod cmd;
mod fuzz;
mod miri;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use edgekv_xtask::qemu::{self, Board};
use edgekv_xtask::{setup, stages::Stages};

const USAGE: &str = "usage: cargo xtask <demo [--cold] [--ask QUESTION]... | demo --model gemma3 [--cold] | demo --parity | demo --host | test [--only STAGE] [--skip STAGE]... \
[--no-miri] [--no-targets] [--no-fuzz] [--no-model] | setup | fuzz [SECONDS] | recursion | size | qemu BOARD ELF>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flags: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let result = match args.first().map(String::as_str) {
        Some("demo") if flags == ["--host"] => host_demo(),
        Some("demo") if flags == ["--parity"] => board_demo(),
        Some("demo") => demo_flags(&flags).and_then(|d| match d.model {
            DemoModel::SmolLm2 => chat_demo(d.cold, &d.asked),
            DemoModel::Gemma3 if d.asked.is_empty() => gemma_demo(d.cold),
            DemoModel::Gemma3 => Err("--ask is for SmolLM2's chat (Gemma 3 270M here is the pretrained model: it continues the demo's document)".into()),
        }),
        Some("test") => test(&flags),
        Some("setup") if flags.is_empty() => checks::setup(),
        Some("fuzz") => match flags.as_slice() {
            [] => Ok(30),
            [secs] => secs
                .parse()
                .map_err(|_| format!("fuzz: not a number of seconds: {secs}")),
            _ => Err(USAGE.into()),
        }
        .and_then(|secs| fuzz::fuzz(secs, fuzz::FuzzBuild::Optimized)),
        Some("recursion") if flags.is_empty() => checks::no_recursion(),
        Some("size") => edgekv_xtask::size::report(&qemu::repo_root()).map(|t| println!("{t}")),
        Some("qemu") => match flags.as_slice() {
            [board, elf] => return qemu_runner(board, elf),
            _ => Err(USAGE.into()),
        },
        _ => Err(USAGE.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The model `cargo demo` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DemoModel {
    /// SmolLM2-135M-Instruct's chat (the default).
    SmolLm2,
    /// Gemma 3 270M continuing a shared document (`--model gemma3`).
    Gemma3,
}

/// `cargo demo`'s flags.
struct DemoFlags {
    model: DemoModel,
    cold: bool,
    asked: Vec<String>,
}

/// `cargo demo [--model smollm2|gemma3] [--cold] [--ask QUESTION]...`: the model, whether to add
/// the cold start, and the user's own questions (none: the demo's script).
fn demo_flags(flags: &[&str]) -> Result<DemoFlags, String> {
    let mut d = DemoFlags {
        model: DemoModel::SmolLm2,
        cold: false,
        asked: Vec::new(),
    };
    let mut it = flags.iter();
    while let Some(&f) = it.next() {
        match f {
            "--cold" => d.cold = true,
            "--ask" => d
                .asked
                .push(it.next().ok_or("--ask needs a question")?.to_string()),
            "--model" => {
                d.model = match it.next().copied() {
                    Some("smollm2") => DemoModel::SmolLm2,
                    Some("gemma3") => DemoModel::Gemma3,
                    other => {
                        return Err(format!(
                            "--model takes smollm2 (the default) or gemma3, not {other:?}"
                        ));
                    }
                }
            }
            _ => {
                return Err(format!(
                    "unknown flag {f}: cargo demo takes --model smollm2|gemma3, --cold, --ask QUESTION (repeatable), --parity or --host"
                ));
            }
        }
    }
    Ok(d)
}

/// `cargo demo --model gemma3`: set-up, model fetch, build and QEMU run of the Cortex-M55's
/// Gemma 3 firmware, its log turned into a transcript as it arrives.
fn gemma_demo(cold: bool) -> Result<(), String> {
    let (start, elf) = demo_build(Board::An547, "gemma", "three")?;
    eprintln!(
        "demo: firmware built ({:.0} s since the start); the model next (253 MB, fetched once)",
        start.elapsed().as_secs_f64()
    );
    let code = gemma(&elf, cold)?;
    demo_end(start, code)
}

/// Runs the an547 Gemma 3 firmware `elf` with the demo's document and requests, printing the
/// transcript; returns the firmware's exit code.
#[cfg(feature = "chat")]
fn gemma(elf: &std::path::Path, cold: bool) -> Result<i32, String> {
    use edgekv_xtask::{an547, gemma, gemma_script};
    let root = qemu::repo_root();
    let path = an547::gemma_path(&root)?;
    let requests = gemma::demo_requests();
    let texts = requests.iter().map(|t| t.user.clone()).collect();
    let (bytes, model) = gemma::load_model(&path)?;
    let mut transcript =
        edgekv_xtask::transcript::Transcript::document(bytes, texts, &gemma_script::STOP)?;
    let turns = an547::script_turns(&requests);
    let script = edgekv_llm::chat::Script {
        system: &gemma_script::DOCUMENT_IDS,
        cold,
        turns: &turns,
        stop: &gemma_script::STOP,
    };
    let mut out = std::io::stdout();
    use std::io::Write;
    let _ = writeln!(
        out,
        "Gemma 3 270M (pretrained) continues a shared document:\n\n{}",
        gemma_script::DOCUMENT
    );
    let run = gemma::run(
        &root,
        elf,
        (&path, &model),
        &script,
        Duration::from_secs(3600),
        &mut |l| transcript.line(&mut out, l),
    )?;
    Ok(run.code)
}

/// Without the `chat` feature: says how to get it.
#[cfg(not(feature = "chat"))]
fn gemma(_elf: &std::path::Path, _cold: bool) -> Result<i32, String> {
    Err("the an547 Gemma demo needs the task runner's `chat` feature: cargo xtask-chat ...".into())
}

/// The main job: set-up, model fetch, build and QEMU run of the Cortex-M55 chat firmware, its
/// log turned into a transcript as it arrives.
fn chat_demo(cold: bool, asked: &[String]) -> Result<(), String> {
    let (start, elf) = demo_build(Board::An547, qemu::AN547_MAIN, "three")?;
    eprintln!(
        "demo: firmware built ({:.0} s since the start); the model next (98 MB, fetched once)",
        start.elapsed().as_secs_f64()
    );
    let code = chat(&elf, cold, asked)?;
    demo_end(start, code)
}

/// A demo's set-up and firmware build: `board`'s rustup target, QEMU, then binary `bin` built
/// in release (its first build takes about `minutes` minutes). Returns the start time and ELF.
fn demo_build(board: Board, bin: &str, minutes: &str) -> Result<(Instant, PathBuf), String> {
    let start = Instant::now();
    eprintln!("demo: checking the rustup target and QEMU");
    setup::targets(&[board.target()])?;
    setup::qemu()?;
    eprintln!(
        "demo: building {} (release; the first build takes about {minutes} minutes on two cores) ...",
        board.dir()
    );
    let elf = qemu::build(&qemu::repo_root(), board, bin, false)?;
    Ok((start, elf))
}

/// Ends a demo: its time, and the firmware's exit `code` as a result.
fn demo_end(start: Instant, code: i32) -> Result<(), String> {
    eprintln!("demo: done in {:.0} s", start.elapsed().as_secs_f64());
    match code {
        0 => Ok(()),
        124 => Err("firmware timed out".into()),
        c => Err(format!("firmware exited with {c}")),
    }
}

/// Runs the an547 chat firmware `elf` with the demo script (or the `asked` questions), printing
/// the transcript; returns the firmware's exit code.
#[cfg(feature = "chat")]
fn chat(elf: &std::path::Path, cold: bool, asked: &[String]) -> Result<i32, String> {
    use edgekv_xtask::an547;
    let root = qemu::repo_root();
    let path = an547::model_path(&root)?;
    let texts = if asked.is_empty() {
        an547::demo_turns()
    } else {
        an547::asked_turns(&root, asked)?
    };
    let users = texts.iter().map(|t| t.user.clone()).collect();
    let (bytes, model) = an547::load_model(&path)?;
    let mut transcript = edgekv_xtask::transcript::Transcript::new(bytes, users)?;
    let turns = an547::script_turns(&texts);
    let script = edgekv_llm::chat::Script {
        system: &edgekv_xtask::chat_script::SYSTEM_IDS,
        cold,
        turns: &turns,
        stop: &edgekv_xtask::chat_script::STOP,
    };
    let mut out = std::io::stdout();
    let run = an547::run(
        &root,
        elf,
        (&path, &model),
        &script,
        Duration::from_secs(1200),
        &mut |l| transcript.line(&mut out, l),
    )?;
    Ok(run.code)
}

/// Without the `chat` feature: says how to get it.
#[cfg(not(feature = "chat"))]
fn chat(_elf: &std::path::Path, _cold: bool, _asked: &[String]) -> Result<i32, String> {
    Err("the an547 chat needs the task runner's `chat` feature: cargo xtask-chat ...".into())
}

/// Set-up, build and QEMU run of the an386 firmware (parity cases and synthetic session), its
/// log streamed.
fn board_demo() -> Result<(), String> {
    let (start, elf) = demo_build(Board::An386, qemu::AN386_MAIN, "five")?;
    eprintln!(
        "demo: running on qemu-system-arm -machine mps2-an386 ({:.0} s since the start) ...",
        start.elapsed().as_secs_f64()
    );
    let run = qemu::run_an386(&elf, Duration::from_secs(300), &mut std::io::stdout())?;
    demo_end(start, run.code)
}

/// The host-only demo session (`host-tests/examples/host_demo.rs`).
fn host_demo() -> Result<(), String> {
    eprintln!(
        "demo: building and running host-tests' host_demo example (release; the first build takes about two minutes) ..."
    );
    cmd::cargo(
        &[
            "run",
            "--release",
            "-p",
            "edgekv-host-tests",
            "--example",
            "host_demo",
        ],
        &[],
    )
}

/// The boards' cargo runner: runs `elf` on `board` and exits with the firmware's code.
fn qemu_runner(board: &str, elf: &str) -> ExitCode {
    let Some(board) = Board::from_name(board) else {
        eprintln!("xtask qemu: unknown board {board} (an386, microbit, an547)");
        return ExitCode::from(2);
    };
    if board == Board::An547 {
        let path = std::path::Path::new(elf);
        let run = if path.file_name().is_some_and(|n| n == "gemma") {
            gemma(path, false)
        } else {
            chat(path, false, &[])
        };
        return match run {
            Ok(0) => ExitCode::SUCCESS,
            Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(e) => {
                eprintln!("xtask qemu: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Err(e) = setup::qemu() {
        eprintln!("xtask qemu: {e}");
        return ExitCode::from(127);
    }
    let secs = std::env::var("QEMU_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let elf = std::path::Path::new(elf);
    match qemu::run(
        board,
        elf,
        Duration::from_secs(secs),
        &mut std::io::stdout(),
    ) {
        Ok(run) => ExitCode::from(u8::try_from(run.code).unwrap_or(1)),
        Err(e) => {
            eprintln!("xtask qemu: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo test-all`: parses the stage selection and runs the checks.
fn test(flags: &[&str]) -> Result<(), String> {
    let mut only = None;
    let mut skip = Vec::new();
    let mut it = flags.iter();
    while let Some(&f) = it.next() {
        match f {
            "--only" | "--skip" => {
                let stage = it.next().ok_or(format!("{f} needs a stage name"))?;
                if !checks::STAGES.contains(stage) {
                    return Err(format!(
                        "unknown stage {stage}; stages: {}",
                        checks::STAGES.join(", ")
                    ));
                }
                if f == "--only" {
                    only = Some(stage.to_string());
                } else {
                    skip.push(stage.to_string());
                }
            }
            "--no-miri" => skip.push("miri".into()),
            "--no-targets" => skip.extend(["no-std".into(), "boards".into()]),
            "--no-fuzz" => skip.push("fuzz".into()),
            "--no-model" => skip.push("model".into()),
            _ => {
                return Err(format!(
                    "unknown flag {f}: cargo test-all takes --only STAGE, --skip STAGE, --no-miri, \
                     --no-targets, --no-fuzz, --no-model"
                ));
            }
        }
    }
    let mut stages = Stages::new(only, skip);
    let result = checks::all(&mut stages);
    if let Err(e) = result {
        eprintln!("{}", stages.table());
        return Err(e);
    }
    Ok(())
}
