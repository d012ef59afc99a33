#!/usr/bin/env python3
"""llama.cpp's outputs for a GGUF model, the reference of `model/tests/gemma.rs` (Gemma 3 270M,
`--out model/tests/gemma_data`, the default) and `model/tests/smollm2.rs` (SmolLM2-135M,
`--tokens 256 --out model/tests/smollm2_data`).

Runs llama.cpp (llama-cpp-python 0.3.36 built from its sdist, numpy) on the GGUF with an f16 K/V
cache and flash attention on (`LLAMA_ATTN_ROT_DISABLE=1` too, which only matters for quantized
caches), teacher-forcing the first tokens of /usr/share/common-licenses/GPL-3 as llama.cpp's
tokenizer gives them (BOS first where the GGUF asks for one), and writes into OUT (default
`model/tests/gemma_data`):

- `gpl3.ids` (u32): the first --tokens ids; `gpl3.top1` (u32): llama.cpp's most likely token at
  each position; `gpl3.next` (f32): the log-probability of the next token at each position but
  the last; `gpl3.topk_ids` (u32) / `gpl3.topk_lp` (f32): its --k most likely tokens at each
  position with their log-probabilities (log-softmax in f64, stored as f32);
- `greedy.prompt` (u32), `greedy.ids` (u32), `greedy.gaps` (f32): a greedy continuation of a
  plain-text prompt, and at each step the gap between llama.cpp's two best logits;
- with `--full DIR`: `full.ids` (u32) and `full.logprobs` (f32, the whole log-softmax row of
  every position, 1 MiB each: not for the repository) for --full-tokens tokens, read by
  `model/tests/gemma.rs`'s ignored `full_gpl3_fidelity` from `~/.cache/edgekv/gemma3_270m/reference`
  (or `$EDGEKV_GEMMA_FULL`); it also prints llama.cpp's own noise floor (flash attention off
  against on: mean / max KL, top-1 agreement, perplexity);
- with `--kv-peers DIR` (DIR holding the `--full` files): nothing written; llama.cpp itself with
  q8_0 and q4_0 K/V pages, its cache rotation off and on, against the f16 reference rows in DIR
  (the peer of edgekv's quantized pages in `full_gpl3_fidelity`).

All files are little-endian raw arrays. Usage:
  python llama_reference.py --gguf "$(bash model/fetch-gemma.sh)" [--out DIR] [--full DIR]
  python llama_reference.py --gguf "$(bash model/fetch-model.sh)" --tokens 256 \
      --out model/tests/smollm2_data
"""

import argparse
import os
import sys

os.environ.setdefault("LLAMA_ATTN_ROT_DISABLE", "1")

import numpy as np  # noqa: E402
import llama_cpp  # noqa: E402

GREEDY_PROMPT = (
    "The GNU General Public License is a free, copyleft license for software and other kinds of"
    " works. The licenses for most software"
)


def load(gguf, n_ctx, flash, kv=None):
    kv = kv or llama_cpp.GGML_TYPE_F16
    return llama_cpp.Llama(
        model_path=gguf,
        n_ctx=n_ctx,
        n_batch=512,
        n_ubatch=512,
        n_threads=2,
        type_k=kv,
        type_v=kv,
        flash_attn=flash,
        logits_all=True,
        verbose=False,
    )


def log_softmax(rows):
    rows = rows.astype(np.float64)
    m = rows.max(axis=-1, keepdims=True)
    return rows - (m + np.log(np.exp(rows - m).sum(axis=-1, keepdims=True)))


