#!/usr/bin/env python3
"""Makes tests/data/references-gemma3.json: llama.cpp's outputs on Gemma 3 270M.

The same schema as scripts/make-references.py (tests/test_reference.c reads
both files), on the file scripts/fetch-model gemma3 fetches and on small
random-weight gemma3 models that cllm-gen-model writes (the test writes them
again, byte for byte):

  "gemma3-rand-*" random weights, 6 layers, a sliding window of 4 positions on
                  layers 0-4 (layer 5 is global), so that every prompt
                  crosses the window.
  "gemma3"        llama.cpp on the Q4_K_M file as it is: the tokenization of
                  the prompts (and of the "tokenize" texts, which cover
                  non-ASCII, digits, code, whitespace runs and emoji), the
                  logits after each prompt and 24 greedy tokens. One prompt
                  is longer than the 512-token sliding window of the local
                  layers.
  "gemma3-exact"  llama.cpp on its own F32 dequantization of that file (float
                  activations), which the test compares with cllm's
                  F32-activation path.

    python3 -m venv .venv && .venv/bin/pip install llama-cpp-python numpy
    .venv/bin/python scripts/make-references-gemma3.py --gen-model build/cllm-gen-model
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from llama_cpp import Llama, __version__ as llama_cpp_version

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VOCAB = os.path.join(ROOT, "tests", "data", "models", "vocab")

GENERATED = [
    (f"gemma3-rand-{t}", ["--arch", "gemma3", "--vocab", "ggml-vocab-llama-spm.gguf",
                          "--n-embd", "64", "--n-layer", "6", "--n-head", "4", "--n-head-kv", "2",
                          "--n-ff", "128", "--n-ctx", "1024", "--swa", "4", "--type", t,
                          "--seed", "31"])
    for t in ["f32", "q8_0"]
]

N_CTX = 1024
# cllm decodes these cases this many tokens at a time, so that the rings of
# the sliding-window layers (window + batch - 1 rows) wrap many times over the
# long prompt; llama.cpp's outputs do not depend on it
N_BATCH = {"gemma3-rand-f32": 8, "gemma3-rand-q8_0": 8, "gemma3": 64}


def long_prompt():
    """About 730 tokens: a fact at the start, then numbered filler lines, so
    that the local layers' window (512) cuts the start off."""
    lines = ["The password of the blue door is 'marmalade'. Remember it."]
    for i in range(1, 36):
        lines.append(f"Line {i}: the train left station {i} at {i % 12 + 1} o'clock.")
    lines.append("Question: what is the password of the blue door? Answer:")
    return "\n".join(lines)


PROMPTS = [
    "Once upon a time",
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n",
    long_prompt(),
]

# Tokenization only (with BOS, special tokens parsed as the flag says).
TOKENIZE = [
    ("Grüße aus Köln — naïve café, 日本語のテキスト, Привет мир, مرحبا", False),
    ("1234567890 3.14159 2026-11-25 1,000,000 0x1F", False),
    ("    four spaces\t\ttwo tabs\n\n\nthree newlines   end  ", False),
    ("emoji 🙂👍🏽 🇫🇷 ✨🚀 and ZWJ 👩‍💻", False),
    ("int main(void) { return x << 2 && y != 0; } // done", False),
    ("  leading and trailing  ", False),
    ("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", True),
    ("<start_of_turn> as text, not a token", False),
]

N_TOP = 40
N_SAMPLE = 64
N_GREEDY = 24


def fetch(name):
    out = subprocess.run([os.path.join(HERE, "fetch-model"), name], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def dequantize(src, dst):
    """llama.cpp's quantizer, asked for F32: every weight dequantized exactly."""
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = 0  # LLAMA_FTYPE_ALL_F32
    params.allow_requantize = True
    params.nthread = 2
    if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params) != 0:
        raise RuntimeError(f"llama.cpp could not dequantize {src}")


def run_case(path, with_tokenize, prompts=None):
    prompts = prompts or PROMPTS
    llm = Llama(model_path=path, n_ctx=N_CTX, n_batch=N_CTX, n_threads=2, logits_all=True,
                verbose=False, seed=0)
    n_vocab = llm.n_vocab()
    rng = np.random.default_rng(1234)
    sample_ids = sorted(int(i) for i in rng.choice(n_vocab, size=N_SAMPLE, replace=False))
    results = []
    for text in prompts:
        # the chat prompt is given as the template renders it: its markers
        # are the special tokens
        special = text.startswith("<start_of_turn>")
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)
        llm.reset()
        llm.eval(ids)
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        top = np.argsort(-logits, kind="stable")[:N_TOP]
        greedy = []
        for _ in range(N_GREEDY):
            tok = int(np.argmax(np.array(llm.scores[llm.n_tokens - 1])))
            greedy.append(tok)
            llm.eval([tok])
        results.append({
            "prompt": text,
            "special": special,
            "prompt_ids": [int(t) for t in ids],
            "top_ids": [int(t) for t in top],
            "top_logits": [round(float(logits[t]), 5) for t in top],
            "sample_ids": sample_ids,
            "sample_logits": [round(float(logits[t]), 5) for t in sample_ids],
            "greedy_ids": greedy,
            "greedy_text": llm.detokenize(greedy).decode("utf-8", errors="replace"),
        })
    case = {"n_vocab": n_vocab, "n_ctx": N_CTX, "prompts": results}
    if with_tokenize:
        case["tokenize"] = [
            {"text": text, "special": special,
             "ids": [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=True,
                                                  special=special)]}
            for text, special in TOKENIZE]
    return case


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen-model", required=True, help="path of the cllm-gen-model executable")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data",
                                                  "references-gemma3.json"))
    args = ap.parse_args()

    cases = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, gen_args in GENERATED:
            gen_args = [os.path.join(VOCAB, a) if a.endswith(".gguf") else a for a in gen_args]
            path = os.path.join(tmp, name + ".gguf")
            subprocess.run([args.gen_model, *gen_args, "--out", path], check=True)
            print(f"{name}: llama.cpp", file=sys.stderr)
            # the chat prompt's markers are not tokens of this vocabulary
            cases[name] = {"generate": [a if not a.endswith(".gguf") else os.path.basename(a)
                                        for a in gen_args], "add_bos": True,
                           "n_batch": N_BATCH[name],
                           **run_case(path, False, [p for p in PROMPTS if "<" not in p])}
    model = fetch("gemma3")
    print("gemma3: llama.cpp", file=sys.stderr)
    cases["gemma3"] = {"model": "gemma3", "add_bos": True, "n_batch": N_BATCH["gemma3"],
                       **run_case(model, True)}
    with tempfile.TemporaryDirectory() as tmp:
        exact = os.path.join(tmp, "gemma3-f32.gguf")
        dequantize(model, exact)
        print("gemma3-exact: llama.cpp on F32", file=sys.stderr)
        cases["gemma3-exact"] = {"model": "gemma3", "add_bos": True, "f32_activations": True,
                                 **run_case(exact, False)}

    doc = {
        "about": "llama.cpp outputs on Gemma 3 270M, made by scripts/make-references-gemma3.py",
        "llama_cpp_python": llama_cpp_version,
        "kv_cache": "f16",
        "cases": cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
