#!/bin/sh
# tests/mesh/test_mesh.sh: tensor and data parallelism over MPI ranks on one machine, with
# OpenMPI's mpirun (SKIP without it). The tiny fixtures of tests/data/mesh (Llama GQA 2:1 and
# MHA, Phi-3 5:1 and 4:1 with 10 KV heads, made by tests/fixtures/make_mesh_fixtures.py with
# transformers) run as:
#   - mesh_tp (tests/mesh/mesh_tp.c) at TP 2, 4 and 8 (Phi-3: 2, 4; 2, 5, 10) in every profile,
#     byte-identical to one
#     process and against transformers' logits and greedy tokens; from Meta's 8-shard checkpoint;
#     data-parallel lanes; and TP2 over MPI's TCP transport on loopback (--mca btl self,tcp);
#   - `meshlm generate` on a mesh: transformers' greedy tokens under --tp 2 (also speculating,
#     with a draft model on rank 0 or by prompt lookup), --mesh N300 and
#     a fake device, per-rank weight cache files in the mesh's folder;
#   - refusals (world size, heads, unknown mesh, no mpirun), each non-zero with a message
#     and no hang, and a rank killed mid-run ending the job.
# MESHLM names the meshlm binary, MESH_BIN the folder of the mesh test programs.
MESHLM=${MESHLM:-build/meshlm}
MESH_BIN=${MESH_BIN:-build/tests/mesh}
DATA=tests/data/mesh
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok - $1"; }
notok() { fail=$((fail + 1)); echo "not ok - $1: $2"; }

if ! command -v mpirun >/dev/null 2>&1; then
    echo "SKIP: mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
