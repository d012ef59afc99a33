#!/usr/bin/env python3
"""Writes llama.cpp's token ids for Gemma 3 270M's tokenizer (model/tests/gemma_tokenizer.rs).

Run with llama-cpp-python (built from its sdist, 0.3.36) installed:
    python3 gen_gemma_tokens.py GGUF
Writes, beside this script:
  gemma_gpl3_ids.txt   the ids of /usr/share/common-licenses/GPL-3 as a document (BOS, control
                       tokens' texts as plain text), one per line
  gemma_cases.json     ids of short texts, as documents and with control tokens matched (chat
                       prompts in Gemma's template among them)
"""
import json
import os
import sys

from llama_cpp import Llama

here = os.path.dirname(os.path.abspath(__file__))
llm = Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)


def ids(text, bos, special):
    return llm.tokenize(text.encode("utf-8"), add_bos=bos, special=special)


gpl = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()
with open(os.path.join(here, "gemma_gpl3_ids.txt"), "w") as f:
    f.write("\n".join(str(i) for i in ids(gpl, True, False)) + "\n")

texts = [
    "",
    "Hello, world! The quick brown fox.",
    " leading space and  two   three",
    "tabs\tand\r\nCRLF\n\n\nnewlines",
    "don't we'll they're I'M",
    "Unicode: naïve café, Ελληνικά, 日本語, emoji 🦀 and \u0007 bell",
    "fn main() { println!(\"{}\", 2 + 2); }",
    "<table><tr><td>cell</td></tr></table> <b>bold</b>",
    "literal <start_of_turn> and <bos> text",
    "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nContinue the notes: greenhouse bed A was watered at 7:00,<end_of_turn>\n"
    "<start_of_turn>model\nbed B at 7:15,<end_of_turn>\n<start_of_turn>model\n",
]
cases = [
    {"text": t, "document": ids(t, True, False), "special": ids(t, False, True)}
    for t in texts
]
with open(os.path.join(here, "gemma_cases.json"), "w") as f:
    f.write("[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n]\n")
