//! Running commands for the stages: a program in the repository root, the calling toolchain's
//! cargo, cargo in a board crate.

use std::path::Path;
use std::process::Command;

use edgekv_xtask::qemu;

/// Runs `program args` with `env` in `dir` (the repository root when `None`), echoing it.
pub fn run_in(
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
pub fn board(dir: &str, args: &[&str]) -> Result<(), String> {
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
