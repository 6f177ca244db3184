#!/usr/bin/env python3
"""Makes the llama.cpp reference outputs that tests/test_reference.c checks.

For each case it runs llama.cpp (through llama-cpp-python) on the same GGUF
file: the tokenization of each prompt, the logits after the prompt (the 40
largest and a fixed sample of the rest), and 24 greedy tokens. Random-weight
models are written first by cllm-gen-model with fixed seeds, so the test can
write byte-identical files itself and needs only this JSON.

    python3 -m venv .venv && .venv/bin/pip install llama-cpp-python numpy
    .venv/bin/python scripts/make-references.py --gen-model build/cllm-gen-model \\
        --out tests/data/references.json

    .venv/bin/python scripts/make-references.py --gen-model build/cllm-gen-model \\
        --set qwen --out tests/data/references-qwen.json

The SmolLM2 cases need scripts/fetch-model smollm2 (its path is taken from it).
The "qwen" set holds random-weight qwen2, qwen3, phi3, Llama 3 rope and YaRN
models, and llama.cpp's ids of our tokenizer prompts and of conversations
rendered by the fixtures' chat templates (jinja2); it needs scripts/fetch-vocab
(the Qwen2, Llama 3 and Phi-3 vocabulary fixtures).
"smollm2" is llama.cpp on the Q4_1 file as it is (activations quantized to
Q8_1); "smollm2-exact" is llama.cpp on its own F32 dequantization of that file
(float activations), which the test compares with cllm's F32-activation path.
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

PROMPTS = [
    "Once upon a time",
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
]

# Random-weight models: (name, cllm-gen-model arguments). Keep them small:
# the test writes them again at run time.
GENERATED = [
    ("gpt2-f32", ["--arch", "gpt2", "--vocab", "ggml-vocab-gpt-2.gguf", "--n-embd", "64",
                  "--n-layer", "2", "--n-head", "4", "--n-ff", "256", "--n-ctx", "256",
                  "--type", "f32", "--tied", "--seed", "11"]),
    ("gpt2-q8_0", ["--arch", "gpt2", "--vocab", "ggml-vocab-gpt-2.gguf", "--n-embd", "64",
                   "--n-layer", "2", "--n-head", "4", "--n-ff", "256", "--n-ctx", "256",
                   "--type", "q8_0", "--tied", "--seed", "12"]),
]
for qtype in ["q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q4_0", "q4_1", "q5_0", "q5_1", "f16"]:
    GENERATED.append((f"llama-{qtype}", [
        "--arch", "llama", "--vocab", "ggml-vocab-llama-spm.gguf", "--n-embd", "256",
        "--n-layer", "2", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "512",
        "--n-ctx", "256", "--type", qtype, "--seed", "21"]))

# The "qwen" set: the architectures of the qwen family, phi3, Llama 3's rope
# frequency factors and YaRN, mostly on the GPT-2 vocabulary (small; the
# architecture does not care which vocabulary it has), and some on the
# model's own vocabulary. The q and k weights are
# larger than the others (--qk-std) so that attention is peaked and the rope
# (NeoX halves, frequency factors) changes the logits well past the tolerance.
GENERATED_QWEN = [
    ("qwen2-f32", ["--arch", "qwen2", "--vocab", "ggml-vocab-gpt-2.gguf", "--n-embd", "64",
                   "--n-layer", "2", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "128",
                   "--n-ctx", "256", "--type", "f32", "--qk-std", "0.3", "--seed", "31"]),
    ("qwen2-q8_0", ["--arch", "qwen2", "--vocab", "ggml-vocab-gpt-2.gguf", "--n-embd", "64",
                    "--n-layer", "2", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "128",
                    "--n-ctx", "256", "--type", "q8_0", "--tied", "--qk-std", "0.3", "--seed", "34"]),
    ("qwen3-f32", ["--arch", "qwen3", "--vocab", "ggml-vocab-gpt-2.gguf", "--n-embd", "64",
                   "--n-layer", "2", "--n-head", "4", "--n-head-kv", "2", "--head-dim", "32",
                   "--n-ff", "128", "--n-ctx", "256", "--type", "f32", "--qk-std", "0.3",
                   "--seed", "32"]),
    ("llama3-rope-f32", ["--arch", "llama", "--vocab", "ggml-vocab-gpt-2.gguf", "--n-embd", "128",
                         "--n-layer", "2", "--n-head", "2", "--n-head-kv", "1", "--n-ff", "256",
                         "--n-ctx", "256", "--type", "f32", "--rope-base", "500000",
                         "--llama3-rope", "32", "--qk-std", "0.3", "--seed", "33"]),
    # Qwen2's own vocabulary (fetched, 151936 tokens; Q8_0 keeps the file small)
    ("qwen2-vocab-q8_0", ["--arch", "qwen2", "--vocab", "ggml-vocab-qwen2.gguf", "--n-embd", "64",
                          "--n-layer", "2", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "128",
                          "--n-ctx", "256", "--type", "q8_0", "--tied", "--qk-std", "0.3",
                          "--seed", "35"]),
    # Llama 3's own vocabulary (fetched, 128256 tokens, BOS <|begin_of_text|>)
    ("llama3-vocab-q8_0", ["--arch", "llama", "--vocab", "ggml-vocab-llama-bpe.gguf", "--n-embd",
                           "128", "--n-layer", "2", "--n-head", "2", "--n-head-kv", "1", "--n-ff",
                           "256", "--n-ctx", "256", "--type", "q8_0", "--tied", "--rope-base",
                           "500000", "--llama3-rope", "32", "--qk-std", "0.3", "--seed", "36"]),
    # YaRN: factor 4 over an original context of 32 (the prompts pass it)
    ("qwen2-yarn-f32", ["--arch", "qwen2", "--vocab", "ggml-vocab-gpt-2.gguf", "--n-embd", "64",
                        "--n-layer", "2", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "128",
                        "--n-ctx", "256", "--type", "f32", "--qk-std", "0.3",
                        "--yarn", "4", "32", "--seed", "42"]),
    # phi3 on the Llama 2 SPM vocabulary, then on Phi-3's own (fetched): the
    # test's context (256) is past the original 128, so the long LongRoPE
    # factors apply; with 4096, the short
    ("phi3-f32", ["--arch", "phi3", "--vocab", "ggml-vocab-llama-spm.gguf", "--n-embd", "96",
                  "--n-layer", "2", "--n-head", "2", "--n-head-kv", "2", "--n-ff", "128",
                  "--n-ctx", "512", "--type", "f32", "--longrope", "128", "--qk-std", "0.3",
                  "--seed", "41"]),
    ("phi3-short-q8_0", ["--arch", "phi3", "--vocab", "ggml-vocab-phi-3.gguf", "--n-embd",
                         "96", "--n-layer", "2", "--n-head", "3", "--n-head-kv", "1", "--n-ff",
                         "128", "--n-ctx", "512", "--type", "q8_0", "--longrope", "4096",
                         "--qk-std", "0.3", "--seed", "43"]),
]

# Tokenizer prompts for the "qwen" set: llama.cpp's ids with the vocabulary
# fixtures that scripts/fetch-vocab fetches (test_tokenizer checks them).
TOKENIZER_VOCABS = ["ggml-vocab-qwen2.gguf", "ggml-vocab-llama-bpe.gguf", "ggml-vocab-phi-3.gguf"]
TOKENIZER_PROMPTS = [
    "Grüße aus Köln: Äpfel, Öl und Straße; ça coûte 12,50 € (naïve café)",
    "数字 1234567890 und 3.14159, 1e-9, -42, 0x1F, ٣٤٥ and ½ ⅔",
    "def f(x):\n\treturn {'a': x**2, \"b\": [1, 2, 3]}  # comment\n",
    "    indented\n\n\n   \t  mixed   whitespace \r\n end  ",
    "emoji 🦙🔥👍🏽 family 👨‍👩‍👧 flags 🇫🇷 ✔️",
    "I'm sure they'll say THEY'VE done it; you'D think it's fine",
    "中文分词测试：你好，世界！日本語のテキスト。한국어 텍스트",
    "<|im_start|>user\nnot special here<|im_end|> <|eot_id|> <s> </s>",
    "   leading spaces and trailing spaces   ",
    "URL https://example.com/a_b-c?d=1&e=%20f#g and e-mail a.b@c.org",
]

# Conversations rendered by the fixtures' own chat templates (jinja2, as
# Hugging Face renders them) and tokenized by llama.cpp with special tokens:
# cllm renders the template's family in C and must give the same ids.
CHAT_CONVERSATIONS = [
    [{"role": "user", "content": "Hi! 2+2?"}],
    [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi, how can I help?"},
     {"role": "user", "content": "Name a colour.\nOne word."}],
]

N_TOP = 40
N_SAMPLE = 64
N_GREEDY = 24


FETCHED_VOCABS = {"ggml-vocab-qwen2.gguf", "ggml-vocab-llama-bpe.gguf", "ggml-vocab-phi-3.gguf"}


def vocab_path(name):
    """tests/data/models/vocab, or scripts/fetch-vocab's cache for the fixtures it fetches."""
    if name in FETCHED_VOCABS:
        out = subprocess.run([os.path.join(HERE, "fetch-vocab")], check=True,
                             capture_output=True, text=True)
        return os.path.join(out.stdout.strip(), name)
    return os.path.join(VOCAB, name)


