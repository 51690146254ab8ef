#!/bin/sh
# tests/server/test_page.sh: the chat page of `meshlm serve` (GET /, tools/server/page.html) in
# a real browser: headless Chromium driven through chromedriver by Python's selenium (from
# .venv-test/, made by scripts/setup.sh), against SmolLM2 (a real instruct model, so answers
# are text). Checks the route (200 text/html without a key, 405 for other methods), an answer
# that streams into the page, Enter and Shift+Enter, an error object shown in the conversation,
# Stop mid-answer cancelling the request on the server (/metrics), the tok/s figure, and a
# --api-key server: the page asks for the key, refuses a wrong one, answers with the right one.
# Saves a screenshot to build/test-artifacts/page.png. SKIP when chromium, chromedriver,
# selenium or the model is missing. Runs from the repository root; MESHLM names the binary.
# Prints "ok - NAME" / "not ok - NAME: DETAILS" per check and ends with "N passed, N failed".

MESHLM=${MESHLM:-build/meshlm}
MODEL=models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
KEY=sekrit
ARTIFACTS=build/test-artifacts

skip_all() {
    echo "SKIP: $1"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
}

PY=python3
if [ -x .venv-test/bin/python3 ] && .venv-test/bin/python3 -c "import selenium" >/dev/null 2>&1; then
    PY=.venv-test/bin/python3
fi
CHROME=$(command -v chromium || command -v chromium-browser)
DRIVER=$(command -v chromedriver || { [ -x /usr/lib/chromium/chromedriver ] && echo /usr/lib/chromium/chromedriver; })
[ -n "$CHROME" ] || skip_all "chromium is not installed (apt-get install chromium)"
[ -n "$DRIVER" ] || skip_all "chromedriver is not installed (apt-get install chromium-driver)"
command -v "$PY" >/dev/null 2>&1 || skip_all "python3 is not installed"
"$PY" -c "import selenium" >/dev/null 2>&1 ||
    skip_all "the python3 selenium package is not installed (scripts/setup.sh puts it in .venv-test)"
[ -f "$MODEL" ] || skip_all "$MODEL is missing (scripts/get-model.sh)"
if [ ! -x "$MESHLM" ]; then
    echo "not ok - meshlm binary: $MESHLM is not an executable (set MESHLM or build it)"
    echo "0 passed, 1 failed"
    exit 1
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/meshlm-page.XXXXXX")
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    sleep 0.2
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# start_server NAME ARGS...: `meshlm serve` on SmolLM2 in the background.
start_server() {
    sname=$1
    shift
    "$MESHLM" serve -m "$MODEL" --port 0 --host 127.0.0.1 --threads 2 --alias smol "$@" \
        >"$TMP/$sname.out" 2>"$TMP/$sname.err" &
    echo $! >"$TMP/$sname.pid"
    PIDS="$PIDS $!"
}

