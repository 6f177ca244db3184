#!/usr/bin/env python3
"""cllm serve with the `ollama` Python client (PyPI), over loopback.

    test_ollama.py CLLM VENV_DIR

Makes a virtual environment in VENV_DIR with the `ollama` package (pip),
re-runs itself inside it, starts `cllm serve` on SmolLM2 (scripts/fetch-model)
on a free port and checks Ollama's API: chat and generate, whole and streamed
(greedy answers equal between the two and to the OpenAI endpoint's), options
(num_predict, seed, stop, num_ctx refused past the slot's context, an unknown
option refused), format "json" and a JSON Schema (the answers parse and
follow it), show, tags, ps, version, and a tool call.
Exits 77 (skipped) when the venv, pip or the model cannot be had, unless
CLLM_REQUIRE_TEST_DATA is set (CI): then that is a failure.
"""
import json
import os
import sys
import urllib.error
import urllib.request

import serverlib

NAME = "test_serve_ollama"
check = serverlib.Checks(f"{NAME}: check failed:")


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


FRUITS = ["apple", "banana", "cherry"]
SCHEMA = {"type": "object",
          "properties": {"fruit": {"type": "string", "enum": FRUITS},
                         "ripe": {"type": "boolean"},
                         "count": {"type": "integer", "minimum": 1, "maximum": 9}},
          "required": ["fruit", "ripe", "count"], "additionalProperties": False}


def follows_schema(doc):
    return (isinstance(doc, dict) and set(doc) == {"fruit", "ripe", "count"}
            and doc["fruit"] in FRUITS and isinstance(doc["ripe"], bool)
            and type(doc["count"]) is int and 1 <= doc["count"] <= 9)


def refused(fn, status, words):
    import ollama
    try:
        fn()
        check(False, f"accepted, wanted {status} ({words})")
    except ollama.ResponseError as e:
        check(e.status_code == status and words in str(e.error), f"{status} {words}: {e}")


def check_chat(client, port, mid):
    msgs = [{"role": "user", "content": "Name a fruit."}]
    greedy = {"temperature": 0, "num_predict": 16}
    whole = client.chat(model=mid, messages=msgs, options=greedy, stream=False)
    text = whole.message.content
    check(whole.done and whole.done_reason in ("stop", "length") and text
          and whole.message.role == "assistant", f"chat: {whole}")
    check(whole.eval_count and 0 < whole.eval_count <= 16 and whole.prompt_eval_count > 0
          and whole.total_duration > 0 and whole.eval_duration > 0, f"chat counts: {whole}")
    check(whole.model == mid and whole.created_at, "model and created_at")
    # no "options" at all (what a client sends by default): the slot's context
    bare = post(port, "/api/chat", {"model": mid, "messages": msgs, "stream": False})
    check(bare.get("done") and bare["message"]["content"], f"chat without options: {bare}")
    parts, last, n = [], None, 0
    for chunk in client.chat(model=mid, messages=msgs, options=greedy, stream=True):
        n += 1
        parts.append(chunk.message.content or "")
        last = chunk
    check("".join(parts) == text and n >= 2, f"streamed chat {''.join(parts)!r} vs {text!r}")
    check(last.done and last.done_reason == whole.done_reason
          and last.eval_count == whole.eval_count, f"last chunk {last}")
    # the same answer as the OpenAI endpoint's
    oa = post(port, "/v1/chat/completions", {"messages": msgs, "temperature": 0, "max_tokens": 16})
    check(oa["choices"][0]["message"]["content"] == text, f"OpenAI's {oa} vs {text!r}")
    # num_predict is honoured, a stop string ends it
    short = client.chat(model=mid, messages=msgs, options={"temperature": 0, "num_predict": 3})
    check(short.eval_count == 3 and short.done_reason == "length", f"num_predict 3: {short}")
    if len(text) > 4:
        stop = text[2:4]
        cut = client.chat(model=mid, messages=msgs, options=dict(greedy, stop=[stop]))
        check(cut.message.content == text[:text.index(stop)] and cut.done_reason == "stop",
              f"stop {stop!r}: {cut.message.content!r}")
    # seeds: the same seed, the same sample
    a = client.chat(model=mid, messages=msgs, options={"seed": 7, "temperature": 1.0,
                                                       "num_predict": 12})
    b = client.chat(model=mid, messages=msgs, options={"seed": 7, "temperature": 1.0,
                                                       "num_predict": 12})
    check(a.message.content == b.message.content, "seed 7 twice")
    # an empty chat "loads" the model
    load = client.chat(model=mid, messages=[])
    check(load.done and load.done_reason == "load", f"load: {load}")
    refused(lambda: client.chat(model=mid, messages=msgs, options={"num_ctx": 100000}), 400,
            "num_ctx")
    refused(lambda: client.chat(model=mid, messages=msgs, options={"mirostat": 2}), 400,
            "mirostat")
    refused(lambda: client.chat(model=mid, messages=msgs, options={"num_gpu": 1}), 400, "num_gpu")
    refused(lambda: client.chat(model=mid, messages=msgs, think=True), 400, "think")
    refused(lambda: client.chat(model=mid, messages=[{"role": "user", "content": "hi",
                                                      "images": ["aGVsbG8="]}]), 400, "images")
    # a small num_ctx bounds the answer
    small = client.chat(model=mid, messages=msgs, options={"num_ctx": whole.prompt_eval_count + 4,
                                                           "temperature": 0})
    check(small.eval_count <= 4 and small.done_reason == "length", f"num_ctx: {small}")
    # keep_alive is accepted
    ka = client.chat(model=mid, messages=msgs, options={"num_predict": 2}, keep_alive="5m")
    check(ka.done, "keep_alive")


