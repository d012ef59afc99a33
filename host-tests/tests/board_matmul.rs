//! The Cortex-M55 firmware's matmul kernel check (`edgekv_llm::matmul::kernel_check`, binary
//! `matmul-check`): every Helium matmul kernel of `edgekv-llm` against the portable dot products
//! on random rows and edge values must give the same bits; any kernel and shape that differs is
//! named in the log. Needs qemu-system-arm (as `board_parity`).

use std::time::Duration;

use edgekv_xtask::qemu;

/// Calls `kernel_check::run` makes: (5 weight types of 32-value blocks × 5 widths + 3 K-quants ×
/// 2 widths) × 4 cases × 6 row counts × 6 activation row counts (1–9: tiles and the rows left
/// over) × 2 entries (the tiled matmul, one row).
const CALLS: u32 = (5 * 5 + 3 * 2) * 4 * 6 * 6 * 2;

/// Those of Q4_1 and Q8_0, the types with Helium kernels.
const HELIUM: u32 = 2 * 5 * 4 * 6 * 6 * 2;

#[test]
fn helium_matmul_kernels_equal_the_portable_dot_products() {
    let root = qemu::repo_root();
    let board = qemu::Board::An547;
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
    assert_eq!(words[0], "helium", "{summary}");
    // The one-row entry declines on Helium (four weight rows at a time is its kernel), and so
    // do the other weight types (the portable code runs).
    assert_eq!(
        (compared, declined, mismatches),
        (HELIUM / 2, CALLS - HELIUM / 2, 0),
        "{summary}"
    );
    eprintln!("an547: matmul_check kernels {summary}");
}
