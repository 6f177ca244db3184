#!/usr/bin/env python3
"""Makes tests/data/embeddings-references.json: llama.cpp's embeddings of a
few texts on SmolLM2-135M-Instruct (Q4_1) and Gemma 3 270M (Q4_K_M), the
files scripts/fetch-model fetches, for tests/test_embed.c.

It runs llama.cpp's llama-embedding (examples/embedding of the llama.cpp
that llama-cpp-python 0.3.36 vendors, built against that tree's libllama)
once per model, text and pooling:

    llama-embedding -m FILE -p TEXT --pooling P --embd-normalize 2
                    --embd-output-format json -c 512 -t 2

Neither file sets <arch>.pooling_type, so llama.cpp's own default pooling
for them is "none" (one vector per token); cllm's default there is "mean".
The file records both, and the vectors of every pooling llama.cpp offers
for a causal model: mean, cls, last, and none (each token's vector, each
normalized, as llama-embedding prints them).

    python3 scripts/make-embedding-references.py --llama-bin PATH/TO/llama.cpp/build/bin
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODELS = ["smollm2", "gemma3"]
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital and largest city of France.",
    "def add(a, b): return a + b  # the sum of two numbers",
]
# (one line each: llama-embedding reads a prompt's lines as texts of their own)
POOLINGS = ["mean", "cls", "last"]
# pooling none prints a vector per token: only the first text
NONE_TEXTS = TEXTS[:1]


def fetch(name):
    out = subprocess.run([os.path.join(HERE, "fetch-model"), name], check=True,
                         capture_output=True, text=True).stdout.strip().splitlines()
    return out[-1]


def embed(binary, model, text, pooling):
    cmd = [binary, "-m", model, "-p", text, "--pooling", pooling, "--embd-normalize", "2",
           "--embd-output-format", "json", "-c", "512", "-t", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr[-2000:]}")
    # the JSON list is printed to standard output; logs go to standard error
    start = r.stdout.index("{")
    doc = json.loads(r.stdout[start:])
    return [[round(x, 7) for x in d["embedding"]] for d in doc["data"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-bin", required=True, help="the folder of llama-embedding")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data",
                                                  "embeddings-references.json"))
    a = ap.parse_args()
    binary = os.path.join(a.llama_bin, "llama-embedding")
    cases = {}
    for name in MODELS:
        path = fetch(name)
        items = []
        for text in TEXTS:
            for p in POOLINGS:
                items.append({"text": text, "pooling": p, "vectors": embed(binary, path, text, p)})
        for text in NONE_TEXTS:
            items.append({"text": text, "pooling": "none",
                          "vectors": embed(binary, path, text, "none")})
        cases[name] = {"file": os.path.basename(path), "llama_cpp_default_pooling": "none",
                       "cllm_default_pooling": "mean", "embeddings": items}
        print(f"{name}: {len(items)} embeddings", file=sys.stderr)
    doc = {
        "about": "llama.cpp's embeddings (llama-embedding, --embd-normalize 2), made by "
                 "scripts/make-embedding-references.py",
        "llama_cpp_python": "0.3.36",
        "normalize": 2,
        "cases": cases,
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
