#!/usr/bin/env python3
"""Perplexity of a GGUF model on a text with llama.cpp (llama-cpp-python),
computed as llama-perplexity and `cllm perplexity` compute it, for comparing
the two where no llama-perplexity binary is at hand:

  - the text (one trailing newline dropped) is tokenized with BOS when the
    vocabulary adds one, and cut into chunks of -c tokens (a partial last
    chunk is dropped);
  - each chunk is decoded from an empty context, its first token replaced by
    BOS (when the vocabulary adds one);
  - the second half of each chunk is scored: the logits at position j give
    -log p(token j + 1) for j = c/2 .. c-2.
Prints the running perplexity after each chunk, as llama-perplexity does, and
the final estimate with its standard error.

    python3 bench/perplexity-llama-cpp.py -m MODEL.gguf -f TEXT [-c 512] [-t 2]
"""
import argparse
import math

import numpy as np
from llama_cpp import Llama, llama_cpp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", required=True)
    ap.add_argument("-f", required=True)
    ap.add_argument("-c", type=int, default=512)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--chunks", type=int, default=0)
    args = ap.parse_args()

    with open(args.f, encoding="utf-8") as f:
        text = f.read()
    if text.endswith("\n"):
        text = text[:-1]
    n_ctx = args.c
    llm = Llama(model_path=args.m, n_ctx=n_ctx, n_batch=n_ctx, n_threads=args.t,
                n_threads_batch=args.t, logits_all=True, verbose=False)
    add_bos = llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model))
    tokens = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=False)
    n_chunk = len(tokens) // n_ctx
    if args.chunks:
        n_chunk = min(n_chunk, args.chunks)
    print(f"{len(tokens)} tokens, {n_chunk} chunks of {n_ctx}")
    first = n_ctx // 2
    nlls = []
    for i in range(n_chunk):
        chunk = list(tokens[i * n_ctx:(i + 1) * n_ctx])
        if add_bos:
            chunk[0] = llm.token_bos()
        llm.reset()
        llm.eval(chunk)
        logits = np.array(llm.scores[:n_ctx], dtype=np.float64)
        for j in range(first, n_ctx - 1):
            row = logits[j]
            m = row.max()
            logz = m + math.log(np.exp(row - m).sum())
            nlls.append(logz - row[chunk[j + 1]])
        print(f"[{i + 1}]{math.exp(np.mean(nlls)):.4f}", end=",", flush=True)
    nll = np.array(nlls)
    mean = nll.mean()
    # standard error of the perplexity, as llama-perplexity reports it
    err = math.sqrt(max(nll.var(ddof=1) / len(nll), 0.0)) if len(nll) > 1 else 0.0
    print(f"\nFinal estimate: PPL = {math.exp(mean):.4f} +/- {math.exp(mean) * err:.5f}")


if __name__ == "__main__":
    main()
