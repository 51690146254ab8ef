#!/bin/sh
# bench/demo.sh: the demo's own reports (TTFT, decode tok/s/user, decode tok/s) for the batch-1
# and batch-32 presets, and the long-context-16k TTFT, on a synthetic checkpoint with a real
# config, in each BFP profile; with LLAMA_BATCHED_BENCH=path/to/llama-batched-bench, llama.cpp
# on the same weights (meshlm's GGUF export, quantized with llama-quantize --pure: Q8_0 next to
# accuracy, Q4_0 next to performance) at 1 and 32 parallel sequences in the same run.
# Prints figures; never fails on speed.
#
#   bench/demo.sh [MODEL_DIR]     (default: /tmp/meshlm-bench/llama-3.2-1b-bf16, synthesized once)
# Environment: MESHLM_BENCH_GEN (tokens per user, default 32), MESHLM_BENCH_LONG=1 to run the
# long-context-16k prefill (minutes on a 1B model here), MESHLM_BENCH_PROFILES.
set -eu
cd "$(dirname "$0")/.."
M=./build/meshlm
model=${1:-${MESHLM_BENCH_MODEL:-/tmp/meshlm-bench/llama-3.2-1b-bf16}}
gen=${MESHLM_BENCH_GEN:-32}
profiles=${MESHLM_BENCH_PROFILES:-performance accuracy}
out=$(mktemp -d /tmp/meshlm-bench-demo-XXXXXX)
trap 'rm -rf "$out"' EXIT
[ -f "$model/config.json" ] || $M synth --preset llama-3.2-1b --out "$model"

metrics() { # FILE: "TTFT x ms, decode y tok/s/user, z tok/s"
    python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["metrics"]; print("TTFT %8.1f ms  prefill %7.1f tok/s  decode %6.2f tok/s/user  %7.2f tok/s  step %7.1f ms  peak %.2f GB" % (m["ttft_ms"], m["prefill_tps"], m["decode_tps_user"], m["decode_tps"], m["decode_step_ms"], m["peak_memory_gb"]))' "$1" 2>/dev/null ||
    grep -o '"metrics":{[^}]*}' "$1"
}

echo "bench/demo: $model, $(nproc) cores, $gen tokens per user"
for p in $profiles; do
    for preset in batch-1 batch-32; do
        # a random-weight model may trip the special-token guard (exit 1); the report is
        # still written, and the speed is what this bench is about
        $M demo --preset $preset -m "$model" --optimizations $p --max-generated-tokens "$gen" \
            --stop-at-eos 0 --quiet --report "$out/r.json" > /dev/null 2>"$out/err" ||
            echo "  (exit $?: $(head -c 160 "$out/err"))"
        printf '%-12s %-10s %s\n' "$p" "$preset" "$(metrics "$out/r.json")"
    done
    if [ "${MESHLM_BENCH_LONG:-0}" = 1 ]; then
        $M demo --preset long-context-16k -m "$model" --optimizations $p --max-generated-tokens 2 \
            --quiet --report "$out/r.json" > /dev/null 2>"$out/err" || echo "  (exit $?)"
        printf '%-12s %-10s %s\n' "$p" "16k" "$(metrics "$out/r.json")"
    fi
done

if [ -n "${LLAMA_BATCHED_BENCH:-}" ]; then
    bin=$(dirname "$LLAMA_BATCHED_BENCH")
    quant=${LLAMA_QUANTIZE:-$bin/llama-quantize}
    [ -f "$model/meshlm-export.bf16.gguf" ] || $M export -m "$model" --gguf "$model/meshlm-export.bf16.gguf" --dtype bf16
    for q in Q8_0 Q4_0; do
        g="$model/meshlm-export.$q.gguf"
        [ -f "$g" ] || "$quant" --pure "$model/meshlm-export.bf16.gguf" "$g" $q "$(nproc)" > /dev/null 2>&1
        echo "llama.cpp $q (llama-batched-bench, prompt 128, $gen generated, -t $(nproc)):"
        "$LLAMA_BATCHED_BENCH" -m "$g" -c 8192 -b 2048 -ub 512 -npp 128 -ntg "$gen" -npl 1,32 \
            -t "$(nproc)" --output-format jsonl 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"): continue
    r = json.loads(line)
    pl = r["pl"]
    print("  %2d sequences: prefill %7.1f tok/s (TTFT %.1f ms/seq), decode %6.2f tok/s/seq, %7.2f tok/s" % (pl, r["speed_pp"], r["t_pp"] * 1e3 / pl, r["speed_tg"] / pl, r["speed_tg"]))'
    done
fi
