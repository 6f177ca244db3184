#!/usr/bin/env python3
"""Makes tests/data/embeddings-exact.json: the embeddings of the texts of
tests/data/embeddings-references.json computed in float64 arithmetic on the
weights of the same files (SmolLM2-135M-Instruct Q4_1, Gemma 3 270M Q4_K_M)
dequantized, with no rounding of activations, caches or attention: what an
implementation would give without rounding errors.

llama.cpp (embeddings-references.json) rounds as it computes: the matmul
activations in blocks of 8-bit integers (Q8_0, Q8_1, and Q8_K with one scale
per 256 values for the K-quants), GELU through an F16 table, K, V and Q in
F16, and flash attention sums V in F16. On Gemma 3, whose hidden states
have outliers that those roundings lose, that puts its vectors up to 0.0026
(pooled) and 0.0075 (per token) in cosine away from these; cllm's default
path rounds less (8-bit activations with a scale per 16 or 32 values in
its prompt kernels) and stays within 0.0008 and 0.003, its F32 path within
1e-6. tests/test_embed.c compares cllm with both files.

--llama-rounding writes nothing: it runs the same forward pass with those
roundings of llama.cpp added (as its CPU code documents them) and prints,
per vector, the cosine with llama.cpp's (embeddings-references.json) and
with the exact one, to show where llama.cpp's difference comes from.

The forward pass is written here from the architectures' definitions
(src/model/llama.c and src/model/gemma3.c say the same in C); the weights
are read and dequantized with the gguf package. The token ids are cllm's
(`cllm serve` /tokenize with special tokens, as llama-embedding tokenizes);
the test checks that its tokenization gives the same ids.

    python3 -m venv .venv && .venv/bin/pip install numpy gguf
    .venv/bin/python scripts/make-embedding-exact.py --cllm build/cllm
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODELS = ["smollm2", "gemma3"]


def fetch(name):
    out = subprocess.run([os.path.join(HERE, "fetch-model"), name], check=True,
                         capture_output=True, text=True).stdout.strip().splitlines()
    return out[-1]


def tokenize_all(cllm, model, texts):
    """The ids of each text, special tokens added and parsed, by cllm serve."""
    p = subprocess.Popen([cllm, "serve", "-m", model, "--port", "0", "-c", "512"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = None
        for line in p.stdout:
            if "listening on " in line:
                url = line.split("listening on ", 1)[1].strip()
                break
        if not url:
            sys.exit(f"{cllm} serve: no address")
        for _ in range(600):  # until the model is loaded
            try:
                with urllib.request.urlopen(url + "/health") as r:
                    if r.status == 200:
                        break
            except urllib.error.HTTPError:
                pass
            time.sleep(0.1)
        ids = []
        for t in texts:
            body = json.dumps({"content": t, "add_special": True, "parse_special": True})
            req = urllib.request.Request(url + "/tokenize", body.encode(),
                                         {"Content-Type": "application/json"})
            with urllib.request.urlopen(req) as r:
                ids.append(json.load(r)["tokens"])
        return ids
    finally:
        p.terminate()
        p.wait()


def f16(a):
    return a.astype(np.float16).astype(np.float64)


def q8_0(x):
    """x as Q8_0 activations: blocks of 32, q = round(x / d), d = amax / 127
    kept in F16."""
    b = x.reshape(-1, 32).astype(np.float32)
    d = np.abs(b).max(-1, keepdims=True) / np.float32(127)
    q = np.round(b * np.where(d > 0, 1 / np.where(d > 0, d, 1), 0))
    return (q * f16(d)).reshape(x.shape)


def q8_k(x):
    """x as Q8_K activations: blocks of 256, one float scale -max / 127 (max:
    the value of largest magnitude, with its sign)."""
    b = x.reshape(-1, 256).astype(np.float32)
    mx = np.take_along_axis(b, np.abs(b).argmax(-1)[:, None], -1)
    isc = np.where(mx != 0, np.float32(-127) / np.where(mx != 0, mx, 1), 0).astype(np.float32)
    q = np.minimum(127, np.round(isc * b))
    d = np.where(isc != 0, 1 / np.where(isc != 0, isc, 1), 0).astype(np.float32)
    return (q * d).reshape(x.shape).astype(np.float64)


def attend_f16(q, k, v, scale):
    """One head's causal attention as llama.cpp's CPU flash attention with an
    F16 cache: Q, K, V in F16, an online softmax in float, the weighted sum
    of V kept in F16 after every step."""
    n, D = q.shape[0], v.shape[1]
    qf, kf, vf = (f16(a).astype(np.float32) for a in (q * scale, k, v))
    o = np.empty((n, D))
    for i in range(n):
        m, s, acc = -np.inf, np.float32(0), np.zeros(D, np.float32)
        for c in range(i + 1):
            sc = np.float32(qf[i] @ kf[c])
            ms = vs = np.float32(1)
            if sc > m:
                ms = np.float32(np.exp(np.float32(m - sc))) if m > -np.inf else np.float32(0)
                m = sc
                acc = (acc * ms).astype(np.float16).astype(np.float32)
            else:
                vs = np.float32(np.exp(np.float32(sc - m)))
            acc = (acc + vf[c] * vs).astype(np.float16).astype(np.float32)
            s = np.float32(s * ms + vs)
        o[i] = acc / s
    return o


class Model:
    def __init__(self, path, llama_rounding=False):
        self.llama_rounding = llama_rounding
        self.r = GGUFReader(path)
        self.arch = self.field("general.architecture")
        self.tensors = {t.name: t for t in self.r.tensors}
        self.cache = {}
        a = self.arch + "."
        self.E = int(self.field(a + "embedding_length"))
        self.L = int(self.field(a + "block_count"))
        self.H = int(self.field(a + "attention.head_count"))
        self.HKV = int(self.field(a + "attention.head_count_kv"))
        self.eps = float(self.field(a + "attention.layer_norm_rms_epsilon"))
        self.D = int(self.field(a + "attention.key_length", self.E // self.H))
        self.base = float(self.field(a + "rope.freq_base", 10000.0))
        self.base_swa = float(self.field(a + "rope.freq_base_swa", 10000.0))
        self.n_swa = int(self.field(a + "attention.sliding_window", 0))
        if self.field(a + "attention.sliding_window_pattern") is not None:
            sys.exit(f"{path}: a sliding-window pattern other than 6 is not written here")
        if self.arch not in ("llama", "gemma3"):
            sys.exit(f"{path}: architecture {self.arch} is not written here")

    def field(self, key, default=None):
        f = self.r.fields.get(key)
        return f.contents() if f is not None else default

    def w(self, name):
        """A weight as float64, [rows][columns] as the file's ne reversed."""
        if name not in self.cache:
            t = self.tensors[name]
            a = dequantize(t.data, t.tensor_type).astype(np.float64)
            self.cache[name] = a.reshape([int(x) for x in reversed(t.shape)])
        return self.cache[name]

    def embd_rows(self, ids):
        t = self.tensors["token_embd.weight"]
        return np.stack([dequantize(t.data[i], t.tensor_type).astype(np.float64).reshape(-1)
                         for i in ids])

    def mm(self, x, name):
        """x @ W^T, x rounded as llama.cpp's activations of that weight type
        with --llama-rounding."""
        if self.llama_rounding:
            ty = self.tensors[name].tensor_type.name
            if ty.endswith("_K"):
                x = q8_k(x)
            elif ty in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"):
                x = q8_0(x)  # (Q8_1 for Q4_1 / Q5_1: the same values, a sum beside)
            elif ty not in ("F32", "F16", "BF16"):
                sys.exit(f"{name}: --llama-rounding does not know the activations of {ty}")
        return x @ self.w(name).T

    def rms(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def rope(self, x, base, neox):
        """x: [n, heads, D]; positions 0 .. n - 1."""
        n, D = x.shape[0], x.shape[-1]
        ang = np.arange(n)[:, None] * base ** (-np.arange(0, D, 2) / D)[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        if neox:
            x1, x2 = x[..., :D // 2], x[..., D // 2:]
            return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], -1)
        y = np.empty_like(x)
        y[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
        y[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
        return y

    def forward(self, ids):
        """The hidden states after the output norm, [n][E]."""
        gemma = self.arch == "gemma3"
        n, H, HKV, D = len(ids), self.H, self.HKV, self.D
        x = self.embd_rows(ids)
        if gemma:  # the embeddings scaled by sqrt(n_embd) (a float, as the C code)
            x *= float(np.float32(math.sqrt(self.E)))
        mask = np.triu(np.full((n, n), -np.inf), 1)  # causal
        for l in range(self.L):
            p = f"blk.{l}."
            h = self.rms(x, self.w(p + "attn_norm.weight"))
            q = self.mm(h, p + "attn_q.weight").reshape(n, H, D)
            k = self.mm(h, p + "attn_k.weight").reshape(n, HKV, D)
            v = self.mm(h, p + "attn_v.weight").reshape(n, HKV, D)
            base, m = self.base, mask
            if gemma:
                q = self.rms(q, self.w(p + "attn_q_norm.weight"))
                k = self.rms(k, self.w(p + "attn_k_norm.weight"))
                if self.n_swa > 0 and l % 6 < 5:  # a sliding-window layer
                    base = self.base_swa
                    m = m + np.tril(np.full((n, n), -np.inf), -self.n_swa)
            q, k = self.rope(q, base, gemma), self.rope(k, base, gemma)
            o = np.empty((n, H, D))
            for hh in range(H):
                g = hh * HKV // H
                if self.llama_rounding:  # (short texts: no sliding window)
                    o[:, hh] = attend_f16(q[:, hh], k[:, g], v[:, g], 1 / math.sqrt(D))
                    continue
                s = q[:, hh] @ k[:, g].T / math.sqrt(D) + m
                s = np.exp(s - s.max(-1, keepdims=True))
                o[:, hh] = (s / s.sum(-1, keepdims=True)) @ v[:, g]
            a = self.mm(o.reshape(n, H * D), p + "attn_output.weight")
            if gemma:
                a = self.rms(a, self.w(p + "post_attention_norm.weight"))
            x = x + a
            h = self.rms(x, self.w(p + "ffn_norm.weight"))
            gate = self.mm(h, p + "ffn_gate.weight")
            up = self.mm(h, p + "ffn_up.weight")
            if gemma:  # GELU, tanh form
                x0 = f16(gate) if self.llama_rounding else gate  # llama.cpp: an F16 table
                y = 0.5 * x0 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x0 + 0.044715 * x0 ** 3)))
                if self.llama_rounding:  # (outside [-10, 10]: 0 or x)
                    y = np.where(gate <= -10, 0, np.where(gate >= 10, gate, f16(y)))
                gate = y
            else:  # SiLU
                gate = gate / (1 + np.exp(-gate))
            f = self.mm(gate * up, p + "ffn_down.weight")
            if gemma:
                f = self.rms(f, self.w(p + "post_ffw_norm.weight"))
            x = x + f
        return self.rms(x, self.w("output_norm.weight"))


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return [round(float(x), 8) for x in v / np.linalg.norm(v)]


