#!/usr/bin/env python3
"""cllm serve's chat page (GET /) in headless Chromium, driven by Selenium.

    test_webui.py CLLM VENV_DIR

Makes a virtual environment in VENV_DIR with `selenium` (pip), re-runs itself
inside it, and drives the system's Chromium and chromedriver (Debian's
chromium and chromium-driver; nothing is downloaded at test time). Starts
`cllm serve` on SmolLM2 (scripts/fetch-model) with an API key and checks:
the page and its files are served without the key, with a
Content-Security-Policy; the page asks for the key and then names the
model; a message sent shows its answer growing while it streams, and the
token count and rate; an answer's fenced code block (SmolLM2 writes one
when asked for a function) renders as <pre><code>; Stop ends an answer
early (fewer tokens than its max_tokens, nothing more arrives); a reload keeps the conversation and the
settings; markdown renders (a fenced block as <pre><code>, bold, lists) while
HTML in the model's text stays text and a javascript: link is no link; and
with --no-webui, GET / is 404. CLLM_WEBUI_SCREENSHOT=FILE saves a screenshot
of the conversation (docs/images/webui.png is one).
Exits 77 (skipped) when the venv, pip, Chromium or the model cannot be had,
unless CLLM_REQUIRE_TEST_DATA is set (CI): then that is a failure.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import serverlib

NAME = "test_serve_webui"
KEY = "webui-test-key"


def missing(what):
    serverlib.missing(NAME, what)


def find_browser():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (
        "/usr/lib/chromium/chromedriver" if os.path.exists("/usr/lib/chromium/chromedriver")
        else None)
    if not browser or not driver:
        missing("Chromium and chromedriver (apt-get install chromium chromium-driver)")
    return browser, driver


def fetch_smollm2():
    root = os.environ.get("CLLM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    r = subprocess.run([os.path.join(root, "scripts", "fetch-model"), "smollm2"],
                       capture_output=True, text=True)
    path = r.stdout.strip()
    if r.returncode != 0 or not path or not os.path.exists(path):
        missing("SmolLM2 (scripts/fetch-model smollm2 could not fetch it)")
    return path


def start_server(cllm, args, healthy=True):
    p = subprocess.Popen([cllm, "serve", "--port", "0"] + args, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    port = None
    for line in p.stdout:
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        p.kill()
        raise SystemExit(f"{NAME}: the server did not start")
    deadline = time.time() + 60
    while healthy and time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return p, port
        except Exception:
            time.sleep(0.05)
    if healthy:
        p.kill()
        raise SystemExit(f"{NAME}: the server is not healthy")
    return p, port


def stop_server(p):
    p.terminate()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()


failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"{NAME}: check failed: {what}", file=sys.stderr)
    return cond


def http_get(url, key=None):
    """(status, headers, body) of GET url."""
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def check_files(base):
    """The page and its files: served without the key, with their types and CSP."""
    st, hd, body = http_get(base + "/")
    check(st == 200, f"GET / without the key: {st}")
    check(hd.get("Content-Type", "").startswith("text/html"), f"GET /: {hd.get('Content-Type')}")
    csp = hd.get("Content-Security-Policy", "")
    check("default-src 'none'" in csp and "connect-src 'self'" in csp
          and "script-src 'self'" in csp and "unsafe-inline" not in csp, f"GET / CSP: {csp!r}")
    check(b"/webui/app.js" in body, "GET / names /webui/app.js")
    for name, ctype in (("app.js", "text/javascript"), ("style.css", "text/css")):
        st, hd, body = http_get(f"{base}/webui/{name}")
        check(st == 200 and hd.get("Content-Type", "").startswith(ctype) and len(body) > 100,
              f"GET /webui/{name}: {st} {hd.get('Content-Type')} {len(body)} bytes")
    st, _, _ = http_get(base + "/webui/missing.js")
    check(st == 404, f"GET /webui/missing.js: {st}")
    st, _, _ = http_get(base + "/v1/models")
    check(st == 401, f"GET /v1/models without the key: {st} (the API stays locked)")


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: test_webui.py CLLM VENV_DIR")
    cllm = os.path.abspath(sys.argv[1])
    serverlib.ensure_venv(NAME, sys.argv[2], "import selenium", ["selenium"])
    browser, driver_path = find_browser()
    model = fetch_smollm2()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    proc, port = start_server(cllm, ["-m", model, "--ctx-per-slot", "1024", "--api-key", KEY])
    base = f"http://127.0.0.1:{port}"
    drv = None
    step = "the page's files"
    try:
        check_files(base)
        step = "the page loaded in Chromium"

        opts = webdriver.ChromeOptions()
        opts.binary_location = browser
        for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                  "--window-size=1100,760", "--no-first-run", "--disable-extensions"):
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        drv = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
        wait = WebDriverWait(drv, 30, poll_frequency=0.05)
        drv.get(base + "/")
        el = lambda css: drv.find_element(By.CSS_SELECTOR, css)  # noqa: E731

        # the API needs the key: the page says so, then names the model
        step = "the key entered, the model named"
        wait.until(lambda d: "API key" in el("#model").text)
        el("#api_key").send_keys(KEY + Keys.TAB)
        wait.until(lambda d: el("#model").text and "API key" not in el("#model").text)
        mid = json.loads(http_get(base + "/v1/models", KEY)[2])["data"][0]["id"]
        check(el("#model").text == mid, f"the model's name shown: {el('#model').text!r}")

        def set_field(fid, value):
            f = el("#" + fid)
            f.clear()
            f.send_keys(str(value))

        def answer():
            return drv.find_elements(By.CSS_SELECTOR, "#chat .msg.assistant .body")[-1].text

        def send(text):
            box = el("#input")
            box.send_keys(text)
            box.send_keys(Keys.ENTER)
            wait.until(lambda d: el("#stats").get_attribute("data-done") == "0")

        # a message sent: its answer grows while it streams
        step = "a message sent, its answer streamed"
        set_field("system", "You are a helpful assistant.")
        set_field("max_tokens", 48)
        set_field("seed", 7)
        send("Write a short poem about the sea.")
        lengths = []
        deadline = time.time() + 60
        while time.time() < deadline:
            done = el("#stats").get_attribute("data-done") == "1"
            lengths.append(len(answer()))
            if done:
                break
            time.sleep(0.03)
        check(el("#stats").get_attribute("data-done") == "1", "the answer ended within 60 s")
        grew = sorted(set(n for n in lengths if n > 0))
        check(len(grew) >= 3 and lengths == sorted(lengths),
              f"the answer grew while it streamed (lengths seen: {grew[:12]})")
        users = drv.find_elements(By.CSS_SELECTOR, "#chat .msg.user")
        check(len(users) == 1 and "poem about the sea" in users[0].text, "the message is shown")
        tokens = int(el("#stats").get_attribute("data-tokens"))
        check(0 < tokens <= 48, f"tokens counted: {tokens} (max_tokens 48)")
        check("tokens/s" in el("#stats").text, f"a rate shown: {el('#stats').text!r}")
        check(el("#error").text == "", f"no error: {el('#error').text!r}")

        # a real answer's markdown: SmolLM2 answers this with a fenced block
        # (the page keeps the raw text in localStorage); shown as <pre><code>
        step = "an answer with code"
        set_field("max_tokens", 60)
        send("Write a Python function that adds two numbers.")
        wait.until(lambda d: el("#stats").get_attribute("data-done") == "1")
        raw = drv.execute_script(
            "return JSON.parse(localStorage.getItem('cllm-chat')).messages.at(-1).content")
        fence = re.search(r"```[\w+-]*\n(.*?)\n```", raw, re.S)
        if check(fence, f"a fenced block in the answer: {raw[:200]!r}"):
            blocks = drv.find_elements(By.CSS_SELECTOR, "#chat .msg.assistant")[-1] \
                .find_elements(By.CSS_SELECTOR, "pre > code")
            check(blocks and blocks[0].text == fence.group(1),
                  f"the answer's block as <pre><code>: {[b.text for b in blocks][:2]}")

        # Stop: the answer ends early and nothing more arrives
        step = "Stop"
        set_field("max_tokens", 400)
        send("Tell me a long story about a dragon and a knight.")
        wait.until(lambda d: int(el("#stats").get_attribute("data-tokens")) >= 8
                   or el("#stats").get_attribute("data-done") == "1")
        check(el("#stats").get_attribute("data-done") == "0",
              "the story was still streaming after 8 tokens")
        el("#stop").click()
        WebDriverWait(drv, 10, 0.05).until(
            lambda d: el("#stats").get_attribute("data-done") == "1")
        stopped = answer()
        tokens = int(el("#stats").get_attribute("data-tokens"))
        check(tokens < 400, f"stopped at {tokens} tokens, fewer than max_tokens 400")
        notes = drv.find_elements(By.CSS_SELECTOR, "#chat .msg.assistant .note")
        check(notes and notes[-1].text == "(stopped)", "the answer is marked stopped")
        check(el("#send").is_enabled() and not el("#stop").is_enabled(),
              "Send is back, Stop is off")
        time.sleep(1.0)
        check(answer() == stopped, "nothing arrived after Stop")

        shot = os.environ.get("CLLM_WEBUI_SCREENSHOT")
        if shot:
            drv.save_screenshot(shot)

        # a reload keeps the conversation and the settings (and, in this
        # tab, the key)
        def conversation():
            return [(m.get_attribute("class"), m.find_element(By.CSS_SELECTOR, ".body").text)
                    for m in drv.find_elements(By.CSS_SELECTOR, "#chat .msg")]
        step = "a reload"
        before = conversation()
        check(len(before) == 6, f"6 messages before the reload: {len(before)}")
        drv.refresh()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#chat .msg")) == len(before))
        check(conversation() == before, "the conversation is the same after a reload")
        check(el("#max_tokens").get_attribute("value") == "400", "max_tokens kept")
        check(el("#system").get_attribute("value") == "You are a helpful assistant.",
              "the system prompt kept")
        check(el("#api_key").get_attribute("value") == KEY, "the key kept in this tab")

        # markdown: a fenced block as <pre><code>; HTML in the text stays text
        step = "markdown"
        md = ("Here:\n\n```c\nint main(void) { return 0; }\n```\n\n**bold** and `a<b>` "
              "<img src=x onerror=\"window.pwned=1\"> <script>window.pwned=2</script> "
              "[ok](https://example.com/) [bad](javascript:window.pwned=3)\n\n- one\n- two\n")
        stored = {"messages": [{"role": "user", "content": "Show me C."},
                               {"role": "assistant", "content": md}],
                  "settings": {}}
        drv.execute_script("localStorage.setItem('cllm-chat', arguments[0])", json.dumps(stored))
        drv.refresh()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chat .msg.assistant pre > code"))
        code = el("#chat .msg.assistant pre > code")
        check(code.text == "int main(void) { return 0; }", f"the code block: {code.text!r}")
        check(code.get_attribute("class") == "language-c", "the code block's language")
        check(el("#chat .msg.assistant strong").text == "bold", "bold")
        check(len(drv.find_elements(By.CSS_SELECTOR, "#chat .msg.assistant ul > li")) == 2,
              "a list of two items")
        check(not drv.find_elements(By.CSS_SELECTOR, "#chat img, #chat script"),
              "no element made from HTML in the text")
        body = el("#chat .msg.assistant .body").text
        check("<img src=x" in body and "<script>" in body, "HTML shown as text")
        links = [a.get_attribute("href")
                 for a in drv.find_elements(By.CSS_SELECTOR, "#chat .msg.assistant a")]
        check(links == ["https://example.com/"], f"only the https link is a link: {links}")
        check(drv.execute_script("return window.pwned === undefined"), "no script ran")
        # (the first /v1/models before the key was entered: a 401)
        errors = [e for e in drv.get_log("browser")
                  if e.get("level") == "SEVERE" and "401" not in e.get("message", "")]
        check(not errors, f"no errors in the browser's console: {errors[:3]}")
    except TimeoutException:
        check(False, f"timed out waiting in the step: {step}")
    finally:
        if drv:
            drv.quit()
        stop_server(proc)

    # --no-webui: no page
    proc, port = start_server(cllm, ["-m", model, "--no-webui"], healthy=False)
    try:
        for path in ("/", "/webui/app.js"):
            st, _, _ = http_get(f"http://127.0.0.1:{port}{path}")
            check(st == 404, f"--no-webui: GET {path}: {st}")
    finally:
        stop_server(proc)

    if failures:
        print(f"{NAME}: {failures} check(s) failed", file=sys.stderr)
        return 1
    print(f"{NAME}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
