#!/usr/bin/env python3
"""Reference blocks for edgekv-llm's weight-type tests (`llm/tests/kquants.rs`).

For each ggml weight type the crate reads (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) this
writes `kquants/<type>.blocks` (raw blocks as a GGUF stores them) and `kquants/<type>.f32` (their
dequantization by gguf-py's `gguf.quants.dequantize`, little-endian f32), a few KB each:

- the 32-value types: random normal rows quantized by gguf-py's `gguf.quants.quantize`, plus
  raw blocks (random bytes with finite f16 scales) and edge blocks (zero, ±65504 and subnormal
  scales, all codes 0 / all codes maximal, a zero minimum);
- the K-quants (gguf-py dequantizes but does not quantize them): raw super-blocks of random
  bytes with finite f16 scales, plus edge super-blocks (every 6-bit scale and minimum 63 or 0,
  all codes 0 / maximal, negative and subnormal `d`, Q6_K scales −128 and 127).

With `--gguf FILE` it also writes `kquants/real-<type>.{blocks,f32}`: the first row of the first
tensor of each quantized type in that GGUF (Gemma 3 270M's Q4_K_M file, from
`model/fetch-gemma.sh`), dequantized by gguf-py, and `kquants/real-tensors.txt` (name, type,
shape of every tensor) for the real-model test.

Run (gguf 0.19.0, numpy 2.x; `pip install gguf numpy`), from the repository root:

    python3 llm/tests/data/gen_kquants.py \
        --gguf "$(bash model/fetch-gemma.sh)"

The output is deterministic (fixed seeds).
"""

import argparse
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf.quants import dequantize, quantize

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kquants")

# name: (type, values per block, bytes per block, offsets of the f16 scales in a block)
TYPES = {
    "q4_0": (T.Q4_0, 32, 18, [0]),
    "q4_1": (T.Q4_1, 32, 20, [0, 2]),
    "q5_0": (T.Q5_0, 32, 22, [0]),
    "q5_1": (T.Q5_1, 32, 24, [0, 2]),
    "q8_0": (T.Q8_0, 32, 34, [0]),
    "q4_k": (T.Q4_K, 256, 144, [0, 2]),
    "q5_k": (T.Q5_K, 256, 176, [0, 2]),
    "q6_k": (T.Q6_K, 256, 210, [208]),
}


def f16_bytes(v):
    return np.array([v], dtype=np.float16).view(np.uint8)


def random_scale(rng):
    # Finite f16 of moderate size and either sign.
    return np.float16(rng.normal() * 0.05)


def raw_blocks(rng, nbytes, scales, n):
    out = rng.integers(0, 256, size=(n, nbytes), dtype=np.uint8)
    for b in out:
        for at in scales:
            b[at : at + 2] = f16_bytes(random_scale(rng))
    return out


def edge_blocks(name, nbytes, scales):
    blocks = []
    for fill in (0x00, 0xFF, 0x5A):
        for s in (65504.0, -6.0e-8, 1.0, -0.0):
            b = np.full(nbytes, fill, dtype=np.uint8)
            for i, at in enumerate(scales):
                # Second scale (a minimum or dmin): 0 for one case, else the same magnitude.
                v = 0.0 if (i == 1 and s == 1.0) else s
                b[at : at + 2] = f16_bytes(v)
            if name == "q6_k" and fill == 0x5A:
                b[192:208] = np.array([0x80, 0x7F] * 8, dtype=np.uint8)  # scales -128, 127
            blocks.append(b)
    return np.stack(blocks)


def write(stem, blocks, values):
    with open(os.path.join(OUT, stem + ".blocks"), "wb") as f:
        f.write(blocks.astype(np.uint8).tobytes())
    with open(os.path.join(OUT, stem + ".f32"), "wb") as f:
        f.write(values.astype("<f4").tobytes())


def synthetic():
    rng = np.random.default_rng(45)
    for name, (qtype, nval, nbytes, scales) in TYPES.items():
        parts = []
        if nval == 32:
            x = rng.normal(size=(4, 32)).astype(np.float32) * np.float32(0.3)
            x[1, 5] = np.float32(-4.0)  # a negative extreme sets the scale's sign
            x[2, :] = 0.0
            parts.append(quantize(x, qtype).reshape(-1, nbytes))
            parts.append(raw_blocks(rng, nbytes, scales, 4))
            edges = edge_blocks(name, nbytes, scales)
            parts.append(edges[::2])
        else:
            parts.append(raw_blocks(rng, nbytes, scales, 3))
            edges = edge_blocks(name, nbytes, scales)
            parts.append(edges[[0, 4, 5, 10, 11]])
        blocks = np.concatenate(parts)
        values = dequantize(blocks.reshape(-1), qtype).reshape(-1)
        assert values.size == blocks.shape[0] * nval
        write(name, blocks, values)
        print(f"{name}: {blocks.shape[0]} blocks")


def real(path):
    reader = GGUFReader(path)
    seen = set()
    lines = []
    for t in reader.tensors:
        ty = T(t.tensor_type)
        shape = [int(d) for d in t.shape]
        lines.append(f"{t.name} {ty.name} {' '.join(map(str, shape))}")
        name = ty.name.lower()
        if name not in TYPES or name in seen:
            continue
        seen.add(name)
        _, nval, nbytes, _ = TYPES[name]
        row_len = shape[0]
        raw = np.asarray(t.data).reshape(-1).view(np.uint8)
        row = raw[: row_len // nval * nbytes]
        values = dequantize(row, ty).reshape(-1)
        assert values.size == row_len
        write("real-" + name, row, values)
        print(f"real {name}: {t.name} row of {row_len}")
    with open(os.path.join(OUT, "real-tensors.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", help="a real GGUF (Gemma 3 270M Q4_K_M) for real-<type> rows")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    synthetic()
    if args.gguf:
        real(args.gguf)


if __name__ == "__main__":
    main()
