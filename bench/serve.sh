#!/bin/sh
# bench/serve.sh: `meshlm serve` against llama.cpp's llama-server under the same load from
# bench/serve (streamed /v1/completions, every request max-tokens long with ignore_eos, prompts
# that differ so no prefix cache helps), one server after the other on the same model and
# threads, then a table with the meshlm/llama-server ratio of output tokens/s. Checks on meshlm
# (exit 1 when one fails): every request ok, /metrics meshlm_kv_blocks_used back to 0 after the
# load, exit status 0 after SIGTERM. Never fails on speed. Servers are killed on any exit.
#
#   bench/serve.sh [--clients 32] [--seconds 60] [--max-tokens 128] [--threads 2]
#                  [--prompt-tokens-approx 256] [--ctx 1024] [--llama-server PATH]
#                  [--meshlm-args "..."] [--llama-args "..."] [--bench-args "..."]
#                  [--response-format JSON]
#
# --llama-server defaults to $LLAMA_SERVER; without either that side is skipped with a note.
# --ctx is the context per sequence: meshlm's --max-seq-len, llama-server's -c is clients x ctx.
# Environment: MESHLM (default build/meshlm), SERVE_BENCH (default build/bench/serve, built
# when missing), MODEL (default models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf).
set -eu
cd "$(dirname "$0")/.."

clients=32 seconds=60 max_tokens=128 threads=2 prompt=256 ctx=1024
llama=${LLAMA_SERVER:-} meshlm_args="" llama_args="" bench_args="" response_format=""
MESHLM=${MESHLM:-build/meshlm}
BENCH=${SERVE_BENCH:-build/bench/serve}
MODEL=${MODEL:-models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || usage
    case $1 in
    --clients) clients=$2 ;;
    --seconds) seconds=$2 ;;
    --max-tokens) max_tokens=$2 ;;
    --threads) threads=$2 ;;
    --prompt-tokens-approx) prompt=$2 ;;
    --ctx) ctx=$2 ;;
    --llama-server) llama=$2 ;;
    --meshlm-args) meshlm_args=$2 ;;
    --llama-args) llama_args=$2 ;;
    --bench-args) bench_args=$2 ;;
    --response-format) response_format=$2 ;;
    *) usage ;;
    esac
    shift 2
done
for v in "$clients" "$seconds" "$max_tokens" "$threads" "$prompt" "$ctx"; do
    case $v in '' | *[!0-9]*) echo "bench/serve.sh: '$v' is not a number" >&2; exit 2 ;; esac
done
if [ $((prompt + max_tokens + 32)) -gt "$ctx" ]; then
    echo "bench/serve.sh: --ctx $ctx is too small for $prompt prompt + $max_tokens tokens" >&2
    exit 2
fi

out=$(mktemp -d /tmp/meshlm-bench-serve-XXXXXX)
pids=""
# shellcheck disable=SC2317 # cleanup is called by the trap
cleanup() {
    for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ ! -x "$BENCH" ]; then
    make -s "$BENCH" >/dev/null 2>&1 ||
        { BENCH=$out/serve-bench && cc -std=c11 -O2 -D_GNU_SOURCE -pthread bench/serve.c \
            bench/common/serve_*.c bench/common/clock.c -o "$BENCH" -lm; }
