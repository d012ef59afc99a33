#!/usr/bin/env bash
# Cargo runner: flashes the firmware ELF over the NUCLEO's ST-LINK with probe-rs and streams its
# defmt log over RTT. Stops at once with the command to run when probe-rs is missing.
set -eu
if ! command -v probe-rs >/dev/null; then
  echo "error: probe-rs is missing: cargo install --locked probe-rs-tools (about 9 minutes), then connect the NUCLEO-H743ZI and run again" >&2
  exit 127
fi
exec probe-rs run --chip STM32H743ZITx "$@"
