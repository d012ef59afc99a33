//! Building the QEMU board firmware and running it under `qemu-system-arm`, its defmt log decoded
//! in process with `defmt-decoder` (what `defmt-print` is built on), so no extra binary is needed.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use defmt_decoder::{DecodeError, Table};

/// The main an386 firmware binary (parity cases and demo).
pub const AN386_MAIN: &str = "edgekv-qemu-an386";
/// The an547 firmware binary (the LLM chat).
pub const AN547_MAIN: &str = "edgekv-qemu-an547";
/// The an386 binary that faults on purpose (its HardFault handler must exit 3).
pub const AN386_HARDFAULT: &str = "hardfault";
/// The an547 binary that runs the parity cases with the Helium kernels.
pub const AN547_PARITY: &str = "parity";
/// Every Arm kernel against the portable one (both Cortex-M boards).
pub const KERNEL_CHECK: &str = "kernel-check";
/// The counted decode steps of every model shape (both Cortex-M boards).
pub const DECODE_STEP: &str = "decode-step";
/// Every matmul kernel of `edgekv-llm` against the portable dot products (the an547 board).
pub const MATMUL_CHECK: &str = "matmul-check";

/// A board crate that runs under QEMU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Board {
    /// `boards/qemu-an386`: Cortex-M4F on `mps2-an386`, defmt log over semihosting.
    An386,
    /// `boards/microbit`: Cortex-M0 on QEMU's `microbit`, plain semihosting text.
    Microbit,
    /// `boards/qemu-an547`: Cortex-M55 on `mps3-an547` with `-icount`, the LLM chat; its model,
    /// script and snapshot image are loaded beside it (`an547`, feature `chat`).
    An547,
}

impl Board {
    /// Every board that runs under QEMU.
    pub const ALL: [Board; 3] = [Board::An386, Board::Microbit, Board::An547];

    /// The name `cargo xtask qemu NAME` takes.
    pub fn name(self) -> &'static str {
        match self {
            Board::An386 => "an386",
            Board::Microbit => "microbit",
            Board::An547 => "an547",
        }
    }

    /// The board named `name`.
    pub fn from_name(name: &str) -> Option<Board> {
        Board::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The firmware crate, relative to the repository root.
    pub fn dir(self) -> &'static str {
        match self {
            Board::An386 => "boards/qemu-an386",
            Board::Microbit => "boards/microbit",
            Board::An547 => "boards/qemu-an547",
        }
    }

    /// The rustup target the firmware builds for.
    pub fn target(self) -> &'static str {
        match self {
            Board::An386 => "thumbv7em-none-eabihf",
            Board::Microbit => "thumbv6m-none-eabi",
            Board::An547 => "thumbv8m.main-none-eabihf",
        }
    }

    /// QEMU's machine arguments (before `-kernel ELF`).
    /// (`-icount shift=0`: one virtual nanosecond per instruction, so the Cortex-M boards'
    /// SysTick counts instructions.)
    fn qemu_args(self) -> &'static [&'static str] {
        match self {
            Board::An386 => &[
                "-cpu",
                "cortex-m4",
                "-machine",
                "mps2-an386",
                "-icount",
                "shift=0",
            ],
            Board::Microbit => &["-machine", "microbit"],
            Board::An547 => &["-machine", "mps3-an547", "-icount", "shift=0"],
        }
    }

    /// Whether the firmware logs through defmt (else its semihosting output is plain text).
    fn defmt(self) -> bool {
        matches!(self, Board::An386 | Board::An547)
    }
}

/// The repository root (the parent of `xtask/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// The target directory every board crate builds into (set in each board's
/// `.cargo/config.toml`, so `cargo run` in a board directory and the task runner share it).
pub fn boards_target_dir(root: &Path) -> PathBuf {
    root.join("target/boards")
}

/// What a firmware run printed and how it ended.
#[derive(Debug)]
pub struct Run {
    /// Decoded log lines, in order.
    pub lines: Vec<String>,
    /// QEMU's exit code (the firmware's semihosting exit code; 124 on timeout).
    pub code: i32,
}