def check_generate(client, mid):
    opts = {"temperature": 0, "num_predict": 12}
    whole = client.generate(model=mid, prompt="The capital of France is", raw=True, options=opts)
    check(whole.done and whole.response and whole.eval_count == 12, f"generate raw: {whole}")
    streamed = "".join(c.response for c in client.generate(
        model=mid, prompt="The capital of France is", raw=True, options=opts, stream=True))
    check(streamed == whole.response, f"streamed generate {streamed!r} vs {whole.response!r}")
    templated = client.generate(model=mid, prompt="Name a fruit.", system="Answer in one word.",
                                options=opts)
    check(templated.done and templated.response, f"generate: {templated}")
    load = client.generate(model=mid)
    check(load.done and load.done_reason == "load", f"generate load: {load}")
    refused(lambda: client.generate(model=mid, prompt="x", suffix="y"), 400, "suffix")
    refused(lambda: client.generate(model=mid, prompt="x", template="{{ .Prompt }}"), 400,
            "template")


def check_format(client, port, mid):
    msgs = [{"role": "user", "content": "Describe a fruit as JSON."}]
    for seed in (1, 2):
        r = client.chat(model=mid, messages=msgs, format=SCHEMA,
                        options={"seed": seed, "temperature": 0.9, "num_predict": 80})
        try:
            doc = json.loads(r.message.content)
        except ValueError:
            doc = None
        check(r.done_reason == "stop" and follows_schema(doc), f"schema, seed {seed}: {r}")
    r = client.generate(model=mid, prompt="A fruit as JSON:", format="json",
                        options={"seed": 3, "num_predict": 60})
    text = r.response.strip()
    check(text[:1] in "{[\"-0123456789tfn" and text, f"json: {text!r}")
    if r.done_reason == "stop":
        try:
            json.loads(text)
        except ValueError:
            check(False, f"format json is not JSON: {text!r}")
    try:
        post(port, "/api/chat", {"model": mid, "messages": msgs, "format": "yaml"})
        check(False, "format yaml: accepted")
    except urllib.error.HTTPError as e:
        body = json.loads(e.read())
        check(e.code == 400 and "format" in body.get("error", ""), f"format yaml: {body}")


def check_info(client, port, model, mid):
    tags = client.list()
    names = [m.model for m in tags.models]
    check(names == [os.path.basename(model), "smollm2:latest"], f"tags {names}")
    first = tags.models[0]
    check(first.size == os.path.getsize(model) and first.digest and first.details.format == "gguf"
          and first.details.family == "llama" and first.details.parameter_size.endswith("M")
          and first.details.quantization_level, f"tag {first}")
    show = client.show(mid)
    check(show.template and "im_start" in show.template, "show: template")
    check(show.details.family == "llama" and show.modelinfo.get("general.architecture") == "llama"
          and show.modelinfo.get("llama.context_length", 0) > 0, f"show: {show.details}")
    check("temperature" in (show.parameters or "") and "completion" in show.capabilities,
          f"show: {show.parameters} {show.capabilities}")
    ps = client.ps()
    check(len(ps.models) == 1 and ps.models[0].size > 0 and ps.models[0].context_length == 512,
          f"ps {ps}")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=10) as r:
        v = json.loads(r.read())
    check(isinstance(v.get("version"), str) and v["version"], f"version {v}")
    import ollama
    strict = ollama.Client(host=f"http://127.0.0.1:{port}")
    refused(lambda: strict.embed(model=mid, input="hello"), 501, "embeddings")
    refused(lambda: strict.pull("llama3"), 501, "not managed")


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def check_tools(client, mid):
    """A tool offered: the answer is a call (as arguments, an object) or
    text; a call sent back with its result is answered."""
    msgs = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]
    r = client.chat(model=mid, messages=msgs, tools=TOOLS, options={"temperature": 0,
                                                                     "num_predict": 60})
    calls = r.message.tool_calls or []
    check(r.done and (calls or r.message.content), f"tools: {r}")
    for c in calls:
        check(c.function.name and isinstance(c.function.arguments, dict), f"call {c}")
    back = msgs + [{"role": "assistant", "content": "",
                    "tool_calls": [{"function": {"name": "get_weather",
                                                 "arguments": {"city": "Paris"}}}]},
                   {"role": "tool", "tool_name": "get_weather", "content": "sunny, 21 C"}]
    r = client.chat(model=mid, messages=back, tools=TOOLS, options={"temperature": 0,
                                                                     "num_predict": 24})
    check(r.done and r.message.content is not None, f"tool result: {r}")


