//! The QEMU Cortex-M4 firmware runs the same parity cases as the host and must print the same
//! digests, byte for byte; it restores a snapshot image the host wrote (at build time) from
//! flash and must decode after it as the host does; its counted decode step over 2,048 keys must
//! give the host's output; then its demo session must pass. The Cortex-M55 firmware's parity
//! binary must print the same case digests too, and so must the M4 firmware built `small-code`.
//! Both boards' decode-step binaries must give the host's output for every model shape, and
//! their kernel checks must find every Arm kernel equal to the portable one.
//! Each firmware's stack high-water marks (per case and per kind of call) must stay within its
//! budget. Needs
//! qemu-system-arm (`cargo test-all`'s setup stage installs it; the defmt log is decoded in
//! process by `edgekv_xtask::qemu`); without it the test fails and says how to install.

use std::mem::MaybeUninit;
use std::time::Duration;

use edgekv_parity::{
    Arenas, CASES, Case, DATA_BYTES, META_BYTES, STEP_SHAPES, STEP_SHAPES_ARENA_BYTES,
    STEP_SHAPES_WORK_F32, TINY_CASES, WORK_F32, decode_step_of, snapshot, stored_pages,
};
use edgekv_xtask::qemu;

/// Runs the board's README command (`cargo run --release` in `boards/qemu-an386`): `cargo
/// test-all`'s `boards` stage only builds this firmware, and this is where it runs.
#[test]
fn firmware_digests_equal_the_hosts() {
    let root = qemu::repo_root();
    let run = qemu::cargo_run(&root, qemu::Board::An386).expect("cargo run the an386 firmware");
    let text = run.lines.join("\n");
    assert_eq!(run.code, 0, "firmware exit code; log:\n{text}");

    let mut buffers = HostBuffers::new();
    let mut arenas = buffers.arenas();
    let restored = assert_m4_digests(&run, &mut arenas, "board", &text);
    // The host restores the same image (rebuilt here by the same code) to the same bits.
    let mut mem = vec![0u8; snapshot::IMAGE_MAX];
    let image = snapshot::write_image_into(&mut arenas, &mut mem).expect("image");
    let host = snapshot::decode_after_image(image, &mut arenas).expect("host restore");
    assert_eq!(
        restored, host.crc32,
        "restored snapshot: board {restored:08x}, host {:08x}",
        host.crc32
    );
    assert!(
        run.lines.iter().any(|l| l.starts_with("demo ok")),
        "the demo session passed; log:\n{text}"
    );
}

/// The Cortex-M55 build (Helium kernels, whole-page int8 kernels) runs the same parity cases:
/// the same digests as the host, case by case.
#[test]
fn m55_case_digests_equal_the_hosts() {
    let root = qemu::repo_root();
    let elf = qemu::build(&root, qemu::Board::An547, qemu::AN547_PARITY, true)
        .expect("build the an547 firmware");
    let mut log = Vec::new();
    let run =
        qemu::run(qemu::Board::An547, &elf, Duration::from_secs(300), &mut log).expect("run QEMU");
    let text = String::from_utf8_lossy(&log);
    assert_eq!(run.code, 0, "firmware exit code; log:\n{text}");
    let mut buffers = HostBuffers::new();
    let digests = run.digests();
    assert_case_digests(&digests, &mut buffers.arenas(), "M55", &text);
    assert_stored_pages(&run, &mut buffers.arenas(), "M55", &text);
    assert_stack(&run, M55_STACK_BUDGET, "M55", &text);
}

/// Each board's decode-step firmware (the Arm kernels at every model shape of `STEP_SHAPES`: runs
/// of one to four query heads, head_dim 64 to 256) gives the host's output bits, shape by shape.
#[test]
fn decode_steps_of_every_shape_equal_the_hosts() {
    let root = qemu::repo_root();
    let mut arena = vec![MaybeUninit::uninit(); STEP_SHAPES_ARENA_BYTES];
    let mut work = vec![0f32; STEP_SHAPES_WORK_F32];
    let host: Vec<String> = STEP_SHAPES
        .iter()
        .map(|s| {
            let c = decode_step_of(s, &mut arena, &mut work, &mut || 0).expect("host step");
            let shape = format!("{},{},{}", s.q_heads, s.kv_heads, s.head_dim);
            format!("{} shape {shape} crc32 {:08x}", s.model, c.crc32)
        })
        .collect();
    for board in [qemu::Board::An386, qemu::Board::An547] {
        let elf = qemu::build(&root, board, qemu::DECODE_STEP, true).expect("build the firmware");
        let mut log = Vec::new();
        let run = qemu::run(board, &elf, Duration::from_secs(300), &mut log).expect("run QEMU");
        let text = String::from_utf8_lossy(&log);
        assert_eq!(run.code, 0, "{} exit code; log:\n{text}", board.name());
        // `decode_step <model> shape <q,kv,hd> keys 2048 instructions <n> crc32 <x>`, without
        // the count.
        let steps: Vec<String> = run
            .lines
            .iter()
            .filter_map(|l| l.strip_prefix("decode_step "))
            .map(|l| {
                let (head, crc) = l.split_once(" keys ").expect("a step line");
                format!("{head} crc32 {}", crc.rsplit(' ').next().unwrap_or(""))
            })
            .collect();
        assert_eq!(steps, host, "{}: log:\n{text}", board.name());
        eprintln!("{}: {}", board.name(), steps.join("; "));
    }
}

