//! The stages of `cargo test-all`, in the order they run. The last, `tests`, is nextest over
//! the workspace; the stage table is printed just before it so its summary ends the log.

use std::path::Path;

use edgekv_xtask::qemu::{self, Board};
use edgekv_xtask::setup;
use edgekv_xtask::stages::Stages;

use crate::cmd::{board, cargo, run_in};
use crate::fuzz::{FuzzBuild, fuzz};
use crate::miri::miri;

/// Every stage name, in running order (those of [`STAGE_NOTES`]).
pub const STAGES: [&str; 13] = {
    let mut names = [""; 13];
    let mut i = 0;
    while i < names.len() {
        names[i] = STAGE_NOTES[i].0;
        i += 1;
    }
    names
};

/// Every stage in running order: what it does and roughly how long it takes on a fresh 2-core machine (printed as the
/// stage starts; CI's whole run is about 40 minutes).
pub const STAGE_NOTES: [(&str, &str); 13] = [
    (
        "setup",
        "rustup components and targets, the pinned nightly with Miri, the declared rust-version's toolchain, cargo-fuzz, QEMU: about 1 minute",
    ),
    ("fmt", "rustfmt --check: a few seconds"),
    (
        "clippy",
        "clippy -D warnings over the workspace: about 3 minutes (it compiles the dependencies first)",
    ),
    ("doc", "rustdoc -D warnings: about 1 minute"),
    (
        "package",
        "cargo publish --dry-run of the four published crates, then the no_std crates with the declared rust-version: about 2 minutes",
    ),
    (
        "no-std",
        "the libraries linted (clippy) for four no_std targets, the C ABI built for two: about 3 minutes",
    ),
    (
        "boards",
        "every board firmware built (the STM32H7 heap variant linted), the micro:bit's run, the Cortex-M4 core's 12 KiB size goal checked, the call graphs checked for recursion: about 6 minutes",
    ),
    (
        "miri",
        "Miri on the modules with unsafe code and the cache code over their arenas, three processes side by side: about 3 minutes",
    ),
    (
        "fuzz",
        "every cargo-fuzz target built, then run 10 s each: about 3 minutes",
    ),
    ("doctests", "the workspace's doctests: about 2 minutes"),
    (
        "model",
        "model/: fetch SmolLM2-135M and Gemma 3 270M once, fmt, clippy, release tests: about 5 minutes",
    ),
    (
        "aarch64",
        "aarch64 Linux under qemu-aarch64: the libraries' unit tests, the forward pass's logit digests, the parity digests against a native run, the C programs against the static and shared libraries: about 5 minutes",
    ),
    (
        "tests",
        "nextest over the workspace, QEMU boards included: about 8 minutes",
    ),
];

/// The note of stage `name` in [`STAGE_NOTES`].
fn note(name: &str) -> &'static str {
    STAGE_NOTES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, what)| what)
}

/// The crates published for users (`edgekv = "0.1"` in a firmware's Cargo.toml).
const PUBLISHED: [&str; 4] = ["edgekv", "edgekv-hal", "edgekv-capi", "edgekv-llm"];

/// no_std targets the libraries must build for.
const TARGETS: [&str; 4] = [
    "thumbv7em-none-eabihf",
    "thumbv6m-none-eabi",
    "thumbv8m.main-none-eabihf",
    "riscv32imac-unknown-none-elf",
];

/// Everything a fresh machine needs for every stage.
pub fn setup() -> Result<(), String> {
    setup::components(&["rustfmt", "clippy", "llvm-tools"])?;
    let mut targets = TARGETS.to_vec();
    targets.extend(Board::ALL.map(Board::target));
    targets.sort_unstable();
    targets.dedup();
    setup::targets(&targets)?;
    setup::nightly()?;
    setup::msrv_toolchain(&qemu::repo_root(), MSRV_TARGET)?;
    setup::cargo_fuzz()?;
    setup::cargo_nextest()?;
    setup::qemu()
}