def check_lazy_tools(client, mid):
    """Tools offered (Ollama has no tool_choice: auto): the answer is free
    until a call opens, and the call then follows the tool's schema. Two
    examples teach the model a call without the required "unit": the call
    must still carry it (the lazy grammar)."""
    import json
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather of a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}}]
    msgs = []
    for c in ["Oslo", "Rome"]:
        msgs += [{"role": "user", "content": f"What is the weather in {c}?"},
                 {"role": "assistant",
                  "content": json.dumps({"name": "get_weather", "arguments": {"city": c}})}]
    msgs.append({"role": "user", "content": "What is the weather in Paris?"})
    r = client.chat(model=mid, messages=msgs, tools=tools,
                    options={"temperature": 0, "num_predict": 80})
    calls = r.message.tool_calls or []
    args = dict(calls[0].function.arguments) if calls else {}
    check(len(calls) == 1 and calls[0].function.name == "get_weather"
          and isinstance(args.get("city"), str) and args.get("unit") in ("celsius", "fahrenheit")
          and set(args) == {"city", "unit"}, f"tools, lazy grammar: {r.message}")


def check_embed(client, port, mid):
    """/api/embed and /api/embeddings give /v1/embeddings' vectors."""
    import math
    texts = ["The cat sat on the mat.", "Stock markets fell on Tuesday."]
    r = client.embed(model=mid, input=texts)
    ref = post(port, "/v1/embeddings", {"input": texts})
    check(len(r.embeddings) == 2 and r.prompt_eval_count == ref["usage"]["prompt_tokens"],
          f"embed: {len(r.embeddings)} vectors, {r.prompt_eval_count} tokens")
    for i, v in enumerate(r.embeddings):
        want = ref["data"][i]["embedding"]
        check(len(v) == len(want) and max(abs(a - b) for a, b in zip(v, want)) < 1e-6,
              f"embed: vector {i} differs from /v1/embeddings'")
        check(abs(math.sqrt(sum(x * x for x in v)) - 1.0) < 1e-4, f"embed: vector {i} not unit")
    one = client.embeddings(model=mid, prompt=texts[0])
    check(max(abs(a - b) for a, b in zip(one.embedding, ref["data"][0]["embedding"])) < 1e-6,
          "embeddings (the older endpoint): differs")
    refused(lambda: client.embed(model=mid, input="hi", truncate=True), 400, "truncate")
    refused(lambda: client.embed(model=mid, input="hi", options={"temperature": 0.5}), 400,
            "options")


def main():
    if len(sys.argv) < 3:
        print("usage: test_ollama.py CLLM VENV_DIR", file=sys.stderr)
        return 2
    cllm, venv = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    serverlib.ensure_venv(NAME, venv, "import ollama", ["ollama"])
    import ollama

    model = serverlib.fetch_model(NAME)
    args = ("--parallel", "2", "--ctx-per-slot", "512", "--alias", "smollm2:latest")
    srv = serverlib.start_server(NAME, cllm, model, *args)
    port = srv.port
    try:
        client = ollama.Client(host=f"http://127.0.0.1:{port}", timeout=120)
        mid = os.path.basename(model)
        check_chat(client, port, mid)
        check_generate(client, mid)
        check_format(client, port, mid)
        check_info(client, port, model, mid)
        check_tools(client, mid)
        check_lazy_tools(client, mid)
    finally:
        rc = srv.stop()
    check(rc == 0, f"exit status {rc} after SIGTERM")
    srv = serverlib.start_server(NAME, cllm, model, *args, "--embeddings")
    port = srv.port
    try:
        check_embed(ollama.Client(host=f"http://127.0.0.1:{port}", timeout=120), port,
                    os.path.basename(model))
    finally:
        srv.stop()
    print(f"{NAME}: {'ok' if check.failures == 0 else f'{check.failures} failed'}")
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
