#!/bin/sh
# tests/server/test_structured.sh: structured output (response_format json_schema and
# json_object), tool calls (tools, tool_choice, parallel_tool_calls, streamed and not) and n on
# `meshlm serve`, driven by tests/server/structured_test.py with the official openai client and
# checked with jsonschema (both from .venv-test/, made by scripts/setup.sh). Starts two servers:
# models/default (babble, the Llama 3 tokenizer and chat format) and SmolLM2-135M-Instruct (a
# real model, ChatML tool calls; its checks say SKIP when the file is missing), and stops them
# on exit. SKIP when python3, openai or jsonschema is missing. Runs from the repository root;
# MESHLM names the binary. Prints "ok - NAME" / "not ok - NAME: DETAILS" per check and ends
# with "N passed, N failed[, N skipped]".

MESHLM=${MESHLM:-build/meshlm}
MODEL=models/default
SMOL=models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

skip_all() {
    echo "SKIP: $1"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
}
fail_all() {
    echo "not ok - $1"
    echo "0 passed, 1 failed"
    exit 1
}

PY=python3
if [ -x .venv-test/bin/python3 ] &&
    .venv-test/bin/python3 -c "import openai, jsonschema" >/dev/null 2>&1; then
    PY=.venv-test/bin/python3
fi
command -v "$PY" >/dev/null 2>&1 || skip_all "python3 is not installed"
"$PY" -c "import openai" >/dev/null 2>&1 ||
    skip_all "the python3 openai package is not installed (scripts/setup.sh: .venv-test)"
"$PY" -c "import jsonschema" >/dev/null 2>&1 ||
    skip_all "the python3 jsonschema package is not installed (scripts/setup.sh: .venv-test)"
[ -f "$MODEL/config.json" ] || skip_all "$MODEL is missing (run from the repository root)"
[ -x "$MESHLM" ] || fail_all "meshlm binary: $MESHLM is not an executable (set MESHLM or build it)"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/meshlm-structured.XXXXXX")
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    sleep 0.2
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# start_server NAME MODEL ARGS...: `meshlm serve` in the background (pid in $TMP/NAME.pid).
start_server() {
    sname=$1
    smodel=$2
    shift 2
    "$MESHLM" serve -m "$smodel" --port 0 --host 127.0.0.1 --threads 2 "$@" \
        >"$TMP/$sname.out" 2>"$TMP/$sname.err" &
    echo $! >"$TMP/$sname.pid"
    PIDS="$PIDS $!"
}

# wait_ready NAME: prints the port from the server's "listening on" line once /health answers
# 200 (up to 60 s in all); fails when the server exits or takes too long.
wait_ready() {
    wpid=$(cat "$TMP/$1.pid")
    i=0
    wport=""
    while [ $i -lt 600 ]; do
        wport=$(sed -n 's|^meshlm serve: listening on http://[^ ]*:\([0-9]*\) (model .*)$|\1|p' \
            "$TMP/$1.out" | head -n 1)
        [ -n "$wport" ] && break
        kill -0 "$wpid" 2>/dev/null || return 1
        sleep 0.1
        i=$((i + 1))
    done
    [ -n "$wport" ] || return 1
    "$PY" - "$wport" "$((60 - i / 10))" <<'EOF' || return 1
import sys, time, urllib.request
port, left = int(sys.argv[1]), max(int(sys.argv[2]), 5)
t_end = time.time() + left
while time.time() < t_end:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            if r.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.1)
sys.exit(1)
EOF
    echo "$wport"
}

start_server tiny "$MODEL" --alias tiny --max-seq-len 1024
[ -f "$SMOL" ] && start_server smol "$SMOL" --alias smol --max-seq-len 2048
TINY_PORT=$(wait_ready tiny) ||
    fail_all "serve $MODEL starts: $(tail -c 400 "$TMP/tiny.err" 2>/dev/null)"
SMOL_PORT=""
if [ -f "$SMOL" ]; then
    SMOL_PORT=$(wait_ready smol) ||
        fail_all "serve $SMOL starts: $(tail -c 400 "$TMP/smol.err" 2>/dev/null)"
fi
echo "# servers up: tiny on port $TINY_PORT${SMOL_PORT:+, smol on port $SMOL_PORT}"
"$PY" "$(dirname "$0")/structured_test.py" "$TINY_PORT" "$SMOL_PORT"
