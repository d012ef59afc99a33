#!/usr/bin/env python3
"""Patch llama.cpp's tests/test-backend-ops.cpp for the edgekv peer benchmark.

Applied at build time by ggml-attention.sh to the llama.cpp sources vendored in the
llama-cpp-python 0.3.36 sdist (no llama.cpp source is kept in this repository). Two edits:

1. `make_test_cases_perf()` gets FLASH_ATTN_EXT perf cases for the decode shapes of five edge
   models (head_dim, KV heads, query heads per KV head): SmolLM2-135M (64, 3, 3), Gemma 3 270M
   (256, 1, 4), Qwen3-0.6B (128, 8, 2), Llama 3.2 1B (64, 8, 4), SmolLM2-360M (64, 5, 3); as
   hsk = hsv = head_dim, nh = KV heads, nr23 = {group, 1}, nb = 1 query row, kv in {512, 2048, 8192}, mask on, no sinks, max_bias 0, softcap 0, GGML_PREC_F32 (the
   constructor's default and what llama.cpp's graph sets; the CPU backend treats
   GGML_PREC_DEFAULT the same), K/V q8_0/q8_0 and f16/f16, the remaining arguments at their
   defaults (permute {0,1,2,3}, K/V as views of a larger cache buffer, n_kv_max 0).
2. The CPU backend's thread count, `max(1, hardware_concurrency()/2)` upstream, is set to 1
   (or EDGEKV_PEER_GGML_THREADS if set), and printed to stderr so the run shows it.

Idempotent: a file already patched is left as is. Fails loudly if an anchor is missing.
"""

import sys

MARK = "// edgekv-peer: edge models' decode shapes"

CASES = """
    {MARK} (head_dim, KV heads, query heads per KV head; one query row)
    for (auto s : std::vector<std::array<int64_t, 3>>{{{{64, 3, 3}}, {{256, 1, 4}}, {{128, 8, 2}}, {{64, 8, 4}}, {{64, 5, 3}}}}) {{
        for (int64_t kv : {{512, 2048, 8192}}) {{
            for (ggml_type t : {{GGML_TYPE_Q8_0, GGML_TYPE_F16}}) {{
                test_cases.emplace_back(new test_flash_attn_ext(s[0], s[0], s[1], {{s[2], 1}}, kv, 1, true, false, 0.0f,
                                                                0.0f, GGML_PREC_F32, t, t));
            }}
        }}
    }}
""".format(MARK=MARK)

PERF_ANCHOR = (
    "static std::vector<std::unique_ptr<test_case>> make_test_cases_perf() {\n"
    "    std::vector<std::unique_ptr<test_case>> test_cases;\n"
)

THREADS_OLD = "ggml_backend_set_n_threads_fn(backend.get(), std::max<int>(1, N_THREADS/2));"
THREADS_NEW = (
    "{ const char * edgekv_t = getenv(\"EDGEKV_PEER_GGML_THREADS\");"
    " const int edgekv_nt = edgekv_t ? std::max(1, atoi(edgekv_t)) : 1;"
    " fprintf(stderr, \"edgekv-peer: CPU backend threads = %d\\n\", edgekv_nt);"
    " ggml_backend_set_n_threads_fn(backend.get(), edgekv_nt); }"
)


def main() -> int:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} path/to/tests/test-backend-ops.cpp", file=sys.stderr)
        return 2
    path = sys.argv[1]
    with open(path, encoding="utf-8") as f:
        src = f.read()
    if MARK in src:
        print(f"{path}: already patched")
        return 0
    if src.count(PERF_ANCHOR) != 1:
        print(f"{path}: make_test_cases_perf() anchor not found exactly once", file=sys.stderr)
        return 1
    if src.count(THREADS_OLD) != 1:
        print(f"{path}: thread-count anchor not found exactly once", file=sys.stderr)
        return 1
    src = src.replace(PERF_ANCHOR, PERF_ANCHOR + CASES)
    src = src.replace(THREADS_OLD, THREADS_NEW)
    with open(path, "w", encoding="utf-8") as f:
        f.write(src)
    print(f"{path}: patched")
    return 0


if __name__ == "__main__":
    sys.exit(main())
