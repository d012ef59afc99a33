//! Building the QEMU board firmware (`boards/qemu-an386`) and running it under
//! `qemu-system-arm -machine mps2-an386`, its defmt log decoded by `defmt-print`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The firmware crate, relative to the repository root.
pub const AN386_DIR: &str = "boards/qemu-an386";
/// The firmware's release binaries, relative to the firmware crate.
const AN386_BINS: &str = "target/thumbv7em-none-eabihf/release";
/// The main firmware binary (parity cases and demo).
pub const AN386_MAIN: &str = "edgekv-qemu-an386";
/// The binary that faults on purpose (its HardFault handler must exit 3).
pub const AN386_HARDFAULT: &str = "hardfault";

/// The repository root (the parent of `host-tests/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
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
}

/// Why a firmware run could not happen, with what to do about it.
pub fn missing_tools() -> Option<String> {
    let have = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    if !have("qemu-system-arm") {
        return Some(
            "qemu-system-arm not found: sudo apt-get install -y qemu-system-arm \
             (run it twice if the first attempt fails on a removed package)"
                .into(),
        );
    }
    if !have("defmt-print") {
        return Some("defmt-print not found: cargo install --locked defmt-print".into());
    }
    None
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

/// Builds the an386 firmware binaries in release and returns the main one's ELF (see
/// [`an386_bin`] for the others).
pub fn build_an386(root: &Path) -> Result<PathBuf, String> {
    let dir = root.join(AN386_DIR);
    let status = board_cargo(&dir)
        .args(["build", "--release", "--quiet"])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("firmware build failed ({status})"));
    }
    Ok(an386_bin(root, AN386_MAIN))
}

/// The ELF of firmware binary `name` (after [`build_an386`]).
pub fn an386_bin(root: &Path, name: &str) -> PathBuf {
    root.join(AN386_DIR).join(AN386_BINS).join(name)
}

/// Runs `elf` on QEMU mps2-an386 for at most `timeout`, echoing each decoded line to `echo`.
pub fn run_an386(elf: &Path, timeout: Duration, echo: &mut dyn Write) -> Result<Run, String> {
    if let Some(why) = missing_tools() {
        return Err(why);
    }
    let mut qemu = Command::new("qemu-system-arm")
        .args(["-cpu", "cortex-m4", "-machine", "mps2-an386", "-nographic"])
        .args(["-semihosting-config", "enable=on,target=native", "-kernel"])
        .arg(elf)
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start qemu-system-arm: {e}"))?;
    let qemu_out = qemu.stdout.take().ok_or("no QEMU stdout")?;
    let mut decoder = Command::new("defmt-print")
        .arg("-e")
        .arg(elf)
        .stdin(qemu_out)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start defmt-print: {e}"))?;
    let decoded = decoder.stdout.take().ok_or("no defmt-print stdout")?;
    // Read the log on a thread, so the timeout below can stop a hung firmware.
    let reader = std::thread::spawn(move || {
        BufReader::new(decoded)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    let start = Instant::now();
    let code = loop {
        match qemu.try_wait() {
            Ok(Some(status)) => break status.code().unwrap_or(-1),
            Ok(None) if start.elapsed() > timeout => {
                let _ = qemu.kill();
                let _ = qemu.wait();
                break 124;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("waiting for QEMU: {e}")),
        }
    };
    let _ = decoder.wait();
    let lines = reader.join().map_err(|_| "log reader panicked")?;
    for l in &lines {
        let _ = writeln!(echo, "{l}");
    }
    Ok(Run { lines, code })
}