/// Each board's kernel check (`edgekv::kernel_check`): every Arm kernel of its build against the
/// portable one on random inputs of every run length (1 to 4 heads), head_dim (32 to 256) and key
/// group; any that differs is named in the log.
#[test]
fn arm_kernels_equal_the_portable_ones() {
    let root = qemu::repo_root();
    // 18 (head_dim, group) shapes × 4 runs × 3 row counts × 4 kernels (two of whole pages, which
    // an ISA may decline), then 18 softmax, lane-sum and widening checks.
    let calls = 18 * 4 * 3 * 4 + 18;
    for board in [qemu::Board::An386, qemu::Board::An547] {
        let elf = qemu::build(&root, board, qemu::KERNEL_CHECK, true).expect("build the firmware");
        let mut log = Vec::new();
        let run = qemu::run(board, &elf, Duration::from_secs(300), &mut log).expect("run QEMU");
        let text = String::from_utf8_lossy(&log);
        let mismatches: Vec<&String> = run
            .lines
            .iter()
            .filter(|l| l.starts_with("kernel_check mismatch"))
            .collect();
        assert!(mismatches.is_empty(), "{}: {mismatches:#?}", board.name());
        assert_eq!(run.code, 0, "{} exit code; log:\n{text}", board.name());
        let summary = run
            .lines
            .iter()
            .find_map(|l| l.strip_prefix("kernel_check compared "))
            .unwrap_or_else(|| panic!("{}: a summary line; log:\n{text}", board.name()));
        let n: Vec<u32> = summary.split(' ').filter_map(|w| w.parse().ok()).collect();
        let [compared, declined, mismatches] = n[..] else {
            panic!("{}: summary {summary}", board.name())
        };
        assert_eq!((compared + declined, mismatches), (calls, 0), "{summary}");
        // Both boards have whole-page kernels for every run length and head_dim: the
        // Cortex-M4's DSP (`arch/arm/page_runs.rs`), the Cortex-M55's Helium
        // (`arch/arm/mve_runs.rs`), so neither declines any.
        assert_eq!(declined, 0, "{}: {summary}", board.name());
        eprintln!("{}: kernel_check compared {summary}", board.name());
    }
}

/// The Cortex-M4 firmware built with `small-code` (the size-first page loop, with the FPU's f16
/// conversion) runs the same parity cases and counted decode step: the host's digests. Built
/// into its own target directory, so the default firmware the other tests run stays as it is.
#[test]
fn small_code_firmware_digests_equal_the_hosts() {
    let root = qemu::repo_root();
    let target = qemu::boards_target_dir(&root).with_file_name("boards-small-code");
    let status = qemu::board_cargo(&root.join(qemu::Board::An386.dir()))
        .args(["build", "--release", "--quiet", "--features", "small-code"])
        .arg("--target-dir")
        .arg(&target)
        .status()
        .expect("cargo build the small-code an386 firmware");
    assert!(status.success(), "small-code an386 build: {status}");
    let elf = target
        .join(qemu::Board::An386.target())
        .join("release")
        .join(qemu::AN386_MAIN);
    let mut log = Vec::new();
    let run =
        qemu::run(qemu::Board::An386, &elf, Duration::from_secs(300), &mut log).expect("run QEMU");
    let text = String::from_utf8_lossy(&log);
    assert_eq!(run.code, 0, "firmware exit code; log:\n{text}");
    let mut buffers = HostBuffers::new();
    assert_m4_digests(&run, &mut buffers.arenas(), "small-code M4", &text);
}

/// Stack budget of the Cortex-M4 firmware (bytes from the top of the stack, the firmware's own
/// frames included): the deepest use measured, 20,220 B (the snapshot restore with 8 decode
/// steps), with about a quarter in reserve. README, "Stack".
const M4_STACK_BUDGET: u32 = 24 * 1024;

/// Stack budget of the Cortex-M55 parity firmware, as [`M4_STACK_BUDGET`]: measured 11,064 B
/// (the snapshot restore, and Q8_0 K with f16 V: the Helium page kernels' integer sums of a
/// 16-row chunk, 2 KiB for four heads of eight groups), with about a quarter in reserve.
const M55_STACK_BUDGET: u32 = 14 * 1024;

