#!/bin/sh
# tests/mesh/test_serve_mesh.sh: `meshlm serve` on a mesh: rank 0 answers HTTP and leads
# every step, the other TP ranks follow it (mlm_sched_follow). SmolLM2-135M (9 heads, 3 KV
# heads) on TP 3: greedy completions, plain and streamed, equal one process's `meshlm
# generate`; SIGTERM to rank 0 drains it and ends every rank with exit 0; `meshlm chat` on TP
# 3 answers two turns from stdin as one process does, and `meshlm accuracy` on TP 3 gives its
# top-1/top-5 and the checksum of its logits (bit-identical to one process). SKIP without
# mpirun, curl, jq or the model (scripts/get-model.sh).
MESHLM=${MESHLM:-build/meshlm}
MODEL=models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok - $1"; }
notok() { fail=$((fail + 1)); echo "not ok - $1: $2"; }
skip_all() {
    echo "SKIP: $1"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
}
command -v mpirun >/dev/null 2>&1 || skip_all "mpirun is not installed (apt-get install openmpi-bin)"
command -v curl >/dev/null 2>&1 || skip_all "curl is not installed"
command -v jq >/dev/null 2>&1 || skip_all "jq is not installed"
[ -f "$MODEL" ] || skip_all "$MODEL is missing (scripts/get-model.sh fetches it)"
. tests/mesh/mpirun.sh # MPIRUN and the ranks' environment
TMP=$(mktemp -d "${TMPDIR:-/tmp}/meshlm-srvmesh.XXXXXX")
MP=""
cleanup() {
    [ -n "$MP" ] && kill -9 "$MP" 2>/dev/null
    pkill -9 -f "$MESHLM serve -m $MODEL --tp 3" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

PROMPT="The capital of France is"
WANT=$("$MESHLM" generate -m "$MODEL" -p "$PROMPT" -n 24 --threads 1 --json 2>/dev/null | jq -r .text)

$MPIRUN -np 3 "$MESHLM" serve -m "$MODEL" --tp 3 --port 0 --host 127.0.0.1 --threads 1 \
    >"$TMP/out" 2>"$TMP/err" &
MP=$!
port=""
i=0
while [ -z "$port" ] && [ $i -lt 600 ]; do
    port=$(sed -n 's|^meshlm serve: listening on http://[^ ]*:\([0-9][0-9]*\) (model .*)$|\1|p' "$TMP/out")
    kill -0 $MP 2>/dev/null || break
    sleep 0.1
    i=$((i + 1))
done
if [ -z "$port" ]; then
    notok "serve --tp 3 starts" "$(tail -n 5 "$TMP/err" | tr '\n' ' ')"
    echo "$pass passed, $fail failed"
    exit 1
fi
ok "serve --tp 3 listens on port $port"
BODY="{\"prompt\":\"$PROMPT\",\"max_tokens\":24,\"temperature\":0}"
got=$(curl -s -m 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "$BODY" | jq -r '.choices[0].text')
if [ -n "$WANT" ] && [ "$got" = "$WANT" ]; then ok "a greedy completion on TP 3 equals one process's"
else notok "completion on TP 3" "got '$got', one process '$WANT'"; fi
SBODY="{\"prompt\":\"$PROMPT\",\"max_tokens\":24,\"temperature\":0,\"stream\":true}"
curl -s -N -m 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "$SBODY" >"$TMP/sse"
sgot=$(sed -n 's/^data: //p' "$TMP/sse" | grep -v '^\[DONE\]' | jq -j '.choices[0].text // ""')
if [ "$sgot" = "$WANT" ] && grep -q '^data: \[DONE\]' "$TMP/sse"; then ok "a streamed completion on TP 3 equals it too"
else notok "streamed completion on TP 3" "got '$sgot'"; fi
# several at once: the leader batches them, the followers run the same steps
for k in 1 2 3 4; do
    curl -s -m 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d "$BODY" >"$TMP/c$k" &
done
wait_ok=1
for k in 1 2 3 4; do
    while [ ! -s "$TMP/c$k" ] && kill -0 $MP 2>/dev/null; do sleep 0.1; done
done
sleep 0.5
for k in 1 2 3 4; do [ "$(jq -r '.choices[0].text' "$TMP/c$k" 2>/dev/null)" = "$WANT" ] || wait_ok=0; done
if [ $wait_ok = 1 ]; then ok "4 concurrent completions on TP 3 each equal one process's"
else notok "concurrent completions" "$(cat "$TMP"/c* | head -c 300)"; fi
# SIGTERM to rank 0, the server (mpirun itself, signalled, ends the job with exit 1 even
# when every rank exits 0)
rank0=""
for p in $(pgrep -f "$MESHLM serve -m $MODEL --tp 3"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=0' && rank0=$p
done
kill -TERM "$rank0"
i=0
while kill -0 $MP 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
if kill -0 $MP 2>/dev/null; then
    notok "SIGTERM ends the mesh" "mpirun still running after 30 s"
else
    wait $MP
    rc=$?
    MP=""
    left=$(pgrep -f "$MESHLM serve -m $MODEL --tp 3" | wc -l)
    if [ $rc -eq 0 ] && [ "$left" = 0 ]; then ok "SIGTERM drains rank 0 and ends all 3 ranks with exit 0"
    else notok "SIGTERM ends the mesh" "mpirun exit $rc, $left ranks left: $(tail -n 3 "$TMP/err" | tr '\n' ' ')"; fi
fi
# chat on the same mesh: stdin reaches rank 0 only, which reads the messages and leads its group
printf 'What is the capital of France?\nAnd of Italy?\n' >"$TMP/chat.in"
timeout 120 $MPIRUN -np 3 "$MESHLM" chat -m "$MODEL" --tp 3 -n 30 --threads 1 <"$TMP/chat.in" \
    >"$TMP/chat3" 2>/dev/null
rc=$?
"$MESHLM" chat -m "$MODEL" -n 30 --threads 1 <"$TMP/chat.in" >"$TMP/chat1" 2>/dev/null
if [ $rc -eq 0 ] && [ -s "$TMP/chat1" ] && cmp -s "$TMP/chat1" "$TMP/chat3"; then
    ok "chat on TP 3 (two turns from stdin) answers as one process does"
else
    notok "chat on TP 3" "exit $rc: '$(head -c 200 "$TMP/chat3")' vs '$(head -c 200 "$TMP/chat1")'"
fi
# token accuracy (teacher forcing against the model's .refpt) on TP 3 and in one process: the
# same top-1/top-5 and the same checksum of every scored step's logits (bit-identical, the
# row-parallel products' K chunks summed in one order on any mesh)
acc3=$(timeout 300 $MPIRUN -np 3 "$MESHLM" accuracy -m "$MODEL" --tp 3 --threads 1 2>/dev/null | grep 'token accuracy')
acc1=$("$MESHLM" accuracy -m "$MODEL" --threads 2 2>/dev/null | grep 'token accuracy')
if [ -n "$acc1" ] && [ "$acc3" = "$acc1" ] && echo "$acc1" | grep -q 'logits checksum'; then
    ok "accuracy on TP 3 gives one process's top-1/top-5 and logits bit for bit: $(echo $acc1 | tr -s ' ')"
else
    notok "accuracy on TP 3" "'$acc3' vs '$acc1'"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