fi
[ -x "$MESHLM" ] || { echo "bench/serve.sh: no $MESHLM (make)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "bench/serve.sh: no $MODEL" >&2; exit 1; }

# ---- helpers ----

jget() { # FILE KEY: a number or string field of bench/serve's JSON line
    sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p" "$1"
}
metric() { # FILE NAME: the value of a Prometheus sample (labels allowed)
    awk -v n="$2" '$1 == n || index($1, n "{") == 1 { print $NF; exit }' "$1"
}
exited() { # PID: gone or a zombie
    [ ! -e "/proc/$1" ] || grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null
}
stop() { # PID NAME: SIGTERM, up to 60 s, then SIGKILL; sets stop_rc
    kill -TERM "$1" 2>/dev/null || true
    i=0
    while ! exited "$1" && [ $i -lt 300 ]; do sleep 0.2; i=$((i + 1)); done
    if ! exited "$1"; then
        echo "  $2 did not stop within 60 s of SIGTERM; killed"
        kill -KILL "$1" 2>/dev/null || true
    fi
    stop_rc=0
    wait "$1" || stop_rc=$?
    pids=$(for p in $pids; do [ "$p" = "$1" ] || echo "$p"; done)
}
warm_up() { # URL
    curl -s -m 120 -o /dev/null -w '%{http_code}' "$1/v1/completions" \
        -H 'Content-Type: application/json' \
        -d '{"prompt":"Warm up the server with a few words.","max_tokens":8,"temperature":0}'
}
run_bench() { # NAME URL [RESPONSE_FORMAT]
    # shellcheck disable=SC2086
    "$BENCH" --url "$2" --clients "$clients" --seconds "$seconds" --max-tokens "$max_tokens" \
        --prompt-tokens-approx "$prompt" --label "$1" --json $bench_args \
        ${3:+--response-format "$3"} >"$out/$1.json" ||
        echo "  bench/serve exited $? (see the errors below)"
    sed 's/^/  /' "$out/$1.json"
}

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
commit=$(git describe --always --dirty 2>/dev/null || echo unknown)
echo "bench/serve.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "  cpu      $cpu ($(nproc) cores online)"
echo "  meshlm   $commit ($MESHLM)"
echo "  model    $MODEL"
echo "  load     $clients clients, $seconds s, $max_tokens tokens per request (ignore_eos)," \
    "~$prompt prompt tokens, $threads threads, ctx $ctx per sequence${bench_args:+, $bench_args}"
fail=0

# ---- meshlm serve ----

echo "== meshlm serve"
# shellcheck disable=SC2086
"$MESHLM" serve -m "$MODEL" --port 0 --max-batch "$clients" --threads "$threads" \
    --max-seq-len "$ctx" $meshlm_args >"$out/meshlm.out" 2>"$out/meshlm.err" &
mpid=$!
pids="$pids $mpid"
url="" i=0
while [ -z "$url" ] && [ $i -lt 600 ] && ! exited $mpid; do
    sleep 0.2
    i=$((i + 1))
    url=$(sed -n 's/^meshlm serve: listening on \(http:[^ ]*\).*/\1/p' "$out/meshlm.out")
done
if [ -z "$url" ]; then
    echo "  meshlm serve did not start (120 s); its stderr:"
    tail -20 "$out/meshlm.err" | sed 's/^/    /'
    exit 1
fi
echo "  $url, warm-up HTTP $(warm_up "$url")"
run_bench meshlm "$url"
if [ -n "$response_format" ]; then # the same load, every reply constrained; other prompts
    plain_args=$bench_args bench_args="$bench_args --seed 2"
    run_bench meshlm-json "$url" "$response_format"
    bench_args=$plain_args
fi
used="" i=0
while [ $i -lt 25 ]; do # cancelled requests may take a step or two to give their blocks back
    curl -s -m 10 "$url/metrics" >"$out/meshlm.metrics" || true
    used=$(metric "$out/meshlm.metrics" meshlm_kv_blocks_used)
    [ "$used" = 0 ] && break
    sleep 0.2
    i=$((i + 1))
done
echo "  /metrics: kv blocks used $used of $(metric "$out/meshlm.metrics" meshlm_kv_blocks_total)," \
    "cached $(metric "$out/meshlm.metrics" meshlm_kv_blocks_cached)," \
    "preemptions $(metric "$out/meshlm.metrics" meshlm_preemptions_total)," \
    "prefix-cache hit tokens $(metric "$out/meshlm.metrics" meshlm_prefix_cache_hit_tokens_total)"
stop $mpid "meshlm serve"
echo "  exit status after SIGTERM: $stop_rc"
m_err=$(jget "$out/meshlm.json" errors)
m_ok=$(jget "$out/meshlm.json" requests_ok)
if [ "$used" != 0 ]; then echo "  FAIL: meshlm_kv_blocks_used is '$used' after the run, want 0"; fail=1; fi
if [ "$stop_rc" != 0 ]; then echo "  FAIL: meshlm serve exited $stop_rc after SIGTERM, want 0"; fail=1; fi
if [ "${m_err:-x}" != 0 ] || [ "${m_ok:-0}" = 0 ]; then
    echo "  FAIL: ${m_ok:-?} requests ok, ${m_err:-?} errors"
    fail=1
fi
if [ $fail != 0 ]; then
    echo "  meshlm serve stderr (last lines):"
    tail -15 "$out/meshlm.err" | sed 's/^/    /'
fi

# ---- llama-server ----

if [ -z "$llama" ]; then
    echo "== llama-server: skipped (no --llama-server PATH and no \$LLAMA_SERVER)"
elif [ ! -x "$llama" ]; then
    echo "== llama-server: skipped ($llama is not an executable)"
    llama=""
else
    src=$(cd "$(dirname "$llama")/../.." 2>/dev/null && pwd || echo "?")
    lver=$(git -C "$src" describe --always --dirty 2>/dev/null ||
        "$llama" --version 2>&1 | sed -n 's/^version: //p' | head -1)
    echo "== llama-server ${lver:-unknown} ($llama; source $src)"
    # shellcheck disable=SC2086
    "$llama" -m "$MODEL" --host 127.0.0.1 --port 0 --parallel "$clients" \
        -c $((clients * ctx)) -t "$threads" $llama_args >"$out/llama.log" 2>&1 &
    lpid=$!
    pids="$pids $lpid"
    lurl="" i=0 health=""
    while [ $i -lt 600 ] && ! exited $lpid; do
        sleep 0.2
        i=$((i + 1))
        [ -n "$lurl" ] || lurl=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$out/llama.log" | head -1)
        [ -n "$lurl" ] || lurl=$(sed -n 's/.*hostname: \([^,]*\), port: \([0-9]*\).*/http:\/\/\1:\2/p' "$out/llama.log" | head -1)
        [ -n "$lurl" ] || continue
        health=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$lurl/health" || true)
        [ "$health" = 200 ] && break
    done
    if [ "$health" != 200 ]; then
        echo "  llama-server did not become healthy (120 s); its log:"
        tail -20 "$out/llama.log" | sed 's/^/    /'
        llama=""
    else
        echo "  $lurl, warm-up HTTP $(warm_up "$lurl")"
        run_bench llama-server "$lurl"
        stop $lpid llama-server
        echo "  exit status after SIGTERM: $stop_rc"
    fi
fi

# ---- table ----

echo "== results (tok/s: output tokens over the whole run with its drain; window: text events"
echo "   in the first $seconds s; TTFT, TPOT in ms)"
printf '%-14s %7s %5s %5s %9s %9s %10s %10s %9s %9s\n' server clients ok err 'tok/s' \
    'window' 'TTFT p50' 'TTFT p99' 'TPOT p50' 'TPOT p99'
row() { # NAME
    f="$out/$1.json"
    [ -s "$f" ] || { printf '%-14s (no result)\n' "$1"; return; }
    printf '%-14s %7s %5s %5s %9s %9s %10s %10s %9s %9s\n' "$1" "$(jget "$f" clients)" \
        "$(jget "$f" requests_ok)" "$(jget "$f" errors)" "$(jget "$f" tokens_per_s)" \
        "$(jget "$f" window_tokens_per_s)" \
        "$(jget "$f" ttft_ms_p50)" "$(jget "$f" ttft_ms_p99)" "$(jget "$f" tpot_ms_p50)" \
        "$(jget "$f" tpot_ms_p99)"
}
row meshlm
if [ -n "$response_format" ]; then
    row meshlm-json
    a=$(jget "$out/meshlm-json.json" tokens_per_s)
    b=$(jget "$out/meshlm.json" tokens_per_s)
    awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN {
        if (b > 0) printf "meshlm with / without response_format tokens/s: %.2fx\n", a / b }'
fi
if [ -n "$llama" ]; then
    row llama-server
    a=$(jget "$out/meshlm.json" tokens_per_s)
    b=$(jget "$out/llama-server.json" tokens_per_s)
    awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN {
        if (b > 0) printf "meshlm / llama-server tokens/s: %.2fx\n", a / b
        else print "meshlm / llama-server tokens/s: n/a" }'
fi
[ $fail = 0 ] || echo "bench/serve.sh: meshlm checks FAILED"
exit $fail
