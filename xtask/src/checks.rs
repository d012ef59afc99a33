//! The stages of `cargo test-all`, in the order they run. The last, `tests`, is nextest over
//! the workspace; the stage table is printed just before it so its summary ends the log.

use std::path::Path;
use std::process::Command;

use edgekv_xtask::qemu::{self, Board};
use edgekv_xtask::setup;
use edgekv_xtask::stages::Stages;

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
        "clippy -D warnings over the workspace, then the core with every feature: about 4 minutes (it compiles the dependencies first)",
    ),
    ("doc", "rustdoc -D warnings: about 1 minute"),
    (
        "package",
        "cargo publish --dry-run of the four published crates, then the no_std crates with the declared rust-version: about 2 minutes",
    ),
    (
        "no-std",
        "the libraries checked for four no_std targets, the C ABI built for two: about 3 minutes",
    ),
    (
        "boards",
        "every board firmware built, the micro:bit's run, the call graphs checked for recursion: about 4 minutes",
    ),
    (
        "miri",
        "Miri on the unsafe and pool/cache modules, three processes side by side: about 6 minutes",
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

/// Runs `program args` with `env` in `dir` (the repository root when `None`), echoing it.
fn run_in(
    dir: Option<&Path>,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<(), String> {
    eprintln!("==> {program} {}", args.join(" "));
    let mut cmd = Command::new(program);
    cmd.current_dir(dir.map_or_else(qemu::repo_root, Path::to_path_buf))
        .args(args)
        .envs(env.iter().copied());
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{program} {} failed ({status})", args.join(" ")))
    }
}

/// Runs the calling toolchain's cargo in the repository root.
pub fn cargo(args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run_in(None, &cargo, args, env)
}

/// Runs cargo with `args` in board crate `dir` (its own workspace and `.cargo/config.toml`),
/// exactly as its README says.
fn board(dir: &str, args: &[&str]) -> Result<(), String> {
    eprintln!("==> (cd {dir} && cargo {})", args.join(" "));
    let status = qemu::board_cargo(&qemu::repo_root().join(dir))
        .args(args)
        .status()
        .map_err(|e| format!("cannot start cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "(cd {dir} && cargo {}) failed ({status})",
            args.join(" ")
        ))
    }
}

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
        )?;
        // The core's library with every feature (defmt, small-code); its tests are linted above.
        cargo(
            &[
                "clippy",
                "-p",
                "edgekv",
                "--lib",
                "--all-features",
                "--",
                "-D",
                "warnings",
            ],
            &[],
        )
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
            &[],
        )
    } else {
        eprintln!("{}", stages.table());
        Ok(())
    }
}

