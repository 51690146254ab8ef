#!/bin/sh
# bench/mesh.sh: tensor parallelism on this machine: TP 2 (mpirun -np 2, one thread per rank,
# each rank bound to its core) against one process with 2 threads, on the same model and
# profile, prefill and decode, interleaved REPS times (medians). Also this rank's time in the
# all-reduces and logit gathers per token (from `generate --json`), and a per-layer decode
# figure for the 70B estimate in the README. Prints figures; never fails on speed.
#
#   bench/mesh.sh [--model DIR] [--preset llama-3.2-1b] [--optimizations performance]
#                 [--prompt 512] [--tokens 64] [--reps 3] [--tp-reduce exact|sum]
#
# Without --model a synthetic checkpoint of --preset (meshlm synth, real config, random
# weights) is written to $MESH_BENCH_DIR (default /tmp/meshlm-mesh-bench) and kept.
set -eu
cd "$(dirname "$0")/.."
MESHLM=${MESHLM:-build/meshlm}
model="" preset=llama-3.2-1b prof=performance prompt=512 tokens=64 reps=3 reduce=exact
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
    case $1 in
    --model) model=$2 ;;
    --preset) preset=$2 ;;
    --optimizations) prof=$2 ;;
    --prompt) prompt=$2 ;;
    --tokens) tokens=$2 ;;
    --reps) reps=$2 ;;
    --tp-reduce) reduce=$2 ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
    esac
    shift 2
done
command -v mpirun >/dev/null || { echo "bench/mesh.sh: mpirun is not installed"; exit 1; }
command -v jq >/dev/null || { echo "bench/mesh.sh: jq is not installed"; exit 1; }
MPIRUN="mpirun --bind-to core --mca btl_vader_single_copy_mechanism none"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
if [ -z "$model" ]; then
    model=${MESH_BENCH_DIR:-/tmp/meshlm-mesh-bench}/$preset
    if [ ! -f "$model/config.json" ]; then
        echo "writing synthetic $preset to $model"
        "$MESHLM" synth --preset "$preset" --out "$model" >/dev/null
    fi
fi
# the old binaries (before the exact mesh) take no --tp-reduce: pass it only when asked
TPR=""
[ "$reduce" = exact ] || TPR="--tp-reduce $reduce"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/meshlm-mesh-bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
ids=$(awk -v n="$prompt" 'BEGIN { s = ""; for (i = 0; i < n; i++) s = s (i ? "," : "") (1000 + (i * 7919) % 30000); print s }')
# warm-up: builds the caches (one file, then one per rank) and fills the page cache
"$MESHLM" generate -m "$model" --optimizations "$prof" --prompt-ids 1,2 -n 2 >/dev/null 2>&1
$MPIRUN -np 2 "$MESHLM" generate -m "$model" --optimizations "$prof" --tp 2 --prompt-ids 1,2 \
    -n 2 >/dev/null 2>&1
run_one() { # threads: one process
    "$MESHLM" generate -m "$model" --optimizations "$prof" --threads 2 --prompt-ids "$ids" \
        -n "$tokens" --ignore-eos --max-seq-len $((prompt + tokens + 16)) --prefill-chunk "$prompt" \
        --json 2>/dev/null
}
run_tp() {
    $MPIRUN -np 2 "$MESHLM" generate -m "$model" --optimizations "$prof" --tp 2 --threads 1 \
        $TPR --prompt-ids "$ids" -n "$tokens" --ignore-eos --max-seq-len $((prompt + tokens + 16)) \
        --prefill-chunk "$prompt" --json 2>/dev/null
}
for r in $(seq "$reps"); do
    run_one >"$TMP/one.$r.json"
    run_tp >"$TMP/tp.$r.json"
done
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { for r in $(seq "$reps"); do jq -r "$2" "$TMP/$1.$r.json"; done | median; }
ttft1=$(field one .stats.ttft_ms) ttft2=$(field tp .stats.ttft_ms)
dec1=$(field one .stats.decode_tok_s) dec2=$(field tp .stats.decode_tok_s)
ar=$(field tp '(.stats.allreduce_s + .stats.gather_s) / (.stats.prompt_tokens + .stats.generated_tokens) * 1e3')
calls=$(field tp '.stats.allreduce_calls')
gcalls=$(field tp '.stats.gather_calls // 0')
# bytes through the collectives per token: all-reduce buffers, and the gathers' (every rank's
# part, this rank's included: the K-chunk partials of wo and w2, the logits)
bytes=$(field tp '((.stats.allreduce_bytes // 0) + (.stats.gather_bytes // 0)) / (.stats.prompt_tokens + .stats.generated_tokens)')
# decode time per token in the all-reduces: rerun the TP side without a prompt to speak of
$MPIRUN -np 2 "$MESHLM" generate -m "$model" --optimizations "$prof" --tp 2 --threads 1 $TPR \
    --prompt-ids 1,2,3 -n "$tokens" --ignore-eos --json 2>/dev/null >"$TMP/dec.json"
ard=$(jq -r '(.stats.allreduce_s + .stats.gather_s) / (.stats.prompt_tokens + .stats.generated_tokens) * 1e3' "$TMP/dec.json")
bytesd=$(jq -r '((.stats.allreduce_bytes // 0) + (.stats.gather_bytes // 0)) / (.stats.prompt_tokens + .stats.generated_tokens)' "$TMP/dec.json")
layers=$(jq -r '.num_hidden_layers // .n_layers' "$model/config.json" 2>/dev/null || echo "?")
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
echo "== bench/mesh.sh: $model ($prof, --tp-reduce $reduce), prompt $prompt tokens, $tokens generated, $reps reps (medians)"
echo "   $cpu, $(nproc) cores, $(date -u +%Y-%m-%d)"
printf '%-28s %12s %12s %8s\n' "" "1 x 2 threads" "TP2 (2 x 1)" "TP2/1"
awk -v a="$ttft1" -v b="$ttft2" 'BEGIN { printf "%-28s %12.1f %12.1f %8.3f\n", "prefill TTFT (ms, lower)", a, b, a / b }'
awk -v a="$dec1" -v b="$dec2" 'BEGIN { printf "%-28s %12.2f %12.2f %8.3f\n", "decode (tok/s)", a, b, b / a }'
echo "collectives per token, TP2 rank 0: ${ar} ms over the prompt run (prefill + decode),"
echo "  ${ard} ms in a decode-only run; $calls all-reduces per prompt run ($layers layers:"
echo "  one for the embedding per step; before the exact mesh also 2 per layer), $gcalls gathers"
echo "  (the exact mesh: wo's and w2's K-chunk partials, 2 per layer; the logits)"
awk -v a="$bytes" -v b="$bytesd" 'BEGIN { printf "bytes through the collectives per token: %.0f over the prompt run, %.0f decoding\n", a, b }'
awk -v d="$dec1" -v L="$layers" 'BEGIN { printf "one process: %.3f ms per layer per decode token (incl. its share of the head)\n", 1e3 / d / L }'
