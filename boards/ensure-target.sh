#!/usr/bin/env bash
# Cargo's rustc wrapper for the board crates (`build.rustc-wrapper` in each board's
# .cargo/config.toml): before the first compile for a target whose standard library the
# toolchain lacks, adds it with rustup (once, about 10 s) instead of failing with "can't find
# crate for `core`"; without rustup it stops with one line naming what to install.
set -eu
rustc="$1"
target=""
prev=""
for arg in "$@"; do
  case "$prev" in --target) target="$arg" ;; esac
  case "$arg" in --target=*) target="${arg#--target=}" ;; esac
  prev="$arg"
done
if [ -n "$target" ] && [ ! -d "$("$rustc" --print target-libdir --target "$target" 2>/dev/null)" ]; then
  sysroot="$("$rustc" --print sysroot)"
  toolchain="$(basename "$sysroot")"
  if ! command -v rustup >/dev/null; then
    echo "error: the Rust standard library for $target is missing from $sysroot: install it (with rustup: rustup target add $target)" >&2
    exit 1
  fi
  # One install at a time: cargo runs several rustc processes at once.
  exec 9>"${TMPDIR:-/tmp}/edgekv-ensure-target.lock"
  flock 9
  if [ ! -d "$("$rustc" --print target-libdir --target "$target")" ]; then
    echo "boards: adding the Rust target $target to $toolchain (rustup target add, once, about 10 s) ..." >&2
    rustup target add --toolchain "$toolchain" "$target" >&2 \
      || { echo "error: rustup target add --toolchain $toolchain $target failed; run it by hand" >&2; exit 1; }
  fi
  flock -u 9
fi
exec "$@"
