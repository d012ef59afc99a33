//! The C ABI from C: the committed header matches what cbindgen generates from
//! `edgekv-hal`'s `capi` module, and a C program compiled with the system C compiler against the
//! static library (`edgekv-capi`) runs the whole flow and every error path.
//!
//! Regenerate the header: `EDGEKV_BLESS=1 cargo test -p edgekv-host-tests --test capi`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn generate_header() -> String {
    let hal = root().join("hal");
    let config = cbindgen::Config::from_file(hal.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(&hal)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("utf-8 header")
}

#[test]
fn header_is_up_to_date() {
    let path = root().join("hal/include/edgekv.h");
    let generated = generate_header();
    if std::env::var_os("EDGEKV_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write header");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "hal/include/edgekv.h is stale: regenerate it with \
         `EDGEKV_BLESS=1 cargo test -p edgekv-host-tests --test capi`"
    );
}

/// The target directory this test was built in (`<target>/<profile>/deps/capi-…`).
fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| root().join("target"))
}

fn run(cmd: &mut Command, what: &str) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn c_program_runs_against_the_staticlib() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        eprintln!("SKIPPED: no C compiler ({cc}) on this machine");
        return;
    }
    // A separate target directory: the outer cargo may still hold the lock on its own.
    let dir = target_dir().join("capi-test");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run(
        Command::new(cargo)
            .current_dir(root())
            .args([
                "build",
                "--quiet",
                "-p",
                "edgekv-capi",
                "--features",
                "ethosu",
            ])
            .arg("--target-dir")
            .arg(&dir)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_BUILD_RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS"),
        "cargo build -p edgekv-capi",
    );
    let lib = dir.join("debug/libedgekv_capi.a");
    let exe = dir.join("capi_test");
    let src = root().join("host-tests/tests/c/capi_test.c");
    run(
        Command::new(&cc)
            .args([
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-O1",
                "-DEDGEKV_ETHOSU",
            ])
            .arg("-I")
            .arg(root().join("hal/include"))
            .arg(&src)
            .arg(&lib)
            .args(["-Wl,--gc-sections", "-lpthread", "-ldl", "-lm", "-o"])
            .arg(&exe),
        "compiling capi_test.c",
    );
    let out = run(&mut Command::new(&exe), "capi_test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(stdout.contains("0 failed"), "capi_test output:\n{stdout}");
}
