#!/usr/bin/env python3
"""cllm serve with the official `openai` Python client, over loopback.

    test_openai.py CLLM VENV_DIR

Makes a virtual environment in VENV_DIR with the `openai` package (pip),
re-runs itself inside it, starts `cllm serve` on SmolLM2 (scripts/fetch-model)
on a free port and checks chat and text completions, whole and streamed,
greedy answers equal between the two, usage (with cached tokens on a second
turn), a request naming another model (served: one model is loaded), and
structured output (response_format json_schema, raw and through the client's
Pydantic parse(), and json_object), and tool calls (forced, streamed, an
answer under auto streamed as content as it comes, a call under auto held
to the tool's schema by the lazy grammar, and a tool result sent back).
Exits 77 (skipped) when the venv, pip or the model cannot be had, unless CLLM_REQUIRE_TEST_DATA is set
(CI): then that is a failure.
"""
import os
import sys

import serverlib

NAME = "test_serve_openai"
check = serverlib.Checks(f"{NAME}: check failed:")


FRUITS = ["apple", "banana", "cherry"]
SCHEMA = {"type": "object",
          "properties": {"fruit": {"type": "string", "enum": FRUITS},
                         "ripe": {"type": "boolean"},
                         "count": {"type": "integer", "minimum": 1, "maximum": 9}},
          "required": ["fruit", "ripe", "count"], "additionalProperties": False}


def follows_schema(doc):
    """The checks of SCHEMA, by hand (no jsonschema in this venv)."""
    return (isinstance(doc, dict) and set(doc) == {"fruit", "ripe", "count"}
            and doc["fruit"] in FRUITS and isinstance(doc["ripe"], bool)
            and type(doc["count"]) is int and 1 <= doc["count"] <= 9)


def check_structured(client, mid, openai):
    """response_format: a JSON Schema, raw and through the client's Pydantic
    parse(); json_object; an unknown field refused."""
    import json
    msgs = [{"role": "user", "content": "Describe a fruit as JSON."}]
    for seed in (1, 2, 3):
        r = client.chat.completions.create(
            model=mid, messages=msgs, max_tokens=80, seed=seed, temperature=0.9,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "fruit", "strict": True, "schema": SCHEMA}})
        text = r.choices[0].message.content
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        check(r.choices[0].finish_reason == "stop" and follows_schema(doc),
              f"json_schema, seed {seed}: {text!r}")

    from typing import Literal
    from pydantic import BaseModel

    class Fruit(BaseModel):
        fruit: Literal["apple", "banana", "cherry"]
        ripe: bool

    parsed = client.chat.completions.parse(model=mid, messages=msgs, max_tokens=80, seed=4,
                                           response_format=Fruit)
    p = parsed.choices[0].message.parsed
    check(isinstance(p, Fruit) and p.fruit in FRUITS, f"parse(): {parsed.choices[0].message}")

    r = client.chat.completions.create(model=mid, messages=msgs, max_tokens=60, seed=5,
                                       response_format={"type": "json_object"})
    text = r.choices[0].message.content.strip()
    check(text.startswith("{"), f"json_object: {text!r}")
    if r.choices[0].finish_reason == "stop":
        try:
            check(isinstance(json.loads(text), dict), f"json_object: {text!r}")
        except ValueError:
            check(False, f"json_object is not JSON: {text!r}")

    for extra, field in (({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "array", "uniqueItems": True}}}}, "response_format"),
                         ({"extra_body": {"best_of": 3}}, "best_of")):
        try:
            client.chat.completions.create(model=mid, messages=msgs, max_tokens=2, **extra)
            check(False, f"{field}: accepted")
        except openai.BadRequestError as e:
            body = e.body if isinstance(e.body, dict) else {}
            body = body.get("error", body)
            check(e.status_code == 400 and body.get("param") == field, f"{field}: {e}")


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}]