impl Run {
    /// `(case, crc32)` of every `case <name> crc32 <hex>` line.
    pub fn digests(&self) -> Vec<(String, u32)> {
        self.lines
            .iter()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                match (w.next(), w.next(), w.next(), w.next()) {
                    (Some("case"), Some(name), Some("crc32"), Some(hex)) => {
                        u32::from_str_radix(hex, 16)
                            .ok()
                            .map(|c| (name.to_string(), c))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// `(bytes, what)` of every `stack <bytes> B: <what>` line (`edgekv-board-stack`'s
    /// high-water marks), the stack's size (`what` = `size`) included.
    pub fn stack_marks(&self) -> Vec<(u32, String)> {
        self.lines
            .iter()
            .filter_map(|l| {
                let rest = l.strip_prefix("stack ")?;
                let (bytes, what) = rest.split_once(" B: ")?;
                Some((bytes.parse().ok()?, what.to_string()))
            })
            .collect()
    }

    /// Checks the run's stack high-water marks against `budget` bytes: at least `min_marks`
    /// figures, each within the budget, and the budget within the stack's size. Returns the
    /// deepest figure and what it measured; the error names every figure over the budget.
    pub fn check_stack(&self, budget: u32, min_marks: usize) -> Result<(u32, String), String> {
        let marks = self.stack_marks();
        let size = marks
            .iter()
            .find(|(_, w)| w == "size")
            .map(|m| m.0)
            .ok_or("no `stack <bytes> B: size` line")?;
        let figures: Vec<&(u32, String)> = marks.iter().filter(|(_, w)| w != "size").collect();
        if figures.len() < min_marks {
            return Err(format!(
                "{} stack figures, expected at least {min_marks}",
                figures.len()
            ));
        }
        if budget > size {
            return Err(format!("budget {budget} B exceeds the stack's {size} B"));
        }
        let over: Vec<String> = figures
            .iter()
            .filter(|(b, _)| *b > budget)
            .map(|(b, w)| format!("{w}: {b} B"))
            .collect();
        if !over.is_empty() {
            return Err(format!(
                "over the {budget} B stack budget: {}",
                over.join("; ")
            ));
        }
        Ok(figures
            .iter()
            .max_by_key(|m| m.0)
            .map(|m| (*m).clone())
            .unwrap_or_default())
    }
}

/// `cargo` run inside board crate `dir` (its own workspace and `.cargo/config.toml`), with none
/// of the calling host build's target or flag settings leaking in.
pub fn board_cargo(dir: &Path) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(dir)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS");
    cmd
}

/// Builds board `board`'s firmware binaries in release (cargo's progress shown unless `quiet`)
/// and returns the path of binary `bin`.
pub fn build(root: &Path, board: Board, bin: &str, quiet: bool) -> Result<PathBuf, String> {
    let mut cmd = board_cargo(&root.join(board.dir()));
    cmd.args(["build", "--release"]);
    if quiet {
        cmd.arg("--quiet");
    }
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("{} firmware build failed ({status})", board.name()));
    }
    Ok(bin_path(root, board, bin))
}

/// Builds the an386 firmware binaries in release and returns the main one's ELF.
pub fn build_an386(root: &Path) -> Result<PathBuf, String> {
    build(root, Board::An386, AN386_MAIN, true)
}