/// Every stage `stages` selects; the stage table goes out just before the final nextest run.
pub fn all(stages: &mut Stages) -> Result<(), String> {
    stages.run_noted("setup", note("setup"), setup)?;
    stages.run_noted("fmt", note("fmt"), || {
        cargo(&["fmt", "--all", "--", "--check"], &[])?;
        // The fuzz targets' own workspace (`model/` is checked in its stage).
        board("fuzz", &["fmt", "--", "--check"])
    })?;
    stages.run_noted("clippy", note("clippy"), || {
        cargo(
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
            &[],
        )
        // The core's other features (defmt, small-code, kernel-check) are linted where they are
        // used, on the no_std targets (the `no-std` stage).
    })?;
    stages.run_noted("doc", note("doc"), || {
        cargo(
            &["doc", "--workspace", "--no-deps"],
            &[("RUSTDOCFLAGS", "-D warnings")],
        )
    })?;
    stages.run_noted("package", note("package"), package)?;
    stages.run_noted("no-std", note("no-std"), no_std)?;
    stages.run_noted("boards", note("boards"), boards)?;
    stages.run_noted("miri", note("miri"), miri)?;
    // A smoke run from the committed corpora; long runs: `cargo xtask fuzz SECONDS`.
    stages.run_noted("fuzz", note("fuzz"), || fuzz(10, FuzzBuild::Smoke))?;
    stages.run_noted("doctests", note("doctests"), || {
        cargo(&["test", "--workspace", "--doc"], &[])
    })?;
    stages.run_noted("model", note("model"), model)?;
    stages.run_noted("aarch64", note("aarch64"), edgekv_xtask::aarch64::stage)?;
    if stages.selected("tests") {
        // The table first, so nextest's summary is the last line of the log.
        eprintln!("{}", stages.table());
        eprintln!("#### stage tests: {}", note("tests"));
        // The units nextest runs, built first with the libraries themselves, so that the C
        // ABI's static library is in the target directory for the C programs' test (one build
        // of it, not a second in a directory of its own).
        cargo(
            &[
                "build",
                "--profile",
                "test",
                "--workspace",
                "--lib",
                "--bins",
                "--tests",
            ],
            &[],
        )?;
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| qemu::repo_root().join("target"), Into::into);
        let staticlib = target.join("debug/libedgekv_capi.a");
        // Libraries, binaries and tests: not the examples, which `cargo test` would also build
        // (the clippy stage checks them; edgekv-llm's `bench` alone cost 65 CPU seconds to build).
        cargo(
            &[
                "nextest",
                "run",
                "--workspace",
                "--lib",
                "--bins",
                "--tests",
                "--no-fail-fast",
            ],
            &[("EDGEKV_CAPI_STATICLIB", &staticlib.to_string_lossy())],
        )
    } else {
        eprintln!("{}", stages.table());
        Ok(())
    }
}

/// The libraries linted by clippy (`-D warnings`) for the no_std targets, which type-checks
/// them there (one cargo call per feature set, its targets at once): everything plain for all
/// four; `defmt` and `kernel-check` for an ARMv7E-M and the ARMv6-M target (the logging layer is
/// target-independent), `small-code` for the ARMv7E-M one (these features are for boards: a
/// host `clippy --all-features` of the core cost about 2 minutes and missed the Arm code); the C
/// ABI crate (with the Ethos-U hooks) for all four and its static library built (code generated)
/// for the Cortex-M7 and Cortex-M55 targets vendor NPU SDKs link it on; the D-cache maintenance
/// (`cortex-m`) and the LLM forward pass for those two.
fn no_std() -> Result<(), String> {
    const ALL: &[&str] = &TARGETS;
    const M7_M55: &[&str] = &["thumbv7em-none-eabihf", "thumbv8m.main-none-eabihf"];
    const DEFMT: &[&str] = &["thumbv7em-none-eabihf", "thumbv6m-none-eabi"];
    let sets: [(&[&str], &[&str]); 7] = [
        (
            &[
                "clippy",
                "-p",
                "edgekv",
                "-p",
                "edgekv-hal",
                "-p",
                "edgekv-parity",
            ],
            ALL,
        ),
        (
            &[
                "clippy",
                "-p",
                "edgekv-capi",
                "--no-default-features",
                "--features",
                "ethosu",
            ],
            ALL,
        ),
        (
            &[
                "clippy",
                "-p",
                "edgekv",
                "-p",
                "edgekv-hal",
                "--features",
                "edgekv/defmt,edgekv/kernel-check,edgekv-hal/defmt",
            ],
            DEFMT,
        ),
        (
            &["clippy", "-p", "edgekv", "--features", "small-code"],
            &["thumbv7em-none-eabihf"],
        ),
        (
            &[
                "build",
                "-p",
                "edgekv-capi",
                "--no-default-features",
                "--features",
                "ethosu",
            ],
            M7_M55,
        ),
        (
            &["clippy", "-p", "edgekv-hal", "--features", "cortex-m"],
            M7_M55,
        ),
        (&["clippy", "-p", "edgekv-llm"], M7_M55),
    ];
    for (args, targets) in sets {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend(targets.iter().map(|t| format!("--target={t}")));
        if args[0] == "clippy" {
            all.extend(["--", "-D", "warnings"].map(String::from));
        }
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        cargo(&all, &[])?;
    }
    Ok(())
}

