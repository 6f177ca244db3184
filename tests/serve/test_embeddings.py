#!/usr/bin/env python3
"""cllm serve --embeddings with the official `openai` client and LangChain's
OpenAIEmbeddings, over loopback.

    test_embeddings.py CLLM VENV_DIR

Makes a virtual environment in VENV_DIR with `openai` and `langchain-openai`
(pip), re-runs itself inside it, starts `cllm serve --embeddings` on SmolLM2
(scripts/fetch-model) on a free port and checks /v1/embeddings: one string, a
list of strings, token ids, float and base64 (the client's default), usage,
the vectors' norm, `dimensions` (only the model's size is served), unknown
fields refused, an embedding computed beside a chat completion equal to one
computed alone; then a retrieval with LangChain's OpenAIEmbeddings over four
documents, where each query's own document must rank first. The documents
are about clearly distinct things: a 135M chat model is no embedding model,
and its mean-pooled hidden states separate topics, not fine shades.
A server without --embeddings answers 501.
Exits 77 (skipped) when the venv, pip or the model cannot be had, unless
CLLM_REQUIRE_TEST_DATA is set (CI): then that is a failure.
"""
import json
import math
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

import serverlib

NAME = "test_serve_embeddings"
check = serverlib.Checks(f"{NAME}: check failed:")


def cos(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def post(port, path, body):
    """(status, JSON) of a raw POST."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def check_api(client, openai, port, mid):
    text = "The cat sat on the mat."
    r = client.embeddings.create(model=mid, input=text)  # base64 on the wire (the client's default)
    check(r.object == "list" and len(r.data) == 1 and r.data[0].index == 0, f"one input: {r}")
    v = r.data[0].embedding
    check(len(v) == 576, f"SmolLM2's vectors have 576 dimensions, got {len(v)}")
    check(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-4, "the vector is L2-normalized")
    check(r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens,
          f"usage {r.usage}")

    f = client.embeddings.create(model=mid, input=text, encoding_format="float")
    check(max(abs(x - y) for x, y in zip(v, f.data[0].embedding)) < 1e-6,
          "float and base64 give the same vector")

    texts = [text, "Stock markets fell sharply on Monday.", "def f(x): return x * 2"]
    many = client.embeddings.create(model=mid, input=texts, encoding_format="float")
    check([d.index for d in many.data] == [0, 1, 2], "a list: one vector per input, in order")
    check(cos(many.data[0].embedding, v) > 0.99999, "a list's first vector is the single one")
    check(many.usage.prompt_tokens > r.usage.prompt_tokens, "usage counts every input")

    ids = client.embeddings.create(model=mid, input=[1, 2, 3, 4, 5], encoding_format="float")
    check(len(ids.data) == 1 and ids.usage.prompt_tokens == 5, f"token ids: {ids.usage}")
    both = client.embeddings.create(model=mid, input=[[1, 2, 3], [4, 5, 6, 7]])
    check(len(both.data) == 2 and both.usage.prompt_tokens == 7, "lists of token ids")

    ok = client.embeddings.create(model=mid, input=text, dimensions=576)
    check(len(ok.data[0].embedding) == 576, "dimensions equal to the model's size")
    try:
        client.embeddings.create(model=mid, input=text, dimensions=64)
        check(False, "dimensions 64 should be refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "dimensions" in str(e), f"dimensions refused: {e}")

    status, body = post(port, "/v1/embeddings", {"input": text, "pooling": "max"})
    check(status == 400 and "pooling" in body["error"]["message"], f"unknown field: {body}")
    status, body = post(port, "/v1/embeddings", {"input": []})
    check(status == 400 and body["error"]["param"] == "input", f"empty input: {body}")
    status, body = post(port, "/v1/embeddings", {"input": text, "encoding_format": "int8"})
    check(status == 400, f"encoding_format int8: {body}")
    status, body = post(port, "/embeddings", {"input": text})
    check(status == 200 and len(body["data"]) == 1, "/embeddings without /v1")

    # beside a chat completion: the same vector as alone
    out = {}

    def chat():
        out["chat"] = client.chat.completions.create(
            model=mid, messages=[{"role": "user", "content": "Count from one to twenty."}],
            max_tokens=48, temperature=0)

    t = threading.Thread(target=chat)
    t.start()
    time.sleep(0.3)
    side = [client.embeddings.create(model=mid, input=text, encoding_format="float")
            for _ in range(3)]
    t.join()
    check(out.get("chat") is not None and out["chat"].choices[0].message.content,
          "the chat completion beside the embeddings answered")
    for s in side:
        check(cos(s.data[0].embedding, v) > 0.99999, "an embedding beside a generation")


DOCS = [
    "Bake the cake in the oven for thirty minutes, after whisking the eggs, sugar and flour.",
    "The football team scored two goals in the second half and won the championship match.",
    "To install the package, run pip install in a terminal and import the module in Python.",
    "The volcano erupted, sending lava and ash down the mountain toward the village.",
]
QUERIES = [
    ("How long do I bake the cake?", 0),
    ("Who won the football match?", 1),
    ("How do I install the Python package?", 2),
    ("What came down the mountain from the volcano?", 3),
]


def check_langchain(port, mid):
    from langchain_openai import OpenAIEmbeddings
    # check_embedding_ctx_length=False: send the texts, not tiktoken's ids
    # (which are OpenAI's vocabulary, not the model's)
    emb = OpenAIEmbeddings(model=mid, base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                           check_embedding_ctx_length=False)
    dv = emb.embed_documents(DOCS)
    check(len(dv) == len(DOCS) and all(len(x) == 576 for x in dv), "embed_documents")
    for q, want in QUERIES:
        qv = emb.embed_query(q)
        scores = [cos(qv, d) for d in dv]
        best = max(range(len(DOCS)), key=lambda i: scores[i])
        print(f"{NAME}: {q!r}: " + " ".join(f"{s:.3f}" for s in scores), file=sys.stderr)
        check(best == want, f"{q!r} ranks document {best} first, not {want}")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(f"usage: {NAME}.py CLLM VENV_DIR")
    cllm, venv = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    serverlib.ensure_venv(NAME, venv, "import openai, langchain_openai",
                          ["openai", "langchain-openai"])
    import openai
    model = serverlib.fetch_model(NAME)
    mid = os.path.splitext(os.path.basename(model))[0]

    args = ("--parallel", "2", "--ctx-per-slot", "512")
    srv = serverlib.start_server(NAME, cllm, model, *args)
    port = srv.port
    try:
        status, body = post(port, "/v1/embeddings", {"input": "hello"})
        check(status == 501 and "--embeddings" in body["error"]["message"],
              f"without --embeddings: {status} {body}")
    finally:
        srv.stop(signal.SIGINT, 20)

    srv = serverlib.start_server(NAME, cllm, model, *args, "--embeddings")
    port = srv.port
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        check_api(client, openai, port, mid)
        check_langchain(port, mid)
    finally:
        srv.stop(signal.SIGINT, 20)
    print(f"{NAME}: {'ok' if check.failures == 0 else f'{check.failures} failed'}",
          file=sys.stderr)
    sys.exit(1 if check.failures else 0)


if __name__ == "__main__":
    main()
