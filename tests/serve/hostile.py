#!/usr/bin/env python3
"""Hostile clients against `cllm serve` (docs/security.md), on loopback only.

usage: hostile.py CLLM MODEL

  1. 300 idle, slow-header and slow-body connections (from ten 127.0.0.x
     addresses) while honest requests must each be answered within a second;
     the server must close every one of them past --header-timeout; one
     address holds no more than --max-conn-per-ip.
  2. 256 unauthenticated uploads of 8 MiB bodies: 401 from the headers, and
     the server's resident memory must stay bounded.
  3. An 8 MiB one-word prompt: refused as longer than the context, fast.
  4. Framing (differing Content-Length, Content-Length with Transfer-Encoding,
     other codings), methods on every route (405), Content-Length or a
     chunked body over --max-body (413), a wrong key (401) before the body.
  5. A body that keeps the minimum rate is still closed at --timeout.
  6. A client that half-closes after its request still gets its answer
     (whole and streamed); one that resets it gets its job cancelled.

Prints the measured figures and 'N passed, N failed'. Exit 0, 1 on a
failure, 77 when the model is missing (unless CLLM_REQUIRE_TEST_DATA is set).
"""
import http.client
import json
import os
import re
import select
import socket
import struct
import sys
import threading
import time

import serverlib

KEY = "hostile-test-key"
check = serverlib.Checks("FAIL:")


class Server(serverlib.Server):
    """`cllm serve` on a free port with a key and /metrics, its stderr in a
    file."""

    def __init__(self, cllm, model, *args):
        super().__init__(cllm, model, "-c", "256", "--api-key", KEY, "--metrics", *args,
                         log=True)

    def metric(self, name):
        st, body, _ = request(self.port, "GET", "/metrics", key=True)
        m = re.search(rf"^{name} (\d+)$", body.decode(), re.M)
        return int(m.group(1)) if st == 200 and m else -1


def request(port, method, path, body=None, key=False, src="127.0.0.1", timeout=30):
    """(status, body bytes, seconds) of one honest request."""
    t = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(src, 0))
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + KEY
    c.request(method, path, body=json.dumps(body) if isinstance(body, dict) else body,
              headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data, time.time() - t


def connect(port, src):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s


def raw(port, data, wait=5.0, half_close=None):
    """Sends data on a new connection, then half-closes it after half_close
    seconds (None: never); (status or None, whole answer, seconds)."""
    s = connect(port, "127.0.0.1")
    t = time.time()
    try:
        s.sendall(data)
        if half_close is not None:
            time.sleep(half_close)
            s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    s.settimeout(wait)
    out = b""
    first = None  # seconds to the first byte of the answer
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            first = first or time.time() - t
            out += b
    except OSError:
        pass
    s.close()
    m = re.match(rb"HTTP/1\.[01] (\d{3})", out)
    return (int(m.group(1)) if m else None), out, first if first else time.time() - t


def closed_by_peer(s):
    """Whether the server closed (or reset) socket s; reads what it sent."""
    try:
        s.setblocking(False)
        while True:
            b = s.recv(65536)
            if not b:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def completion_body(prompt="Once upon a time", n=8, **kw):
    return {"prompt": prompt, "max_tokens": n, "temperature": 0, **kw}


def slow_clients(cllm, model):
    header_s = 3
    srv = Server(cllm, model, "--header-timeout", str(header_s), "--min-body-rate", "4096")
    try:
        socks = []  # (socket, kind)
        t_open = time.time()
        for i in range(300):
            src = f"127.0.0.{2 + i // 30}"
            s = connect(srv.port, src)
            kind = i % 3
            if kind == 1:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            elif kind == 2:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                          + KEY.encode() + b"\r\nContent-Length: 100000\r\n\r\n{\"prompt\":")
            socks.append((s, kind))
        stop = threading.Event()

        def dribble():
            while not stop.is_set():
                for s, kind in socks:
                    try:
                        if kind == 1:
                            s.send(b"X")
                        elif kind == 2:
                            s.send(b" " * 10)
                    except OSError:
                        pass
                stop.wait(0.5)

        th = threading.Thread(target=dribble, daemon=True)
        th.start()
        lat = []
        ok = True
        for i in range(20):
            if i % 2:
                st, body, dt = request(srv.port, "POST", "/v1/completions", completion_body(),
                                       key=True)
            else:
                st, body, dt = request(srv.port, "GET", "/health")
            ok = ok and st == 200
            lat.append(dt)
        check(ok, "honest requests during 300 slow connections answered 200")
        check(max(lat) < 1.0, f"honest requests within 1 s (slowest {max(lat):.3f} s)")
        print(f"figure: honest latency under 300 slow/idle connections: "
              f"median {sorted(lat)[len(lat) // 2] * 1e3:.1f} ms, max {max(lat) * 1e3:.1f} ms "
              f"(20 requests)", flush=True)
        # every slow connection closed past --header-timeout (and the rate)
        deadline = t_open + header_s + 4
        open_left = socks
        while open_left and time.time() < deadline:
            open_left = [(s, k) for s, k in open_left if not closed_by_peer(s)]
            time.sleep(0.2)
        stop.set()
        th.join()
        kinds = [sum(1 for _, k in open_left if k == j) for j in range(3)]
        check(not open_left, f"the server closed every slow connection within --header-timeout + "
              f"4 s (still open: idle {kinds[0]}, headers {kinds[1]}, body {kinds[2]})")
        print(f"figure: 300 slow connections closed {time.time() - t_open:.1f} s after opening "
              f"(--header-timeout {header_s})", flush=True)
        for s, _ in socks:
            s.close()
        # one address holds at most --max-conn-per-ip (32)
        many = [connect(srv.port, "127.0.0.50") for _ in range(40)]
        time.sleep(0.5)
        kept = sum(1 for s in many if not closed_by_peer(s))
        check(kept == 32, f"one address holds 32 connections (--max-conn-per-ip), held {kept}")
        for s in many:
            s.close()
        st, _, dt = request(srv.port, "GET", "/health")
        check(st == 200 and dt < 1.0, "/health answers after the per-address limit")
    finally:
        srv.stop()
    if check.failures:
        print(srv.tail())


