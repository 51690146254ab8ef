#!/bin/sh
# bench/serve_soak.sh: a soak of `meshlm serve`: bench/serve with --clients for --seconds, every
# --disconnect-every'th request of each client hanging up mid-stream, while the server's RSS
# (VmRSS of /proc/PID/status) is sampled every --interval seconds and printed as a series.
# Then the checks (exit 1 when one fails): the server is still alive, every request that did not
# hang up succeeded, /metrics meshlm_kv_blocks_used is 0 once the load stops, RSS after the
# load grew less than --max-growth-pct over its value at the end of the warm-up, and exit status
# 0 after SIGTERM. The warm-up is --warmup (the first minute; a third of the run when the run is
# shorter than two warm-ups) and, since the KV pool's pages are touched only as blocks are
# first handed out, until meshlm_kv_blocks_free has reached 0 (without that: --warmup alone, with
# a note). The server is killed on any exit.
#
#   bench/serve_soak.sh [--seconds 600] [--clients 32] [--max-tokens 128] [--threads 2]
#                       [--disconnect-every 5] [--interval 10] [--warmup 60]
#                       [--max-growth-pct 5] [--ctx 1024] [--meshlm-args "..."]
#
# Environment: MESHLM (default build/meshlm), SERVE_BENCH (default build/bench/serve, built
# when missing), MODEL (default models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf).
set -eu
cd "$(dirname "$0")/.."

seconds=600 clients=32 max_tokens=128 threads=2 every=5 interval=10 warmup=60 growth=5 ctx=1024
meshlm_args=""
MESHLM=${MESHLM:-build/meshlm}
BENCH=${SERVE_BENCH:-build/bench/serve}
MODEL=${MODEL:-models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || usage
    case $1 in
    --seconds) seconds=$2 ;;
    --clients) clients=$2 ;;
    --max-tokens) max_tokens=$2 ;;
    --threads) threads=$2 ;;
    --disconnect-every) every=$2 ;;
    --interval) interval=$2 ;;
    --warmup) warmup=$2 ;;
    --max-growth-pct) growth=$2 ;;
    --ctx) ctx=$2 ;;
    --meshlm-args) meshlm_args=$2 ;;
    *) usage ;;
    esac
    shift 2
done
for v in "$seconds" "$clients" "$max_tokens" "$threads" "$every" "$interval" "$warmup" "$growth" "$ctx"; do
    case $v in '' | *[!0-9]*) echo "bench/serve_soak.sh: '$v' is not a number" >&2; exit 2 ;; esac
done
[ "$interval" -gt 0 ] || interval=1
if [ "$seconds" -lt $((2 * warmup)) ]; then
    warmup=$((seconds / 3))
    short=" (a third of this short run)"
else
    short=""
fi

