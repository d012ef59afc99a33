//! The `fuzz` stage (and `cargo xtask fuzz SECONDS`): every cargo-fuzz target built, then run
//! from its committed seed corpus.

use std::path::Path;
use std::process::Command;

use edgekv_xtask::{qemu, setup};

/// The cargo-fuzz targets in `fuzz/`.
const FUZZ_TARGETS: [&str; 7] = [
    "cache_ops",
    "snapshot_parse",
    "quant_roundtrip",
    "capi_calls",
    "gguf_parse",
    "chat_script",
    "snapshot_store",
];

/// How `cargo fuzz` builds the targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FuzzBuild {
    /// cargo-fuzz's default: optimized (one codegen unit), ASan, debug assertions. For long runs
    /// (`cargo xtask fuzz SECONDS`): about 6.5 minutes to build on two cores, then ~10⁴ executions
    /// a second.
    Optimized,
    /// The CI smoke run: unoptimized with debug assertions and overflow checks (`--dev`), ASan
    /// for `capi_calls` only (the target that drives unsafe code, through raw pointers; the
    /// others fuzz safe Rust, whose unsafe modules Miri checks). Coverage instrumentation makes
    /// the optimizer slow on the cache's generic code: every optimized build measured over six
    /// minutes (opt-level 1 or 3, 1 or 16 codegen units, with or without ASan), this one about
    /// 1.5 minutes; a 10 s run still replays each committed corpus and mutates beyond it.
    Smoke,
}

/// The cargo-fuzz arguments that pick how and where target `t` is built: `capi_calls` (feature
/// `capi`, the package's default) in its own target directory, the others without the C ABI
/// crate. Each target waits for all of its package's dependencies, and the C ABI crate alone
/// takes as long as the slowest target, so the two builds run side by side.
fn fuzz_build_args(t: &str, how: FuzzBuild) -> Vec<&'static str> {
    let mut args = if t == "capi_calls" {
        vec!["--target-dir", "target/capi"]
    } else {
        vec!["--no-default-features"]
    };
    if how == FuzzBuild::Smoke {
        args.push("--dev");
        if t != "capi_calls" {
            args.extend(["--sanitizer", "none"]);
        }
    }
    args
}

/// Starts `cargo +NIGHTLY fuzz args…` in `fuzz/`, echoing it.
fn spawn_fuzz(dir: &Path, args: &[&str]) -> Result<std::process::Child, String> {
    eprintln!("==> (cd fuzz && cargo {})", args.join(" "));
    Command::new("cargo")
        .current_dir(dir)
        .args(args)
        .spawn()
        .map_err(|e| format!("cannot start cargo fuzz: {e}"))
}

/// Waits for every named child; the first failure is returned after all have ended.
fn wait_all(children: Vec<(&str, std::process::Child)>, what: &str) -> Result<(), String> {
    let mut failed = Vec::new();
    for (name, mut child) in children {
        match child.wait() {
            Ok(status) if status.success() => {}
            Ok(status) => failed.push(format!("{what} {name} failed ({status})")),
            Err(e) => failed.push(format!("{what} {name}: {e}")),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// Every cargo-fuzz target for `secs` seconds from its committed seed corpus (`fuzz/corpus/<t>`,
/// read only; new inputs go to `fuzz/target/corpus/<t>`), two at a time, built as `how` says.
pub fn fuzz(secs: u32, how: FuzzBuild) -> Result<(), String> {
    let dir = qemu::repo_root().join("fuzz");
    let toolchain = format!("+{}", setup::NIGHTLY);
    let max_time = format!("-max_total_time={secs}");
    // Built first, in two cargo calls side by side (see `fuzz_build_args`); then run two at a
    // time: libFuzzer is single-threaded and the machines have two cores.
    let build = |targets: &[&str], of: &str| {
        let mut args = vec![toolchain.as_str(), "fuzz", "build"];
        args.extend(targets);
        args.extend(fuzz_build_args(of, how));
        spawn_fuzz(&dir, &args)
    };
    // Both builds create directories under `fuzz/target`: on a fresh clone each cargo making
    // `target` (and `target/capi`) itself raced with the other, and one lost its temporary
    // directory ("No such file or directory … fuzz/target/capi…"). Made here first.
    let capi_dir = dir.join("target/capi");
    std::fs::create_dir_all(&capi_dir).map_err(|e| format!("{}: {e}", capi_dir.display()))?;
    let builds = vec![
        ("capi_calls", build(&["capi_calls"], "capi_calls")?),
        ("the other targets", build(&[], "cache_ops")?),
    ];
    wait_all(builds, "cargo fuzz build")?;
    for pair in FUZZ_TARGETS.chunks(2) {
        let mut running = Vec::new();
        for &t in pair {
            let scratch = dir.join("target/corpus").join(t);
            std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
            let scratch = scratch.to_string_lossy().into_owned();
            let seeds = format!("corpus/{t}");
            let mut args = vec![toolchain.as_str(), "fuzz", "run"];
            args.extend(fuzz_build_args(t, how));
            args.extend([t, scratch.as_str()]);
            if dir.join(&seeds).is_dir() {
                args.push(&seeds);
            }
            args.extend(["--", max_time.as_str()]);
            running.push((t, spawn_fuzz(&dir, &args)?));
        }
        wait_all(running, "fuzz").map_err(|e| format!("{e}: see fuzz/artifacts/"))?;
    }
    Ok(())
}
