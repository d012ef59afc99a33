//! The boards' matmul kernel checks (`edgekv_llm::matmul::kernel_check`, binary `matmul-check`):
//! every matmul kernel of `edgekv-llm` the firmware has — Helium on the Cortex-M55 (qemu-an547),
//! the DSP extension's `SMLAD` on the Cortex-M4 (qemu-an386) — against the portable dot products
//! on random rows and edge values must give the same bits; any kernel and shape that differs is
//! named in the log. The Cortex-M4's `block-matmuls` bench (one SmolLM2-135M block's seven
//! matmuls over synthetic weights, the 1,536-value FFN rows in two of the kernels' chunks; then
//! one Gemma 3 270M block's, its 2,048-value Q6_K / Q4_K rows in two chunks) must print the
//! CRC-32s the portable build prints. Needs qemu-system-arm (as `board_parity`).

use std::time::Duration;

use edgekv_xtask::qemu;

/// Calls `kernel_check::run` makes: (5 weight types of 32-value blocks × 5 widths + 3 K-quants ×
/// 2 widths) × 4 cases × 6 row counts × 6 activation row counts (1–9: tiles and the rows left
/// over) × 2 entries (the tiled matmul, one row).
const CALLS: u32 = (5 * 5 + 3 * 2) * 4 * 6 * 6 * 2;

/// Those of Q4_1 and Q8_0, the types with Helium and DSP kernels.
const Q4_1_Q8_0: u32 = 2 * 5 * 4 * 6 * 6 * 2;

/// Q4_1's and Q8_0's tiled-matmul calls of the extreme-scales case whose activation rows hold a
/// scale Helium's vector lanes would not combine exactly (below 2⁻²⁴: f32 subnormals among
/// them), out of 2 types × 5 widths × 6 × 6 = 360: the whole matmul declines there (the check is
/// made once per matmul). Counted on the board (2026-11-30); the rows are the check's fixed
/// random draws.
const HELIUM_INEXACT: u32 = 337;

/// Those of Q5_0 (Helium: the tiled matmul entry; its one-row entry declines, as Q4_1's; DSP:
/// both entries).
const Q5_0: u32 = 5 * 4 * 6 * 6 * 2;

/// Those of Q4_K and Q6_K (Helium and DSP: both entries).
const Q4_K_Q6_K: u32 = 2 * 2 * 4 * 6 * 6 * 2;

/// The CRC-32 of every output of `block-matmuls` built with `--features portable` (the portable
/// matmuls; measured 2026-11-29, FIGURES.md).
const PORTABLE_CRC: &str = "ddd296e8";

/// The same for its Gemma 3 270M block (Q5_0, Q8_0, Q4_K, Q6_K; measured 2026-11-30, FIGURES.md).
const GEMMA_PORTABLE_CRC: &str = "d379ee7a";

/// `edgekv_llm::subnormal_check::SUBNORMAL_DIGEST`, the host's digest of the f32 loops
/// around the matmuls on subnormal inputs (its unit test recomputes it on the host).
const SUBNORMAL_DIGEST: u32 = 0x995a_3a8a;

/// Builds and runs `board`'s `matmul-check`: no mismatch, the host's digest on subnormal
/// inputs, exit code 0, its kernels named `isa`.
/// Returns the calls compared and declined.
fn kernel_check(board: qemu::Board, isa: &str) -> (u32, u32) {
    let root = qemu::repo_root();
    let elf = qemu::build(&root, board, qemu::MATMUL_CHECK, true).expect("build the firmware");
    let mut log = Vec::new();
    let run = qemu::run(board, &elf, Duration::from_secs(300), &mut log).expect("run QEMU");
    let text = String::from_utf8_lossy(&log);
    let mismatches: Vec<&String> = run
        .lines
        .iter()
        .filter(|l| l.starts_with("matmul_check mismatch"))
        .collect();
    assert!(mismatches.is_empty(), "{mismatches:#?}");
    assert_eq!(run.code, 0, "exit code; log:\n{text}");
    quantizer_check(board, &run.lines, &text);
    let summary = run
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("matmul_check kernels "))
        .unwrap_or_else(|| panic!("a summary line; log:\n{text}"));
    let words: Vec<&str> = summary.split(' ').collect();
    let n: Vec<u32> = words.iter().filter_map(|w| w.parse().ok()).collect();
    let [compared, declined, mismatches] = n[..] else {
        panic!("summary {summary}")
    };
    assert_eq!(words[0], isa, "{summary}");
    assert_eq!(mismatches, 0, "{summary}");
    // The f32 loops around the matmuls on subnormal inputs (`subnormal_digest`): the host's.
    let subnormal = run
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("matmul_check subnormal crc "))
        .unwrap_or_else(|| panic!("a subnormal digest line; log:\n{text}"));
    let (board_crc, host_crc) = subnormal.split_once(" host ").expect("crc and host crc");
    // Every board the host's digest: the Cortex-M55's `matmul_f32` too (`dot_dequantized`'s
    // lanes, on Helium's flushing vector floats, take operands floored at 2^-42).
    let want = host_crc;
    eprintln!(
        "{}: subnormal digest {board_crc} (host {host_crc})",
        board.name()
    );
    assert_eq!(board_crc, want, "subnormal inputs: the board's digest");
    assert_eq!(
        u32::from_str_radix(host_crc, 16).ok(),
        Some(SUBNORMAL_DIGEST),
        "the firmware's host digest"
    );
    eprintln!("{}: matmul_check kernels {summary}", board.name());
    (compared, declined)
}