def unauthenticated(cllm, model):
    srv = Server(cllm, model)
    try:
        base = srv.rss_kib()
        peak = base
        n_conn, body = 256, 8 << 20
        socks = []
        head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
                b"Content-Type: application/json\r\nContent-Length: " + str(body).encode() +
                b"\r\n\r\n")
        for i in range(n_conn):
            s = connect(srv.port, f"127.0.0.{60 + i // 32}")
            s.sendall(head)
            s.setblocking(False)
            socks.append(s)
        sent = {s: 0 for s in socks}
        answers = {s: b"" for s in socks}
        chunk = b"x" * 65536
        live = set(socks)
        t = time.time()
        while live and time.time() - t < 20:
            _, w, _ = select.select(list(live), [s for s in live if sent[s] < body], [], 0.2)
            for s in list(live):
                try:
                    b = s.recv(65536)
                    if not b:
                        live.discard(s)
                        continue
                    answers[s] += b
                except BlockingIOError:
                    pass
                except OSError:
                    live.discard(s)
            for s in w:
                if s in live and sent[s] < body:
                    try:
                        sent[s] += s.send(chunk[:min(len(chunk), body - sent[s])])
                    except BlockingIOError:
                        pass
                    except OSError:
                        live.discard(s)
            peak = max(peak, srv.rss_kib())
        n401 = sum(1 for s in socks if answers[s].startswith(b"HTTP/1.1 401"))
        other = sum(1 for s in socks if answers[s] and not answers[s].startswith(b"HTTP/1.1 401"))
        total = sum(sent.values())
        for s in socks:
            s.close()
        # the server closes with the body unread: the reset that follows may
        # drop its 401 before the client reads it, never turn it into another
        check(n401 > 0 and other == 0,
              f"unauthenticated uploads answered 401 or reset ({n401} 401, {other} other, "
              f"of {n_conn})")
        check(peak - base < 64 << 10, f"resident memory under 256 unauthenticated uploads grew "
              f"{(peak - base) / 1024:.1f} MiB (at most 64)")
        print(f"figure: resident memory under {n_conn} unauthenticated 8 MiB uploads: "
              f"{base / 1024:.1f} MiB before, {peak / 1024:.1f} MiB at most "
              f"({total / 1048576:.1f} MiB of body sent before the server closed)", flush=True)
        st, _, _ = request(srv.port, "GET", "/health")
        check(st == 200, "/health after the uploads")
    finally:
        srv.stop()