/// The dry run's own target directory (its packages and verify builds), emptied before each
/// run.
const PUBLISH_TARGET_DIR: &str = "target/publish";

/// The no_std target the declared `rust-version` is built for (the `package` stage).
const MSRV_TARGET: &str = "thumbv7em-none-eabihf";

/// What a user of the published crates gets: `cargo publish --dry-run` packages [`PUBLISHED`]
/// and builds each from its packaged sources (the unpublished ones resolved from a local
/// registry of the others), then the no_std crates (the C ABI as firmware links it) are checked
/// with the toolchain of the workspace's declared `rust-version` for an ARMv7E-M target, in
/// their own target directory.
fn package() -> Result<(), String> {
    forget_packaged_sources()?;
    let mut args = vec!["publish", "--dry-run", "--allow-dirty"];
    for p in PUBLISHED {
        args.extend(["-p", p]);
    }
    // Without debug info: the verify builds (a dev build of each packaged crate, in a target
    // directory of their own) only have to compile.
    cargo(
        &args,
        &[
            ("CARGO_TARGET_DIR", PUBLISH_TARGET_DIR),
            ("CARGO_PROFILE_DEV_DEBUG", "0"),
        ],
    )?;
    let msrv = format!("+{}", setup::rust_version(&qemu::repo_root())?);
    let target = format!("--target={MSRV_TARGET}");
    let env = [("CARGO_TARGET_DIR", "target/msrv")];
    let core = [
        "check",
        "-p",
        "edgekv",
        "-p",
        "edgekv-hal",
        "-p",
        "edgekv-llm",
    ];
    let capi = [
        "check",
        "-p",
        "edgekv-capi",
        "--no-default-features",
        "--features",
        "ethosu",
    ];
    for set in [&core[..], &capi[..]] {
        let mut all = vec![msrv.as_str()];
        all.extend(set);
        all.push(&target);
        run_in(None, "cargo", &all, &env)?;
    }
    // The host (x86-64 here; its AVX2 kernels are code the Arm targets never see), with std.
    let mut host = vec![msrv.as_str()];
    host.extend(core);
    host.extend(["--features", "edgekv/std"]);
    run_in(None, "cargo", &host, &env)
}

/// Removes what an earlier dry run left of [`PUBLISHED`]: its target directory
/// ([`PUBLISH_TARGET_DIR`]) and what it unpacked from its temporary local registry
/// (`$CARGO_HOME/registry/{src,cache}/-<hash>/`). Cargo reuses both for the same name and
/// version, so a second dry run after a change would verify the first one's build.
fn forget_packaged_sources() -> Result<(), String> {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    // The verify builds' target directory too: cargo takes registry sources as immutable, so
    // it would reuse the earlier build of the same name and version.
    let publish = qemu::repo_root().join(PUBLISH_TARGET_DIR);
    if publish.is_dir() {
        std::fs::remove_dir_all(&publish).map_err(|e| format!("{}: {e}", publish.display()))?;
    }
    for kind in ["src", "cache"] {
        let Ok(registries) = std::fs::read_dir(home.join("registry").join(kind)) else {
            continue;
        };
        // Local registries' directories start with '-' (crates.io's with its host name).
        for reg in registries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with('-'))
        {
            let Ok(entries) = std::fs::read_dir(reg.path()) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let ours = PUBLISHED.iter().any(|c| {
                    name.strip_prefix(c)
                        .and_then(|r| r.strip_prefix('-'))
                        .is_some_and(|v| v.starts_with(|ch: char| ch.is_ascii_digit()))
                });
                if ours {
                    let p = e.path();
                    let removed = if p.is_dir() {
                        std::fs::remove_dir_all(&p)
                    } else {
                        std::fs::remove_file(&p)
                    };
                    removed.map_err(|err| format!("{}: {err}", p.display()))?;
                }
            }
        }
    }
    Ok(())
}

