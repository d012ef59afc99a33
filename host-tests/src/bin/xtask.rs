//! Task runner (the xtask pattern), reached through the cargo aliases in `.cargo/config.toml`:
//!
//! - `cargo demo` — the main job: builds the Cortex-M4 firmware (`boards/qemu-an386`) and runs it
//!   on QEMU mps2-an386: the parity cases, then a multi-turn session. `cargo demo --host` runs the
//!   host demo (SmolLM2-shaped session with fork, truncate and contiguous growth) instead.
//! - `cargo test-all` — every check CI runs: rustfmt, clippy, docs, no_std target builds (with and
//!   without `defmt`, the HAL also with `cortex-m`), Miri on the core and the HAL, then all tests;
//!   the output ends with nextest's summary.
//!   `--no-miri` and `--no-targets` skip the slow parts for quick local runs (`--no-targets` also
//!   skips the board firmware builds and the micro:bit QEMU run); `--no-model` skips the real-model
//!   harness in `model/` (which fetches SmolLM2-135M, 98 MB, on first use).
//! - `cargo xtask fuzz [SECONDS]` — every cargo-fuzz target in `fuzz/` from its seed corpus
//!   (default 30 s each; `cargo test-all` runs this unless `--no-fuzz`).
//! - `cargo xtask size` — .text / .data / .bss of each board firmware and the core's share.

use std::process::{Command, ExitCode};
use std::time::Instant;

