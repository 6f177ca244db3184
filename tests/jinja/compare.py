#!/usr/bin/env python3
"""The chat templates of real models, rendered by cllm's Jinja interpreter and
by Python's jinja2, compared byte for byte.

    compare.py TEST_JINJA VENV_DIR PASS_LIST [--update]

The templates are the ones llama.cpp keeps for its tests
(vendor/llama.cpp/models/templates/*.jinja in the llama-cpp-python 0.3.36
sdist, fetched from PyPI once and cached beside scripts/fetch-vocab's
copy). Each is rendered on a few conversations (system and user; several
turns; a tool definition, an assistant tool call and its result; contents
as lists of parts), with and without add_generation_prompt, by jinja2 as
Hugging Face's apply_chat_template sets it up (trim_blocks, lstrip_blocks,
loop controls, tojson as json.dumps without ASCII escapes, raise_exception,
strftime_now at a fixed date) and by `TEST_JINJA --render`. A case agrees
when both texts are equal or both raise. A template agrees when all its
cases do.

Prints how many templates agree and why each of the others does not. Fails
when a template of PASS_LIST (the templates that agreed before) no longer
agrees; --update rewrites PASS_LIST with those that agree now. jinja2 comes
from PyPI into a virtual environment at VENV_DIR. Exits 77 (skipped) when
the venv, pip or the sdist cannot be had, unless CLLM_REQUIRE_TEST_DATA is
set (CI): then that is a failure.
"""
import json
import os
import subprocess
import sys
import tarfile
import tempfile

SKIP = 77
PKG = "llama-cpp-python==0.3.36"
SDIST = "llama_cpp_python-0.3.36.tar.gz"
NOW = 1736937000  # 2025-01-15 10:30:00 UTC


def require_data():
    return os.environ.get("CLLM_REQUIRE_TEST_DATA", "") not in ("", "0")


def missing(what):
    print(f"test_jinja_templates: missing: {what}", file=sys.stderr)
    sys.exit(1 if require_data() else SKIP)


def ensure_venv(venv):
    """Re-executes this script in a venv that has jinja2."""
    if os.environ.get("CLLM_TEST_IN_VENV") == "1":
        return
    py = os.path.join(venv, "bin", "python3")
    if not os.path.exists(py):
        r = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
        if r.returncode != 0:
            missing(f"python3 -m venv (apt-get install python3-venv; {r.stderr.strip()[-200:]})")
    if subprocess.run([py, "-c", "import jinja2"], capture_output=True).returncode != 0:
        r = subprocess.run([py, "-m", "pip", "install", "--quiet", "jinja2"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            missing(f"pip install jinja2 ({r.stderr.strip()[-300:]})")
    env = dict(os.environ, CLLM_TEST_IN_VENV="1")
    os.execve(py, [py] + sys.argv, env)


def fetch_templates():
    """The directory of the sdist's templates (extracted once)."""
    cache = os.environ.get("CLLM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cllm")
    out = os.path.join(cache, "templates")
    if os.path.isdir(out) and any(n.endswith(".jinja") for n in os.listdir(out)):
        return out
    pip_dir = os.path.join(cache, "pip")
    sdist = os.path.join(pip_dir, SDIST)
    if not os.path.exists(sdist):
        os.makedirs(pip_dir, exist_ok=True)
        print(f"test_jinja_templates: downloading the {PKG} sdist from PyPI", file=sys.stderr)
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--no-binary", ":all:", "--dest", pip_dir, PKG],
                           capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(sdist):
            missing(f"the {PKG} sdist ({r.stderr.strip()[-300:]})")
    tmp = out + ".part"
    os.makedirs(tmp, exist_ok=True)
    with tarfile.open(sdist) as t:
        for m in t.getmembers():
            if m.isfile() and "/vendor/llama.cpp/models/templates/" in m.name and \
                    m.name.endswith(".jinja"):
                with t.extractfile(m) as src, \
                        open(os.path.join(tmp, os.path.basename(m.name)), "wb") as dst:
                    dst.write(src.read())
    os.replace(tmp, out)
    return out


TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city's name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}]

CONVERSATIONS = {
    "system-user": {"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello! How are you?"},
    ]},
    "multi-turn": {"messages": [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "  And 3+3?\n"},
    ]},
    "user-only": {"messages": [
        {"role": "user", "content": "Tell me a joke about caf\u00e9s."},
    ]},
    "tools": {"tools": TOOLS, "messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
        }]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
         "content": "{\"temperature\": 18.5, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 18.5 \u00b0C and clear in Paris."},
        {"role": "user", "content": "Thanks!"},
    ]},
    "content-parts": {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
        {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                     {"type": "text", "text": "there"}]},
    ]},
}