/// Every board firmware built (the STM32H7's `heap` variant linted only); the micro:bit's runs
/// exactly as its README says (`cargo run --release` in the board directory). The Cortex-M4
/// parity firmware and the Cortex-M55 chat are only built here: the `tests` stage runs them, the
/// first with its README's `cargo run --release` (`host-tests/tests/board_parity.rs`, its
/// digests compared with the host's), the second a short chat compared with the host
/// (`host-tests/tests/llm_board.rs`), since a full demo run takes minutes. All boards share `target/boards`.
fn boards() -> Result<(), String> {
    board("boards/stm32h7", &["build", "--release"])?;
    // The heap-backed variant linted (which type-checks it), not linked again: its fat-LTO
    // build cost 82 s of the stage for a firmware that differs only by its arena's allocator.
    board(
        "boards/stm32h7",
        &[
            "clippy",
            "--release",
            "--features",
            "heap",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    board(Board::Microbit.dir(), &["run", "--release"])?;
    board(Board::An386.dir(), &["build", "--release"])?;
    board(Board::An547.dir(), &["build", "--release"])?;
    // The Cortex-M4 core's size goal (int8, `small-code`, opt-level "s"): a failing check.
    println!(
        "{}",
        edgekv_xtask::size::check_core_goal(&qemu::repo_root())?
    );
    no_recursion()
}

/// A demangled symbol without its hash suffix.
fn short_name(f: &str) -> &str {
    f.rsplit_once("::h").map_or(f, |(name, _)| name)
}

/// No function of the edgekv crates (core, HAL, C ABI, forward pass, parity cases) is on a cycle
/// of the direct call graph of the linked firmware: the Cortex-M4 parity firmware, the Cortex-M55
/// chat and the micro:bit's (see [`edgekv_xtask::callgraph`]). Cycles inside dependencies (none
/// expected) are counted, not failed.
pub fn no_recursion() -> Result<(), String> {
    let root = qemu::repo_root();
    let elfs = [
        qemu::bin_path(&root, Board::An386, qemu::AN386_MAIN),
        qemu::bin_path(&root, Board::An547, qemu::AN547_MAIN),
        qemu::bin_path(&root, Board::Microbit, "edgekv-microbit"),
    ];
    for elf in elfs {
        let (ours, others) = edgekv_xtask::callgraph::recursion(&elf, &["edgekv"])?;
        if !ours.is_empty() {
            let list: Vec<String> = ours.iter().map(|c| c.join(" -> ")).collect();
            return Err(format!(
                "recursion in {}: {}",
                elf.display(),
                list.join("; ")
            ));
        }
        let names: Vec<String> = others
            .iter()
            .map(|c| {
                c.iter()
                    .map(|f| short_name(f))
                    .collect::<Vec<_>>()
                    .join(" -> ")
            })
            .collect();
        eprintln!(
            "==> no recursion in edgekv's code in {} (direct calls); cycles in dependencies: {}",
            elf.display(),
            if names.is_empty() {
                "none".into()
            } else {
                names.join("; ")
            }
        );
    }
    Ok(())
}

/// The real-model harness (`model/`, its own workspace): fetches SmolLM2-135M (98 MB) and
/// Gemma 3 270M (253 MB), both cached outside the repository, then rustfmt, clippy and its
/// tests (release builds: the forward pass is too slow unoptimized).
fn model() -> Result<(), String> {
    let root = qemu::repo_root();
    for script in ["model/fetch-model.sh", "model/fetch-gemma.sh"] {
        let script = root.join(script);
        run_in(None, "bash", &[&script.to_string_lossy()], &[])?;
    }
    board("model", &["fmt", "--", "--check"])?;
    board(
        "model",
        &[
            "clippy",
            "--release",
            "--all-targets",
            // The candle reference too (checked, not built: the tests leave it out).
            "--all-features",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    // Not the examples (benchmarks and comparisons with candle, linted above).
    board(
        "model",
        &["test", "--release", "--lib", "--bins", "--tests"],
    )
}