/// no_std targets the core must build for.
const TARGETS: [&str; 4] = [
    "thumbv7em-none-eabihf",
    "thumbv6m-none-eabi",
    "thumbv8m.main-none-eabihf",
    "riscv32imac-unknown-none-elf",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flags: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let result = match args.first().map(String::as_str) {
        Some("demo") if flags == ["--host"] => {
            edgekv_host_tests::demo::run(&mut std::io::stdout()).map_err(|e| e.to_string())
        }
        Some("demo") if flags.is_empty() => board_demo(),
        Some("test") => test(&flags),
        Some("fuzz") => match flags.as_slice() {
            [] => fuzz(30),
            [secs] => secs
                .parse()
                .map_err(|_| format!("fuzz: not a number of seconds: {secs}"))
                .and_then(fuzz),
            _ => Err("usage: cargo xtask fuzz [SECONDS]".into()),
        },
        Some("size") => edgekv_host_tests::size::report(&edgekv_host_tests::qemu::repo_root())
            .map(|table| println!("{table}")),
        _ => Err(
            "usage: cargo xtask <demo [--host] | test [--no-miri] [--no-targets] [--no-fuzz] [--no-model] | fuzz [SECONDS] | size>"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The cargo-fuzz targets in `fuzz/`.
const FUZZ_TARGETS: [&str; 4] = [
    "cache_ops",
    "snapshot_parse",
    "quant_roundtrip",
    "capi_calls",
];

/// Runs every fuzz target for `secs` seconds from its committed seed corpus (`fuzz/corpus/<t>`,
/// read only; new inputs go to `fuzz/target/corpus/<t>`). Needs nightly and cargo-fuzz.
fn fuzz(secs: u32) -> Result<(), String> {
    let dir = edgekv_host_tests::qemu::repo_root().join("fuzz");
    for t in FUZZ_TARGETS {
        let scratch = dir.join("target/corpus").join(t);
        std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
        let start = Instant::now();
        eprintln!("\n==> fuzz {t} for {secs} s");
        let mut cmd = Command::new("cargo");
        cmd.current_dir(&dir)
            .env_remove("CARGO_TARGET_DIR")
            .args(["+nightly", "fuzz", "run", t])
            .arg(&scratch);
        if dir.join("corpus").join(t).is_dir() {
            cmd.arg(format!("corpus/{t}"));
        }
        let status = cmd
            .args(["--", &format!("-max_total_time={secs}")])
            .status()
            .map_err(|e| format!("fuzz {t}: cannot start cargo: {e}"))?;
        eprintln!("<== fuzz {t}: {:.1} s", start.elapsed().as_secs_f64());
        if !status.success() {
            return Err(format!(
                "fuzz {t} failed ({status}): see fuzz/artifacts/{t}"
            ));
        }
    }
    Ok(())
}

/// Builds the QEMU firmware and runs it, streaming its decoded log.
fn board_demo() -> Result<(), String> {
    use edgekv_host_tests::qemu;
    if let Some(why) = qemu::missing_tools() {
        return Err(why);
    }
    let root = qemu::repo_root();
    eprintln!("building {} (release) ...", qemu::AN386_DIR);
    let elf = qemu::build_an386(&root)?;
    eprintln!("running on qemu-system-arm -machine mps2-an386 ...");
    let run = qemu::run_an386(
        &elf,
        std::time::Duration::from_secs(300),
        &mut std::io::stdout(),
    )?;
    match run.code {
        0 => Ok(()),
        124 => Err("firmware timed out".into()),
        c => Err(format!("firmware exited with {c}")),
    }
}

/// Runs one command, echoing it and its duration, and fails on a non-zero exit.
fn run(desc: &str, program: &str, args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    let start = Instant::now();
    let result = run_quiet(desc, program, args, env);
    eprintln!("<== {desc}: {:.1} s", start.elapsed().as_secs_f64());
    result
}

/// Runs one command, echoing it; prints nothing after it, so its own output ends the log.
fn run_quiet(desc: &str, program: &str, args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    eprintln!("\n==> {desc}: {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .status()
        .map_err(|e| format!("{desc}: cannot start {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{desc} failed ({status})"))
    }
}

/// Runs cargo with `args` inside board crate `dir` (its own workspace and `.cargo/config.toml`),
/// without the host build's target settings.
fn run_board(desc: &str, dir: &str, args: &[&str]) -> Result<(), String> {
    let start = Instant::now();
    eprintln!("\n==> {desc}: (cd {dir}) cargo {}", args.join(" "));
    let root = edgekv_host_tests::qemu::repo_root();
    let status = edgekv_host_tests::qemu::board_cargo(&root.join(dir))
        .args(args)
        .status()
        .map_err(|e| format!("{desc}: cannot start cargo: {e}"))?;
    eprintln!("<== {desc}: {:.1} s", start.elapsed().as_secs_f64());
    if status.success() {
        Ok(())
    } else {
        Err(format!("{desc} failed ({status})"))
    }
}

/// The real-model harness (`model/`, its own workspace): fetches SmolLM2-135M (98 MB, cached
/// outside the repository), then rustfmt, clippy and its tests (release builds: the forward pass
/// is too slow unoptimized).
fn model_tests() -> Result<(), String> {
    let root = edgekv_host_tests::qemu::repo_root();
    let start = Instant::now();
    eprintln!("\n==> fetch SmolLM2-135M: model/fetch-model.sh");
    let status = Command::new("bash")
        .arg(root.join("model/fetch-model.sh"))
        .status()
        .map_err(|e| format!("cannot run model/fetch-model.sh: {e}"))?;
    eprintln!(
        "<== fetch SmolLM2-135M: {:.1} s",
        start.elapsed().as_secs_f64()
    );
    if !status.success() {
        return Err(format!("model/fetch-model.sh failed ({status})"));
    }
    run_board("model: rustfmt", "model", &["fmt", "--", "--check"])?;
    run_board(
        "model: clippy",
        "model",
        &[
            "clippy",
            "--release",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    run_board("model: tests", "model", &["test", "--release"])
}

fn test(flags: &[&str]) -> Result<(), String> {
    for f in flags {
        if !["--no-miri", "--no-targets", "--no-fuzz", "--no-model"].contains(f) {
            return Err(format!("unknown flag {f}"));
        }
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let c = cargo.as_str();
    run("rustfmt", c, &["fmt", "--all", "--", "--check"], &[])?;
    run(
        "clippy",
        c,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    run(
        "clippy (core, all features)",
        c,
        &[
            "clippy",
            "-p",
            "edgekv",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    run(
        "rustdoc",
        c,
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    if !flags.contains(&"--no-targets") {
        for t in TARGETS {
            for pkg in ["edgekv", "edgekv-hal"] {
                run(
                    &format!("build {pkg} for {t}"),
                    c,
                    &["build", "-p", pkg, "--target", t],
                    &[],
                )?;
                run(
                    &format!("build {pkg} for {t} with defmt"),
                    c,
                    &["build", "-p", pkg, "--target", t, "--features", "defmt"],
                    &[],
                )?;
            }
            // The C ABI with the Ethos-U hooks, and its no_std static library.
            run(
                &format!("build edgekv-hal for {t} with capi,ethosu"),
                c,
                &[
                    "build",
                    "-p",
                    "edgekv-hal",
                    "--target",
                    t,
                    "--features",
                    "capi,ethosu",
                ],
                &[],
            )?;
            run(
                &format!("build edgekv-capi (no_std staticlib) for {t}"),
                c,
                &[
                    "build",
                    "-p",
                    "edgekv-capi",
                    "--no-default-features",
                    "--features",
                    "ethosu",
                    "--target",
                    t,
                ],
                &[],
            )?;
            // The Cortex-M7/M55 D-cache maintenance (ARMv7E-M and ARMv8-M Mainline only).
            if t.starts_with("thumbv7em") || t.starts_with("thumbv8m.main") {
                run(
                    &format!("build edgekv-hal for {t} with cortex-m"),
                    c,
                    &[
                        "build",
                        "-p",
                        "edgekv-hal",
                        "--target",
                        t,
                        "--features",
                        "cortex-m",
                    ],
                    &[],
                )?;
            }
            // The parity cases the board firmware runs.
            run(
                &format!("build edgekv-parity for {t}"),
                c,
                &["build", "-p", "edgekv-parity", "--target", t],
                &[],
            )?;
        }
        // Board firmware (boards/qemu-an386 is built and run by host-tests' board_parity).
        run_board(
            "stm32h7 firmware",
            "boards/stm32h7",
            &["build", "--release"],
        )?;
        run_board(
            "stm32h7 firmware with embedded-alloc",
            "boards/stm32h7",
            &["build", "--release", "--features", "heap"],
        )?;
        run_board(
            "microbit firmware on QEMU (Cortex-M0)",
            "boards/microbit",
            &["run", "--release"],
        )?;
    }
    if !flags.contains(&"--no-miri") {
        // rustup's proxy picks the toolchain from `+nightly`; CARGO points at stable's cargo.
        run(
            "miri (core)",
            "cargo",
            &[
                "+nightly",
                "miri",
                "test",
                "-p",
                "edgekv",
                "--features",
                "std",
            ],
            &[("MIRIFLAGS", "-Zmiri-strict-provenance")],
        )?;
        run(
            "miri (hal: views, simulated cache, software NPU, C ABI, Ethos-U hooks)",
            "cargo",
            &[
                "+nightly",
                "miri",
                "test",
                "-p",
                "edgekv-hal",
                "--features",
                "sim,capi,ethosu",
            ],
            &[("MIRIFLAGS", "-Zmiri-strict-provenance")],
        )?;
    }
    if !flags.contains(&"--no-fuzz") {
        fuzz(30)?;
    }
    run("doctests", c, &["test", "--workspace", "--doc"], &[])?;
    if !flags.contains(&"--no-model") {
        model_tests()?;
    }
    // Last, so the output ends with the test runner's summary.
    run_quiet(
        "tests",
        c,
        &["nextest", "run", "--workspace", "--no-fail-fast"],
        &[],
    )
}