/// Runs `board`'s firmware exactly as its README says, `cargo run --release` in the board's
/// directory (built if needed; its runner, `run.sh`, is `cargo xtask qemu`), and collects the
/// decoded log lines the runner prints and the firmware's exit code.
pub fn cargo_run(root: &Path, board: Board) -> Result<Run, String> {
    let out = board_cargo(&root.join(board.dir()))
        .args(["run", "--release", "--quiet"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    Ok(Run {
        lines: String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect(),
        code: out.status.code().unwrap_or(-1),
    })
}

/// The ELF of firmware binary `bin` of `board` (after [`build`]).
pub fn bin_path(root: &Path, board: Board, bin: &str) -> PathBuf {
    boards_target_dir(root)
        .join(board.target())
        .join("release")
        .join(bin)
}

/// The ELF of an386 firmware binary `name` (after [`build_an386`]).
pub fn an386_bin(root: &Path, name: &str) -> PathBuf {
    bin_path(root, Board::An386, name)
}

/// Runs an an386 ELF (see [`run`]).
pub fn run_an386(elf: &Path, timeout: Duration, echo: &mut dyn Write) -> Result<Run, String> {
    run(Board::An386, elf, timeout, echo)
}

/// Runs `elf` on `board`'s QEMU machine for at most `timeout`, writing each log line to `echo`
/// as it arrives (defmt frames decoded with the ELF's table).
pub fn run(
    board: Board,
    elf: &Path,
    timeout: Duration,
    echo: &mut dyn Write,
) -> Result<Run, String> {
    run_with(board, elf, &[], timeout, &mut |line| {
        let _ = writeln!(echo, "{line}");
        let _ = echo.flush();
    })
}

/// [`run`] with `extra` QEMU arguments (e.g. `-device loader,...`), handing each log line to
/// `line` as it arrives.
pub fn run_with(
    board: Board,
    elf: &Path,
    extra: &[String],
    timeout: Duration,
    line: &mut dyn FnMut(&str),
) -> Result<Run, String> {
    let bytes = std::fs::read(elf).map_err(|e| format!("{}: {e}", elf.display()))?;
    // Parse the table before starting QEMU: a firmware without defmt symbols is an error here.
    let table = if board.defmt() {
        let table = Table::parse(&bytes)
            .map_err(|e| format!("{}: defmt table: {e}", elf.display()))?
            .ok_or_else(|| format!("{}: no .defmt section", elf.display()))?;
        Some(table)
    } else {
        None
    };
    // Installed when missing (as root; otherwise the error names the command), so a plain
    // `cargo test` on a fresh machine runs the board tests.
    crate::setup::qemu()?;
    let mut qemu = Command::new("qemu-system-arm")
        .args(board.qemu_args())
        .args([
            "-nographic",
            "-semihosting-config",
            "enable=on,target=native",
        ])
        .arg("-kernel")
        .arg(elf)
        .args(extra)
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start qemu-system-arm: {e}"))?;
    let out = qemu.stdout.take().ok_or("no QEMU stdout")?;
    let (tx, rx) = mpsc::channel::<String>();
    // Decode on a thread, so a hung firmware can be stopped at the timeout below.
    let reader = std::thread::spawn(move || match table {
        Some(table) => decode_defmt(&table, out, &tx),
        None => split_lines(out, &tx),
    });
    let start = Instant::now();
    let mut lines = Vec::new();
    let mut timed_out = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(text) => {
                line(&text);
                lines.push(text);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) if start.elapsed() > timeout => {
                let _ = qemu.kill();
                timed_out = true;
                break;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    let status = qemu.wait().map_err(|e| format!("waiting for QEMU: {e}"))?;
    let decoded = reader.join().map_err(|_| "log reader panicked")?;
    // Lines sent after a timeout's break.
    for text in rx.try_iter() {
        line(&text);
        lines.push(text);
    }
    decoded?;
    let code = if timed_out {
        124
    } else {
        status.code().unwrap_or(-1)
    };
    Ok(Run { lines, code })
}

/// Decodes defmt frames from `input` until it ends, sending one line per frame.
fn decode_defmt(
    table: &Table,
    mut input: impl Read,
    tx: &mpsc::Sender<String>,
) -> Result<(), String> {
    let mut decoder = table.new_stream_decoder();
    let mut buf = [0u8; 4096];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading QEMU's output: {e}")),
        };
        decoder.received(&buf[..n]);
        loop {
            match decoder.decode() {
                Ok(frame) => {
                    let msg = frame.display_message().to_string();
                    let line = match frame.level() {
                        Some(level) => format!("{} {msg}", level.as_str().to_uppercase()),
                        None => msg,
                    };
                    let _ = tx.send(line);
                }
                Err(DecodeError::UnexpectedEof) => break,
                // rzcobs resynchronises at the next frame boundary.
                Err(DecodeError::Malformed) if table.encoding().can_recover() => {
                    let _ = tx.send("(malformed defmt frame skipped)".into());
                }
                Err(DecodeError::Malformed) => return Err("malformed defmt frame".into()),
            }
        }
    }
}

/// Splits plain text from `input` into lines.
fn split_lines(mut input: impl Read, tx: &mpsc::Sender<String>) -> Result<(), String> {
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = match input.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading QEMU's output: {e}")),
        };
        if n == 0 {
            if !pending.is_empty() {
                let _ = tx.send(String::from_utf8_lossy(&pending).into_owned());
            }
            return Ok(());
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(i) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=i).collect();
            let text = String::from_utf8_lossy(&line[..i]);
            let _ = tx.send(text.trim_end_matches('\r').to_string());
        }
    }
}
