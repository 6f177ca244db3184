#!/usr/bin/env python3
"""cllm serve under LangChain's ChatOpenAI, over loopback.

    test_langchain.py CLLM VENV_DIR

Makes a virtual environment in VENV_DIR with `langchain-openai` and
`pydantic` (pip), re-runs itself inside it, starts `cllm serve` on SmolLM2
(scripts/fetch-model) on a free port and checks, through LangChain:
- with_structured_output(a Pydantic model) returns a parsed object of that
  model for several prompts and seeds, with each method LangChain offers
  for it ("json_schema": response_format; "function_calling": a forced
  tool call), whole and streamed;
- bind_tools([a Python function]) in a two-step agent loop: the model calls
  the tool (tool_choice "required", then the function named), the test runs
  the function, sends its ToolMessage back, and the model answers in text.
A 135M model's answers are not checked beyond their shape.
Exits 77 (skipped) when the venv, pip or the model cannot be had, unless
CLLM_REQUIRE_TEST_DATA is set (CI): then that is a failure.
"""
import json
import os
import sys
import urllib.request

import serverlib

NAME = "test_serve_langchain"
check = serverlib.Checks(f"{NAME}: check failed:")


def structured(ChatOpenAI, base_url, mid):
    """with_structured_output(Pydantic model) over prompts, seeds and the
    methods LangChain has for it."""
    from typing import Literal
    from pydantic import BaseModel, Field

    class Fruit(BaseModel):
        """A fruit and how it is."""
        fruit: Literal["apple", "banana", "cherry"]
        ripe: bool
        count: int = Field(ge=1, le=9)

    prompts = ["Describe a fruit.", "Pick a fruit from the basket and say how many there are.",
               "Is the banana ripe?"]
    for method in ("json_schema", "function_calling"):
        n_ok = 0
        for seed, prompt in enumerate(prompts, 1):
            llm = ChatOpenAI(base_url=base_url, api_key="none", model=mid, max_tokens=80,
                             temperature=0.8, seed=seed, max_retries=0, timeout=120)
            try:
                out = llm.with_structured_output(Fruit, method=method).invoke(prompt)
            except Exception as e:  # noqa: BLE001: the test reports what LangChain raised
                check(False, f"{method}, seed {seed}: {type(e).__name__}: {e}")
                continue
            ok = isinstance(out, Fruit) and 1 <= out.count <= 9
            check(ok, f"{method}, seed {seed}: {out!r}")
            n_ok += ok
        print(f"{NAME}: with_structured_output({method}): {n_ok}/{len(prompts)} parsed")
    # streamed: the last chunk is the parsed object
    llm = ChatOpenAI(base_url=base_url, api_key="none", model=mid, max_tokens=80, temperature=0,
                     max_retries=0, timeout=120)
    last = None
    for chunk in llm.with_structured_output(Fruit, method="json_schema").stream("A fruit?"):
        last = chunk
    check(isinstance(last, Fruit), f"streamed structured output: {last!r}")


def get_weather(city: str) -> str:
    """The weather of a city.

    Args:
        city: the city's name
    """
    calls.append(city)
    return f"sunny, 21 C in {city}"


calls = []


def agent(ChatOpenAI, base_url, mid):
    """Two steps: the model calls the tool, the tool runs, its result goes
    back as a ToolMessage, the model answers in text."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool

    weather = tool(get_weather)
    llm = ChatOpenAI(base_url=base_url, api_key="none", model=mid, max_tokens=60, temperature=0,
                     max_retries=0, timeout=120)
    for choice in ("required", "get_weather"):
        for stream in (False, True):
            calls.clear()
            msgs = [HumanMessage("What is the weather in Paris?")]
            bound = llm.bind_tools([weather], tool_choice=choice)
            if stream:
                ai = None
                for chunk in bound.stream(msgs):
                    ai = chunk if ai is None else ai + chunk
            else:
                ai = bound.invoke(msgs)
            what = f"tool_choice {choice}{', streamed' if stream else ''}"
            check(isinstance(ai, AIMessage) and ai.tool_calls
                  and ai.tool_calls[0]["name"] == "get_weather"
                  and isinstance(ai.tool_calls[0]["args"].get("city"), str),
                  f"{what}: the call {ai!r}")
            if not (isinstance(ai, AIMessage) and ai.tool_calls):
                continue
            result = weather.invoke(ai.tool_calls[0])
            check(isinstance(result, ToolMessage) and len(calls) == 1
                  and result.tool_call_id == ai.tool_calls[0]["id"],
                  f"{what}: the tool ran: {result!r} {calls}")
            msgs += [ai, result]
            final = llm.bind_tools([weather], tool_choice="none").invoke(msgs)
            check(isinstance(final, AIMessage) and isinstance(final.content, str)
                  and final.content.strip() and not final.tool_calls,
                  f"{what}: the answer after the tool: {final!r}")
    # the loop again with the answer under "auto": the server reads any
    # answer either as calls or as text, and LangChain takes it either way
    calls.clear()
    msgs = [HumanMessage("What is the weather in Rome?")]
    ai = llm.bind_tools([weather], tool_choice="required").invoke(msgs)
    if ai.tool_calls:
        msgs += [ai, weather.invoke(ai.tool_calls[0])]
        final = llm.bind_tools([weather]).invoke(msgs)
        check(isinstance(final, AIMessage) and (final.tool_calls or final.content.strip()),
              f"auto after the tool: {final!r}")
        for tc in final.tool_calls:
            check(tc["name"] == "get_weather" and isinstance(tc["args"], dict),
                  f"auto: a call of a tool that is not offered: {tc}")


def main():
    if len(sys.argv) < 3:
        print("usage: test_langchain.py CLLM VENV_DIR", file=sys.stderr)
        return 2
    cllm, venv = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    serverlib.ensure_venv(NAME, venv, "import langchain_openai, pydantic",
                          ["langchain-openai", "pydantic"])
    from langchain_openai import ChatOpenAI

    model = serverlib.fetch_model(NAME)
    srv = serverlib.start_server(NAME, cllm, model, "--parallel", "1", "--ctx-per-slot", "1024")
    port = srv.port
    try:
        base_url = f"http://127.0.0.1:{port}/v1"
        with urllib.request.urlopen(f"{base_url}/models", timeout=10) as r:
            mid = json.load(r)["data"][0]["id"]
        structured(ChatOpenAI, base_url, mid)
        agent(ChatOpenAI, base_url, mid)
    finally:
        rc = srv.stop()
    check(rc == 0, f"exit status {rc} after SIGTERM")
    print(f"{NAME}: {'ok' if check.failures == 0 else f'{check.failures} failed'}")
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
