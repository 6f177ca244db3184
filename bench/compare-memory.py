#!/usr/bin/env python3
"""Prints cllm's memory per kind next to llama.cpp's, for the same model,
context and batch: weights, KV cache (state) and compute buffer.

cllm's figures come from `cllm run --json` (planned and allocated bytes per
memory kind); llama.cpp's from the buffer sizes it logs when it creates a
context (llama-cpp-python with verbose=True). Both engines use an F16 KV
cache and mapped weights.

    bench/compare-memory.py [--cllm build/cllm] [-c 2048] [-b 512] MODEL.gguf...

Needs llama-cpp-python in the running interpreter (for example the virtual
environment that bench/compare-llama-cpp creates).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

MIB = 1024.0 * 1024.0


def cllm_memory(exe, model, ctx, batch):
    out = subprocess.run([exe, "run", "-m", model, "-p", "Hello", "-n", "1", "--temp", "0",
                          "-c", str(ctx), "-b", str(batch), "--json"],
                         check=True, capture_output=True, text=True)
    mem = json.loads(out.stdout)["memory"]
    for kind, v in mem.items():
        if v["planned"] != v["allocated"]:
            raise SystemExit(f"cllm: {kind} planned {v['planned']} != allocated {v['allocated']}")
    return {k: v["allocated"] / MIB for k, v in mem.items()}


def llama_cpp_memory(model, ctx, batch):
    """Runs llama.cpp in a child process and parses the sizes it logs."""
    code = ("from llama_cpp import Llama\n"
            f"Llama(model_path={model!r}, n_ctx={ctx}, n_batch={batch}, n_ubatch={batch}, "
            "n_threads=2, verbose=True)\n")
    with tempfile.TemporaryFile(mode="w+") as log:
        subprocess.run([sys.executable, "-c", code], check=True, stdout=log, stderr=log)
        log.seek(0)
        text = log.read()

    def size(pattern):
        m = re.findall(pattern + r"\s*=\s*([0-9.]+) MiB", text)
        return sum(float(x) for x in m) if m else float("nan")

    return {
        "weights": size(r"CPU(?:_Mapped)? model buffer size"),
        "state": size(r"CPU KV buffer size"),
        "compute": size(r"CPU compute buffer size"),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--cllm", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                   "cllm"))
    ap.add_argument("-c", "--ctx", type=int, default=2048)
    ap.add_argument("-b", "--batch", type=int, default=512)
    args = ap.parse_args()

    print(f"context {args.ctx}, batch {args.batch}; MiB\n")
    print("| model | kind | cllm | llama.cpp | cllm / llama.cpp |")
    print("|---|---|---:|---:|---:|")
    for model in args.models:
        ours = cllm_memory(args.cllm, model, args.ctx, args.batch)
        theirs = llama_cpp_memory(model, args.ctx, args.batch)
        name = os.path.basename(model)
        for kind in ["weights", "state", "compute"]:
            a, b = ours[kind], theirs[kind]
            print(f"| {name} | {kind} | {a:.2f} | {b:.2f} | {a / b:.3f} |")
        print(f"| {name} | workspace | {ours['workspace']:.2f} | (in compute) | |")


if __name__ == "__main__":
    main()