def check_lazy_tools(client, mid):
    """tool_choice auto: the answer is free until a call opens, and the
    call then follows the tool's schema. Two examples teach the model the
    form of a call without the required "unit": the call must still carry
    it (the lazy grammar), and tool_choice none shows the model's own."""
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
    own = client.chat.completions.create(model=mid, messages=msgs, tools=tools, max_tokens=80,
                                         temperature=0, tool_choice="none")
    r = client.chat.completions.create(model=mid, messages=msgs, tools=tools, max_tokens=80,
                                       temperature=0)
    calls = r.choices[0].message.tool_calls or []
    args = json.loads(calls[0].function.arguments) if calls else {}
    check(r.choices[0].finish_reason == "tool_calls" and len(calls) == 1
          and calls[0].function.name == "get_weather" and isinstance(args.get("city"), str)
          and args.get("unit") in ("celsius", "fahrenheit") and set(args) == {"city", "unit"},
          f"auto, lazy grammar: {r.choices[0]} (without tools: {own.choices[0].message.content})")
    name, streamed = "", ""
    for chunk in client.chat.completions.create(model=mid, messages=msgs, tools=tools,
                                                max_tokens=80, temperature=0, stream=True):
        for ch in chunk.choices:
            for tc in ch.delta.tool_calls or []:
                name += tc.function.name or ""
                streamed += tc.function.arguments or ""
    check(name == "get_weather" and calls and streamed == calls[0].function.arguments,
          f"auto, streamed: {name} {streamed}")


