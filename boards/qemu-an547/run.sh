#!/usr/bin/env bash
# Cargo runner: runs a firmware ELF on QEMU mps3-an547 through the repository's task runner
# (`cargo xtask qemu an547`), which fetches the model if needed, writes the system prompt's
# snapshot image and the chat script, loads them with the model, decodes the defmt log in process,
# prints the transcript and exits with the firmware's code. QEMU_TIMEOUT (seconds) bounds the run.
set -eu
elf="$(realpath "$1")"
cd "$(dirname "$0")/../.."
exec cargo xtask-chat qemu an547 "$elf"