/// Calls `kernel_check::run_quantizers` makes (`check_quantize::CALLS`): rows of 182 block
/// kinds, 18 per Q8_0 / Q8_1 row (11 rows each) and 2 per Q8_K row (91 rows), each row with 4
/// buffer lengths.
const QUANTIZER_CALLS: u32 = (2 * 11 + 91) * 4;

/// The firmware's activation-quantizer check: no mismatch; Helium's kernels (every type) take
/// every call, the Cortex-M4's Q8_0's and Q8_1's (Q8_K declines: the portable code runs). Prints the
/// summary and the firmware's per-token instruction counts (`quantize_count`).
fn quantizer_check(board: qemu::Board, lines: &[String], text: &str) {
    let bad: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("matmul_check quantizer mismatch"))
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
    let summary = lines
        .iter()
        .find_map(|l| l.strip_prefix("matmul_check quantizers "))
        .unwrap_or_else(|| panic!("a quantizer summary line; log:\n{text}"));
    let n: Vec<u32> = summary.split(' ').filter_map(|w| w.parse().ok()).collect();
    let compared = match board {
        qemu::Board::An547 => QUANTIZER_CALLS,
        // The Cortex-M4's kernel: Q8_0 and Q8_1 (Q8_K declines).
        _ => 2 * 11 * 4,
    };
    assert_eq!(
        n,
        [compared, QUANTIZER_CALLS - compared, 0],
        "quantizers: {summary}"
    );
    eprintln!("{}: matmul_check quantizers {summary}", board.name());
    for l in lines.iter().filter(|l| l.starts_with("quantize_count ")) {
        eprintln!("{}: {l}", board.name());
    }
}

#[test]
fn helium_matmul_kernels_equal_the_portable_dot_products() {
    // The one-row entry declines on Helium for Q4_1, Q8_0 and Q5_0 (four weight rows at a
    // time is their kernel), not for the K-quants (one row at a time); the other weight types
    // decline (the portable code runs), and so do Q4_1's and Q8_0's matmuls over activation
    // scales the lanes would not combine exactly.
    let compared = Q4_1_Q8_0 / 2 - HELIUM_INEXACT + Q5_0 / 2 + Q4_K_Q6_K;
    assert_eq!(
        kernel_check(qemu::Board::An547, "helium"),
        (compared, CALLS - compared)
    );
}

#[test]
fn dsp_matmul_kernels_equal_the_portable_dot_products() {
    let board = qemu::Board::An386;
    // The DSP kernels decline none of Q4_1's, Q8_0's, Q5_0's, Q4_K's and Q6_K's calls.
    let compared = Q4_1_Q8_0 + Q5_0 + Q4_K_Q6_K;
    assert_eq!(kernel_check(board, "dsp"), (compared, CALLS - compared));

    // The bench, built with the check (`qemu::build` builds every binary of the board).
    let elf = qemu::bin_path(&qemu::repo_root(), board, "block-matmuls");
    let mut log = Vec::new();
    let run = qemu::run(board, &elf, Duration::from_secs(120), &mut log).expect("run QEMU");
    let text = String::from_utf8_lossy(&log);
    assert_eq!(run.code, 0, "exit code; log:\n{text}");
    let total = run
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("block_matmuls dsp total "))
        .unwrap_or_else(|| panic!("a DSP total line; log:\n{text}"));
    assert!(
        total.ends_with(&format!("crc32 {PORTABLE_CRC}")),
        "the kernels' outputs differ from the portable build's: {total}"
    );
    eprintln!("an386: block_matmuls dsp total {total}");
    let gemma = run
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("block_matmuls gemma3 dsp total "))
        .unwrap_or_else(|| panic!("a Gemma DSP total line; log:\n{text}"));
    assert!(
        gemma.ends_with(&format!("crc32 {GEMMA_PORTABLE_CRC}")),
        "the kernels' Gemma outputs differ from the portable build's: {gemma}"
    );
    eprintln!("an386: block_matmuls gemma3 dsp total {gemma}");
}
