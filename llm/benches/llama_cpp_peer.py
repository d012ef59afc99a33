#!/usr/bin/env python3
"""llama.cpp's host tokens/s beside `forward.rs` (the peer of its rounds).

Runs llama.cpp through llama-cpp-python (0.3.36, built from its sdist as host-tests/peer does)
on the same GGUF and the same prompt token ids: f16 K/V cache, flash attention on, one batch of
up to 512 tokens for the prefill, then greedy decode one token at a time. Prints one line:

    llama.cpp threads=N prefill_tps=... decode_tps=... tokens=a,b,c

Usage: python llama_cpp_peer.py --gguf PATH --threads N --decode D --ids 1,2,3,...
"""

import argparse
import time

import numpy as np
import llama_cpp


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gguf", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--decode", type=int, default=32)
    p.add_argument("--ids", required=True)
    a = p.parse_args()
    prompt = [int(t) for t in a.ids.split(",")]
    llm = llama_cpp.Llama(
        model_path=a.gguf,
        n_ctx=max(512, len(prompt) + a.decode + 16),
        n_batch=512,
        n_ubatch=512,
        n_threads=a.threads,
        n_threads_batch=a.threads,
        type_k=llama_cpp.GGML_TYPE_F16,
        type_v=llama_cpp.GGML_TYPE_F16,
        flash_attn=True,
        logits_all=False,
        verbose=False,
    )
    # A warm-up evaluation (first-touch of the weights), then the timed prompt from scratch.
    llm.eval(prompt[:8])
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    prefill = time.perf_counter() - t0
    out = []
    t1 = time.perf_counter()
    for _ in range(a.decode):
        # The last evaluated token's logits (llama-cpp-python fills `scores` only with
        # logits_all, which would make llama.cpp compute every prompt row's logits).
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
        tok = int(np.argmax(logits))
        out.append(tok)
        llm.eval([tok])
    decode = time.perf_counter() - t1
    print(
        f"llama.cpp threads={a.threads} prefill_tps={len(prompt) / prefill:.3f} "
        f"decode_tps={a.decode / decode:.3f} tokens={','.join(map(str, out))}"
    )


if __name__ == "__main__":
    main()