def cases():
    for name, conv in CONVERSATIONS.items():
        for gen in (True, False):
            ctx = dict(conv, add_generation_prompt=gen, bos_token="<s>", eos_token="</s>")
            yield f"{name}{'+gen' if gen else ''}", ctx


def make_env():
    import datetime
    from jinja2 import nodes
    from jinja2.exceptions import TemplateError
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import SandboxedEnvironment

    class Generation(Extension):
        """{% generation %}: Hugging Face's marker of the assistant's text
        (its AssistantTracker), which renders its body."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime(2025, 1, 15, 10, 30, 0).strftime(fmt)

    # Hugging Face's setup, with one difference: its ImmutableSandboxedEnvironment
    # refuses list.append and dict.update, which cllm (like llama.cpp) allows.
    env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_py(env, src, ctx):
    try:
        return True, env.from_string(src).render(**ctx)
    except Exception as e:  # any exception is a raise, as in apply_chat_template
        return False, f"{type(e).__name__}: {e}"


def render_c(test_jinja, tmpl_path, ctx, tmp):
    ctx_path = os.path.join(tmp, "ctx.json")
    with open(ctx_path, "w", encoding="utf-8") as f:
        json.dump(ctx, f, ensure_ascii=False)
    r = subprocess.run([test_jinja, "--render", tmpl_path, ctx_path, str(NOW)], capture_output=True,
                       env=dict(os.environ, TZ="UTC"))
    out = r.stdout.decode("utf-8", errors="replace")
    if r.returncode == 0:
        return True, out
    if r.returncode == 3:
        return False, out[len("ERROR: "):]
    return False, f"crashed with {r.returncode}: {r.stderr.decode(errors='replace')[-300:]}"


def first_difference(a, b):
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return i, a[max(0, i - 20):i + 30], b[max(0, i - 20):i + 30]


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    test_jinja, venv, pass_list = sys.argv[1], sys.argv[2], sys.argv[3]
    update = "--update" in sys.argv[4:]
    ensure_venv(venv)
    tdir = fetch_templates()
    env = make_env()
    names = sorted(n for n in os.listdir(tdir) if n.endswith(".jinja"))
    agree, why = [], {}
    n_equal = n_raised = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = os.path.join(tdir, name)
            with open(path, encoding="utf-8") as f:
                src = f.read()
            problem = None
            for case, ctx in cases():
                ok_py, py = render_py(env, src, ctx)
                ok_c, c = render_c(test_jinja, path, ctx, tmp)
                if ok_py and ok_c and py == c:
                    n_equal += 1
                    continue
                if not ok_py and not ok_c:
                    n_raised += 1
                    continue
                if ok_py and not ok_c:
                    problem = f"{case}: cllm raised: {c.strip()[:160]}"
                elif not ok_py:
                    problem = f"{case}: jinja2 raised ({py[:120]}), cllm rendered"
                else:
                    at, want, got = first_difference(py, c)
                    problem = f"{case}: differs at byte {at}: jinja2 {want!r} cllm {got!r}"
                break
            if problem:
                why[name] = problem
            else:
                agree.append(name)
    print(f"test_jinja_templates: {len(agree)} of {len(names)} templates render as jinja2 "
          f"renders them ({len(list(cases()))} cases each; of the cases of all templates, {n_equal} "
          f"render equal and {n_raised} raise in both)")
    for name in sorted(why):
        print(f"  differs: {name}: {why[name]}")
    if update:
        with open(pass_list, "w", encoding="utf-8") as f:
            f.write("# Chat templates that cllm's Jinja interpreter renders as jinja2 does\n"
                    "# (tests/jinja/compare.py). Source: vendor/llama.cpp/models/templates/ of\n"
                    f"# the {PKG} sdist on PyPI. One file name a line.\n")
            for name in agree:
                f.write(name + "\n")
        print(f"test_jinja_templates: wrote {len(agree)} names to {pass_list}")
        return 0
    with open(pass_list, encoding="utf-8") as f:
        expected = [l.strip() for l in f if l.strip() and not l.startswith("#")]
    regressed = [n for n in expected if n not in agree]
    for n in regressed:
        print(f"test_jinja_templates: REGRESSION: {n} agreed before: {why.get(n, 'missing')}")
    return 1 if regressed else 0


if __name__ == "__main__":
    sys.exit(main())
