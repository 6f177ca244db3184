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
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

SKIP = 77
NAME = "test_serve_embeddings"


def require_data():
    return os.environ.get("CLLM_REQUIRE_TEST_DATA", "") not in ("", "0")


def missing(what):
    print(f"{NAME}: missing: {what}", file=sys.stderr)
    sys.exit(1 if require_data() else SKIP)


def ensure_venv(venv):
    """Re-executes this script in a venv that has openai and langchain-openai."""
    if os.environ.get("CLLM_TEST_IN_VENV") == "1":
        return
    py = os.path.join(venv, "bin", "python3")
    if not os.path.exists(py):
        r = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
        if r.returncode != 0:
            missing(f"python3 -m venv (apt-get install python3-venv; {r.stderr.strip()[-200:]})")
    r = subprocess.run([py, "-c", "import openai, langchain_openai"], capture_output=True)
    if r.returncode != 0:
        r = subprocess.run([py, "-m", "pip", "install", "--quiet", "openai", "langchain-openai"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            missing(f"pip install openai langchain-openai ({r.stderr.strip()[-300:]})")
    env = dict(os.environ, CLLM_TEST_IN_VENV="1")
    os.execve(py, [py] + sys.argv, env)


def fetch_smollm2():
    root = os.environ.get("CLLM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    r = subprocess.run([os.path.join(root, "scripts", "fetch-model"), "smollm2"],
                       capture_output=True, text=True)
    path = r.stdout.strip()
    if r.returncode != 0 or not path or not os.path.exists(path):
        missing("SmolLM2 (scripts/fetch-model smollm2 could not fetch it)")
    return path


def start_server(cllm, model, *extra):
    p = subprocess.Popen([cllm, "serve", "-m", model, "--port", "0", "--parallel", "2",
                          "--ctx-per-slot", "512", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = None
    for line in p.stdout:
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        p.kill()
        raise SystemExit(f"{NAME}: the server did not start")
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return p, port
        except Exception:
            time.sleep(0.05)
    p.kill()
    raise SystemExit(f"{NAME}: the server is not healthy")


def stop_server(p):
    p.send_signal(2)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()


failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"{NAME}: check failed: {what}", file=sys.stderr)


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
    ensure_venv(venv)
    import openai
    model = fetch_smollm2()
    mid = os.path.splitext(os.path.basename(model))[0]

    p, port = start_server(cllm, model)
    try:
        status, body = post(port, "/v1/embeddings", {"input": "hello"})
        check(status == 501 and "--embeddings" in body["error"]["message"],
              f"without --embeddings: {status} {body}")
    finally:
        stop_server(p)

    p, port = start_server(cllm, model, "--embeddings")
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        check_api(client, openai, port, mid)
        check_langchain(port, mid)
    finally:
        stop_server(p)
    print(f"{NAME}: {'ok' if failures == 0 else f'{failures} failed'}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
