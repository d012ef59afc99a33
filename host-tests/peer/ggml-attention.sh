#!/usr/bin/env bash
# ggml's CPU flash attention (FLASH_ATTN_EXT, llama.cpp's test-backend-ops perf mode) as a peer of
# edgekv's attention, both measured in the same run, one thread each, rounds alternating between
# the two sides so that load drift hits both equally. See host-tests/peer/README.md.
#
# Environment:
#   EDGEKV_PEER_CACHE   where the sdist, its sources and the build live (outside the repo);
#                       default $HOME/.cache/edgekv-peer
#   EDGEKV_PEER_ROUNDS  rounds (default 5)
#   EDGEKV_PEER_CTXS    contexts, space separated (default "512 2048 8192"; ggml only has cases
#                       for these three, see patch-test-backend-ops.py)
#   EDGEKV_PEER_EDGEKV_ROUNDS  timed batches inside one edgekv measurement (default 10, about
#                       1 s as ggml's perf loop; the median of them is that measurement)
#   EDGEKV_PEER_BUILD_ONLY=1   stop after building both sides
#   EDGEKV_SHAPE        the decode shape, q_heads,kv_heads,head_dim (default 9,3,64: SmolLM2-135M);
#                       ggml has cases for 9,3,64  4,1,256  16,8,128  32,8,64  15,5,64 (the five
#                       models of FIGURES.md), see patch-test-backend-ops.py
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${EDGEKV_PEER_CACHE:-$HOME/.cache/edgekv-peer}"
rounds="${EDGEKV_PEER_ROUNDS:-5}"
ctxs="${EDGEKV_PEER_CTXS:-512 2048 8192}"
edgekv_rounds="${EDGEKV_PEER_EDGEKV_ROUNDS:-10}"
shape="${EDGEKV_SHAPE:-9,3,64}"
IFS=, read -r q_heads kv_heads head_dim <<<"$shape"
if ! [[ "$q_heads" =~ ^[0-9]+$ && "$kv_heads" =~ ^[0-9]+$ && "$head_dim" =~ ^[0-9]+$ ]] ||
    [ "$kv_heads" -eq 0 ] || [ $((q_heads % kv_heads)) -ne 0 ]; then
    echo "[ggml-peer] EDGEKV_SHAPE=$shape: expected q_heads,kv_heads,head_dim with q_heads a multiple of kv_heads" >&2
    exit 2
fi
group=$((q_heads / kv_heads))

version=0.3.36
sdist="llama_cpp_python-$version.tar.gz"
src="$cache/llama_cpp_python-$version/vendor/llama.cpp"
cmake_flags=(-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF
    -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release)
build="$cache/build-$version"
bin="$build/bin/test-backend-ops"

log() { echo "[ggml-peer] $*" >&2; }

# --- cmake and ninja ---------------------------------------------------------------------------
# The build needs cmake; `pip download` of the sdist needs both, to prepare its metadata without
# building them from source in its isolated environment.
if ! command -v cmake >/dev/null 2>&1 || ! command -v ninja >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        log "cmake or ninja is missing and this is not root: install them (apt-get install -y cmake ninja-build)"
        exit 1
    fi
    log "installing cmake and ninja with apt"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake ninja-build >/dev/null
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
    log "pip is missing: install it (apt-get install -y python3-pip) and run again"
    exit 1
fi

# --- llama-cpp-python sdist (vendors llama.cpp) ------------------------------------------------
mkdir -p "$cache"
if [ ! -f "$cache/$sdist" ]; then
    log "fetching $sdist with pip download (77 MB, once)"
    python3 -m pip download --no-deps --no-binary llama-cpp-python --dest "$cache" \
        "llama-cpp-python==$version" >&2
    [ -f "$cache/$sdist" ] || { log "pip download did not leave $cache/$sdist"; exit 1; }
fi
if [ ! -f "$src/tests/test-backend-ops.cpp" ]; then
    log "unpacking $sdist"
    tar -xzf "$cache/$sdist" -C "$cache"
fi

# --- test-backend-ops, patched, built once per (patch, flags) ----------------------------------
stamp="$( (cat "$here/patch-test-backend-ops.py"; echo "${cmake_flags[*]}") | sha256sum | cut -c1-16)"
if [ -x "$bin" ] && [ "$(cat "$build/.edgekv-peer-stamp" 2>/dev/null)" = "$stamp" ]; then
    log "test-backend-ops is built ($bin)"
else
    # Pristine test file from the sdist, then the patch: a changed patch applies cleanly.
    tar -xzf "$cache/$sdist" -C "$cache" \
        "llama_cpp_python-$version/vendor/llama.cpp/tests/test-backend-ops.cpp"
    python3 "$here/patch-test-backend-ops.py" "$src/tests/test-backend-ops.cpp" >&2
    log "building test-backend-ops (niced, -j2; the first build takes a while)"
    nice -n 10 cmake -S "$src" -B "$build" "${cmake_flags[@]}" >"$build.configure.log" 2>&1 ||
        { tail -30 "$build.configure.log" >&2; exit 1; }
    nice -n 10 cmake --build "$build" --target test-backend-ops -j2 >"$build.build.log" 2>&1 ||
        { tail -30 "$build.build.log" >&2; exit 1; }
    echo "$stamp" >"$build/.edgekv-peer-stamp"
fi

# --- edgekv's bench binary ---------------------------------------------------------------------
log "building edgekv's attention bench (niced)"
edgekv_bin="$(cd "$repo" && nice -n 10 cargo bench -p edgekv-host-tests --bench attention --no-run \
    --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "attention" and m.get("executable"):
        print(m["executable"])')"
[ -x "$edgekv_bin" ] || { log "could not build the attention bench"; exit 1; }

