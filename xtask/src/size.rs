//! Size report of the board firmware (`cargo xtask size`): builds every board in release and
//! tabulates its sections and the core's share of `.text`.
//!
//! Tools: `llvm-size` and `llvm-nm` from the toolchain's `llvm-tools` component
//! (`rustup component add llvm-tools`), found under
//! `$(rustc --print sysroot)/lib/rustlib/<host>/bin/`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Goal for the core (int8 + prefix + attention, `small-code`, opt-level "s") on Cortex-M4:
/// `.text` bytes (issue 19 item 6; the first goal, 24 KiB, was for any build).
pub const CORE_TEXT_GOAL: u64 = 12 * 1024;

/// One firmware build the report covers.
struct Build {
    /// Row label.
    name: &'static str,
    /// Board directory under the repository root.
    dir: &'static str,
    /// A missing or failing build is reported, not an error.
    optional: bool,
    /// Extra cargo arguments (feature selection).
    args: &'static [&'static str],
    /// Extra environment (profile overrides) and the target directory they build into.
    env: &'static [(&'static str, &'static str)],
    target_dir: Option<&'static str>,
    /// The Cortex-M4 core goal's configuration (thumbv7em: without `-C target-cpu`, M4F and M7
    /// builds are the same code).
    m4_goal: bool,
}

const BUILDS: [Build; 6] = [
    // The Cortex-M55 LLM chat (edgekv + edgekv-llm, Helium on).
    Build {
        name: "qemu-an547",
        dir: "boards/qemu-an547",
        optional: true,
        args: &[],
        env: &[],
        target_dir: None,
        m4_goal: false,
    },
    Build {
        name: "qemu-an386",
        dir: "boards/qemu-an386",
        optional: true,
        args: &[],
        env: &[],
        target_dir: None,
        m4_goal: false,
    },
    Build {
        name: "stm32h7",
        dir: "boards/stm32h7",
        optional: false,
        args: &[],
        env: &[],
        target_dir: None,
        m4_goal: false,
    },
    // The same firmware optimized for size: what the core costs when a board asks for small code.
    Build {
        name: "stm32h7 opt=s",
        dir: "boards/stm32h7",
        optional: false,
        args: &[],
        env: &[("CARGO_PROFILE_RELEASE_OPT_LEVEL", "s")],
        target_dir: Some("target/size-opt-s"),
        m4_goal: false,
    },
    // The goal's configuration: int8 pages only (+ prefix + attention), small attention code,
    // optimized for size.
    Build {
        name: "stm32h7 int8 small opt=s",
        dir: "boards/stm32h7",
        optional: false,
        args: &["--no-default-features", "--features", "small-code"],
        env: &[("CARGO_PROFILE_RELEASE_OPT_LEVEL", "s")],
        target_dir: Some("target/size-int8-small"),
        m4_goal: true,
    },
    Build {
        name: "microbit",
        dir: "boards/microbit",
        optional: false,
        args: &[],
        env: &[],
        target_dir: None,
        m4_goal: false,
    },
];

/// Section sizes of one ELF, in bytes.
#[derive(Default)]
struct Sections {
    /// `.text`.
    text: u64,
    /// `.rodata` and `.vector_table`.
    rodata: u64,
    /// `.data` (flash and RAM).
    data: u64,
    /// `.bss` and cortex-m-rt's `.uninit`.
    bss: u64,
    /// Other allocated sections: NOLOAD arena sections such as `.axisram` or `.psram`.
    other: Vec<(String, u64)>,
}