def cosine(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cllm", required=True, help="the cllm command (for /tokenize)")
    ap.add_argument("--refs", default=os.path.join(ROOT, "tests", "data",
                                                   "embeddings-references.json"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data",
                                                  "embeddings-exact.json"))
    ap.add_argument("--llama-rounding", action="store_true",
                    help="compare llama.cpp's roundings with its vectors and the exact ones "
                         "(--out), write nothing")
    a = ap.parse_args()
    with open(a.refs) as f:
        refs = json.load(f)
    exact = None
    if a.llama_rounding:
        with open(a.out) as f:
            exact = json.load(f)["cases"]
    cases = {}
    for name in MODELS:
        path = fetch(name)
        items = refs["cases"][name]["embeddings"]
        texts = sorted({it["text"] for it in items})
        ids = dict(zip(texts, tokenize_all(a.cllm, path, texts)))
        m = Model(path, a.llama_rounding)
        rows = {t: m.forward(ids[t]) for t in texts}
        out = []
        for i, it in enumerate(items):
            r, p = rows[it["text"]], it["pooling"]
            if p == "none":
                vecs = [unit(x) for x in r]
            else:
                vecs = [unit(r.mean(0) if p == "mean" else r[0] if p == "cls" else r[-1])]
            if exact:
                ex = exact[name]["embeddings"][i]["vectors"]
                print(f"{name} {p:4} {it['text'][:24]!r:27} llama.cpp:",
                      " ".join(f"{cosine(v, w):.5f}" for v, w in zip(vecs, it["vectors"])),
                      " exact:", " ".join(f"{cosine(v, w):.5f}" for v, w in zip(vecs, ex)))
            out.append({"text": it["text"], "pooling": p, "ids": ids[it["text"]],
                        "vectors": vecs})
        cases[name] = {"file": os.path.basename(path), "embeddings": out}
        print(f"{name}: {len(out)} embeddings", file=sys.stderr)
    if a.llama_rounding:
        return
    doc = {
        "about": "embeddings in float64 on the dequantized weights, L2-normalized, made by "
                 "scripts/make-embedding-exact.py",
        "normalize": 2,
        "cases": cases,
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

if __name__ == "__main__":
    main()