if [ "${EDGEKV_PEER_BUILD_ONLY:-0}" = 1 ]; then
    log "built: $bin and $edgekv_bin"
    exit 0
fi

# --- measurement -------------------------------------------------------------------------------
# ggml: one perf case per call (test-backend-ops averages over a loop of at least 1 s, one
# thread). The params regex picks the case the patch added; the check below makes sure exactly
# that one ran, on one thread.
ggml_us() { # ctx type
    local ctx="$1" t="$2" out
    out="$("$bin" perf -o FLASH_ATTN_EXT -b CPU \
        -p "^hsk=$head_dim,hsv=$head_dim,nh=$kv_heads,nr23=\[$group,1\],kv=$ctx,nb=1,mask=1,sinks=0,max_bias=0\.0+,logit_softcap=0\.0+,prec=f32,type_K=$t,type_V=$t,permute=\[0,1,2,3\]," \
        2>"$tmp/ggml.err")" || { cat "$tmp/ggml.err" >&2; return 1; }
    grep -q "CPU backend threads = 1$" "$tmp/ggml.err" ||
        { log "ggml did not report 1 thread:"; cat "$tmp/ggml.err" >&2; return 1; }
    # One case (upstream's own perf cases include some of these shapes: a case listed twice runs
    # twice, and its first run counts).
    [ "$(grep 'us/run' <<<"$out" | sed -E 's/\):.*//' | sort -u | wc -l)" = 1 ] ||
        { log "expected one FLASH_ATTN_EXT case for kv=$ctx $t:"; echo "$out" >&2; return 1; }
    grep -m1 'us/run' <<<"$out" | sed -E 's/.* runs - +([0-9.]+) us\/run.*/\1/'
}
# edgekv: one measurement per call of the bench binary.
edgekv_us() { # ctx what
    local line
    line="$(EDGEKV_SHAPE="$shape" EDGEKV_PEER_CTX="$1" EDGEKV_PEER_WHAT="$2" EDGEKV_PEER_BATCHES="$edgekv_rounds" \
        "$edgekv_bin" | grep '^edgekv-peer ')"
    echo "$line" >>"$tmp/edgekv.lines"
    sed -E 's/.* median_us=([0-9.]+) .*/\1/' <<<"$line"
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
load_before="$(uptime)"
log "shape $shape: $rounds rounds x contexts ($ctxs); load before: $load_before"
: >"$tmp/results.tsv"
for r in $(seq 1 "$rounds"); do
    for ctx in $ctxs; do
        g8="$(ggml_us "$ctx" q8_0)"
        e8="$(edgekv_us "$ctx" q8_0)"
        g16="$(ggml_us "$ctx" f16)"
        e16="$(edgekv_us "$ctx" f16)"
        mc="$(edgekv_us "$ctx" memcpy)"
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$ctx" "$g8" "$e8" "$g16" "$e16" "$mc" |
            tee -a "$tmp/results.tsv" >&2
    done
done
load_after="$(uptime)"

echo "ggml FLASH_ATTN_EXT (llama-cpp-python $version's llama.cpp, test-backend-ops perf, 1 thread)"
echo "vs edgekv KvCache::attention, decode shape $shape (q_heads,kv_heads,head_dim; 1 row);"
echo "median over $rounds alternating rounds, µs per call; $(date -u '+%Y-%m-%d %H:%M UTC')"
python3 - "$tmp/results.tsv" <<'EOF2'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
ctxs = list(dict.fromkeys(int(r[1]) for r in rows))
hdr = ("ctx", "ggml q8_0", "edgekv q8_0", "ggml/edgekv", "ggml f16", "edgekv f16",
       "ggml/edgekv", "memcpy", "memcpy/edgekv q8_0")
print("| " + " | ".join(hdr) + " |")
print("|" + "|".join("---:" for _ in hdr) + "|")
for c in ctxs:
    m = [statistics.median(float(r[i]) for r in rows if int(r[1]) == c) for i in range(2, 7)]
    g8, e8, g16, e16, mc = m
    print(f"| {c} | {g8:.2f} | {e8:.2f} | {g8 / e8:.2f} | {g16:.2f} | {e16:.2f} | "
          f"{g16 / e16:.2f} | {mc:.2f} | {mc / e8:.2f} |")
# On a noisy machine the rounds drift together: each round's own ratios, then their median.
print()
print("median of each round's ratios (the two sides of a ratio measured a second apart):")
hdr = ("ctx", "ggml/edgekv q8_0", "ggml/edgekv f16", "memcpy/edgekv q8_0")
print("| " + " | ".join(hdr) + " |")
print("|" + "|".join("---:" for _ in hdr) + "|")
for c in ctxs:
    rs = [[float(v) for v in r[2:7]] for r in rows if int(r[1]) == c]
    q8 = statistics.median(g8 / e8 for g8, e8, _, _, _ in rs)
    f16 = statistics.median(g16 / e16 for _, _, g16, e16, _ in rs)
    mem = statistics.median(mc / e8 for _, e8, _, _, mc in rs)
    print(f"| {c} | {q8:.2f} | {f16:.2f} | {mem:.2f} |")
EOF2
echo "load before: $load_before"
echo "load after:  $load_after"
echo "memcpy bytes (the K+V bytes of the Q8_0 pages, values and scales):" \
    "$(awk '/what=memcpy/ { c = ""; b = ""; for (i = 1; i <= NF; i++) {
            if ($i ~ /^ctx=/) c = substr($i, 5); if ($i ~ /^bytes=/) b = substr($i, 7) }
        print "ctx " c ": " b }' "$tmp/edgekv.lines" | sort -u -n -k2 | paste -sd ';' | sed 's/;/; /g')"
