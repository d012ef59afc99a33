//! SmolLM2-135M on the emulated Cortex-M55 (`boards/qemu-an547`) equals the host, bit for bit:
//! the host writes the system prompt's snapshot image with its build of the forward pass, the
//! board restores it from flash, prefills a user turn and generates 8 tokens; every token id and
//! every logit digest (CRC-32 of the logits) must equal the host's run of the same chat code.
//! Fetches the model if it is missing (`model/fetch-model.sh`) and needs qemu-system-arm.

use std::time::Duration;

use edgekv_llm::chat::{Event, Script, Start, Turn};
use edgekv_xtask::an547;
use edgekv_xtask::chat_script::{STOP, SYSTEM_IDS, TURNS};
use edgekv_xtask::qemu::{self, Board};

/// Stack budget of the Cortex-M55 chat firmware (bytes from the top of the stack, the
/// firmware's own frames included: about 20 KB before the forward pass runs): the deepest use
/// measured, 25,332 B (a prefill after the restore), with about a quarter in reserve.
const CHAT_STACK_BUDGET: u32 = 32 * 1024;

#[test]
fn board_chat_equals_the_host_bit_for_bit() {
    let root = qemu::repo_root();
    let elf =
        qemu::build(&root, Board::An547, qemu::AN547_MAIN, true).expect("build the an547 firmware");
    let path = an547::model_path(&root).expect("the model (model/fetch-model.sh)");
    let (_, model) = an547::load_model(&path).expect("model");
    let turns = [Turn {
        prompt: TURNS[0].1,
        max_new: 8,
        new_conversation: false,
    }];
    let script = Script {
        system: &SYSTEM_IDS,
        cold: false,
        turns: &turns,
        stop: &STOP,
    };
    let image = an547::system_image(&model, script.system).expect("snapshot image");
    let host = an547::host_events(&model, &script, &image).expect("host run");

    let args = an547::loader_args(&root, &path, image, &script).expect("loader files");
    let run = qemu::run_with(
        Board::An547,
        &elf,
        &args,
        Duration::from_secs(600),
        &mut |_| {},
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
    assert_eq!(board, host, "board and host chats differ; log:\n{log}");
    // The forward pass's stack (the restore, prefill and decode calls and the decode step at
    // 2,048 keys): within the budget README's "Stack" states.
    match run.check_stack(CHAT_STACK_BUDGET, 4) {
        Ok((deepest, what)) => eprintln!("M55 chat: deepest stack use {deepest} B ({what})"),
        Err(e) => panic!("M55 chat: {e}; log:\n{log}"),
    }
    // What was compared: the restore, the first token, 7 decode steps and the end.
    assert_eq!(board.len(), 10, "log:\n{log}");
    assert!(matches!(
        board[1],
        Event::First {
            start: Start::Restored,
            prefilled: 11,
            ..
        }
    ));
    // The counted decode step over 2,048 Q8_0 keys (before the chat): the host's output bits.
    let step = run
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("decode_step keys 2048 instructions "))
        .unwrap_or_else(|| panic!("a decode_step line; log:\n{log}"));
    let mut arena = vec![std::mem::MaybeUninit::uninit(); edgekv_parity::STEP_ARENA_BYTES];
    let mut work = vec![0f32; edgekv_parity::STEP_WORK_F32];
    let host = edgekv_parity::decode_step(&mut arena, &mut work, &mut || 0).expect("host step");
    assert!(
        step.ends_with(&format!("crc32 {:08x}", host.crc32)),
        "decode step: {step}"
    );
}