. tests/mesh/mpirun.sh # MPIRUN and the ranks' environment
TMP=$(mktemp -d "${TMPDIR:-/tmp}/meshlm-mesh.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# mesh_tp NP ARGS...: one mesh_tp run; its ok/not ok lines count here.
mesh_tp() {
    np=$1
    shift
    timeout 600 $MPIRUN -np "$np" "$MESH_BIN/mesh_tp" "$@" >"$TMP/tp.out" 2>"$TMP/tp.err"
    rc=$?
    p=$(grep -c '^ok - ' "$TMP/tp.out")
    f=$(grep -c '^not ok - ' "$TMP/tp.out")
    grep '^not ok - ' "$TMP/tp.out"
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        notok "mesh_tp -np $np $*" "exit $rc: $(tail -n 3 "$TMP/tp.err" | tr '\n' ' ')"
    elif [ "$p" -eq 0 ]; then
        notok "mesh_tp -np $np $*" "no checks ran"
    else
        pass=$((pass + p))
        fail=$((fail + f))
        echo "ok - mesh_tp -np $np $* ($p checks)"
    fi
}

ALL=f32,bf16,accuracy,performance
mesh_tp 2 $DATA/llama_gqa --profiles $ALL
mesh_tp 4 $DATA/llama_gqa --profiles $ALL
mesh_tp 8 $DATA/llama_gqa --profiles $ALL
mesh_tp 8 $DATA/llama_gqa --format meta8 --profiles f32,performance
mesh_tp 2 $DATA/llama_mha --profiles $ALL
mesh_tp 8 $DATA/llama_mha --profiles f32,accuracy
mesh_tp 2 $DATA/phi3_5to1 --profiles $ALL
# TP 4 cuts Phi-3's 320 attention columns in shards of 80, not whole blocks of the int8
# activations (32): the chunks are quantized one by one in one process too, so still exact
mesh_tp 4 $DATA/phi3_5to1 --profiles $ALL
# Phi-4's head structure (40 heads, 10 KV heads: 4:1): TP 2, 5 and 10, as Phi-4 allows
mesh_tp 2 $DATA/phi3_kv10 --profiles $ALL
mesh_tp 5 $DATA/phi3_kv10 --profiles $ALL
mesh_tp 10 $DATA/phi3_kv10 --profiles $ALL
# Qwen2 (q/k/v biases: each rank its heads' rows) and Qwen3 (q/k norms per head), from
# tests/data/qwen (make_qwen_fixtures.py): TP 2 over their 2 KV heads
mesh_tp 2 tests/data/qwen/qwen2_gqa_untied --profiles $ALL
mesh_tp 2 tests/data/qwen/qwen3_hd64_tied --profiles f32,performance
mesh_tp 4 $DATA/llama_gqa --dp 2 --profiles f32,performance
mesh_tp 2 $DATA/llama_mha --dp 2 --profiles f32,performance
MPIRUN_SAVED=$MPIRUN
MPIRUN="$MPIRUN --mca btl self,tcp --mca btl_tcp_if_include lo"
mesh_tp 2 $DATA/llama_gqa --profiles f32,performance
MPIRUN=$MPIRUN_SAVED

# ---- meshlm generate on a mesh: transformers' greedy tokens ----
HF=$DATA/llama_gqa/hf
PROMPT=$(jq -r '.greedy.prompt|map(tostring)|join(",")' $DATA/llama_gqa/reference.json 2>/dev/null)
WANT=$(jq -r '.greedy.generated|map(tostring)|join(",")' $DATA/llama_gqa/reference.json 2>/dev/null)
if [ -z "$PROMPT" ]; then
    notok "generate on a mesh" "jq is needed to read $DATA/llama_gqa/reference.json"
else
    gen() { # NAME ENV MPIRUN-ARGS -- MESHLM-ARGS: greedy tokens equal transformers'
        name=$1 envs=$2 margs=$3
        shift 3
        env $envs timeout 120 $MPIRUN $margs "$MESHLM" generate -m $HF --prompt-ids "$PROMPT" \
            -n 64 --ignore-eos --optimizations f32 --json "$@" >"$TMP/g.out" 2>"$TMP/g.err"
        rc=$?
        got=$(jq -r '.generated_ids|map(tostring)|join(",")' "$TMP/g.out" 2>/dev/null)
        if [ "$rc" -eq 0 ] && [ "$got" = "$WANT" ]; then ok "$name"
        else notok "$name" "exit $rc, tokens '$got' $(tail -n 2 "$TMP/g.err" | tr '\n' ' ')"; fi
    }
    gen "generate --tp 2 gives transformers' greedy tokens" "" "-np 2" --tp 2
    gen "generate --mesh N300 gives transformers' greedy tokens" "" "-np 2" --mesh N300
    gen "generate --tp 2 --tp-reduce sum (the plain all-reduce) gives them too" "" "-np 2" \
        --tp 2 --tp-reduce sum
    gen "generate --tp 2 with a draft model on rank 0 (the same weights in bf16) gives them too" "" "-np 2" --tp 2 --draft-model $HF --draft-optimizations bf16
    gen "generate --tp 2 --draft-ngram gives them too" "" "-np 2" --tp 2 --draft-ngram
    gen "mpirun -np 4 without mesh flags runs TP 4" "" "-np 4"
    gen "generate --mesh T3K (TP 8) gives transformers' greedy tokens" "" "-np 8" --mesh T3K
    gen "MESHLM_FAKE_DEVICE=N300 on 4 ranks: TP 2, ranks 2 and 3 sit out" \
        "MESHLM_FAKE_DEVICE=N300" "-np 4"
fi

# ---- per-rank weight caches in the mesh's folder ----
CACHE=$TMP/cache
MESHLM_CACHE=$CACHE timeout 120 $MPIRUN -np 2 "$MESHLM" generate -m $HF --prompt-ids 1,2,3 -n 2 \
    --mesh N300 --optimizations performance >/dev/null 2>"$TMP/c1.err"
rc1=$?
MESHLM_CACHE=$CACHE timeout 120 $MPIRUN -np 2 "$MESHLM" generate -m $HF --prompt-ids 1,2,3 -n 2 \
    --mesh N300 --optimizations performance >/dev/null 2>"$TMP/c2.err"
rc2=$?
n0=$(ls "$CACHE"/N300/*.rank0of2.mlmc 2>/dev/null | wc -l)
n1=$(ls "$CACHE"/N300/*.rank1of2.mlmc 2>/dev/null | wc -l)
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$n0" = 1 ] && [ "$n1" = 1 ] &&
    grep -q 'cache: built' "$TMP/c1.err" && grep -q 'cache: mapped' "$TMP/c2.err"; then
    ok "TP 2 writes one cache file per rank under N300/, the next run maps them"
else
    notok "per-rank caches" "exit $rc1/$rc2, files $n0/$n1: $(ls -R "$CACHE" 2>&1 | tr '\n' ' ')"
fi
sz=$(stat -c %s "$CACHE"/N300/*.rank0of2.mlmc 2>/dev/null)
MESHLM_CACHE=$CACHE timeout 120 "$MESHLM" cache -m $HF --optimizations performance >/dev/null 2>&1
full=$(stat -c %s "$CACHE"/*.performance.*.mlmc 2>/dev/null | head -n 1)
if [ -n "$sz" ] && [ -n "$full" ] && [ $((sz * 10)) -lt $((full * 6)) ]; then
    ok "a TP 2 rank's cache holds its shard: $sz of $full bytes"
else
    notok "shard cache size" "rank file '$sz' bytes, whole model '$full'"
fi

# ---- the demo's data-parallel lanes: each lane's users equal one process's ----
# demo_lanes NAME NP MODEL FLAGS...: ci-b1-DP-2 on NP ranks (2 lanes) against ci-1 with
# --batch-size 2 in one process (the same two prompts; the batch does not change a user's
# tokens), compared user by user from the --report files; FLAGS go to both
demo_lanes() {
    name=$1 np=$2 model=$3
    shift 3
    timeout 300 $MPIRUN -np "$np" "$MESHLM" demo -m "$model" --preset ci-b1-DP-2 \
        --max-generated-tokens 24 --threads 1 --quiet --report "$TMP/dp.json" "$@" \
        >"$TMP/dp.out" 2>"$TMP/dp.err"
    rc=$?
    timeout 300 "$MESHLM" demo -m "$model" --preset ci-1 --batch-size 2 --max-generated-tokens 24 \
        --threads 2 --quiet --report "$TMP/one.json" "$@" >/dev/null 2>"$TMP/one.err"
    a=$(jq -c '[.users[].output]' "$TMP/dp.json" 2>/dev/null)
    b=$(jq -c '[.users[].output]' "$TMP/one.json" 2>/dev/null)
    lanes=$(jq -r '.metrics.lanes' "$TMP/dp.json" 2>/dev/null)
    if [ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && [ "$lanes" = 2 ] &&
        grep -q 'data-parallel lanes *2 lanes' "$TMP/dp.out"; then
        ok "$name: both lanes' outputs equal one process's, per-lane tok/s reported"
    else
        notok "$name" "exit $rc, lanes '$lanes', lanes $a vs one process $b $(tail -n 2 "$TMP/dp.err" | tr '\n' ' ')"
    fi
}
demo_lanes "demo ci-b1-DP-2, lanes of TP 1 (models/default)" 2 models/default
SMOL=models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$SMOL" ]; then
    # the default profile (bf16): a lane of TP 3 gives one process's bits
    demo_lanes "demo ci-b1-DP-2, lanes of TP 3 (SmolLM2 bf16, 6 ranks)" 6 "$SMOL"
else
    echo "SKIP: demo lanes of TP 3: $SMOL is missing (scripts/get-model.sh)"
fi

# ---- refusals: a message, a non-zero exit, no hang ----
refuse() { # NAME PATTERN MPIRUN-ARGS -- MESHLM-ARGS
    name=$1 pat=$2 margs=$3
    shift 3
    if [ -n "$margs" ]; then
        timeout 60 $MPIRUN $margs "$MESHLM" generate -m "$@" --prompt-ids 1,2 -n 2 >/dev/null 2>"$TMP/r.err"
    else
        timeout 60 "$MESHLM" generate -m "$@" --prompt-ids 1,2 -n 2 >/dev/null 2>"$TMP/r.err"
    fi
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q -e "$pat" "$TMP/r.err"; then ok "$name (exit $rc)"
    else notok "$name" "exit $rc, stderr: $(head -c 400 "$TMP/r.err" | tr '\n' ' ')"; fi
}
refuse "a world of 2 for T3K's 8 devices" "has 8 devices.*MPI world has 2 ranks" "-np 2" $HF --mesh T3K
refuse "Phi-3's 4 KV heads on T3K" "mesh T3K: TP 8 does not divide the model's 4 KV heads" \
    "-np 8" $DATA/phi3_5to1/hf --mesh T3K
refuse "an unknown mesh" "--mesh is N150, N300, T3K or TG" "-np 2" $HF --mesh N999
refuse "an unknown --tp-reduce" "--tp-reduce is exact or sum, got 'fast'" "-np 2" $HF --tp 2 \
    --tp-reduce fast
refuse "--tp 2 without mpirun" "not under an MPI launcher.*mpirun -np 2" "" $HF --tp 2
refuse "--dp 2 on 2 ranks for a command of one user" "one user" "-np 2" $HF --dp 2

# ---- a rank that dies: the others end instead of waiting ----
$MPIRUN -np 2 "$MESHLM" generate -m $HF --prompt-ids 1,2,3 -n 1000000 --ignore-eos \
    --max-seq-len 2000000 --optimizations f32 >/dev/null 2>"$TMP/d.err" &
mp=$!
victim=""
i=0
while [ -z "$victim" ] && [ $i -lt 100 ]; do
    sleep 0.1
    for p in $(pgrep -f "$MESHLM generate -m $HF --prompt-ids 1,2,3 -n 1000000"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then victim=$p; fi
    done
    i=$((i + 1))
done
sleep 0.5
if [ -n "$victim" ]; then
    kill -9 "$victim"
    t0=$(date +%s)
    ( sleep 60; kill -9 $mp 2>/dev/null ) &
    watchdog=$!
    wait $mp
    rc=$?
    t=$(($(date +%s) - t0))
    kill $watchdog 2>/dev/null
    left=$(pgrep -f "$MESHLM generate -m $HF --prompt-ids 1,2,3 -n 1000000" | wc -l)
    if [ "$rc" -ne 0 ] && [ "$t" -lt 60 ] && [ "$left" = 0 ]; then
        ok "rank 1 killed mid-run: the job ends in ${t} s with exit $rc, no rank left waiting"
    else
        notok "a rank that dies" "exit $rc after ${t} s, $left processes left"
        pkill -9 -f "$MESHLM generate -m $HF --prompt-ids 1,2,3 -n 1000000"
    fi
else
    kill $mp 2>/dev/null
    notok "a rank that dies" "could not find rank 1's process"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
