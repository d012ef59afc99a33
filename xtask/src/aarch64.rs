//! The `aarch64` stage of `cargo test-all`: Linux edge SoCs (Cortex-A cores: Raspberry Pi 5,
//! RK3588, Jetson) under user-mode emulation. It installs Debian's cross linker and
//! `qemu-user` when missing, runs tests of `edgekv`, `edgekv-llm` and `edgekv-capi` built for
//! `aarch64-unknown-linux-gnu` through `qemu-aarch64` (cargo's runner), compares the parity
//! digests with the committed listing, builds the other `no_std` crates there, and builds the C ABI's
//! static and shared libraries and links the C test programs against each, run under emulation
//! too.

use std::path::Path;
use std::process::Command;

use crate::qemu;
use crate::setup;

/// The target triple.
pub const TARGET: &str = "aarch64-unknown-linux-gnu";

/// Debian's cross C compiler (package `gcc-aarch64-linux-gnu`).
pub const CC: &str = "aarch64-linux-gnu-gcc";

/// Debian's aarch64 sysroot (`libc6-arm64-cross`), where `qemu-aarch64` finds the dynamic loader.
pub const SYSROOT: &str = "/usr/aarch64-linux-gnu";

/// Cargo's linker and runner for [`TARGET`].
pub fn cargo_env() -> [(&'static str, String); 2] {
    [
        (
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
            CC.to_string(),
        ),
        (
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER",
            format!("qemu-aarch64 -L {SYSROOT}"),
        ),
    ]
}

/// Runs `cmd`, echoing it; an error names it and its exit status.
fn run(cmd: &mut Command, what: &str) -> Result<String, String> {
    eprintln!("==> {what}");
    let out = cmd
        .output()
        .map_err(|e| format!("cannot start {what}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{what} failed ({}):\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A cargo command in the repository root with the cross linker and runner set.
fn cargo(args: &[&str]) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(qemu::repo_root())
        .args(args)
        .envs(cargo_env().map(|(k, v)| (k, v)));
    cmd
}

/// Runs a cargo command with its output streamed (tests print their summaries).
fn cargo_streamed(args: &[&str]) -> Result<(), String> {
    eprintln!("==> cargo {}", args.join(" "));
    let status = cargo(args)
        .status()
        .map_err(|e| format!("cannot start cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo {} failed ({status})", args.join(" ")))
    }
}

/// The crates every cargo call of the stage selects, with the C ABI's Ethos-U hooks: one feature
/// resolution, so `edgekv` and the dependencies are compiled once for the target (and once
/// natively, where the `doctests` stage already built the same units).
const CRATES: [&str; 12] = [
    "-p",
    "edgekv",
    "-p",
    "edgekv-hal",
    "-p",
    "edgekv-llm",
    "-p",
    "edgekv-capi",
    "-p",
    "edgekv-parity",
    "--features",
    "edgekv-capi/ethosu",
];

/// `cargo VERB --profile test [--target aarch64] <CRATES> EXTRA...`: everything in the stage is
/// built in the test profile (optimized enough for the emulated runs; a release build would
/// compile every crate a second time).
fn args<'a>(verb: &'a str, cross: bool, extra: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec![verb, "--profile", "test"];
    if cross {
        all.extend(["--target", TARGET]);
    }
    all.extend(CRATES);
    all.extend(extra);
    all
}

/// The whole stage. Under emulation everything runs 10–50× slower, so this runs what proves the
/// claims and leaves the model-scale tests (pool and grouped-cache models, attention sweeps) to
/// the native `tests` stage: the libraries' unit tests; the forward pass's logit digests
/// of SmolLM2-135M (`hello_logit_digest_is_stable`, the value the host and the boards match);
/// every parity case's digest and every model shape's decode step, compared line by line with the
/// committed listing (`parity/digests.txt`, which the host prints too); the C programs.
pub fn stage() -> Result<(), String> {
    setup::aarch64_tools()?;
    setup::targets(&[TARGET])?;
    // The forward pass's digest test needs SmolLM2-135M (fetched once, cached).
    let fetch = qemu::repo_root().join("model/fetch-model.sh");
    run(
        Command::new("bash").arg(&fetch),
        "model/fetch-model.sh (SmolLM2-135M, once)",
    )?;
    cargo_streamed(&args("test", true, &["--lib"]))?;
    without_dotprod()?;
    cargo_streamed(&args(
        "test",
        true,
        &["--test", "model", "--", "hello_logit_digest_is_stable"],
    ))?;
    same_digests()?;
    c_programs()
}

/// The kernels' unit tests again on an emulated core without the dot-product extension (a
/// Cortex-A53: `SDOT` absent, so detection must say so and the kernels without it run; the
/// test binaries are the ones just built, only the runner differs).
pub fn without_dotprod() -> Result<(), String> {
    let mut cmd = cargo(&args("test", true, &["--lib", "--", "arch::"]));
    cmd.env(
        "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER",
        format!("qemu-aarch64 -cpu cortex-a53 -L {SYSROOT}"),
    );
    eprintln!("==> the kernels' tests on a Cortex-A53 (no SDOT)");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the kernels' tests without SDOT failed ({status})"))
    }
}

