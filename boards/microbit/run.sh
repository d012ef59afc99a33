#!/usr/bin/env bash
# Cargo runner: runs a firmware ELF on QEMU microbit (nRF51, Cortex-M0) through the repository's task runner
# (`cargo xtask qemu`), which installs QEMU if it can, prints its semihosting output and exits
# with the firmware's code. QEMU_TIMEOUT (seconds, default 300) bounds the run.
set -eu
elf="$(realpath "$1")"
cd "$(dirname "$0")/../.."
exec cargo xtask qemu microbit "$elf"
