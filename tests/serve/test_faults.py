#!/usr/bin/env python3
"""cllm serve when the model file changes under it (docs/server.md, "Faults").

A random-weight model (written by cllm-gen-model) is copied and served with
its weights mapped (the default). Truncating the copy makes the next request
fail with 500 and /health answer 503 naming the file, and the server stays
up; so does overwriting part of another copy in place (same size). Without
the fault handling the first case kills the server (SIGBUS) and the second
answers with garbage and a healthy /health.

usage: test_faults.py CLLM CLLM_GEN_MODEL
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import serverlib

check = serverlib.Checks("FAIL:")


def request(port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except Exception as e:  # the server gone
        return -1, str(e)


COMPLETION = {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}


def check_fault(cllm, model, name, damage):
    """Serves `model`, damages it, checks 500, 503 naming the file, alive."""
    srv = serverlib.start_server("test_serve_faults", cllm, model, "--parallel", "1",
                                 "--ctx-per-slot", "256")
    p, port = srv.p, srv.port
    try:
        st, body = request(port, "POST", "/v1/completions", COMPLETION)
        check(st == 200, f"{name}: first request {st} {body[:200]}")
        damage(model)
        for i in range(2):
            st, body = request(port, "POST", "/v1/completions", COMPLETION)
            check(st == 500, f"{name}: request {i + 1} after the damage: {st} {body[:300]}")
        st, body = request(port, "GET", "/health")
        check(st == 503, f"{name}: /health {st} {body[:300]}")
        check(os.path.basename(model) in body, f"{name}: /health does not name the file: {body}")
        check(p.poll() is None, f"{name}: the server died (status {p.poll()})")
    finally:
        srv.stop(timeout=20)


def truncate(path):
    os.truncate(path, os.path.getsize(path) // 2)


def overwrite(path):
    time.sleep(0.05)  # a modification time after the load's
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        f.write(os.urandom(65536))
    check(os.path.getsize(path) == size, "overwrite: the size changed")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    cllm, gen = sys.argv[1], sys.argv[2]
    root = os.environ.get("CLLM_SOURCE_DIR", ".")
    vocab = os.path.join(root, "tests/data/models/vocab/ggml-vocab-llama-spm.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "model.gguf")
        subprocess.run([gen, "--vocab", vocab, "--out", base, "--n-embd", "256", "--n-layer",
                        "4", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "1024", "--n-ctx",
                        "256", "--type", "q8_0", "--seed", "3", "--arch", "llama"],
                       check=True, stdout=subprocess.DEVNULL)
        for name, damage in (("truncated", truncate), ("overwritten", overwrite)):
            copy = os.path.join(tmp, f"{name}.gguf")
            shutil.copyfile(base, copy)
            check_fault(cllm, copy, name, damage)
    print(f"test_serve_faults: {'failed' if check.failures else 'passed'}")
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
