"""What the `cllm serve` tests in this folder share: the skip rules, a
virtual environment with a client package, the model, and a server on a
free port.

A test that cannot have its venv, pip package or model exits with SKIP (77),
unless CLLM_REQUIRE_TEST_DATA is set (CI): then that is a failure (1).
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SKIP = 77


def require_data():
    """Whether missing test data is a failure (CLLM_REQUIRE_TEST_DATA set)."""
    return os.environ.get("CLLM_REQUIRE_TEST_DATA", "") not in ("", "0")


def missing(name, what):
    """Exits: skipped, or failed when the data is required."""
    print(f"{name}: missing: {what}", file=sys.stderr)
    sys.exit(1 if require_data() else SKIP)


class Checks:
    """Counts failed checks; each failure is printed as `prefix what`."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.passed = 0
        self.failures = 0

    def __call__(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failures += 1
            print(f"{self.prefix} {what}", file=sys.stderr, flush=True)
        return cond


def ensure_venv(name, venv, imports, packages):
    """Re-executes the running script in the venv at `venv` (made when
    missing), with `packages` installed by pip unless `imports` (a Python
    statement) already works there."""
    if os.environ.get("CLLM_TEST_IN_VENV") == "1":
        return
    py = os.path.join(venv, "bin", "python3")
    if not os.path.exists(py):
        r = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
        if r.returncode != 0:
            missing(name,
                    f"python3 -m venv (apt-get install python3-venv; {r.stderr.strip()[-200:]})")
    r = subprocess.run([py, "-c", imports], capture_output=True)
    if r.returncode != 0:
        r = subprocess.run([py, "-m", "pip", "install", "--quiet", *packages],
                           capture_output=True, text=True)
        if r.returncode != 0:
            missing(name, f"pip install {' '.join(packages)} ({r.stderr.strip()[-300:]})")
    env = dict(os.environ, CLLM_TEST_IN_VENV="1")
    os.execve(py, [py] + sys.argv, env)


def fetch_model(name, which="smollm2"):
    """The path of a model of scripts/fetch-model (fetched once)."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.environ.get("CLLM_SOURCE_DIR", os.path.join(here, "..", ".."))
    try:
        r = subprocess.run([os.path.join(root, "scripts", "fetch-model"), which],
                           capture_output=True, text=True)
    except OSError as e:
        missing(name, f"{which} (scripts/fetch-model: {e})")
    path = r.stdout.strip()
    if r.returncode != 0 or not path or not os.path.exists(path):
        missing(name, f"{which} (scripts/fetch-model {which} could not fetch it)")
    return path


def healthy(port, timeout=2):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout) as r:
            return r.status == 200
    except Exception:
        return False


class Server:
    """`cllm serve -m MODEL --port 0 ARGS...`, up when made (/health 200);
    RuntimeError when it does not start. Its stderr goes to a file (`tail`)
    when `log`, else nowhere; its stdout is read until it ends."""

    def __init__(self, cllm, model, *args, log=False, ready_s=60):
        self.log = tempfile.TemporaryFile() if log else None
        self.p = subprocess.Popen([cllm, "serve", "-m", model, "--port", "0", *args],
                                  stdout=subprocess.PIPE,
                                  stderr=self.log if log else subprocess.DEVNULL, text=True)
        self.port = None
        deadline = time.time() + ready_s
        while time.time() < deadline:
            line = self.p.stdout.readline()
            if not line:
                break
            m = re.search(r"listening on http://[^ ]*:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.kill()
            raise RuntimeError("the server did not start" + self.tail_note())
        # its stdout drained, so that it never blocks on a full pipe
        threading.Thread(target=self.p.stdout.read, daemon=True).start()
        while time.time() < deadline:
            if healthy(self.port):
                return
            time.sleep(0.05)
        self.kill()
        raise RuntimeError("the server never answered /health" + self.tail_note())

    def tail(self):
        """The end of its stderr (with `log`), else ""."""
        if not self.log:
            return ""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-3000:]

    def tail_note(self):
        return ":\n" + self.tail() if self.log else ""

    def rss_kib(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return -1

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Sends `sig` and waits: its exit status, or -1 when it had to be
        killed (or was no more)."""
        if self.p.poll() is not None:
            return self.p.returncode
        self.p.send_signal(sig)
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -1


def start_server(name, cllm, model, *args, **kw):
    """A Server, or exits (a failure) saying why it did not start."""
    try:
        return Server(cllm, model, *args, **kw)
    except RuntimeError as e:
        raise SystemExit(f"{name}: {e}")