/// The libraries type-checked for the no_std targets (one cargo call per feature set, its
/// targets at once): everything plain for all four; `defmt` for an ARMv7E-M and the ARMv6-M
/// target (the logging layer is target-independent); the C ABI crate (with the Ethos-U hooks)
/// checked for all four and its static library built (code generated) for the Cortex-M7 and
/// Cortex-M55 targets vendor NPU SDKs link it on; the D-cache maintenance (`cortex-m`) and the
/// LLM forward pass for those two.
fn no_std() -> Result<(), String> {
    const ALL: &[&str] = &TARGETS;
    const M7_M55: &[&str] = &["thumbv7em-none-eabihf", "thumbv8m.main-none-eabihf"];
    const DEFMT: &[&str] = &["thumbv7em-none-eabihf", "thumbv6m-none-eabi"];
    let sets: [(&[&str], &[&str]); 6] = [
        (
            &[
                "check",
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
                "check",
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
                "check",
                "-p",
                "edgekv",
                "-p",
                "edgekv-hal",
                "--features",
                "edgekv/defmt,edgekv-hal/defmt",
            ],
            DEFMT,
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
            &["check", "-p", "edgekv-hal", "--features", "cortex-m"],
            M7_M55,
        ),
        (&["check", "-p", "edgekv-llm"], M7_M55),
    ];
    for (args, targets) in sets {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend(targets.iter().map(|t| format!("--target={t}")));
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
    cargo(&args, &[("CARGO_TARGET_DIR", PUBLISH_TARGET_DIR)])?;
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
    Ok(())
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

/// Every board firmware built; the micro:bit's runs exactly as its README says (`cargo run
/// --release` in the board directory). The Cortex-M4 parity firmware and the Cortex-M55 chat are
/// only built here: the `tests` stage runs them, the first with its README's `cargo run
/// --release` (`host-tests/tests/board_parity.rs`, its digests compared with the host's), the
/// second a short chat compared with the host (`host-tests/tests/llm_board.rs`), since a full
/// demo run takes minutes. All boards share `target/boards`.
fn boards() -> Result<(), String> {
    board("boards/stm32h7", &["build", "--release"])?;
    board(
        "boards/stm32h7",
        &["build", "--release", "--features", "heap"],
    )?;
    board(Board::Microbit.dir(), &["run", "--release"])?;
    board(Board::An386.dir(), &["build", "--release"])?;
    board(Board::An547.dir(), &["build", "--release"])?;
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

/// Miri on the modules with unsafe code and the pool / cache / snapshot logic: the core's unit
/// tests except the numeric kernels (their portable paths are what the x86 builds are compared
/// with bit for bit in the normal tests) plus its arena, fault, pool-model, prefix and snapshot
/// integration tests; the HAL's tests (views, simulated cache, software NPU) and the C ABI
/// crate's (every `ekv_*` call from raw pointers, the contract tests, the Ethos-U hooks).
/// Miri is single-threaded: the core's unit tests, its integration tests and the HAL with the C
/// ABI run as three processes side by side, their logs printed one after the other. They share
/// one target directory, built first by one process after the other (`--no-run`; the second and
/// third reuse what the first compiled), so nothing is compiled twice and the runs never wait for
/// a build lock (cargo holds it only while building). nextest was tried instead: each test its
/// own Miri process cost ~7 s of start-up per test, twice the old stage's time.
fn miri() -> Result<(), String> {
    let toolchain = format!("+{}", setup::NIGHTLY);
    let core_lib: Vec<&str> = vec![
        &toolchain,
        "miri",
        "test",
        "-p",
        "edgekv",
        "--features",
        "std",
        "--lib",
        "--",
        // The numeric kernels (their portable paths are what every native build is compared
        // with): the page loop, the kernels and the query below it, exp and the floors.
        "--skip",
        "attention::",
        "--skip",
        "arch::",
        "--skip",
        "numeric::",
        "--skip",
        "format::int8::",
        "--skip",
        "format::fp8::",
        // A 300-token growth with invariant checks: 76 s under Miri; the other contiguous tests
        // cover the same relocation code (so do the next one's several doublings: 32 s).
        "--skip",
        "contiguous_capacity_doubles_and_data_survives_growth",
        "--skip",
        "contiguous_reserve_across_several_doublings",
        // Safe code only, and slow under Miri (52, 24 and 10 s of the 230 s alone): the kernels'
        // read-back of quantized pages (the pages' arena access is every cache test's), and the
        // prefix matcher's and hash's sweeps (`prefix` has no `unsafe`; its other tests run).
        "--skip",
        "quantized_pages_read_back_what_the_kernels_give",
        // The sliding window's page release (safe code, tested natively): even reduced to 30
        // steps, its four tests took over ten minutes under Miri with invariants checked at
        // every step.
        "--skip",
        "cache::window_tests::",
        // Grouped caches (safe code): a one-group cache checked call for call against a
        // `KvCache` with attention, and fifty appends with invariants (together about 140 s of
        // the grouped unit tests' 190 s). `grouped_model`'s Miri run below drives the same
        // routing, windows and all-or-nothing paths.
        "--skip",
        "grouped::tests::one_group_is_a_kv_cache_call_for_call",
        "--skip",
        "grouped::tests::layers_reach_their_groups_and_windows_release_pages",
        "--skip",
        "prefix::matcher::tests::agrees_with_the_naive_loop",
        "--skip",
        "prefix::xxh3::tests::equals_xxhash_rust_on_every_length",
    ];
    let core_tests: Vec<&str> = vec![
        &toolchain,
        "miri",
        "test",
        "-p",
        "edgekv",
        "--features",
        "std",
        "--test",
        "faults",
        "--test",
        "static_arenas",
        "--test",
        "pool_model",
        "--test",
        "prefix_model",
        "--test",
        "prefix_reuse",
        "--test",
        "snapshot",
        // The grouped cache's model test: 8 cases of 12 operations under Miri (about 50 s).
        "--test",
        "grouped_model",
        // Two fill-level sweeps of `reserve` (145 s together under Miri); the other four sweeps
        // in `faults` run the same allocation and rollback paths.
        "--",
        "--skip",
        "reserve_is_all_or_nothing_at_every_fill_level",
        "--skip",
        "reserve_secures_the_copy_on_write_of_a_shared_tail_at_every_fill_level",
        // Whole names: `attach_then_reserve_is_all_or_nothing…` still runs.
        "--exact",
    ];
    let hal: Vec<&str> = vec![
        &toolchain,
        "miri",
        "test",
        "-p",
        "edgekv-hal",
        "-p",
        "edgekv-capi",
        "--features",
        "edgekv-hal/sim,edgekv-capi/ethosu",
    ];
    // The LLM crate's kernel module (`llm/src/arch`: dispatch, row loop and the kernel check).
    // Under Miri its build script selects no ISA (`arch/none.rs`, as the core's does), so these
    // run the portable path through the dispatch; the Helium and AVX2 kernels are compared
    // with it bit for bit natively and on the board.
    let llm: Vec<&str> = vec![
        &toolchain,
        "miri",
        "test",
        "-p",
        "edgekv-llm",
        "--lib",
        "--",
        "arch::",
    ];
    let root = qemu::repo_root();
    let target = root.join("target/miri");
    let target_env = target.to_string_lossy().into_owned();
    let env = [
        ("MIRIFLAGS", "-Zmiri-strict-provenance"),
        ("CARGO_TARGET_DIR", target_env.as_str()),
    ];
    for args in [&core_lib, &core_tests, &hal, &llm] {
        // The build alone: the arguments before `--` (test filters), plus `--no-run`.
        let build: Vec<&str> = args
            .iter()
            .copied()
            .take_while(|&a| a != "--")
            .chain(["--no-run"])
            .collect();
        run_in(None, "cargo", &build, &env)?;
    }
    let logs = root.join("target/miri-logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let spawn = |name: &str,
                 args: &[&str]|
     -> Result<(std::process::Child, std::path::PathBuf), String> {
        eprintln!(
            "==> cargo {} (log: target/miri-logs/{name}.log)",
            args.join(" ")
        );
        let path = logs.join(format!("{name}.log"));
        let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let err = file.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new("cargo")
            .current_dir(&root)
            .args(args)
            .envs(env)
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start cargo: {e}"))?;
        Ok((child, path))
    };
    let mut runs = vec![
        ("core-lib", spawn("core-lib", &core_lib)?),
        ("core-tests", spawn("core-tests", &core_tests)?),
        ("hal", spawn("hal", &hal)?),
        ("llm", spawn("llm", &llm)?),
    ];
    let mut failed = Vec::new();
    for (name, (child, path)) in &mut runs {
        let status = child.wait().map_err(|e| format!("miri {name}: {e}"))?;
        let log = std::fs::read_to_string(&*path).unwrap_or_default();
        eprintln!("---- miri {name} ----\n{log}");
        if !status.success() {
            failed.push(*name);
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("miri failed: {}", failed.join(", ")))
    }
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
