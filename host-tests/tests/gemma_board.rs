//! Gemma 3 270M on the emulated Cortex-M55 (`boards/qemu-an547`, binary `gemma`) equals the
//! host, bit for bit: the host writes the shared document's grouped snapshot image (496
//! positions: the 15 sliding-window layers in one group, the 3 global ones in another) with its
//! build of the forward pass, the board restores it from flash, prefills the first request's 9
//! tokens and generates past position 512, where the windowed layers stop seeing the document's
//! first positions; every token id, every logit digest (CRC-32 of the 262,144 logits) and each
//! group's pages must equal the host's run of the same chat code. Fetches the model if it is
//! missing (`model/fetch-gemma.sh`; skipped with a message only when it cannot be fetched) and
//! needs qemu-system-arm.

use std::time::Duration;

use edgekv_llm::chat::{Event, Script, Start, Turn};
use edgekv_xtask::gemma_script::{DOCUMENT_IDS, REQUESTS, STOP};
use edgekv_xtask::qemu::{self, Board};
use edgekv_xtask::{an547, gemma};

/// Tokens the first request generates: 496 + 9 prefilled, then 10 decode steps reach position
/// 514 (the last one attends to positions 3..=514 in the windowed layers).
const GENERATED: u32 = 11;

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
        prompt: REQUESTS[0].1,
        max_new: GENERATED,
        new_conversation: false,
    }];
    let script = Script {
        system: &DOCUMENT_IDS,
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
            prefilled: 9,
            ..
        }
    ));
    let context = DOCUMENT_IDS.len() + REQUESTS[0].1.len() + GENERATED as usize - 1;
    assert!(context > 512, "the window is crossed");
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