/// Checks `run`'s stack high-water marks (`who`'s per case and per kind of call) against
/// `budget`, printing the deepest.
fn assert_stack(run: &qemu::Run, budget: u32, who: &str, log: &str) {
    match run.check_stack(budget, CASES.len()) {
        Ok((deepest, what)) => {
            eprintln!("{who}: deepest stack use {deepest} B ({what}; budget {budget} B)")
        }
        Err(e) => panic!("{who}: {e}; log:\n{log}"),
    }
}

/// What the M4 parity firmware printed (`who`: its name in messages, `log` its log), checked
/// against the host: one digest per case, the host's; last, the snapshot restored from flash,
/// equal to the cold prefill's; the counted decode step at 2,048 keys, the host's output bits.
/// Returns the restored snapshot's digest.
fn assert_m4_digests(run: &qemu::Run, arenas: &mut Arenas<'_>, who: &str, log: &str) -> u32 {
    let mut board = run.digests();
    let (name, restored) = board.pop().expect("digests");
    assert_eq!(name, "snapshot_restored", "log:\n{log}");
    let cold = assert_case_digests(&board, arenas, who, log);
    assert_stored_pages(run, arenas, who, log);
    assert_eq!(Some(restored), cold, "{who}: restored == cold prefill");
    assert_stack(run, M4_STACK_BUDGET, who, log);
    let step = run
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("decode_step keys 2048 instructions "))
        .unwrap_or_else(|| panic!("a decode_step line; log:\n{log}"));
    let mut arena = vec![MaybeUninit::uninit(); edgekv_parity::STEP_ARENA_BYTES];
    let host = edgekv_parity::decode_step(&mut arena, arenas.work, &mut || 0).expect("host step");
    assert!(
        step.ends_with(&format!("crc32 {:08x}", host.crc32)),
        "{who} decode step: {step}"
    );
    restored
}

/// Asserts that a board printed the stored pages of every case of [`TINY_CASES`] (`pages <case>
/// crc32 <hex>`, subnormal inputs), each the host's.
fn assert_stored_pages(run: &qemu::Run, arenas: &mut Arenas<'_>, who: &str, log: &str) {
    let board: Vec<&str> = run
        .lines
        .iter()
        .filter_map(|l| l.strip_prefix("pages "))
        .map(str::trim)
        .collect();
    let host: Vec<String> = TINY_CASES
        .iter()
        .map(|&c| {
            let crc = stored_pages(c, arenas).expect("host pages");
            format!("{} crc32 {crc:08x}", c.name())
        })
        .collect();
    assert_eq!(board, host, "{who}: stored pages; log:\n{log}");
}

/// The host's buffers for the parity cases.
struct HostBuffers {
    data: Vec<MaybeUninit<u8>>,
    meta: Vec<MaybeUninit<u8>>,
    work: Vec<f32>,
}

impl HostBuffers {
    fn new() -> Self {
        HostBuffers {
            data: vec![MaybeUninit::uninit(); DATA_BYTES],
            meta: vec![MaybeUninit::uninit(); META_BYTES],
            work: vec![0f32; WORK_F32],
        }
    }

    fn arenas(&mut self) -> Arenas<'_> {
        Arenas {
            data: &mut self.data,
            meta: &mut self.meta,
            work: &mut self.work,
        }
    }
}

/// Asserts that a board printed one digest per case, each the host's (`who`: the board's name in
/// messages, `log` its log); returns the host's digest of [`Case::SnapshotCold`].
fn assert_case_digests(
    board: &[(String, u32)],
    arenas: &mut Arenas<'_>,
    who: &str,
    log: &str,
) -> Option<u32> {
    assert_eq!(board.len(), CASES.len(), "one digest per case; log:\n{log}");
    let mut cold = None;
    for (&case, (name, crc)) in CASES.iter().zip(board) {
        let host = edgekv_parity::run(case, arenas, &mut |_| {}).expect("host case");
        assert_eq!(name, host.name());
        assert_eq!(
            *crc, host.crc32,
            "case {name}: {who} {crc:08x}, host {:08x}",
            host.crc32
        );
        if case == Case::SnapshotCold {
            cold = Some(host.crc32);
        }
    }
    cold
}

#[test]
fn a_hardfault_ends_the_run_with_exit_code_3() {
    let root = qemu::repo_root();
    qemu::build_an386(&root).expect("build the an386 firmware");
    let elf = qemu::an386_bin(&root, qemu::AN386_HARDFAULT);
    let mut log = Vec::new();
    let run = qemu::run_an386(&elf, Duration::from_secs(60), &mut log).expect("run QEMU");
    assert_eq!(run.code, 3, "log:\n{}", String::from_utf8_lossy(&log));
    assert!(run.lines.iter().any(|l| l.starts_with("HardFault at pc")));
}