/// Builds each board firmware in release and returns a table of `.text`, `.rodata`, `.data` and
/// `.bss` per firmware, the core's `.text` share and the Cortex-M4 goal check.
///
/// `root` is the repository root. `boards/qemu-an386` may be missing or fail to build: its row
/// then says "not built". A failing `boards/stm32h7` or `boards/microbit` build is an `Err`, as
/// are missing LLVM tools.
pub fn report(root: &Path) -> Result<String, String> {
    let bin = llvm_bin_dir()?;
    let (size, nm) = (bin.join("llvm-size"), bin.join("llvm-nm"));
    if !size.exists() || !nm.exists() {
        return Err(format!(
            "{} not found: rustup component add llvm-tools",
            size.display()
        ));
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<30} {:>8} {:>8} {:>6} {:>7} {:>10}  other allocated sections",
        "firmware", ".text", ".rodata", ".data", ".bss", "core .text"
    );
    let mut m4_core: Vec<(String, u64)> = Vec::new();
    for b in &BUILDS {
        let elfs = match build(root, b) {
            Ok(elfs) => elfs,
            Err(why) if b.optional => {
                let _ = writeln!(out, "{:<30} not built: {why}", b.name);
                continue;
            }
            Err(why) => return Err(format!("{}: {why}", b.name)),
        };
        for (bin_name, elf) in &elfs {
            let label = if elfs.len() == 1 {
                b.name.to_string()
            } else {
                format!("{}/{}", b.name, bin_name)
            };
            let s = sections(&size, elf)?;
            let core = core_text(&nm, elf)?;
            let other: Vec<String> = s.other.iter().map(|(n, v)| format!("{n} {v}")).collect();
            let _ = writeln!(
                out,
                "{:<30} {:>8} {:>8} {:>6} {:>7} {:>10}  {}",
                label,
                s.text,
                s.rodata,
                s.data,
                s.bss,
                core,
                other.join(", ")
            );
            // Binaries without the core (e.g. a fault test) say nothing about the goal.
            if b.m4_goal && core > 0 {
                m4_core.push((label, core));
            }
        }
    }
    let _ = writeln!(
        out,
        "\ncore .text = sizes of text symbols named edgekv::* (llvm-nm); code the linker inlined \
         into firmware functions counts as firmware."
    );
    let verdict = goal_verdict(&m4_core).map_or_else(|e| e, |t| format!("goal met: {t}"));
    let _ = writeln!(out, "{verdict}");
    Ok(out)
}

/// Builds the goal's configuration alone (the STM32H7 firmware, int8 pages, `small-code`,
/// opt-level "s") and checks the core's `.text` against [`CORE_TEXT_GOAL`]: `Ok` with the
/// verdict line when it is met, `Err` with the same line when not (the `boards` stage).
pub fn check_core_goal(root: &Path) -> Result<String, String> {
    let nm = llvm_bin_dir()?.join("llvm-nm");
    let b = BUILDS
        .iter()
        .find(|b| b.m4_goal)
        .ok_or("no build carries the goal")?;
    let elfs = build(root, b).map_err(|why| format!("{}: {why}", b.name))?;
    let mut cores = Vec::new();
    for (bin, elf) in &elfs {
        cores.push((format!("{} {bin}", b.name), core_text(&nm, elf)?));
    }
    goal_verdict(&cores)
}

/// The goal's verdict over `(label, core .text bytes)` of each binary: `Err` when one is over
/// [`CORE_TEXT_GOAL`] or when none holds the core (0 bytes: binaries without it say nothing).
fn goal_verdict(cores: &[(String, u64)]) -> Result<String, String> {
    let lines: Vec<String> = cores
        .iter()
        .filter(|(_, core)| *core > 0)
        .map(|(label, core)| {
            format!(
                "{label}: core .text {core} B, goal <= {CORE_TEXT_GOAL} B ({:.1} KiB of {:.1})",
                *core as f64 / 1024.0,
                CORE_TEXT_GOAL as f64 / 1024.0
            )
        })
        .collect();
    if lines.is_empty() {
        return Err("no binary holds the core".into());
    }
    let text = lines.join("\n");
    if cores.iter().all(|(_, core)| *core <= CORE_TEXT_GOAL) {
        Ok(text)
    } else {
        Err(format!("goal NOT met: {text}"))
    }
}

/// `$(rustc --print sysroot)/lib/rustlib/<host>/bin`.
fn llvm_bin_dir() -> Result<PathBuf, String> {
    let sysroot = capture(Command::new("rustc").args(["--print", "sysroot"]))?;
    let version = capture(Command::new("rustc").arg("-vV"))?;
    let host = version
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .ok_or("rustc -vV printed no host")?;
    Ok(Path::new(sysroot.trim())
        .join("lib/rustlib")
        .join(host.trim())
        .join("bin"))
}

/// Builds one board; returns `(binary name, ELF path)` of every executable it produced.
fn build(root: &Path, b: &Build) -> Result<Vec<(String, PathBuf)>, String> {
    let dir = root.join(b.dir);
    if !dir.join("Cargo.toml").exists() {
        return Err(format!("{} does not exist", b.dir));
    }
    // The board's own .cargo/config.toml picks the target and link flags.
    let mut cmd = crate::qemu::board_cargo(&dir);
    cmd.args([
        "build",
        "--release",
        "--message-format=json-render-diagnostics",
    ]);
    cmd.args(b.args);
    if let Some(t) = b.target_dir {
        cmd.args(["--target-dir", t]);
    }
    for (k, v) in b.env {
        cmd.env(k, v);
    }
    let output = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with("error"))
            .unwrap_or("cargo build failed");
        return Err(last.trim().to_string());
    }
    // Cargo prints one JSON object per line; compiler-artifact lines of binaries carry
    // `"executable":"<path>"` and the target's `"name":"<bin>"`. The paths are plain Unix paths
    // (no JSON escapes), so a string search is enough and keeps serde out of host-tests.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut elfs = Vec::new();
    for line in stdout
        .lines()
        .filter(|l| l.contains(r#""reason":"compiler-artifact""#))
    {
        if let (Some(exe), Some(name)) = (json_str(line, "executable"), json_str(line, "name")) {
            elfs.push((name.to_string(), PathBuf::from(exe)));
        }
    }
    if elfs.is_empty() {
        return Err("no executable in cargo's output".into());
    }
    Ok(elfs)
}

/// The string value of the first `"key":"…"` in a JSON line (`None` for `null` or absent).
fn json_str<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":\"");
    let start = line.find(&pat)? + pat.len();
    let len = line[start..].find('"')?;
    Some(&line[start..start + len])
}

