//! The C ABI from C: the committed header matches what cbindgen generates from the `edgekv-capi`
//! crate, and three C programs compiled with the system C compiler against its static library —
//! `c/capi_test.c` (the whole flow and every error path), `c/decode_loop.c` (a vendor-SDK
//! style decode loop on heap arenas: prefix reuse, forks, snapshot and restore, bit-exact against
//! cold runs) and `c/grouped_test.c` (a cache of layer groups: plan, create, write, attention
//! bit-exact against plain caches, release past the window, bad group configurations) — pass, plain and under AddressSanitizer (leaks included) and
//! UndefinedBehaviorSanitizer.
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
    let capi = root().join("capi");
    let config = cbindgen::Config::from_file(capi.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(&capi)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    parenthesize_negative_defines(&String::from_utf8(out).expect("utf-8 header"))
}

/// cbindgen writes `#define EKV_ERR_NULL -1`; safety-minded C rules (MISRA C:2012 rule 20.7's
/// spirit, CERT PRE02-C) want macro bodies that are expressions in parentheses, so that
/// `x-EKV_ERR_NULL` or `sizeof EKV_ERR_NULL` mean what they say: `#define EKV_ERR_NULL (-1)`.
/// cbindgen drops parentheses around a literal, so the header generation adds them.
fn parenthesize_negative_defines(header: &str) -> String {
    let mut out = String::with_capacity(header.len() + 256);
    for line in header.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let mut words = body.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("#define"), Some(name), Some(value))
                if value.starts_with('-') && value[1..].bytes().all(|b| b.is_ascii_digit()) =>
            {
                out.push_str(&format!("#define {name} ({value})"));
                out.push_str(&line[body.len()..]);
            }
            _ => out.push_str(line),
        }
    }
    out
}

#[test]
fn header_is_ascii_with_parenthesized_negative_macros() {
    let header = std::fs::read_to_string(root().join("capi/include/edgekv.h")).expect("header");
    for (i, line) in header.lines().enumerate() {
        assert!(line.is_ascii(), "line {}: not ASCII: {line}", i + 1);
        if let Some(rest) = line.strip_prefix("#define ") {
            let value = rest.split_once(' ').map_or("", |(_, v)| v);
            assert!(
                !value.starts_with('-'),
                "line {}: bare negative: {line}",
                i + 1
            );
        }
    }
    assert!(header.contains("#define EKV_ERR_NULL (-1)"));
}

#[test]
fn header_is_up_to_date() {
    let path = root().join("capi/include/edgekv.h");
    let generated = generate_header();
    if std::env::var_os("EDGEKV_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write header");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "capi/include/edgekv.h is stale: regenerate it with \
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
fn c_programs_run_against_the_staticlib() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        eprintln!("SKIPPED: no C compiler ({cc}) on this machine");
        return;
    }
    // A separate target directory: the outer cargo may still hold the lock on its own.
    let dir = target_dir().join("capi-test");
    std::fs::create_dir_all(&dir).expect("create the C programs' directory");
    let lib = match std::env::var_os(PREBUILT) {
        // `cargo test-all` builds the library with the test binaries (the same units), which
        // saves a second build of the C ABI and its dependencies in a directory of its own.
        Some(lib) => {
            eprintln!("the C ABI library built by the task runner: {lib:?}");
            PathBuf::from(lib)
        }
        None => build_staticlib(&dir),
    };
    assert!(lib.is_file(), "no static library at {}", lib.display());
    c_programs(&cc, &dir, &lib);
}

/// The environment variable naming a static library of `edgekv-capi` (features `ethosu`)
/// already built from this tree; unset, the test builds one.
const PREBUILT: &str = "EDGEKV_CAPI_STATICLIB";

/// `cargo build -p edgekv-capi --features ethosu` into `dir`; returns the static library.
fn build_staticlib(dir: &Path) -> PathBuf {
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
            .arg(dir)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_BUILD_RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS"),
        "cargo build -p edgekv-capi",
    );
    dir.join("debug/libedgekv_capi.a")
}

/// The C test programs compiled by `cc` into `dir`, linked with `lib` and run, then again
/// under the sanitizers where `cc` has them.
fn c_programs(cc: &str, dir: &Path, lib: &Path) {
    // The contract test, a decode loop as a vendor SDK integration would run it, layer groups.
    let programs = ["capi_test", "decode_loop", "grouped_test"];
    // Strict C99 (the header's stated minimum), pedantic, every warning an error.
    const STRICT: [&str; 6] = [
        "-std=c99",
        "-pedantic",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-DEDGEKV_ETHOSU",
    ];
    let build = |name: &str, exe: &Path, extra: &[&str]| {
        let src = root().join(format!("host-tests/tests/c/{name}.c"));
        run(
            Command::new(cc)
                .args(STRICT)
                .args(extra)
                .arg("-I")
                .arg(root().join("capi/include"))
                .arg(&src)
                .arg(lib)
                .args(["-Wl,--gc-sections", "-lpthread", "-ldl", "-lm", "-o"])
                .arg(exe),
            &format!("compiling {name}.c"),
        );
    };
    let check = |exe: &Path| {
        let out = run(&mut Command::new(exe), &exe.display().to_string());
        let stdout = String::from_utf8_lossy(&out.stdout);
        println!("{stdout}");
        assert!(
            stdout.contains(" 0 failed"),
            "{} output:\n{stdout}",
            exe.display()
        );
    };
    for name in programs {
        let exe = dir.join(name);
        build(name, &exe, &["-O1"]);
        check(&exe);
    }

    // Again under AddressSanitizer and UndefinedBehaviorSanitizer, where the compiler has them
    // (gcc and clang on Linux hosts; probed with an empty program).
    let probe_src = dir.join("sanitizer_probe.c");
    let probe = dir.join("sanitizer_probe");
    std::fs::write(&probe_src, "int main(void) { return 0; }\n").expect("write probe");
    const SANITIZE: [&str; 4] = [
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all",
        "-fno-omit-frame-pointer",
        "-O1",
    ];
    let usable = Command::new(cc)
        .args(SANITIZE)
        .arg(&probe_src)
        .arg("-o")
        .arg(&probe)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new(&probe).status().is_ok_and(|s| s.success());
    if !usable {
        eprintln!("SKIPPED: {cc} cannot build and run -fsanitize=address,undefined programs here");
        return;
    }
    for name in programs {
        let exe = dir.join(format!("{name}_sanitized"));
        build(name, &exe, &SANITIZE);
        check(&exe);
    }
}