# wait_port NAME: prints the port from the server's "listening on" line (up to 60 s).
wait_port() {
    wpid=$(cat "$TMP/$1.pid")
    i=0
    while [ $i -lt 600 ]; do
        wport=$(sed -n 's|^meshlm serve: listening on http://[^ ]*:\([0-9][0-9]*\) (model .*)$|\1|p' \
            "$TMP/$1.out" | head -n 1)
        if [ -n "$wport" ]; then echo "$wport"; return 0; fi
        kill -0 "$wpid" 2>/dev/null || return 1
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

start_server main
start_server keyed --api-key "$KEY"
MAIN=$(wait_port main)
KEYED=$(wait_port keyed)
if [ -z "$MAIN" ] || [ -z "$KEYED" ]; then
    echo "not ok - servers start: main '$MAIN', keyed '$KEYED'; $(tail -c 400 "$TMP/main.err" "$TMP/keyed.err" | tr '\n' ' ')"
    echo "0 passed, 1 failed"
    exit 1
fi
mkdir -p "$ARTIFACTS"

# The browser part; "timeout" bounds it whatever hangs (selenium has its own timeouts too).
MAIN=$MAIN KEYED=$KEYED KEY=$KEY CHROME=$CHROME DRIVER=$DRIVER TMP=$TMP \
    SHOT="$(cd "$ARTIFACTS" && pwd)/page.png" \
    timeout -k 5 300 "$PY" - >"$TMP/py.out" 2>&1 <<'EOF'
import os, re, sys, time, urllib.error, urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

MAIN = "http://127.0.0.1:" + os.environ["MAIN"]
KEYED = "http://127.0.0.1:" + os.environ["KEYED"]
KEY = os.environ["KEY"]


def ok(name):
    print("ok - " + name, flush=True)


def not_ok(name, details):
    print("not ok - %s: %s" % (name, details), flush=True)


def check(name, cond, details=""):
    if cond:
        ok(name)
    else:
        not_ok(name, details)
    return cond


def http(method, url, headers=None):
    """(status, headers, body) of METHOD URL."""
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def cancelled(base):
    """meshlm_request_finish_total{...,reason="cancelled"} from BASE's /metrics."""
    _, _, body = http("GET", base + "/metrics")
    m = re.search(r'^meshlm_request_finish_total\{[^}]*reason="cancelled"[^}]*\} (\d+)',
                  body.decode(), re.M)
    return int(m.group(1)) if m else None


def wait(cond, seconds, step=0.05):
    """The first true value of COND() within SECONDS, else None."""
    end = time.time() + seconds
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(step)
    return None


# ---- the route ----

page = open("tools/server/page.html", "rb").read()
st, h, body = http("GET", MAIN + "/")
check("GET / is 200 text/html with the page", st == 200 and
      h.get("Content-Type") == "text/html; charset=utf-8" and body == page,
      "HTTP %s %s, %d bytes (page.html has %d)" % (st, h.get("Content-Type"), len(body), len(page)))
st, _, body = http("GET", MAIN + "/index.html")
check("GET /index.html is the page", st == 200 and body == page, "HTTP %s" % st)
check("the page fetches nothing from elsewhere",
      not re.search(rb'(src|href)\s*=\s*["\']?(https?:)?//|@import|url\(', page))
st, h, _ = http("HEAD", MAIN + "/")
check("HEAD / is 405 with Allow: GET", st == 405 and h.get("Allow") == "GET",
      "HTTP %s, Allow %s" % (st, h.get("Allow")))
st, _, _ = http("POST", MAIN + "/")
check("POST / is 405", st == 405, "HTTP %s" % st)
st, _, body = http("GET", KEYED + "/")
check("--api-key: GET / needs no key", st == 200 and body == page, "HTTP %s" % st)
st, _, _ = http("GET", KEYED + "/v1/models")
check("--api-key: GET /v1/models without the key is 401", st == 401, "HTTP %s" % st)

# ---- the browser ----

opts = Options()
opts.binary_location = os.environ["CHROME"]
for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
          "--window-size=1000,800", "--user-data-dir=" + os.environ["TMP"] + "/chrome"):
    opts.add_argument(a)
driver = webdriver.Chrome(options=opts, service=Service(
    os.environ["DRIVER"], log_output=os.environ["TMP"] + "/chromedriver.log"))
driver.set_page_load_timeout(30)
driver.set_script_timeout(30)

# Records every change of the last assistant message: [text length, its data-state], so that
# a streamed answer shows text while it is still "streaming".
WATCH = """
window.snaps = [];
new MutationObserver(() => {
  const a = document.querySelectorAll('#log .assistant');
  const last = a[a.length - 1];
  if (last) window.snaps.push([last.textContent.length, last.dataset.state]);
}).observe(document.getElementById('log'),
           {subtree: true, childList: true, characterData: true, attributes: true});
"""


def el(i):
    return driver.find_element(By.ID, i)


def set_field(i, v):
    e = el(i)
    e.clear()
    e.send_keys(str(v))


def last_answer():
    """(text, state, stopped) of the last assistant message, or None."""
    return driver.execute_script("""
      const a = document.querySelectorAll('#log .assistant');
      const l = a[a.length - 1];
      return l ? [l.textContent, l.dataset.state, l.dataset.stopped || ''] : null;""")


def n_assistant():
    return len(driver.find_elements(By.CSS_SELECTOR, "#log .assistant"))


def answer_done(before, seconds):
    """Waits for a new assistant message (after BEFORE of them) to finish."""
    def done():
        if n_assistant() <= before:
            return None
        a = last_answer()
        return a if a and a[1] == "done" else None
    return wait(done, seconds)


def errors():
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#log .error")]


SPEED = re.compile(r"^\d+ tokens?, \d+(\.\d)? tok/s")