def big_prompt(cllm, model):
    srv = Server(cllm, model)
    try:
        prompt = "a" * ((8 << 20) - 64)
        # the same body refused for a field checked before the prompt: the
        # cost of receiving and parsing it, against which the refusal counts
        st, data, base = request(srv.port, "POST", "/v1/completions",
                                 json.dumps({"prompt": prompt, "max_tokens": 1, "n": 2}), key=True)
        check(st == 400, f"an 8 MiB body with n = 2 refused ({st})")
        st, data, dt = request(srv.port, "POST", "/v1/completions",
                               json.dumps({"prompt": prompt, "max_tokens": 1}), key=True)
        check(st == 400 and b"context_length_exceeded" in data,
              f"an 8 MiB prompt refused as longer than the context ({st}, {data[:200]!r})")
        check(dt < 2 * base + 0.5, f"refused in {dt:.3f} s, about what receiving and parsing the "
              f"body takes ({base:.3f} s)")
        print(f"figure: an 8 MiB one-word prompt refused in {dt * 1e3:.0f} ms (receiving and "
              f"parsing the body: {base * 1e3:.0f} ms)", flush=True)
    finally:
        srv.stop()


def framing(cllm, model):
    srv = Server(cllm, model, "--max-body", "65536")
    try:
        key = b"Authorization: Bearer " + KEY.encode() + b"\r\n"
        post = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + key
        cases = [
            ("two differing Content-Length", post +
             b"Content-Length: 5\r\nContent-Length: 7\r\n\r\n{}\r\n\r\n", 400),
            ("Content-Length with Transfer-Encoding", post +
             b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
            ("Transfer-Encoding other than chunked", post +
             b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400),
            ("a header with a control byte", b"GET /health HTTP/1.1\r\nHost: x\r\n"
             b"X-A: a\x01b\r\n\r\n", 400),
            ("POST /health", b"POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405),
            ("PUT /v1/health", b"PUT /v1/health HTTP/1.1\r\nHost: x\r\n\r\n", 405),
            ("DELETE /v1/models", b"DELETE /v1/models HTTP/1.1\r\nHost: x\r\n" + key + b"\r\n",
             405),
            ("GET /v1/completions", b"GET /v1/completions HTTP/1.1\r\nHost: x\r\n" + key +
             b"\r\n", 405),
            ("PUT /v1/chat/completions", b"PUT /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" +
             key + b"Content-Length: 0\r\n\r\n", 405),
            ("PATCH /metrics", b"PATCH /metrics HTTP/1.1\r\nHost: x\r\n" + key + b"\r\n", 405),
            ("Content-Length over --max-body, no body sent", post +
             b"Content-Length: 9000000\r\n\r\n", 413),
            ("a wrong key, no body sent", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
             b"Authorization: Bearer no\r\nContent-Length: 1000\r\n\r\n", 401),
        ]
        for name, data, want in cases:
            st, out, dt = raw(srv.port, data, wait=3.0)
            code = re.search(rb'"code":"([a-z_]+)"', out)
            code = code.group(1).decode() if code else None
            # a framing error is the server's own 400, not a body it read
            check(st == want and dt < 1.0 and (want != 400 or code == "bad_request"),
                  f"{name}: {want} within 1 s (got {st}, {code}, in {dt:.2f} s)")
        # a chunked body that outgrows --max-body: 413, or closed unanswered
        s = connect(srv.port, "127.0.0.1")
        s.sendall(post + b"Transfer-Encoding: chunked\r\n\r\n")
        out = b""
        try:
            for _ in range(64):
                s.sendall(b"1000\r\n" + b" " * 4096 + b"\r\n")
        except OSError:
            pass
        s.settimeout(3)
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
        except OSError:
            pass
        s.close()
        check(out == b"" or out.startswith(b"HTTP/1.1 413"),
              f"a chunked body over --max-body: 413 or closed ({out[:40]!r})")
        # what libmicrohttpd itself accepts (docs/security.md): reported only
        for name, data in [("bare LF line endings", b"GET /health HTTP/1.1\nHost: x\n\n"),
                           ("a NUL byte in a header", b"GET /health HTTP/1.1\r\nHost: x\r\n"
                            b"X-A: a\x00b\r\n\r\n")]:
            st, _, _ = raw(srv.port, data, wait=3.0)
            print(f"info: {name}: {st}", flush=True)
        st, _, _ = request(srv.port, "GET", "/health")
        check(st == 200, "/health after the framing cases")
    finally:
        srv.stop()


def read_timeout(cllm, model):
    # a body that keeps the rate but not --timeout: closed at --timeout
    srv = Server(cllm, model, "--timeout", "2", "--min-body-rate", "1", "--header-timeout", "30")
    try:
        s = connect(srv.port, "127.0.0.1")
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                  KEY.encode() + b"\r\nContent-Length: 100000\r\n\r\n{")
        t = time.time()
        closed = False
        while time.time() - t < 6 and not closed:
            try:
                s.send(b" " * 16)
            except OSError:
                closed = True
            closed = closed or closed_by_peer(s)
            time.sleep(0.2)
        dt = time.time() - t
        s.close()
        check(closed and 1.5 < dt < 4, f"a body slower than --timeout 2 closed after {dt:.1f} s")
    finally:
        srv.stop()


def half_close(cllm, model):
    srv = Server(cllm, model)
    try:
        # keep the one slot busy so that the request under test waits
        def busy():
            request(srv.port, "POST", "/v1/completions",
                    completion_body(n=200, ignore_eos=True), key=True)

        # half-closed at once, and once the request waits for the engine
        for stream, delay in ((False, 0), (True, 0), (False, 0.3), (True, 0.3)):
            ths = [threading.Thread(target=busy) for _ in range(3)]
            for th in ths:
                th.start()
            time.sleep(0.05)
            body = json.dumps(completion_body(n=16, stream=stream)).encode()
            st, out, dt = raw(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                              b"Authorization: Bearer " + KEY.encode() + b"\r\n"
                              b"Content-Type: application/json\r\nConnection: close\r\n"
                              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" +
                              body, wait=30, half_close=delay)
            for th in ths:
                th.join()
            done = b"data: [DONE]" in out if stream else b'"choices"' in out
            check(st == 200 and done, f"a {'streamed' if stream else 'whole'} request half-closed "
                  f"after {delay} s answered in full after {dt:.2f} s (status {st})")
        # a reset (RST) while the request waits cancels its job, or every
        # job of a list of prompts
        for prompt, n_jobs in (("Once upon a time", 1), (["Once upon a time", "Once"], 2)):
            before = srv.metric("cllm_requests_cancelled_total")
            th = threading.Thread(target=busy)
            th.start()
            time.sleep(0.05)
            body = json.dumps(completion_body(prompt, n=200, ignore_eos=True)).encode()
            s = connect(srv.port, "127.0.0.1")
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                      KEY.encode() + b"\r\nContent-Length: " + str(len(body)).encode() +
                      b"\r\n\r\n" + body)
            time.sleep(0.02)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            th.join()
            after = before
            t = time.time()
            while after < before + n_jobs and time.time() - t < 5:
                time.sleep(0.1)
                after = srv.metric("cllm_requests_cancelled_total")
            check(after == before + n_jobs,
                  f"a reset request of {n_jobs} prompt(s) is cancelled ({before} -> {after})")
    finally:
        srv.stop()


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    cllm, model = sys.argv[1], sys.argv[2]
    if not os.path.exists(model):
        print(f"hostile: no model {model}")
        return 1 if os.environ.get("CLLM_REQUIRE_TEST_DATA") else 77
    t = time.time()
    for part in (framing, big_prompt, read_timeout, half_close, unauthenticated, slow_clients):
        try:
            part(cllm, model)
        except Exception as e:  # a broken server shows here
            check(False, f"{part.__name__}: {e!r}")
    print(f"hostile: {time.time() - t:.1f} s")
    print(f"{check.passed} passed, {check.failures} failed")
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