/// `edgekv-parity`'s `digests` example under `qemu-aarch64` prints the committed listing
/// (`parity/digests.txt`), which the host's tests (`host-tests/tests/parity.rs`) and the boards
/// print too. (A native build of the example to compare with cost about 150 s of the stage: its
/// units were not the `doctests` stage's.)
pub fn same_digests() -> Result<(), String> {
    let listing = qemu::repo_root().join("parity/digests.txt");
    let host =
        std::fs::read_to_string(&listing).map_err(|e| format!("{}: {e}", listing.display()))?;
    // The libraries too (the C ABI's static library for `c_programs`).
    run(
        &mut cargo(&args("build", true, &["--lib", "--example", "digests"])),
        "the libraries and digests (aarch64 build)",
    )?;
    let emulated = run(
        Command::new("qemu-aarch64")
            .args(["-L", SYSROOT])
            .arg(built().join("examples/digests")),
        "digests (aarch64, qemu-aarch64)",
    )?;
    let lines = host.lines().count();
    if host != emulated || lines == 0 {
        return Err(format!(
            "parity digests differ between parity/digests.txt and aarch64:\n--- committed\n{host}--- aarch64\n{emulated}"
        ));
    }
    eprintln!("aarch64: {lines} parity and decode-step digests equal the committed listing");
    Ok(())
}

/// The directory the test profile's artifacts for the target go to.
fn built() -> std::path::PathBuf {
    qemu::repo_root().join("target").join(TARGET).join("debug")
}

/// The C ABI's static library (as vendor SDKs link it; built by [`same_digests`]) and a shared library built from the same
/// crate (`cargo rustc --crate-type cdylib`), each linked with the C test programs
/// (`host-tests/tests/c/`) by the cross compiler and run under `qemu-aarch64`.
pub fn c_programs() -> Result<(), String> {
    let root = qemu::repo_root();
    // The static library was built by `same_digests`.
    let dir = built();
    // The shared library's name differs from the staticlib's only by its extension.
    // The dev profile: `cargo rustc --profile test` would compile the test harness. Its
    // output goes to the test profile's directory.
    let shared = [
        "rustc",
        "--target",
        TARGET,
        "-p",
        "edgekv-capi",
        "--features",
        "ethosu",
        "--lib",
        "--crate-type",
        "cdylib",
    ];
    run(
        &mut cargo(&shared),
        "cargo rustc --crate-type cdylib (aarch64)",
    )?;
    let out = root.join("target").join(TARGET).join("c-programs");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    for name in ["capi_test", "decode_loop", "grouped_test"] {
        let src = root.join(format!("host-tests/tests/c/{name}.c"));
        let static_exe = out.join(format!("{name}_static"));
        let mut cc = compile(&root, &src, &static_exe);
        cc.arg(dir.join("libedgekv_capi.a"))
            .args(["-static", "-lpthread", "-ldl", "-lm"]);
        run(&mut cc, &format!("{CC} {name}.c (static library)"))?;
        check(Command::new("qemu-aarch64").arg(&static_exe), name)?;
        let shared_exe = out.join(format!("{name}_shared"));
        let mut cc = compile(&root, &src, &shared_exe);
        cc.arg("-L")
            .arg(&dir)
            .args(["-ledgekv_capi", "-lpthread", "-ldl", "-lm"]);
        run(&mut cc, &format!("{CC} {name}.c (shared library)"))?;
        check(
            Command::new("qemu-aarch64")
                .args(["-L", SYSROOT])
                .arg("-E")
                .arg(format!("LD_LIBRARY_PATH={}", dir.display()))
                .arg(&shared_exe),
            name,
        )?;
    }
    Ok(())
}

/// The cross compiler's command for `src` → `exe`: strict C99, every warning an error.
fn compile(root: &Path, src: &Path, exe: &Path) -> Command {
    let mut cc = Command::new(CC);
    cc.args([
        "-std=c99",
        "-pedantic",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-DEDGEKV_ETHOSU",
        "-O1",
    ])
    .arg("-I")
    .arg(root.join("capi/include"))
    .arg(src)
    .arg("-o")
    .arg(exe);
    cc
}

/// Runs a C test program; it must report ` 0 failed`.
fn check(cmd: &mut Command, name: &str) -> Result<(), String> {
    let stdout = run(cmd, &format!("{name} under qemu-aarch64"))?;
    let last = stdout.lines().last().unwrap_or_default();
    eprintln!("{name}: {last}");
    if stdout.contains(" 0 failed") {
        Ok(())
    } else {
        Err(format!("{name} under qemu-aarch64:\n{stdout}"))
    }
}
