//! Fresh-machine set-up: rustup targets and components, the pinned nightly (Miri, cargo-fuzz),
//! cargo-fuzz and QEMU. Each step checks first and says what it installs while it does it.

use std::process::{Command, Stdio};

/// The nightly toolchain Miri and cargo-fuzz run on, pinned so CI does not change under us (the
/// date of the nightly these machines ship; its Miri component is available).
pub const NIGHTLY: &str = "nightly-2026-05-20";

/// What to do when QEMU is missing and cannot be installed here.
pub const QEMU_MISSING: &str = "qemu-system-arm not found: sudo apt-get install -y qemu-system-arm \
     (run it again if the first attempt fails on a removed package)";

/// Whether `tool --version` runs.
pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `program args`, echoing it; an error names the command and its exit status.
fn sh(program: &str, args: &[&str]) -> Result<(), String> {
    sh_env(program, args, &[])
}

/// [`sh`] with environment variables `env` set for the command.
fn sh_env(program: &str, args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    let vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    eprintln!("setup: {}{program} {}", vars.concat(), args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .status()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{program} {} failed ({status})", args.join(" ")))
    }
}

/// The output of `program args` (empty when it fails).
fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Adds the rustup targets of `targets` that the default toolchain lacks.
pub fn targets(targets: &[&str]) -> Result<(), String> {
    let installed = output("rustup", &["target", "list", "--installed"]);
    let missing: Vec<&str> = targets
        .iter()
        .copied()
        .filter(|t| !installed.lines().any(|l| l.trim() == *t))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut args = vec!["target", "add"];
    args.extend(&missing);
    sh("rustup", &args)
}

/// Adds the components of `components` that the default toolchain lacks.
pub fn components(components: &[&str]) -> Result<(), String> {
    let installed = output("rustup", &["component", "list", "--installed"]);
    let missing: Vec<&str> = components
        .iter()
        .copied()
        .filter(|c| !installed.lines().any(|l| l.starts_with(&format!("{c}-"))))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut args = vec!["component", "add"];
    args.extend(&missing);
    sh("rustup", &args)
}

/// Installs [`NIGHTLY`] with Miri and rust-src, unless present.
pub fn nightly() -> Result<(), String> {
    let installed = output(
        "rustup",
        &["component", "list", "--installed", "--toolchain", NIGHTLY],
    );
    if installed.lines().any(|l| l.starts_with("miri-"))
        && installed.lines().any(|l| l.starts_with("rust-src"))
    {
        return Ok(());
    }
    sh(
        "rustup",
        &[
            "toolchain",
            "install",
            NIGHTLY,
            "--profile",
            "minimal",
            "--component",
            "miri,rust-src",
        ],
    )
}

/// The workspace's declared `rust-version` (`[workspace.package]` in `root`'s Cargo.toml), a
/// rustup toolchain name such as `1.85`.
pub fn rust_version(root: &std::path::Path) -> Result<String, String> {
    let path = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .map(str::to_owned)
        .ok_or_else(|| format!("{}: no rust-version = \"…\" line", path.display()))
}

/// Installs the toolchain of the declared `rust-version` (minimal, with `target`), unless it
/// and the target are present.
pub fn msrv_toolchain(root: &std::path::Path, target: &str) -> Result<(), String> {
    let version = rust_version(root)?;
    let installed = output(
        "rustup",
        &["target", "list", "--installed", "--toolchain", &version],
    );
    if installed.lines().any(|l| l.trim() == target) {
        return Ok(());
    }
    sh(
        "rustup",
        &[
            "toolchain",
            "install",
            &version,
            "--profile",
            "minimal",
            "--target",
            target,
        ],
    )
}

/// Installs cargo-fuzz, unless present.
pub fn cargo_fuzz() -> Result<(), String> {
    if output("cargo", &["fuzz", "--version"]).starts_with("cargo-fuzz") {
        return Ok(());
    }
    // Unoptimized: it only starts builds and libFuzzer, and installs in half the time.
    sh_env(
        "cargo",
        &["install", "--locked", "cargo-fuzz@0.13.2"],
        &[("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")],
    )
}

/// Installs cargo-nextest, unless present (these machines ship it).
pub fn cargo_nextest() -> Result<(), String> {
    if output("cargo", &["nextest", "--version"]).starts_with("cargo-nextest") {
        return Ok(());
    }
    sh("cargo", &["install", "--locked", "cargo-nextest"])
}

/// Installs `qemu-system-arm` with apt when running as root (retried once: the first attempt
/// can fail on a package a cleanup hook removed; then once more after `apt-get update`);
/// otherwise says the exact command.
pub fn qemu() -> Result<(), String> {
    if have("qemu-system-arm") {
        return Ok(());
    }
    if output("id", &["-u"]).trim() != "0" {
        return Err(QEMU_MISSING.into());
    }
    // Waits for dpkg's lock: board tests running side by side may all find QEMU missing.
    let install = [
        "-o",
        "DPkg::Lock::Timeout=300",
        "install",
        "-y",
        "--no-install-recommends",
        "qemu-system-arm",
    ];
    sh("apt-get", &install)
        .or_else(|_| sh("apt-get", &install))
        .or_else(|_| sh("apt-get", &["update"]).and_then(|()| sh("apt-get", &install)))?;
    if have("qemu-system-arm") {
        Ok(())
    } else {
        Err("apt-get installed qemu-system-arm, but it does not run".into())
    }
}

/// Installs Debian's aarch64 cross C compiler (`gcc-aarch64-linux-gnu`, with the aarch64 C
/// library as its sysroot) and user-mode QEMU (`qemu-user`) with apt when either is missing and
/// running as root; otherwise says the exact command.
pub fn aarch64_tools() -> Result<(), String> {
    let packages = ["gcc-aarch64-linux-gnu", "qemu-user"];
    if have("aarch64-linux-gnu-gcc") && have("qemu-aarch64") {
        return Ok(());
    }
    let command = format!("apt-get install -y {}", packages.join(" "));
    if output("id", &["-u"]).trim() != "0" {
        return Err(format!("aarch64 cross tools missing: sudo {command}"));
    }
    let mut install = vec![
        "-o",
        "DPkg::Lock::Timeout=300",
        "install",
        "-y",
        "--no-install-recommends",
    ];
    install.extend(packages);
    sh("apt-get", &install)
        .or_else(|_| sh("apt-get", &["update"]).and_then(|()| sh("apt-get", &install)))?;
    if have("aarch64-linux-gnu-gcc") && have("qemu-aarch64") {
        Ok(())
    } else {
        Err(format!("{command} ran, but the tools do not run"))
    }
}