/// Section sizes from `llvm-size -A` (SysV format: one `name size addr` line per section).
/// Berkeley format is not used because it folds `.rodata` into text and NOLOAD arenas into bss.
/// Non-allocated sections (debug info, `.defmt`, attributes) are skipped by name: their address
/// is 0, but so is the flash of the micro:bit, so the address cannot tell them apart.
fn sections(size: &Path, elf: &Path) -> Result<Sections, String> {
    let text = capture(Command::new(size).arg("-A").arg(elf))?;
    let mut s = Sections::default();
    for line in text.lines().skip(2) {
        let mut f = line.split_whitespace();
        let (Some(name), Some(bytes)) = (f.next(), f.next().and_then(|v| v.parse::<u64>().ok()))
        else {
            continue;
        };
        let skipped = [
            ".debug", ".comment", ".ARM.", ".defmt", ".sym", ".str", ".shstr",
        ];
        if bytes == 0 || name == "Total" || skipped.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        match name {
            ".text" => s.text += bytes,
            ".rodata" | ".vector_table" => s.rodata += bytes,
            ".data" => s.data += bytes,
            ".bss" | ".uninit" => s.bss += bytes,
            _ => s.other.push((name.to_string(), bytes)),
        }
    }
    Ok(s)
}

/// Bytes of `.text` symbols belonging to the core: `llvm-nm --print-size --demangle
/// --defined-only` lists every function with its size; those of type `t`/`T` whose demangled
/// path starts with `edgekv::` (inherent items, generic instances included, since a
/// monomorphized function keeps its defining crate's path) or `<edgekv::` / `_$LT$edgekv..`
/// (trait impls on core types, as llvm-nm prints them) are summed. `edgekv_hal::` and the boards' `edgekv_*` crates do not match. This is a
/// lower bound: with LTO, core functions inlined into a board's functions count as the board's.
fn core_text(nm: &Path, elf: &Path) -> Result<u64, String> {
    let text = capture(
        Command::new(nm)
            .args(["--print-size", "--demangle", "--defined-only"])
            .arg(elf),
    )?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let mut f = line.splitn(4, ' ');
            let (_addr, size, kind, name) = (f.next()?, f.next()?, f.next()?, f.next()?);
            // llvm-nm prints a trait impl's legacy symbol half-demangled: `_$LT$edgekv..T$u20$as…`.
            let core = name.starts_with("edgekv::")
                || name.starts_with("<edgekv::")
                || name.starts_with("_$LT$edgekv..");
            (matches!(kind, "t" | "T") && core).then(|| u64::from_str_radix(size, 16).ok())?
        })
        .sum())
}

/// Runs a command and returns its stdout, or its stderr as the error.
fn capture(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{:?} failed: {}",
            cmd.get_program(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_fields() {
        let line = r#"{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"fw"},"executable":"/t/fw","fresh":true}"#;
        assert_eq!(json_str(line, "executable"), Some("/t/fw"));
        assert_eq!(json_str(line, "name"), Some("fw"));
        assert_eq!(json_str(r#"{"executable":null}"#, "executable"), None);
    }

    #[test]
    fn goal_verdicts() {
        let at = |core| vec![("fw a".to_string(), 0), ("fw b".to_string(), core)];
        assert!(goal_verdict(&at(CORE_TEXT_GOAL)).is_ok());
        let over = goal_verdict(&at(CORE_TEXT_GOAL + 1)).unwrap_err();
        assert!(
            over.starts_with("goal NOT met: fw b: core .text 12289 B"),
            "{over}"
        );
        assert!(goal_verdict(&at(0)).is_err(), "no binary with the core");
        assert!(goal_verdict(&[]).is_err());
    }

    /// Builds the firmware and prints the report (slow: `cargo test -p edgekv-host-tests --lib
    /// size -- --ignored --nocapture`).
    #[test]
    #[ignore = "builds every board firmware"]
    fn print_report() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        println!("{}", report(&root).unwrap());
    }
}