def fetch_smollm2():
    out = subprocess.run([os.path.join(HERE, "fetch-model"), "smollm2"], check=True,
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


def run_case(path, prompts, add_bos):
    llm = Llama(model_path=path, n_ctx=256, n_batch=256, n_threads=2, logits_all=True,
                verbose=False, seed=0)
    n_vocab = llm.n_vocab()
    rng = np.random.default_rng(1234)
    sample_ids = sorted(int(i) for i in rng.choice(n_vocab, size=N_SAMPLE, replace=False))
    results = []
    for text in prompts:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=False)
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
            "prompt_ids": [int(t) for t in ids],
            "top_ids": [int(t) for t in top],
            "top_logits": [round(float(logits[t]), 5) for t in top],
            "sample_ids": sample_ids,
            "sample_logits": [round(float(logits[t]), 5) for t in sample_ids],
            "greedy_ids": greedy,
        })
    return {"n_vocab": n_vocab, "prompts": results}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen-model", required=True, help="path of the cllm-gen-model executable")
    ap.add_argument("--set", choices=["main", "qwen"], default="main")
    ap.add_argument("--out")
    args = ap.parse_args()
    if not args.out:
        base = "references.json" if args.set == "main" else f"references-{args.set}.json"
        args.out = os.path.join(ROOT, "tests", "data", base)

    cases = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, gen_args in (GENERATED if args.set == "main" else GENERATED_QWEN):
            gen_args = [vocab_path(a) if a.endswith(".gguf") else a for a in gen_args]
            path = os.path.join(tmp, name + ".gguf")
            subprocess.run([args.gen_model, *gen_args, "--out", path], check=True)
            add_bos = any(v in " ".join(gen_args) for v in ("ggml-vocab-llama-spm.gguf",
                                                            "ggml-vocab-phi-3.gguf",
                                                            "ggml-vocab-llama-bpe.gguf"))
            print(f"{name}: llama.cpp", file=sys.stderr)
            cases[name] = {"generate": [a if not a.endswith(".gguf") else os.path.basename(a)
                                        for a in gen_args], "add_bos": add_bos,
                           **run_case(path, PROMPTS, add_bos)}
        if args.set == "main":
            add_smollm2(cases, tmp)
    write(args.out, cases, tokenizers(args.set))


