#!/usr/bin/env python3
"""bench/default-sampling.py: what the servers' default sampling picks.

Sends the same chat request to cllm serve and to llama-server (the same
model file), one seed after the other, and reads the log-probability of
every token each server chose. The requests carry no sampling field (no
temperature, top_k, top_p, min_p, penalties): each server samples with its
own defaults. They carry only the message, `seed`, `max_tokens` and
`"logprobs": true`. Both servers report a chosen token's log-probability
from the softmax of the model's raw logits (before temperature and
truncation), so the figures say how likely under the model the picked
tokens were:

  - tokens with p < 1 %: picks a well-truncated sampler (top_k 40, top_p
    0.95, min_p 0.05 at temperature 0.8) should rarely make;
  - the mean log-probability of the picked tokens.

  bench/default-sampling.py --model FILE [--cllm build/cllm]
      [--llama-server PATH] [--seeds 1-6] [--max-tokens 60] [--threads 2]
      [--prompt TEXT] [--json OUT]

Prints a markdown table (per server: tokens, tokens with p < 1 %, their
share, mean log-probability; then per seed). Only 127.0.0.1 is used.
"""
import argparse
import json
import math
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

LOW = math.log(0.01)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name, argv, port):
        self.name, self.port = name, port
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit("default-sampling: %s exited: %s"
                         % (name, self.proc.stderr.read().decode()[-2000:]))
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        sys.exit("default-sampling: %s did not become healthy" % name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def chat(port, prompt, seed, max_tokens):
    """(the answer, [logprob of each chosen token], finish_reason)."""
    body = {"messages": [{"role": "user", "content": prompt}], "seed": seed,
            "max_tokens": max_tokens, "logprobs": True}
    req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port,
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        j = json.load(r)
    ch = j["choices"][0]
    entries = (ch.get("logprobs") or {}).get("content") or []
    lps = [e["logprob"] for e in entries]
    if not lps:
        sys.exit("default-sampling: no logprobs in the answer: %s" % json.dumps(j)[:500])
    return ch["message"]["content"], lps, ch.get("finish_reason")


def seeds_of(text):
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def summary(lps):
    n = len(lps)
    low = sum(1 for x in lps if x < LOW)
    return n, low, (100.0 * low / n if n else float("nan")), (sum(lps) / n if n else float("nan"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cllm", default="build/cllm")
    ap.add_argument("--llama-server")
    ap.add_argument("--seeds", default="1-6")
    ap.add_argument("--max-tokens", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", default="Write a short poem about the sea.")
    ap.add_argument("--json", help="write every answer and its logprobs to this file")
    args = ap.parse_args()
    seeds = seeds_of(args.seeds)

    servers = [("cllm serve", lambda port: [args.cllm, "serve", "-m", args.model,
                                            "--port", str(port), "-t", str(args.threads),
                                            "--ctx-per-slot", "1024"])]
    if args.llama_server:
        servers.append(("llama-server", lambda port: [
            args.llama_server, "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
            "-np", "1", "-t", str(args.threads), "-tb", str(args.threads), "-c", "1024"]))

    results = {}
    for name, argv_fn in servers:
        port = free_port()
        srv = Server(name, argv_fn(port), port)
        try:
            runs = []
            for s in seeds:
                text, lps, finish = chat(port, args.prompt, s, args.max_tokens)
                runs.append({"seed": s, "text": text, "logprobs": lps, "finish": finish})
                print("%s seed %d: %d tokens, %d below 1 %%, mean %.3f (%s)"
                      % ((name, s) + summary(lps)[:2] + (summary(lps)[3], finish)),
                      file=sys.stderr, flush=True)
            results[name] = runs
        finally:
            srv.stop()

    print("Prompt (chat): %r; seeds %s; max_tokens %d; no sampling field sent.\n"
          % (args.prompt, args.seeds, args.max_tokens))
    print("| server | tokens | p < 1 % | share | mean logprob |")
    print("|---|---:|---:|---:|---:|")
    for name, runs in results.items():
        n, low, share, mean = summary([x for r in runs for x in r["logprobs"]])
        print("| %s | %d | %d | %.1f %% | %.3f |" % (name, n, low, share, mean))
    print("\n| seed | " + " | ".join("%s: tokens, p < 1 %%, mean" % n for n in results) + " |")
    print("|---:|" + "---|" * len(results))
    for i, s in enumerate(seeds):
        cells = []
        for runs in results.values():
            n, low, _, mean = summary(runs[i]["logprobs"])
            cells.append("%d, %d, %.3f" % (n, low, mean))
        print("| %d | %s |" % (s, " | ".join(cells)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"prompt": args.prompt, "max_tokens": args.max_tokens,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
