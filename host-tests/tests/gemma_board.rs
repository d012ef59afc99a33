//! Gemma 3 270M on the emulated Cortex-M55 (`boards/qemu-an547`, binary `gemma`) equals the
//! host, bit for bit: the host writes a grouped snapshot image of the shared document's first
//! 64 positions (the 15 sliding-window layers in one group, the 3 global ones in another) with
//! its build of the forward pass, the board restores it from flash, prefills one token of the
//! first request and generates two more; every token id, every logit digest (CRC-32 of the
//! 262,144 logits) and each group's pages must equal the host's run of the same chat code.
//! Kept short for CI (about 2.4 G emulated instructions: a Gemma token is about 0.7 G on the
//! board); the whole demo script, which continues the document past position 512 so that the
//! windowed group releases pages and reuses the document for a second request, is the ignored
//! `gemma_board_demo_script` (`cargo demo --model gemma3`). Fetches the model if it is missing
//! (`model/fetch-gemma.sh`; skipped with a message only when it cannot be fetched) and needs
//! qemu-system-arm.

use std::time::Duration;

use edgekv_llm::chat::{Event, Script, Start, Turn};
use edgekv_xtask::gemma_script::{DOCUMENT_IDS, REQUESTS, STOP};
use edgekv_xtask::qemu::{self, Board};
use edgekv_xtask::{an547, gemma};

/// Positions of the document restored from flash (4 pages).
const PREFIX: usize = 64;
/// Tokens of the first request prefilled after it.
const PROMPT: usize = 1;
/// Tokens generated (the first from the prefill's logits, then decode steps).
const GENERATED: u32 = 3;

#[test]
fn gemma_board_equals_the_host_bit_for_bit() {
    let root = qemu::repo_root();
    let path = match an547::gemma_path(&root) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("SKIPPED gemma_board: the Gemma 3 270M model cannot be fetched: {e}");
            return;
        }
    };
    let elf =
        qemu::build(&root, Board::An547, gemma::GEMMA_BIN, true).expect("build the an547 firmware");
    let (_, model) = gemma::load_model(&path).expect("model");
    let turns = [Turn {
        prompt: &REQUESTS[0].1[..PROMPT],
        max_new: GENERATED,
        new_conversation: false,
    }];
    let script = Script {
        system: &DOCUMENT_IDS[..PREFIX],
        cold: false,
        turns: &turns,
        stop: &STOP,
    };
    let image = gemma::document_image(&model, script.system).expect("snapshot image");
    let host = gemma::host_events(&model, &script, &image).expect("host run");

    let args = gemma::loader_args(&root, &path, image, &script).expect("loader files");
    let run = qemu::run_with(
        Board::An547,
        &elf,
        &args,
        Duration::from_secs(900),
        &mut |l| eprintln!("{l}"),
    )
    .expect("run QEMU");
    let log = run.lines.join("\n");
    assert_eq!(run.code, 0, "firmware exit code; log:\n{log}");
    let board: Vec<Event> = run
        .lines
        .iter()
        .filter_map(|l| an547::event(l))
        .map(an547::without_cost)
        .collect();
    let host: Vec<Event> = host.into_iter().map(an547::without_cost).collect();
    assert_eq!(board, host, "board and host differ; log:\n{log}");
    // What was compared: the restore, the first token, the decode steps, the end and both
    // groups' pages.
    assert_eq!(board.len(), 2 + GENERATED as usize + 2, "log:\n{log}");
    assert!(matches!(
        board[1],
        Event::First {
            start: Start::Restored,
            prefilled: 1,
            ..
        }
    ));
    let context = PREFIX + PROMPT + GENERATED as usize - 1;
    assert!(
        board.contains(&Event::End {
            turn: 0,
            generated: GENERATED,
            context: context as u32
        }),
        "log:\n{log}"
    );
    for l in run.lines.iter().filter(|l| l.starts_with("figure ")) {
        eprintln!("M55 Gemma: {l}");
    }
}

/// The whole demo script (`cargo demo --model gemma3`'s: the document restored, continued past
/// position 512, a second request over the reused document), board against host, its log
/// printed: for measuring the figures (several minutes of QEMU; not in CI). With
/// `EDGEKV_GEMMA_COLD=1` a cold prefill of the document and the first request runs first.
#[test]
#[ignore = "several minutes of QEMU: run with --ignored to measure the figures"]
fn gemma_board_demo_script() {
    let root = qemu::repo_root();
    let path = an547::gemma_path(&root).expect("the Gemma 3 270M model (model/fetch-gemma.sh)");
    let elf =
        qemu::build(&root, Board::An547, gemma::GEMMA_BIN, true).expect("build the an547 firmware");
    let (_, model) = gemma::load_model(&path).expect("model");
    let requests = gemma::demo_requests();
    let turns = an547::script_turns(&requests);
    let script = Script {
        system: &DOCUMENT_IDS,
        cold: std::env::var_os("EDGEKV_GEMMA_COLD").is_some(),
        turns: &turns,
        stop: &STOP,
    };
    let image = gemma::document_image(&model, script.system).expect("snapshot image");
    let host = gemma::host_events(&model, &script, &image).expect("host run");
    let args = gemma::loader_args(&root, &path, image, &script).expect("loader files");
    let run = qemu::run_with(
        Board::An547,
        &elf,
        &args,
        Duration::from_secs(3 * 3600),
        &mut |l| eprintln!("{l}"),
    )
    .expect("run QEMU");
    assert_eq!(run.code, 0, "firmware exit code");
    let board: Vec<Event> = run
        .lines
        .iter()
        .filter_map(|l| an547::event(l))
        .map(an547::without_cost)
        .collect();
    let host: Vec<Event> = host.into_iter().map(an547::without_cost).collect();
    assert_eq!(board, host, "board and host differ");
}