def check_tools(client, mid):
    """A call forced by tool_choice (whole and streamed), then its result
    sent back in a tool message."""
    import json
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=mid, messages=msgs, tools=TOOLS, max_tokens=60,
                                       tool_choice="required", temperature=0)
    calls = r.choices[0].message.tool_calls or []
    check(r.choices[0].finish_reason == "tool_calls" and len(calls) >= 1
          and calls[0].function.name == "get_weather"
          and isinstance(json.loads(calls[0].function.arguments).get("city"), str),
          f"required: {r.choices[0]}")
    # streamed: the client's deltas put together give the same call
    name, args, finish = "", "", None
    for chunk in client.chat.completions.create(
            model=mid, messages=msgs, tools=TOOLS, max_tokens=60, temperature=0, stream=True,
            tool_choice={"type": "function", "function": {"name": "get_weather"}}):
        for ch in chunk.choices:
            for tc in ch.delta.tool_calls or []:
                if tc.index == 0 and tc.function:
                    name += tc.function.name or ""
                    args += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    check(finish == "tool_calls" and name == "get_weather" and calls
          and args == calls[0].function.arguments, f"streamed call {name} {args} {finish}")
    # auto: an answer that is no call is streamed as content as it comes
    # (not held back to the end), and equals the whole answer
    q = [{"role": "user", "content": "Tell me a joke about cats."}]
    whole = client.chat.completions.create(model=mid, messages=q, tools=TOOLS, max_tokens=24,
                                           temperature=0)
    parts, streamed_calls = [], []
    for chunk in client.chat.completions.create(model=mid, messages=q, tools=TOOLS, max_tokens=24,
                                                temperature=0, stream=True):
        for ch in chunk.choices:
            if ch.delta.content:
                parts.append(ch.delta.content)
            streamed_calls += ch.delta.tool_calls or []
    if not whole.choices[0].message.tool_calls:
        check("".join(parts) == whole.choices[0].message.content and len(parts) > 1
              and not streamed_calls, f"auto, streamed: {parts} vs {whole.choices[0].message}")
    if not calls:
        return
    back = msgs + [{"role": "assistant", "content": None,
                    "tool_calls": [c.model_dump() for c in calls[:1]]},
                   {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny, 21 C"}]
    r = client.chat.completions.create(model=mid, messages=back, tools=TOOLS, tool_choice="none",
                                       max_tokens=24, temperature=0)
    check(r.choices[0].message.content and not r.choices[0].message.tool_calls,
          f"round trip: {r.choices[0]}")


def main():
    if len(sys.argv) < 3:
        print("usage: test_openai.py CLLM VENV_DIR", file=sys.stderr)
        return 2
    cllm, venv = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    serverlib.ensure_venv(NAME, venv, "import openai", ["openai"])
    import openai

    model = serverlib.fetch_model(NAME)
    srv = serverlib.start_server(NAME, cllm, model, "--parallel", "2", "--ctx-per-slot", "512")
    port = srv.port
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none",
                               max_retries=0, timeout=120)
        ids = [m.id for m in client.models.list().data]
        check(ids == [os.path.basename(model)], f"models: {ids}")
        mid = ids[0]
        msgs = [{"role": "user", "content": "Name a fruit."}]

        whole = client.chat.completions.create(model=mid, messages=msgs, temperature=0,
                                               max_tokens=16)
        text = whole.choices[0].message.content
        check(whole.object == "chat.completion" and text, f"chat: {whole}")
        check(whole.choices[0].finish_reason in ("stop", "length"), "finish_reason")
        check(whole.usage.prompt_tokens > 0 and whole.usage.completion_tokens > 0, "usage")

        parts, usage, finish = [], None, None
        for chunk in client.chat.completions.create(model=mid, messages=msgs, temperature=0,
                                                    max_tokens=16, stream=True,
                                                    stream_options={"include_usage": True}):
            if chunk.usage:
                usage = chunk.usage
            for ch in chunk.choices:
                if ch.delta.content:
                    parts.append(ch.delta.content)
                finish = ch.finish_reason or finish
        check("".join(parts) == text, f"streamed chat {''.join(parts)!r} vs {text!r}")
        check(usage is not None and usage.completion_tokens == whole.usage.completion_tokens,
              f"stream usage {usage}")
        check(finish == whole.choices[0].finish_reason, "streamed finish_reason")

        # a second turn: the first comes from the cache
        turn2 = client.chat.completions.create(
            model=mid, temperature=0, max_tokens=8,
            messages=msgs + [{"role": "assistant", "content": text},
                             {"role": "user", "content": "What color is it?"}])
        cached = turn2.usage.prompt_tokens_details.cached_tokens
        check(cached >= whole.usage.prompt_tokens, f"cached {cached}")

        comp = client.completions.create(model=mid, prompt="The capital of France is",
                                         temperature=0, max_tokens=12, logprobs=2)
        ctext = comp.choices[0].text
        check(comp.object == "text_completion" and ctext, f"completion: {comp}")
        lp = comp.choices[0].logprobs
        check(lp is not None and len(lp.tokens) == comp.usage.completion_tokens
              and all(v <= 0 for v in lp.token_logprobs), f"logprobs {lp}")
        streamed = "".join(c.choices[0].text for c in client.completions.create(
            model=mid, prompt="The capital of France is", temperature=0, max_tokens=12,
            stream=True) if c.choices)
        check(streamed == ctext, f"streamed completion {streamed!r} vs {ctext!r}")

        # the client's own model name is served (one model loaded, no
        # --strict-model-names): clients that send a default name work
        other = client.chat.completions.create(model="gpt-4o-mini", messages=msgs, max_tokens=2,
                                               temperature=0)
        check(other.choices[0].message.content is not None and other.usage.completion_tokens >= 1,
              f"another model name: {other}")
        check_structured(client, mid, openai)
        check_tools(client, mid)
        check_lazy_tools(client, mid)
        try:
            client.chat.completions.create(model=mid, messages=msgs, max_tokens=2, n=2)
            check(False, "n = 2 was accepted")
        except openai.BadRequestError as e:
            check(e.status_code == 400, "n = 2: 400")
    finally:
        rc = srv.stop()
    check(rc == 0, f"exit status {rc} after SIGTERM")
    print(f"{NAME}: {'ok' if check.failures == 0 else f'{check.failures} failed'}")
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