out=$(mktemp -d /tmp/meshlm-bench-soak-XXXXXX)
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
[ -x "$MESHLM" ] || { echo "bench/serve_soak.sh: no $MESHLM (make)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "bench/serve_soak.sh: no $MODEL" >&2; exit 1; }

jget() { sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p" "$1"; }
metric() { awk -v n="$2" '$1 == n || index($1, n "{") == 1 { print $NF; exit }' "$1"; }
exited() { [ ! -e "/proc/$1" ] || grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || true; }

echo "bench/serve_soak.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(git describe --always --dirty 2>/dev/null || echo unknown)"
echo "  cpu      $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') ($(nproc) cores online)"
echo "  load     $clients clients, $seconds s, $max_tokens tokens per request, 1 in $every requests" \
    "of each client hangs up, $threads threads; RSS every $interval s," \
    "warm-up $warmup s$short"

# shellcheck disable=SC2086
"$MESHLM" serve -m "$MODEL" --port 0 --max-batch "$clients" --threads "$threads" \
    --max-seq-len "$ctx" $meshlm_args >"$out/meshlm.out" 2>"$out/meshlm.err" &
mpid=$!
pids="$mpid"
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
echo "  $url (pid $mpid), RSS at start $(rss_kb $mpid) kB"

"$BENCH" --url "$url" --clients "$clients" --seconds "$seconds" --max-tokens "$max_tokens" \
    --disconnect-every "$every" --label soak --json >"$out/soak.json" 2>"$out/soak.err" &
bpid=$!
pids="$pids $bpid"
t0=$(date +%s)
base="" wbase="" peak=0 next=$interval
echo "  series (s: RSS kB, KV blocks free):"
while ! exited $bpid; do
    sleep 1
    t=$(($(date +%s) - t0))
    [ "$t" -ge "$next" ] || continue
    next=$((next + interval))
    r=$(rss_kb $mpid)
    [ -n "$r" ] || { echo "    $t: (server gone)"; break; }
    free=$(curl -s -m 5 "$url/metrics" | awk '$1 ~ /^meshlm_kv_blocks_free/ { print $NF; exit }' || true)
    echo "    $t: $r kB, ${free:-?} free"
    [ "$t" -ge "$warmup" ] || continue
    [ -n "$wbase" ] || wbase=$r
    # the pool's pages are first touched as blocks leave the free list: until none is left
    # RSS grows by design, so the baseline waits for that too
    if [ -z "$base" ] && [ "$free" = 0 ]; then
        base=$r peak=$r
        echo "    (warm-up over and the KV pool touched: baseline $base kB)"
    fi
    [ "$r" -le "$peak" ] || peak=$r
done
bench_rc=0
wait $bpid || bench_rc=$?
pids="$mpid"
sed 's/^/  /' "$out/soak.json" "$out/soak.err"

fail=0
check() { # OK-CONDITION-RESULT MESSAGE
    if [ "$1" = 0 ]; then echo "  ok    $2"; else echo "  FAIL  $2"; fail=1; fi
}
echo "== checks"
alive=1
exited $mpid && alive=0
check $((1 - alive)) "server alive after the load"
ok=$(jget "$out/soak.json" requests_ok)
err=$(jget "$out/soak.json" errors)
disc=$(jget "$out/soak.json" disconnects)
unf=$(jget "$out/soak.json" unfinished)
[ "${ok:-0}" -gt 0 ] && [ "${err:-1}" = 0 ] && [ "${unf:-1}" = 0 ] && c=0 || c=1
check "$c" "requests: ${ok:-?} ok, ${err:-?} errors, ${unf:-?} unfinished, ${disc:-?} hung up (bench/serve exit $bench_rc)"
used=""
if [ $alive = 1 ]; then
    i=0
    while [ $i -lt 25 ]; do
        curl -s -m 10 "$url/metrics" >"$out/metrics" || true
        used=$(metric "$out/metrics" meshlm_kv_blocks_used)
        [ "$used" = 0 ] && break
        sleep 0.2
        i=$((i + 1))
    done
fi
[ "$used" = 0 ] && c=0 || c=1
check "$c" "meshlm_kv_blocks_used after the load: ${used:-?} (want 0)"
final=$(rss_kb $mpid)
if [ -z "$base" ] && [ -n "$wbase" ]; then
    base=$wbase
    echo "  note: the KV pool never ran out of free blocks; RSS growth below includes first touches"
fi
if [ -n "$base" ] && [ -n "$final" ]; then
    pct=$(awk -v a="$base" -v b="$final" 'BEGIN { printf "%.2f", (b - a) * 100 / a }')
    c=$(awk -v p="$pct" -v g="$growth" 'BEGIN { print (p < g) ? 0 : 1 }')
    check "$c" "RSS: $base kB after warm-up, $final kB after the load (peak $peak kB): ${pct}% (want < ${growth}%)"
else
    check 1 "RSS: no baseline (${base:-none}) or final (${final:-none}) sample"
fi
if [ $alive = 1 ]; then
    kill -TERM $mpid
    i=0
    while ! exited $mpid && [ $i -lt 300 ]; do sleep 0.2; i=$((i + 1)); done
    exited $mpid || { echo "  (no exit within 60 s of SIGTERM; killed)"; kill -KILL $mpid; }
    rc=0
    wait $mpid || rc=$?
    pids=""
    [ "$rc" = 0 ] && c=0 || c=1
    check "$c" "exit status after SIGTERM: $rc"
fi
if [ $fail != 0 ]; then
    echo "  meshlm serve stderr (last lines):"
    tail -15 "$out/meshlm.err" | sed 's/^/    /'
    echo "bench/serve_soak.sh: FAILED"
fi
exit $fail