def teacher_force(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def write(path, array, dtype):
    np.asarray(array, dtype=dtype).tofile(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "../../model/tests/gemma_data"))
    ap.add_argument("--tokens", type=int, default=640)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--greedy", type=int, default=32)
    ap.add_argument("--full", default=None)
    ap.add_argument("--full-tokens", type=int, default=1536)
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--kv-peers", default=None)
    a = ap.parse_args()
    if a.kv_peers:
        kv_peers(a.gguf, a.kv_peers)
        return
    text = open(a.text, "rb").read()
    n_ctx = max(a.tokens, a.full_tokens if a.full else 0, 256)
    llm = load(a.gguf, n_ctx, True)
    all_ids = llm.tokenize(text, add_bos=True, special=False)
    print(f"GPL-3: {len(all_ids)} ids; first {all_ids[:8]}", file=sys.stderr)
    os.makedirs(a.out, exist_ok=True)

    ids = all_ids[: a.tokens]
    lp = log_softmax(teacher_force(llm, ids))
    top1 = lp.argmax(axis=-1)
    nxt = lp[np.arange(len(ids) - 1), ids[1:]]
    order = np.argsort(-lp, axis=-1, kind="stable")[:, : a.k]
    write(os.path.join(a.out, "gpl3.ids"), ids, "<u4")
    write(os.path.join(a.out, "gpl3.top1"), top1, "<u4")
    write(os.path.join(a.out, "gpl3.next"), nxt, "<f4")
    write(os.path.join(a.out, "gpl3.topk_ids"), order, "<u4")
    write(os.path.join(a.out, "gpl3.topk_lp"), np.take_along_axis(lp, order, axis=-1), "<f4")
    mass = np.exp(np.take_along_axis(lp, order, axis=-1)).sum(axis=-1)
    print(
        f"teacher-forced {len(ids)} tokens: perplexity {np.exp(-nxt.mean()):.4f}, "
        f"top-{a.k} mass mean {mass.mean():.4f} min {mass.min():.4f}",
        file=sys.stderr,
    )

    prompt = llm.tokenize(GREEDY_PROMPT.encode(), add_bos=True, special=False)
    llm.reset()
    llm.eval(prompt)
    out, gaps = [], []
    for _ in range(a.greedy):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        two = np.argsort(-row, kind="stable")[:2]
        out.append(int(two[0]))
        gaps.append(float(row[two[0]] - row[two[1]]))
        llm.eval([int(two[0])])
    write(os.path.join(a.out, "greedy.prompt"), prompt, "<u4")
    write(os.path.join(a.out, "greedy.ids"), out, "<u4")
    write(os.path.join(a.out, "greedy.gaps"), gaps, "<f4")
    print(f"greedy: {out}\n  {llm.detokenize(out)!r}\n  gaps {np.round(gaps, 3)}", file=sys.stderr)

    if a.full:
        os.makedirs(a.full, exist_ok=True)
        ids = all_ids[: a.full_tokens]
        write(os.path.join(a.full, "full.ids"), ids, "<u4")
        path = os.path.join(a.full, "full.logprobs")
        on_next, on_top = full_rows(llm, ids, path)
        print(f"full: {len(ids)} tokens, perplexity {np.exp(-np.mean(on_next)):.4f}", file=sys.stderr)
        # llama.cpp's own noise floor: flash attention off against on.
        del llm
        off = load(a.gguf, n_ctx, False)
        off.reset()
        off.eval(ids)
        on = np.memmap(path, dtype="<f4", mode="r", shape=(len(ids), off.n_vocab()))
        kl, agree, off_next = [], 0, []
        for t0 in range(0, len(ids), 128):
            lp_off = log_softmax(np.array(off.scores[t0 : t0 + 128], dtype=np.float32))
            lp_on = on[t0 : t0 + 128].astype(np.float64)
            kl.extend((np.exp(lp_on) * (lp_on - lp_off)).sum(axis=-1))
            agree += int((lp_off.argmax(axis=-1) == lp_on.argmax(axis=-1)).sum())
            for i in range(len(lp_off)):
                if t0 + i + 1 < len(ids):
                    off_next.append(lp_off[i, ids[t0 + i + 1]])
        kl = np.array(kl)
        print(
            f"flash attention off vs on: mean KL {kl.mean():.3e} max {kl.max():.3e}, "
            f"top-1 agreement {100 * agree / len(ids):.2f} %, "
            f"perplexity off {np.exp(-np.mean(off_next)):.4f}",
            file=sys.stderr,
        )


def compare(llm, ids, path):
    """Teacher-forces `ids` through `llm` and compares its rows with the log-softmax rows in
    `path`: mean and max KL(reference || llm), top-1 agreement, llm's perplexity."""
    llm.reset()
    llm.eval(ids)
    ref = np.memmap(path, dtype="<f4", mode="r", shape=(len(ids), llm.n_vocab()))
    kl, agree, nxt = [], 0, []
    for t0 in range(0, len(ids), 128):
        lp = log_softmax(np.array(llm.scores[t0 : t0 + 128], dtype=np.float32))
        lp_ref = ref[t0 : t0 + 128].astype(np.float64)
        kl.extend((np.exp(lp_ref) * (lp_ref - lp)).sum(axis=-1))
        agree += int((lp.argmax(axis=-1) == lp_ref.argmax(axis=-1)).sum())
        for i in range(len(lp)):
            if t0 + i + 1 < len(ids):
                nxt.append(lp[i, ids[t0 + i + 1]])
    kl = np.array(kl)
    return kl.mean(), kl.max(), agree / len(ids), float(np.exp(-np.mean(nxt)))


def kv_peers(gguf, full):
    """llama.cpp with quantized K/V (flash attention on), its rotation off and on, against the
    f16 reference rows of `--full`."""
    ids = np.fromfile(os.path.join(full, "full.ids"), dtype="<u4").tolist()
    path = os.path.join(full, "full.logprobs")
    for name, kv in (("q8_0", llama_cpp.GGML_TYPE_Q8_0), ("q4_0", llama_cpp.GGML_TYPE_Q4_0)):
        for rot in ("1", "0"):
            os.environ["LLAMA_ATTN_ROT_DISABLE"] = rot
            llm = load(gguf, len(ids), True, kv)
            kl, kl_max, agree, ppl = compare(llm, ids, path)
            del llm
            print(
                f"llama.cpp {name} K/V, rotation {'off' if rot == '1' else 'on'}: "
                f"top-1 {100 * agree:.2f} %, mean KL {kl:.3e} (max {kl_max:.3e}), "
                f"perplexity {ppl:.4f}",
                file=sys.stderr,
            )


def full_rows(llm, ids, path):
    """Teacher-forces `ids` and writes every position's log-softmax (f32) to `path`, 128 rows at a
    time; returns the next tokens' log-probabilities and the top-1 ids."""
    llm.reset()
    llm.eval(ids)
    nxt, top = [], []
    with open(path, "wb") as f:
        for t0 in range(0, len(ids), 128):
            lp = log_softmax(np.array(llm.scores[t0 : t0 + 128], dtype=np.float32))
            lp.astype("<f4").tofile(f)
            top.extend(lp.argmax(axis=-1))
            for i in range(len(lp)):
                if t0 + i + 1 < len(ids):
                    nxt.append(lp[i, ids[t0 + i + 1]])
    return nxt, top


if __name__ == "__main__":
    main()
