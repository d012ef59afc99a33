//! The `miri` stage: Miri on the modules with unsafe code and the cache code over their arenas.

use std::process::Command;

use edgekv_xtask::{qemu, setup};

use crate::cmd::run_in;

/// Miri on the modules with unsafe code and the code that keeps cache data in their arenas: the
/// core's `arena`, `workers`, `cache`, `alloc`, `pool` and format unit tests (not the numeric
/// kernels, whose portable paths are what the native builds are compared with bit for bit, nor
/// the safe logic above the cache) and its static-arena and page-sharing integration tests; the
/// HAL's tests (views, simulated cache, software NPU) and the C ABI
/// crate's (every `ekv_*` call from raw pointers, the contract tests, the Ethos-U hooks).
/// Miri is single-threaded: the core's unit tests, its integration tests and the HAL with the C
/// ABI run as three processes side by side, their logs printed one after the other. They share
/// one target directory, built first by one process after the other (`--no-run`; the second and
/// third reuse what the first compiled), so nothing is compiled twice and the runs never wait for
/// a build lock (cargo holds it only while building). nextest was tried instead: each test its
/// own Miri process cost ~7 s of start-up per test, twice the old stage's time.
pub fn miri() -> Result<(), String> {
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
        // The modules with unsafe code (`arena`: uninitialized bytes, the heap arena; `workers`:
        // the borrowed-closure handoff) and the ones that hold cache data in those arenas and
        // move it about (`cache`, `alloc`, `pool`, the page formats' codecs). Not the safe
        // logic above them (`grouped`, `prefix`, `plan`: 77 s of a 180 s run), which Miri could
        // only check through these same arena paths, nor the numeric kernels below (their
        // portable paths are what every native build is compared with).
        "arena::",
        "workers::",
        "cache::",
        "alloc::",
        "pool::",
        "format::",
        "--skip",
        "format::int8::",
        "--skip",
        "format::fp8::",
        // A 300-token growth with invariant checks: 76 s under Miri; the other contiguous tests
        // cover the same relocation code (so do the next two's doublings and growth with
        // scales: 32 s and 21 s).
        "--skip",
        "contiguous_capacity_doubles_and_data_survives_growth",
        "--skip",
        "contiguous_reserve_across_several_doublings",
        "--skip",
        "quantized_contiguous_growth_moves_scales",
        // The kernels' read-back of quantized pages (52 s; the pages' arena access is every
        // cache test's).
        "--skip",
        "quantized_pages_read_back_what_the_kernels_give",
        // The sliding window's page release (safe code, tested natively): even reduced to 30
        // steps, its four tests took over ten minutes under Miri with invariants checked at
        // every step.
        "--skip",
        "cache::window_tests::",
    ];
    let core_tests: Vec<&str> = vec![
        &toolchain,
        "miri",
        "test",
        "-p",
        "edgekv",
        "--features",
        "std",
        // The integration tests' binary, one module per file of `core/tests/`; libtest's filters
        // match substrings of `module::test` names.
        "--test",
        "integration",
        "--",
        // The core's own unsafe code is `arena` (uninitialized bytes and the heap arena) and
        // `workers`: these build caches in static, static-cell and heap arenas and share pages
        // between sequences through them. The model, fault-sweep and snapshot tests drive safe
        // code (pool, cache, prefix and snapshot logic) over the same arenas: under Miri they
        // could only find what these already reach, at 100–1,000× the native cost (240 s of
        // the stage), so they run natively only.
        "static_arenas::",
        "prefix_reuse::",
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
