//! The `miri` stage: Miri on the unsafe and pool/cache modules.

use std::process::Command;

use edgekv_xtask::{qemu, setup};

use crate::cmd::run_in;

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
        // Grouped snapshots (safe code, tested natively): the first of the six took over ten
        // minutes under Miri on a loaded machine.
        "--skip",
        "grouped::snapshot_tests::",
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
        // The integration tests' binary, one module per file of `core/tests/`; libtest's filters
        // match substrings of `module::test` names.
        "--test",
        "integration",
        "--",
        "faults::",
        "static_arenas::",
        "pool_model::",
        "prefix_model::",
        "prefix_reuse::",
        "snapshot::",
        // The grouped cache's model test: 8 cases of 12 operations under Miri (about 50 s).
        "grouped_model::",
        // `faults::` matches these too; the grouped cache's fault sweeps run natively.
        "--skip",
        "grouped_faults::",
        // Two fill-level sweeps of `reserve` (145 s together under Miri); the other four sweeps
        // in `faults` run the same allocation and rollback paths.
        "--skip",
        "faults::reserve_is_all_or_nothing_at_every_fill_level",
        "--skip",
        "faults::reserve_secures_the_copy_on_write_of_a_shared_tail_at_every_fill_level",
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
