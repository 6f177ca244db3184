#!/usr/bin/env python3
"""Validates generated JSON against the schemas it was generated under.

    json_schema_check.py VENV_DIR CASES.jsonl

Each line of CASES.jsonl is {"name": ..., "schema": {...}, "output": "..."}.
Makes a virtual environment in VENV_DIR with the `jsonschema` package (pip),
re-runs itself inside it, parses every output as JSON and validates it with
jsonschema (Draft 2020-12, formats checked). Exits 0 when all are valid, 1
otherwise, 77 (skipped) when the venv or pip cannot be had, unless
CLLM_REQUIRE_TEST_DATA is set (CI): then that is a failure.
"""
import json
import os
import subprocess
import sys

SKIP = 77


def missing(what):
    print(f"json_schema_check: missing: {what}", file=sys.stderr)
    v = os.environ.get("CLLM_REQUIRE_TEST_DATA", "")
    sys.exit(1 if v not in ("", "0") else SKIP)


def ensure_venv(venv):
    """Re-executes this script in a venv that has jsonschema."""
    if os.environ.get("CLLM_TEST_IN_VENV") == "1":
        return
    py = os.path.join(venv, "bin", "python3")
    if not os.path.exists(py):
        r = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
        if r.returncode != 0:
            missing(f"python3 -m venv (apt-get install python3-venv; {r.stderr.strip()[-200:]})")
    r = subprocess.run([py, "-c", "import jsonschema"], capture_output=True)
    if r.returncode != 0:
        r = subprocess.run([py, "-m", "pip", "install", "--quiet", "jsonschema"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            missing(f"pip install jsonschema ({r.stderr.strip()[-300:]})")
    env = dict(os.environ, CLLM_TEST_IN_VENV="1")
    os.execve(py, [py] + sys.argv, env)


def main():
    venv, cases = sys.argv[1], sys.argv[2]
    ensure_venv(venv)
    import jsonschema

    bad = 0
    n = 0
    with open(cases, encoding="utf-8") as f:
        for line in f:
            case = json.loads(line)
            n += 1
            try:
                doc = json.loads(case["output"])
                cls = jsonschema.validators.validator_for(case["schema"],
                                                          default=jsonschema.Draft202012Validator)
                cls(case["schema"], format_checker=cls.FORMAT_CHECKER).validate(doc)
            except (ValueError, jsonschema.ValidationError) as e:
                bad += 1
                print(f"{case['name']}: invalid: {str(e).splitlines()[0]}\n  output: {case['output']!r}",
                      file=sys.stderr)
    print(f"json_schema_check: {n - bad} of {n} outputs valid")
    sys.exit(1 if bad or n == 0 else 0)


if __name__ == "__main__":
    main()