try:
    driver.get(MAIN + "/")
    check("the page loads", driver.title == "meshlm", "title %r" % driver.title)
    check("no key needed: #key-needed hidden",
          wait(lambda: el("model").text == "smol", 10) and not el("key-needed").is_displayed(),
          "model %r" % el("model").text)
    check("the loop guard is on by default, as in meshlm chat (DRY multiplier 0.8)",
          el("dry").get_attribute("value") == "0.8", repr(el("dry").get_attribute("value")))
    driver.execute_script(WATCH)
    md = driver.execute_script("return render(arguments[0])",
                               "a <b> & `x<y`\n```c\nif (a < b && c) {}\n```\nend <i>")
    check("Markdown: fenced code as <pre><code>, inline code, all text escaped",
          md == "a &lt;b&gt; &amp; <code>x&lt;y</code>\n<pre><code>if (a &lt; b &amp;&amp; c) {}"
                "</code></pre>\nend &lt;i&gt;", repr(md))

    # Shift+Enter is a new line, Enter sends.
    set_field("temperature", 0)
    set_field("max-tokens", 120)
    msg = el("message")
    msg.send_keys("Tell me about")
    msg.send_keys(Keys.SHIFT, Keys.ENTER)
    check("Shift+Enter adds a new line and sends nothing",
          msg.get_attribute("value") == "Tell me about\n" and n_assistant() == 0,
          "value %r, %d answers" % (msg.get_attribute("value"), n_assistant()))
    msg.clear()
    msg.send_keys("Write a short poem about the sea.", Keys.ENTER)
    a = answer_done(0, 120)
    check("Enter sends; the answer is text", a and len(a[0].strip()) > 10 and not errors(),
          "answer %r, errors %r" % (a, errors()))
    snaps = driver.execute_script("return window.snaps")
    final = len(a[0]) if a else 0
    mid = [s for s in snaps if s[1] == "streaming" and 0 < s[0] < final]
    check("the answer streams (text shows before it ends)", len(mid) >= 2,
          "%d partial states of %d changes, final length %d" % (len(mid), len(snaps), final))
    check("#speed shows tokens and tok/s", SPEED.match(el("speed").text), repr(el("speed").text))
    t = driver.execute_script("return turns")
    check("the turn is kept for the next request (user, then the answer)",
          [x["role"] for x in t] == ["user", "assistant"] and a and t[1]["content"] == a[0], repr(t))

    # A server error is shown in the conversation: max_tokens past --max-seq-len is a 400.
    set_field("max-tokens", 100000)
    el("message").send_keys("Hello")
    el("send").click()
    e = wait(lambda: errors(), 30)
    check("an error object is shown in the conversation", e and "maximum context length" in e[-1],
          repr(e))

    # Stop mid-answer: the fetch is aborted, the server cancels the request.
    before = cancelled(MAIN)
    n0 = n_assistant()
    set_field("temperature", 0.8)
    set_field("max-tokens", 2000)
    el("message").send_keys("Write a very long story about a dragon and a knight, "
                            "in many chapters.")
    el("send").click()
    started = wait(lambda: n_assistant() > n0 and (last_answer() or ["", ""])[1] == "streaming"
                   and len(last_answer()[0]) > 40, 60)
    check("the long answer streams", started, repr(last_answer()))
    el("stop").click()
    a = wait(lambda: (last_answer() or ["", ""])[1] == "done" and last_answer(), 10)
    check("Stop ends the answer in the page", a and a[2] == "1", repr(a))
    check("after Stop, Send is back and Stop disabled",
          el("send").is_enabled() and not el("stop").is_enabled())
    after = wait(lambda: (cancelled(MAIN) or 0) > (before or 0) and cancelled(MAIN), 15)
    check("the server cancelled the request (/metrics reason=\"cancelled\" %s -> %s)"
          % (before, after), before is not None and after, "metric not found or not raised")
    sp = el("speed").text
    check("#speed shows tok/s after Stop", SPEED.match(sp) and "stopped" in sp, repr(sp))
    driver.save_screenshot(os.environ["SHOT"])
    check("screenshot saved", os.path.getsize(os.environ["SHOT"]) > 1000)
    print("artifact: " + os.environ["SHOT"], flush=True)

    # A server with --api-key: the page asks for the key and keeps it.
    driver.get(KEYED + "/")
    check("--api-key: the page shows #key-needed",
          wait(lambda: el("key-needed").is_displayed(), 10))
    set_field("max-tokens", 40)
    el("api-key").send_keys("wrong")
    el("message").send_keys("Hi")
    el("send").click()
    e = wait(lambda: errors(), 30)
    check("--api-key: a wrong key's 401 is shown", e and "Incorrect API key" in e[-1], repr(e))
    set_field("api-key", KEY)
    el("message").send_keys("What is the capital of France?")
    el("send").click()
    a = answer_done(0, 60)
    check("--api-key: with the key the page gets an answer",
          a and len(a[0].strip()) > 0 and len(errors()) == 1, "answer %r, errors %r" % (a, errors()))
    check("--api-key: the key is kept in localStorage",
          driver.execute_script("return localStorage.getItem('meshlm-api-key')") == KEY)
    check("--api-key: #key-needed hides once the key works",
          wait(lambda: not el("key-needed").is_displayed(), 10))
    logs = [l for l in driver.get_log("browser") if l.get("level") == "SEVERE"
            and "401" not in l.get("message", "") and "400" not in l.get("message", "")]
    check("no script errors in the browser console", not logs, repr(logs[:3]))
except Exception as ex:  # a failed step: report it, the rest cannot run
    not_ok("browser steps", "%s: %s" % (type(ex).__name__, str(ex).splitlines()[0] if str(ex) else ""))
finally:
    driver.quit()
EOF
rc=$?
cat "$TMP/py.out"
pass=$(grep -c '^ok - ' "$TMP/py.out")
fail=$(grep -c '^not ok - ' "$TMP/py.out")
if [ "$rc" -ne 0 ]; then
    fail=$((fail + 1))
    echo "not ok - the browser part exited with status $rc (124: it ran past 300 s)"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