def tokenizers(set_name):
    """llama.cpp's ids of TOKENIZER_PROMPTS with each fixture (no BOS)."""
    if set_name != "qwen":
        return None
    vocab_dir = subprocess.run([os.path.join(HERE, "fetch-vocab")], check=True,
                               capture_output=True, text=True).stdout.strip()
    import jinja2
    out, chats = {}, []
    for name in TOKENIZER_VOCABS:
        llm = Llama(model_path=os.path.join(vocab_dir, name), vocab_only=True, verbose=False)
        out[name] = [{"text": t, "ids": [int(i) for i in llm.tokenize(t.encode("utf-8"),
                                                                      add_bos=False,
                                                                      special=False)]}
                     for t in TOKENIZER_PROMPTS]
        tmpl = llm.metadata.get("tokenizer.chat_template")
        if tmpl:
            bos = llm.detokenize([llm.token_bos()], special=True).decode("utf-8")
            eos = llm.detokenize([llm.token_eos()], special=True).decode("utf-8")
            for conv in CHAT_CONVERSATIONS:
                text = jinja2.Template(tmpl).render(messages=conv, add_generation_prompt=True,
                                                    bos_token=bos, eos_token=eos)
                ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
                chats.append({"vocab": name, "messages": conv, "text": text,
                              "ids": [int(i) for i in ids]})
        del llm
    out["chat"] = chats
    return out


def add_smollm2(cases, tmp):
    smollm2 = fetch_smollm2()
    print("smollm2: llama.cpp", file=sys.stderr)
    cases["smollm2"] = {"model": "smollm2", "add_bos": False,
                        **run_case(smollm2, PROMPTS, False)}
    exact = os.path.join(tmp, "smollm2-f32.gguf")
    dequantize(smollm2, exact)
    print("smollm2-exact: llama.cpp on F32", file=sys.stderr)
    cases["smollm2-exact"] = {"model": "smollm2", "add_bos": False, "f32_activations": True,
                              **run_case(exact, PROMPTS, False)}


def write(out, cases, toks=None):
    doc = {
        "about": "llama.cpp outputs on the same GGUF files, made by scripts/make-references.py",
        "llama_cpp_python": llama_cpp_version,
        "kv_cache": "f16",
        "cases": cases,
    }
    if toks:
        doc["tokenizers"] = toks
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
