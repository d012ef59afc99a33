#!/usr/bin/env bash
# Runs a firmware ELF on QEMU mps2-an386 and decodes its defmt log; exits with the firmware's code.
set -u
elf="$1"
if ! command -v qemu-system-arm >/dev/null; then
    echo "qemu-system-arm not found: sudo apt-get install -y qemu-system-arm (run it twice if the first attempt fails)" >&2
    exit 127
fi
if ! command -v defmt-print >/dev/null; then
    echo "defmt-print not found: cargo install --locked defmt-print" >&2
    exit 127
fi
timeout "${QEMU_TIMEOUT:-300}" qemu-system-arm -cpu cortex-m4 -machine mps2-an386 -nographic \
    -semihosting-config enable=on,target=native -kernel "$elf" | defmt-print -e "$elf"
exit "${PIPESTATUS[0]}"
