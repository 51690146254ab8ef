#!/bin/sh
# tests/server/test_http.sh: the HTTP contract of `meshlm serve`, checked with curl (and jq to
# read JSON) against real servers on models/default: /health, /v1/models, chat and completions
# (plain and streamed) equal to `meshlm generate` under greedy decoding, the OpenAI error
# objects (400, 401, 404, 413, 503 + Retry-After), KV blocks freed when a client goes away, and
# a clean SIGTERM during a stream. Images (image_url parts with data: URLs) go to a tiny Llama
# 3.2 Vision model made here by `meshlm synth` (random weights, the real Llama 3 tokenizer):
# PNG and JPEG, image before or after the text, two images, against `meshlm generate --image`,
# and the 400s of bad URLs, bad base64, broken images, too many images, a text-only model.
# Expected texts come from `meshlm generate`, never from here.
# Runs from the repository root; MESHLM names the binary (default build/meshlm). Prints
# "ok - NAME" / "not ok - NAME: DETAILS" per check and ends with "N passed, N failed".

MESHLM=${MESHLM:-build/meshlm}
MODEL=models/default
ALIAS=tiny
KEY=sekrit-key
MAX_SEQ=512
MAX_BODY=16384
pass=0
fail=0
PIDS=""

ok() { pass=$((pass + 1)); echo "ok - $1"; }
notok() { fail=$((fail + 1)); echo "not ok - $1: $2"; }
check() { # NAME DETAILS CONDITION...: ok when the condition (a command) succeeds
    name=$1 details=$2
    shift 2
    if "$@"; then ok "$name"; else notok "$name" "$details"; fi
}
skip_all() {
    echo "SKIP: $1"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
}

[ -f "$MODEL/config.json" ] || skip_all "$MODEL is missing (run from the repository root)"
command -v curl >/dev/null 2>&1 || skip_all "curl is not installed"
command -v jq >/dev/null 2>&1 || skip_all "jq is not installed (apt-get install jq)"
if [ ! -x "$MESHLM" ]; then
    notok "meshlm binary" "$MESHLM is not an executable (set MESHLM or build it)"
    echo "$pass passed, $fail failed"
    exit 1
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/meshlm-http.XXXXXX")
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    sleep 0.2
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# ---- helpers ----

# start_server NAME ARGS...: starts `meshlm serve` in the background (pid in $TMP/NAME.pid).
start_server() {
    sname=$1
    shift
    "$MESHLM" serve -m "$MODEL" --port 0 --host 127.0.0.1 --threads 2 "$@" \
        >"$TMP/$sname.out" 2>"$TMP/$sname.err" &
    echo $! >"$TMP/$sname.pid"
    PIDS="$PIDS $!"
}

# wait_port NAME: prints the port from the server's "listening on" line (up to 60 s); fails
# when the server exits first or prints no such line.
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

# http METHOD URL [BODY_FILE|""] [CURL ARGS...]: sets ST (status; 000 when no answer), body in
# $TMP/b, headers in $TMP/h.
http() {
    hm=$1 hu=$2
    shift 2
    hb=""
    if [ $# -gt 0 ]; then hb=$1; shift; fi
    if [ -n "$hb" ]; then
        ST=$(curl -s -m 60 -X "$hm" -o "$TMP/b" -D "$TMP/h" -w '%{http_code}' \
            -H 'Content-Type: application/json' --data-binary "@$hb" "$@" "$hu")
    else
        ST=$(curl -s -m 60 -X "$hm" -o "$TMP/b" -D "$TMP/h" -w '%{http_code}' "$@" "$hu")
    fi
    [ -n "$ST" ] || ST=000
}

# jb FILTER: jq -r FILTER on the last body.
jb() { jq -r "$1" "$TMP/b" 2>/dev/null; }
# jtrue FILTER: whether FILTER is true on the last body.
jtrue() { [ "$(jq -r "$1" "$TMP/b" 2>/dev/null)" = true ]; }
# brief: the last status and the start of the body, for a not-ok line.
brief() { printf 'HTTP %s, body %s' "$ST" "$(head -c 300 "$TMP/b" 2>/dev/null | tr '\n' ' ')"; }

# metric PORT NAME: the value of NAME (with or without labels) from /metrics.
metric() {
    curl -s -m 10 "http://127.0.0.1:$1/metrics" |
        sed -n "s/^$2\({[^}]*}\)\{0,1\} \([^ ]*\).*/\2/p" | head -n 1
}

# wait_line FILE PATTERN SECONDS: waits until FILE has a line matching PATTERN.
wait_line() {
    i=0
    while [ $i -lt $(($3 * 10)) ]; do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# wait_metric PORT NAME VALUE SECONDS: waits until NAME in /metrics reads VALUE; the last
# value read is left in $used.
wait_metric() {
    i=0 used=""
    while [ $i -lt $(($4 * 10)) ]; do
        used=$(metric "$1" "$2")
        [ "$used" = "$3" ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# reap PID: waits up to 30 s for PID (a server this shell started) to exit, kills it after
# that, and leaves its exit status in $reaped.
reap() {
    i=0
    while kill -0 "$1" 2>/dev/null && [ $i -lt 300 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    kill -9 "$1" 2>/dev/null
    wait "$1"
    reaped=$?
}

# sse_data FILE: the payloads of the "data: " lines of an event stream, one a line.
sse_data() { tr -d '\r' <"$1" | sed -n 's/^data: \{0,1\}//p'; }

# is_error_object: whether the last body is {"error":{message (string), type, param, code}}.
is_error_object() {
    jtrue '(.error.message|type)=="string" and (.error.type|type)=="string" and
           (.error|has("param")) and (.error|has("code"))'
}

# st_jq CODE FILTER: whether the last status is CODE and FILTER is true on the body.
st_jq() { [ "$ST" = "$1" ] && jtrue "$2"; }
# st_error CODE: whether the last status is CODE with an OpenAI error object.
st_error() { [ "$ST" = "$1" ] && is_error_object; }

# body_chat PROMPT MAX_TOKENS [EXTRA JQ OBJECT]: writes a greedy chat request to $TMP/req.
body_chat() {
    jq -n --arg m "$ALIAS" --arg p "$1" --argjson n "$2" --argjson x "${3:-{\}}" \
        '{model:$m, messages:[{role:"user",content:$p}], max_tokens:$n, temperature:0} + $x' \
        >"$TMP/req"
}
body_completion() {
    jq -n --arg m "$ALIAS" --arg p "$1" --argjson n "$2" --argjson x "${3:-{\}}" \
        '{model:$m, prompt:$p, max_tokens:$n, temperature:0} + $x' >"$TMP/req"
}

# ---- servers ----

start_server main --alias "$ALIAS" --max-seq-len $MAX_SEQ --max-body-bytes $MAX_BODY \
    --drain-timeout 60
start_server keyed --alias "$ALIAS" --api-key "$KEY" --max-seq-len 256
start_server small --alias "$ALIAS" --max-batch 1 --max-queue 1 --kv-blocks 33 --max-seq-len 512
# A Llama 3.2 Vision model with the real Llama 3 tokenizer and seeded random weights (36 MB, a
# fraction of a second): its answers are gibberish, but the same from the server and the CLI.
# Its weight cache goes to $TMP, not the user's cache folder.
VMODEL=$TMP/vision
VCACHE=$TMP/cache
VMAX=2
if MESHLM_TEST_PRESETS=1 "$MESHLM" synth --preset tiny-mllama-llama3 --out "$VMODEL" \
    >"$TMP/synth.out" 2>&1; then
    MESHLM_CACHE=$VCACHE "$MESHLM" serve -m "$VMODEL" --port 0 --host 127.0.0.1 --threads 2 \
        --alias vision --max-seq-len 512 --max-images $VMAX >"$TMP/vis.out" 2>"$TMP/vis.err" &
    echo $! >"$TMP/vis.pid"
    PIDS="$PIDS $!"
fi
MAIN=$(wait_port main)
if [ -z "$MAIN" ]; then
    notok "serve starts" "no 'listening on' line; stdout: $(head -c 300 "$TMP/main.out"); stderr: $(tail -c 600 "$TMP/main.err")"
    echo "$pass passed, $fail failed"
    exit 1
fi
ok "serve starts and prints its port ($MAIN)"
U="http://127.0.0.1:$MAIN"

# ---- basic routes ----

http GET "$U/health"
check "/health is 200" "$(brief)" [ "$ST" = 200 ]

http GET "$U/v1/models"
check "/v1/models lists the alias" "$(brief)" \
    jtrue "(.object==\"list\") and ([.data[].id] | index(\"$ALIAS\") != null) and
           ([.data[] | select(.id==\"$ALIAS\") | .object][0] == \"model\")"

# ---- chat and completions, equal to meshlm generate ----

P1="The old man looked at the sea and said"
N1=12
"$MESHLM" generate -m "$MODEL" --instruct -p "$P1" -n $N1 --json --threads 2 >"$TMP/gen_chat.json" 2>"$TMP/gen.err"
"$MESHLM" generate -m "$MODEL" -p "$P1" -n $N1 --json --threads 2 >"$TMP/gen_cmpl.json" 2>>"$TMP/gen.err"
if ! jq -e .text "$TMP/gen_chat.json" >/dev/null 2>&1 || ! jq -e .text "$TMP/gen_cmpl.json" >/dev/null 2>&1; then
    notok "meshlm generate --json" "$(tail -c 400 "$TMP/gen.err")"
fi
want_chat=$(jq -r .text "$TMP/gen_chat.json" 2>/dev/null)
want_chat_p=$(jq -r '.prompt_ids|length' "$TMP/gen_chat.json" 2>/dev/null)
want_chat_n=$(jq -r '.generated_ids|length' "$TMP/gen_chat.json" 2>/dev/null)
want_chat_r=$(jq -r .stop_reason "$TMP/gen_chat.json" 2>/dev/null)
want_cmpl=$(jq -r .text "$TMP/gen_cmpl.json" 2>/dev/null)
want_cmpl_p=$(jq -r '.prompt_ids|length' "$TMP/gen_cmpl.json" 2>/dev/null)
want_cmpl_n=$(jq -r '.generated_ids|length' "$TMP/gen_cmpl.json" 2>/dev/null)
want_cmpl_r=$(jq -r .stop_reason "$TMP/gen_cmpl.json" 2>/dev/null)

body_chat "$P1" $N1
http POST "$U/v1/chat/completions" "$TMP/req"
cp "$TMP/b" "$TMP/chat.json"
check "chat: 200 and a chat.completion object" "$(brief)" \
    jtrue "(.object==\"chat.completion\") and (.id|type)==\"string\" and (.created|type)==\"number\"
           and .model==\"$ALIAS\" and (.choices|length)==1 and .choices[0].index==0
           and .choices[0].message.role==\"assistant\" and (.choices[0].message.content|type)==\"string\""
check "chat: finish_reason matches generate ($want_chat_r)" "$(brief)" \
    jtrue ".choices[0].finish_reason == (if \"$want_chat_r\"==\"stop\" then \"stop\" else \"length\" end)"
check "chat: usage consistent (prompt $want_chat_p, completion $want_chat_n)" "$(jb -c .usage)" \
    jtrue ".usage.prompt_tokens==$want_chat_p and .usage.completion_tokens==$want_chat_n and
           .usage.total_tokens==(.usage.prompt_tokens+.usage.completion_tokens) and
           (.usage.prompt_tokens_details.cached_tokens|type)==\"number\""
got=$(jb '.choices[0].message.content')
check "chat: greedy text equals meshlm generate --instruct" "server '$got' vs generate '$want_chat'" \
    [ "$got" = "$want_chat" ]

body_completion "$P1" $N1
http POST "$U/v1/completions" "$TMP/req"
check "completions: 200 and a text_completion object" "$(brief)" \
    jtrue "(.object==\"text_completion\") and (.id|type)==\"string\" and .model==\"$ALIAS\"
           and (.choices|length)==1 and .choices[0].index==0 and (.choices[0].text|type)==\"string\""
check "completions: finish_reason matches generate ($want_cmpl_r)" "$(brief)" \
    jtrue ".choices[0].finish_reason == (if \"$want_cmpl_r\"==\"stop\" then \"stop\" else \"length\" end)"
check "completions: usage consistent (prompt $want_cmpl_p, completion $want_cmpl_n)" "$(jb -c .usage)" \
    jtrue ".usage.prompt_tokens==$want_cmpl_p and .usage.completion_tokens==$want_cmpl_n and
           .usage.total_tokens==(.usage.prompt_tokens+.usage.completion_tokens)"
got=$(jb '.choices[0].text')
check "completions: greedy text equals meshlm generate -p" "server '$got' vs generate '$want_cmpl'" \
    [ "$got" = "$want_cmpl" ]

# ---- a streamed chat ----

body_chat "$P1" $N1 '{"stream":true,"stream_options":{"include_usage":true}}'
ST=$(curl -s -N -m 60 -o "$TMP/sse" -D "$TMP/h" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "@$TMP/req" "$U/v1/chat/completions")
sse_data "$TMP/sse" >"$TMP/sse.data"
sse_brief="HTTP $ST, stream $(head -c 400 "$TMP/sse" | tr '\n' ' ')"
is_sse() { [ "$ST" = 200 ] && grep -qi '^content-type: *text/event-stream' "$TMP/h"; }
check "stream: 200 text/event-stream" "$sse_brief" is_sse
check "stream: the last data line is [DONE]" "$sse_brief" [ "$(tail -n 1 "$TMP/sse.data")" = "[DONE]" ]
grep -v '^\[DONE\]$' "$TMP/sse.data" >"$TMP/chunks"
jq -s . "$TMP/chunks" >"$TMP/b" 2>/dev/null || echo null >"$TMP/b"
check "stream: every chunk is a chat.completion.chunk" "$sse_brief" \
    jtrue "length > 0 and all(.[]; .object==\"chat.completion.chunk\" and .model==\"$ALIAS\")"
check "stream: the first chunk's delta has role assistant" "$(jb -c '.[0]')" \
    jtrue '.[0].choices[0].delta.role=="assistant"'
check "stream: finish_reason only on the last choice chunk" "$(jb -c '[.[] | .choices[0].finish_reason]')" \
    jtrue "[.[] | select(.choices|length>0)] as \$c |
           (\$c[-1].choices[0].finish_reason == (if \"$want_chat_r\"==\"stop\" then \"stop\" else \"length\" end))
           and all(\$c[:-1][]; .choices[0].finish_reason == null)"
check "stream: include_usage chunk (no choices) just before [DONE]" "$(jb -c '.[-1]')" \
    jtrue ".[-1].choices==[] and .[-1].usage.prompt_tokens==$want_chat_p and
           .[-1].usage.completion_tokens==$want_chat_n and
           .[-1].usage.total_tokens==$((want_chat_p + want_chat_n))"
got=$(jb '[.[] | .choices[0].delta.content // empty] | join("")')
check "stream: content deltas join to the greedy text" "stream '$got' vs generate '$want_chat'" \
    [ "$got" = "$want_chat" ]

# ---- errors ----

printf '{"model": "%s", "messages": [{"role": "user", "content": "hi"}' "$ALIAS" >"$TMP/req"
http POST "$U/v1/chat/completions" "$TMP/req"
check "malformed JSON: 400 invalid_request_error" "$(brief)" \
    st_jq 400 '.error.type=="invalid_request_error" and (.error.message|length)>0 and
               (.error|has("param")) and (.error|has("code"))'

body_chat "hi" 4 '{"max_tokens":"four"}'
http POST "$U/v1/chat/completions" "$TMP/req"
check "wrong type (max_tokens a string): 400 with param max_tokens" "$(brief)" \
    st_jq 400 '.error.param=="max_tokens"'

body_completion "hi" 4 '{"temperature":"hot"}'
http POST "$U/v1/completions" "$TMP/req"
check "wrong type (temperature a string): 400 with param temperature" "$(brief)" \
    st_jq 400 '.error.param=="temperature"'

body_chat "hi" 4 '{"model":"no-such-model"}'
http POST "$U/v1/chat/completions" "$TMP/req"
check "unknown model: 404 model_not_found" "$(brief)" \
    st_jq 404 '.error.code=="model_not_found"'

LONG=$(awk 'BEGIN { for (i = 0; i < 100; i++) printf "the quick brown fox jumps over the lazy dog. " }')
# its length as `meshlm generate -p` counts it (BOS first), without prefilling it
n_long=$("$MESHLM" tokenize -m "$MODEL" --bos "$LONG" 2>/dev/null | wc -w | tr -d ' ')
body_completion "$LONG" 4
http POST "$U/v1/completions" "$TMP/req"
msg=$(jb .error.message)
has_num() { printf '%s' "$1" | grep -Eq "(^|[^0-9])$2([^0-9]|$)"; }
check "over-long prompt ($n_long tokens > $MAX_SEQ): 400 error object" "$(brief)" st_error 400
if [ "$ST" = 400 ] && [ -n "$n_long" ] && has_num "$msg" "$n_long" && has_num "$msg" "$MAX_SEQ"; then
    ok "over-long prompt: the message names $n_long and $MAX_SEQ"
else
    notok "over-long prompt: the message names $n_long and $MAX_SEQ" "$(brief)"
fi

awk -v n=$((MAX_BODY + 4096)) -v m="$ALIAS" 'BEGIN {
    printf "{\"model\":\"%s\",\"max_tokens\":1,\"prompt\":\"", m
    for (i = 0; i < n; i++) printf "a"
    printf "\"}" }' >"$TMP/req"
http POST "$U/v1/completions" "$TMP/req"
check "body over --max-body-bytes: 413 error object" "$(brief)" st_error 413

http GET "$U/v1/no-such-route"
check "unknown path: 404 error object" "$(brief)" st_error 404
echo '{}' >"$TMP/req"
http POST "$U/no/such/path" "$TMP/req"
check "unknown path (POST): 404" "$(brief)" [ "$ST" = 404 ]

# ---- --api-key ----

KEYED=$(wait_port keyed)
if [ -z "$KEYED" ]; then
    notok "serve --api-key starts" "$(tail -c 600 "$TMP/keyed.err")"
else
    K="http://127.0.0.1:$KEYED"
    body_chat "hi" 2
    http POST "$K/v1/chat/completions" "$TMP/req"
    check "missing key: 401 error object" "$(brief)" st_error 401
    http POST "$K/v1/chat/completions" "$TMP/req" -H "Authorization: Bearer wrong-$KEY"
    check "wrong key: 401 error object" "$(brief)" st_error 401
    http GET "$K/v1/models" "" -H "Authorization: Bearer wrong-$KEY"
    check "wrong key on /v1/models: 401" "$(brief)" [ "$ST" = 401 ]
    http POST "$K/v1/chat/completions" "$TMP/req" -H "Authorization: Bearer $KEY"
    check "right key: 200" "$(brief)" [ "$ST" = 200 ]
    http GET "$K/health"
    check "/health needs no key" "$(brief)" [ "$ST" = 200 ]
fi

# ---- a full queue: 503 + Retry-After ----

SMALL=$(wait_port small)
if [ -z "$SMALL" ]; then
    notok "serve --max-batch 1 --max-queue 1 starts" "$(tail -c 600 "$TMP/small.err")"
else
    S="http://127.0.0.1:$SMALL"
    body_completion "Once upon a time" 480 '{"stream":true,"ignore_eos":true}'
    # queue_one N: sends request N in the background.
    queue_one() {
        curl -s -N -m 60 -o "$TMP/q$1.out" -D "$TMP/q$1.h" -w '%{http_code}' \
            -H 'Content-Type: application/json' --data-binary "@$TMP/req" \
            "$S/v1/completions" >"$TMP/q$1.st" 2>/dev/null &
        qpids="$qpids $!"
        PIDS="$PIDS $!"
    }
    # One at a time, each once the server has taken the one before: the first runs, the
    # second waits, the third finds both places taken and is answered at once.
    qpids=""
    queue_one 1
    wait_metric "$SMALL" meshlm_running_sequences 1 20
    queue_one 2
    wait_metric "$SMALL" meshlm_queue_depth 1 20
    queue_one 3
    wait_line "$TMP/q3.h" '^HTTP/[0-9.]* [0-9]' 20
    sleep 0.3
    n503=$(cat "$TMP"/q?.h 2>/dev/null | grep -c '^HTTP/[0-9.]* 503')
    n200=$(cat "$TMP"/q?.h 2>/dev/null | grep -c '^HTTP/[0-9.]* 200')
    retry=0
    for q in 1 2 3; do
        if grep -q '^HTTP/[0-9.]* 503' "$TMP/q$q.h" 2>/dev/null; then
            grep -qi '^retry-after: *[0-9]' "$TMP/q$q.h" && retry=1
            cp "$TMP/q$q.out" "$TMP/b"
        fi
    done
    check "full queue: exactly one of three gets 503, the third" \
        "503s: $n503, 200s so far: $n200, the third: $(head -n 1 "$TMP/q3.h" 2>/dev/null)" \
        sh -c "[ $n503 = 1 ] && grep -q '^HTTP/[0-9.]* 503' '$TMP/q3.h'"
    ST=503
    check "full queue: the 503 has Retry-After and an error object" \
        "headers: $(cat "$TMP"/q?.h | tr '\r\n' '  ' | head -c 500); body $(head -c 200 "$TMP/b")" \
        sh -c "[ $retry = 1 ]"
    check "full queue: the 503 body is an error object" "$(head -c 300 "$TMP/b")" st_error 503
    for p in $qpids; do kill "$p" 2>/dev/null; done
fi

# ---- a client killed mid-stream frees its blocks ----

body_completion "It was a dark and stormy night" 480 '{"stream":true,"ignore_eos":true}'
curl -s -N -m 60 -o "$TMP/kill.out" -H 'Content-Type: application/json' --data-binary "@$TMP/req" \
    "$U/v1/completions" 2>/dev/null &
kpid=$!
PIDS="$PIDS $kpid"
if wait_line "$TMP/kill.out" '^data: ' 20; then
    used_during=$(metric "$MAIN" meshlm_kv_blocks_used)
    done_early=0
    grep -q '^data: \[DONE\]' "$TMP/kill.out" && done_early=1
    kill "$kpid" 2>/dev/null
    wait "$kpid" 2>/dev/null
    wait_metric "$MAIN" meshlm_kv_blocks_used 0 5
    check "killed client: meshlm_kv_blocks_used > 0 while it streamed" \
        "meshlm_kv_blocks_used '$used_during' (stream already done: $done_early)" \
        sh -c "[ -n '$used_during' ] && [ '$used_during' != 0 ] && [ $done_early = 0 ]"
    check "killed client: meshlm_kv_blocks_used back to 0 within 5 s" "still '$used'" [ "$used" = 0 ]
    running=$(metric "$MAIN" meshlm_running_sequences)
    check "killed client: meshlm_running_sequences back to 0" "'$running'" [ "$running" = 0 ]
else
    notok "killed client: the stream starts" "$(head -c 300 "$TMP/kill.out")"
fi

# ---- /metrics ----

curl -s -m 10 -o "$TMP/metrics" -w '%{http_code}' "$U/metrics" >"$TMP/st"
missing=""
for m in meshlm_kv_blocks_used meshlm_kv_blocks_cached meshlm_kv_blocks_free \
    meshlm_running_sequences meshlm_queue_depth meshlm_prefix_cache_hit_tokens_total \
    meshlm_preemptions_total meshlm_requests_total meshlm_prompt_tokens_total \
    meshlm_generation_tokens_total meshlm_time_to_first_token_seconds_bucket \
    meshlm_time_per_output_token_seconds_bucket; do
    grep -q "^$m[{ ]" "$TMP/metrics" || missing="$missing $m"
done
check "/metrics: 200 with every contract metric" "status $(cat "$TMP/st"), missing:$missing" \
    sh -c "[ '$(cat "$TMP/st")' = 200 ] && [ -z '$missing' ]"
gen_total=$(metric "$MAIN" meshlm_generation_tokens_total)
check "/metrics: generation tokens counted (>= $((want_chat_n * 2 + want_cmpl_n)))" "'$gen_total'" \
    awk -v g="$gen_total" -v w=$((want_chat_n * 2 + want_cmpl_n)) 'BEGIN { exit !(g + 0 >= w) }'
check "/metrics: requests_total has chat 200 and 404 rows" "$(grep '^meshlm_requests_total' "$TMP/metrics" | head -n 20 | tr '\n' ' ')" \
    sh -c "grep '^meshlm_requests_total{' '$TMP/metrics' | grep 'chat' | grep -q '\"200\"' &&
           grep '^meshlm_requests_total{' '$TMP/metrics' | grep -q '\"404\"'"

# ---- /tokenize and /detokenize (llama-server's), against tiktoken's ids ----

if [ -n "$SMALL" ]; then
    S="http://127.0.0.1:$SMALL"
    TOKD=tests/data/tokenizer
    # the whole book: tiktoken's encode_ordinary ids (little-endian uint32)
    jq -Rs '{content: ., parse_special: false}' tests/data/text/frankenstein.txt >"$TMP/tk"
    http POST "$S/tokenize" "$TMP/tk"
    jb '.tokens[]' >"$TMP/tk.got"
    od -An -tu4 -v "$TOKD/frankenstein.llama3.ids" | tr -s ' ' '\n' | sed '/^$/d' >"$TMP/tk.want"
    check "/tokenize: Frankenstein's $(wc -l <"$TMP/tk.want") ids equal tiktoken's" "$(brief)" \
        cmp -s "$TMP/tk.got" "$TMP/tk.want"
    # special-token text: parsed by default, plain with parse_special false; add_special: BOS
    printf '{"content": "<|eot_id|>hi", "add_special": true}' >"$TMP/tk"
    http POST "$S/tokenize" "$TMP/tk"
    check "/tokenize parses special tokens and adds BOS: [128000, 128009, 6151]" "$(brief)" \
        [ "$(jb '.tokens|map(tostring)|join(",")')" = "128000,128009,6151" ]
    # /detokenize: Python's bytes.decode("utf-8", "replace") of each case's bytes
    n=$(jq length "$TOKD/detok_cases.json")
    bad=0 i=0
    while [ $i -lt "$n" ]; do
        jq "{tokens: .[$i].ids}" "$TOKD/detok_cases.json" >"$TMP/dk"
        http POST "$S/detokenize" "$TMP/dk"
        got=$(jq -j '.content' "$TMP/b" | od -An -tx1 -v | tr -d ' \n')
        want=$(jq -r ".[$i].expected_hex" "$TOKD/detok_cases.json")
        [ "$ST" = 200 ] && [ "$got" = "$want" ] || bad=$((bad + 1))
        i=$((i + 1))
    done
    check "/detokenize: $n cases equal Python's decode with replacement" "$bad differ" [ $bad -eq 0 ]
    printf '{"tokens": [1, 999999]}' >"$TMP/dk"
    http POST "$S/detokenize" "$TMP/dk"
    check "/detokenize: an id outside the vocabulary is a 400 naming tokens[1]" "$(brief)" \
        [ "$ST" = 400 ] && [ "$(jb .error.param)" = "tokens[1]" ]
    printf '{"text": "hi"}' >"$TMP/tk"
    http POST "$S/tokenize" "$TMP/tk"
    check "/tokenize: no content is a 400 naming it" "$(brief)" \
        [ "$ST" = 400 ] && [ "$(jb .error.param)" = "content" ]
fi
if [ -n "$KEYED" ]; then
    printf '{"content": "hi"}' >"$TMP/tk"
    http POST "http://127.0.0.1:$KEYED/tokenize" "$TMP/tk"
    check "/tokenize needs the API key" "$(brief)" [ "$ST" = 401 ]
fi

# ---- images (Llama 3.2 Vision): image_url parts with base64 data: URLs ----

VA=tests/data/mllama/images/b_2tile.png # a PNG of two tiles
VB=tests/data/image/jpeg420_96x64.jpg   # a JPEG (4:2:0)
VT="Describe the picture in one sentence."
VN=10
# durl MEDIA FILE [wrap]: FILE as a data: URL (with "wrap", base64 in 76-column lines, the MIME
# form the decoder tolerates)
durl() {
    if [ "${3:-}" = wrap ]; then printf 'data:%s;base64,%s' "$1" "$(base64 "$2")"
    else printf 'data:%s;base64,%s' "$1" "$(base64 -w0 "$2")"; fi
}
img_part() { jq -n --arg u "$1" '{type:"image_url", image_url:{url:$u, detail:"auto"}}'; }
txt_part() { jq -n --arg t "$1" '{type:"text", text:$t}'; }
# vbody MODEL [EXTRA]: a greedy chat request whose one user message's content is the parts on
# stdin (one JSON object each), to $TMP/req
vbody() {
    jq -cs . >"$TMP/parts"
    jq -n --arg m "$1" --slurpfile p "$TMP/parts" --argjson n $VN --argjson x "${2:-{\}}" \
        '{model:$m, messages:[{role:"user", content:$p[0]}], max_tokens:$n, temperature:0} + $x' \
        >"$TMP/req"
}
# vgen NAME PROMPT IMAGE [IMAGE]: `meshlm generate --instruct --json` on the vision model (the
# CLI puts images first when PROMPT has no <|image|> marker, else one at each marker)
vgen() {
    MESHLM_CACHE=$VCACHE "$MESHLM" generate -m "$VMODEL" --instruct -p "$2" --image "$3" \
        ${4:+--image "$4"} --temperature 0 -n $VN --json --threads 2 >"$TMP/$1.json" \
        2>"$TMP/$1.err"
}
# vsame NAME WHAT: checks the last body (a chat.completion) against $TMP/NAME.json
vsame() {
    want=$(jq -r .text "$TMP/$1.json" 2>/dev/null)
    wp=$(jq -r '.prompt_ids|length' "$TMP/$1.json" 2>/dev/null)
    wn=$(jq -r '.generated_ids|length' "$TMP/$1.json" 2>/dev/null)
    got=$(jb '.choices[0].message.content')
    if [ "$ST" = 200 ] && [ -n "$want" ] && [ "$got" = "$want" ]; then
        ok "$2: 200, the text equals meshlm generate --image"
    else
        notok "$2: 200, the text equals meshlm generate --image" "$(brief); generate '$want'"
    fi
    check "$2: usage.prompt_tokens $wp (the image token counts one), completion $wn" \
        "$(jb -c .usage)" jtrue ".usage.prompt_tokens==$wp and .usage.completion_tokens==$wn"
}
# vstream NAME WHAT: sends $TMP/req streamed (with usage) and checks it against $TMP/NAME.json
vstream() {
    jq -c '. + {stream:true, stream_options:{include_usage:true}}' "$TMP/req" >"$TMP/req.s"
    ST=$(curl -s -N -m 60 -o "$TMP/vsse" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "@$TMP/req.s" "$V/v1/chat/completions")
    sse_data "$TMP/vsse" | grep -v '^\[DONE\]$' | jq -s . >"$TMP/b" 2>/dev/null || echo null >"$TMP/b"
    want=$(jq -r .text "$TMP/$1.json" 2>/dev/null)
    wp=$(jq -r '.prompt_ids|length' "$TMP/$1.json" 2>/dev/null)
    got=$(jb '[.[] | .choices[0].delta.content // empty] | join("")')
    gp=$(jb '.[-1].usage.prompt_tokens')
    last=$(sse_data "$TMP/vsse" | tail -n 1)
    if [ "$ST" = 200 ] && [ -n "$want" ] && [ "$got" = "$want" ] && [ "$gp" = "$wp" ] &&
        [ "$last" = "[DONE]" ]; then
        ok "$2, streamed: the deltas join to meshlm generate's text, usage prompt_tokens $wp"
    else
        notok "$2, streamed: the deltas join to meshlm generate's text, usage prompt_tokens $wp" \
            "HTTP $ST, '$got' vs '$want', prompt_tokens '$gp', last '$last'"
    fi
}
# verr WHAT PARAM NEEDLE: the last answer is a 400 error object naming PARAM, its message
# containing NEEDLE
verr() {
    if [ "$ST" = 400 ] && is_error_object && [ "$(jb .error.param)" = "$2" ] &&
        jb .error.message | grep -qF -- "$3"; then
        ok "$1: 400, param $2, the message says '$3'"
    else
        notok "$1: 400, param $2, the message says '$3'" "$(brief)"
    fi
}

VPORT=""
[ -f "$TMP/vis.pid" ] && VPORT=$(wait_port vis)
if [ -z "$VPORT" ]; then
    notok "vision: synth and serve start" "synth: $(tail -c 300 "$TMP/synth.out"); serve: $(tail -c 400 "$TMP/vis.err" 2>/dev/null)"
else
    V="http://127.0.0.1:$VPORT"
    vgen vg_png "$VT" "$VA"
    vgen vg_jpg "$VT<|image|>" "$VB"
    vgen vg_two "<|image|>$VT<|image|>" "$VA" "$VB"
    vgen vg_other "$VT" "$VB"
    for g in vg_png vg_jpg vg_two vg_other; do
        jq -e .text "$TMP/$g.json" >/dev/null 2>&1 || notok "meshlm generate --image ($g)" "$(tail -c 300 "$TMP/$g.err")"
    done
    # what makes the comparisons below tell something: the answer depends on the image
    check "vision: meshlm generate answers differently for another image" \
        "both '$(jq -r .text "$TMP/vg_png.json")'" \
        sh -c "[ \"\$(jq -c .generated_ids '$TMP/vg_png.json')\" != \"\$(jq -c .generated_ids '$TMP/vg_other.json')\" ]"

    { img_part "$(durl image/png "$VA")"; txt_part "$VT"; } | vbody vision
    http POST "$V/v1/chat/completions" "$TMP/req"
    vsame vg_png "PNG, image before the text"
    vstream vg_png "PNG, image before the text"

    { txt_part "$VT"; img_part "$(durl image/jpeg "$VB" wrap)"; } | vbody vision
    http POST "$V/v1/chat/completions" "$TMP/req"
    vsame vg_jpg "JPEG (MIME-wrapped base64), text before the image"
    vstream vg_jpg "JPEG (MIME-wrapped base64), text before the image"

    { img_part "$(durl image/png "$VA")"; txt_part "$VT"; img_part "$(durl image/jpeg "$VB")"; } |
        vbody vision
    http POST "$V/v1/chat/completions" "$TMP/req"
    vsame vg_two "two images (PNG, text, JPEG)"

    # errors, each naming the part
    { txt_part "$VT"; img_part "https://example.com/cat.png"; } | vbody vision
    http POST "$V/v1/chat/completions" "$TMP/req"
    verr "an https URL" "messages[0].content[1].image_url.url" "only data: URLs"
    { txt_part "$VT"; img_part "data:image/png;base64,iVBORw0K*GgoAAAANSUhEUg=="; } | vbody vision
    http POST "$V/v1/chat/completions" "$TMP/req"
    verr "bad base64 ('*')" "messages[0].content[1].image_url.url" "base64"
    head -c 300 "$VA" >"$TMP/trunc.png"
    { txt_part "$VT"; img_part "$(durl image/png "$TMP/trunc.png")"; } | vbody vision
    http POST "$V/v1/chat/completions" "$TMP/req"
    verr "a truncated PNG" "messages[0].content[1]" "messages[0].content[1]: "
    printf 'These bytes are text, not an image.' >"$TMP/noimage.png"
    { img_part "$(durl image/png "$TMP/noimage.png")"; txt_part "$VT"; } | vbody vision
    http POST "$V/v1/chat/completions" "$TMP/req"
    verr "bytes that are no image" "messages[0].content[0]" "messages[0].content[0]: "
    { img_part "$(durl image/png "$VA")"; img_part "$(durl image/jpeg "$VB")";
      img_part "$(durl image/png "$VA")"; } | vbody vision
    http POST "$V/v1/chat/completions" "$TMP/req"
    verr "$((VMAX + 1)) images over --max-images $VMAX" "messages[0].content[$VMAX]" "at most $VMAX"
    { txt_part "$VT"; img_part "$(durl image/png tests/data/image/rgb_7x5.png)"; } | vbody "$ALIAS"
    http POST "$U/v1/chat/completions" "$TMP/req"
    verr "an image to a text-only model" "messages[0].content[1]" "takes no images"

    # a client killed while its image request streams: its blocks (and images) are freed
    { img_part "$(durl image/png "$VA")"; txt_part "Go on and on."; } |
        vbody vision '{"max_tokens":400,"ignore_eos":true,"stream":true}'
    curl -s -N -m 60 -o "$TMP/vkill.out" -H 'Content-Type: application/json' \
        --data-binary "@$TMP/req" "$V/v1/chat/completions" 2>/dev/null &
    vkpid=$!
    PIDS="$PIDS $vkpid"
    if wait_line "$TMP/vkill.out" '^data: ' 20; then
        kill "$vkpid" 2>/dev/null
        wait "$vkpid" 2>/dev/null
        wait_metric "$VPORT" meshlm_kv_blocks_used 0 5
        check "vision: a killed streaming client's blocks are freed within 5 s" "still '$used'" [ "$used" = 0 ]
    else
        notok "vision: the killed client's stream starts" "$(head -c 300 "$TMP/vkill.out")"
    fi

    n_img=$(metric "$VPORT" meshlm_images_total)
    n_enc=$(metric "$VPORT" meshlm_images_encoded_total)
    v_s=$(metric "$VPORT" meshlm_vision_encoder_seconds_total)
    check "vision /metrics: images received >= encoded >= 7, encoder seconds > 0" \
        "images_total '$n_img', images_encoded_total '$n_enc', vision_encoder_seconds_total '$v_s'" \
        awk -v a="$n_img" -v b="$n_enc" -v s="$v_s" 'BEGIN { exit !(a + 0 >= b + 0 && b + 0 >= 7 && s + 0 > 0) }'

    vpid=$(cat "$TMP/vis.pid")
    kill -TERM "$vpid"
    reap "$vpid"
    vrc=$reaped
    check "vision: serve exits 0 on SIGTERM (no leak reported)" \
        "exit status $vrc; stderr: $(tail -c 400 "$TMP/vis.err")" [ $vrc = 0 ]
fi

# ---- SIGTERM during a stream ----

mpid=$(cat "$TMP/main.pid")
body_chat "Tell me a long story" 300 '{"stream":true,"ignore_eos":true}'
curl -s -N -m 90 -o "$TMP/term.out" -H 'Content-Type: application/json' --data-binary "@$TMP/req" \
    "$U/v1/chat/completions" 2>/dev/null &
tpid=$!
PIDS="$PIDS $tpid"
if wait_line "$TMP/term.out" '^data: ' 20; then
    done_early=0
    grep -q '^data: \[DONE\]' "$TMP/term.out" && done_early=1
    kill -TERM "$mpid"
    sleep 0.3
    after=$(curl -s -m 3 -o /dev/null -w '%{http_code}' "$U/health" 2>/dev/null)
    [ -n "$after" ] || after=000
    wait "$tpid" 2>/dev/null
    sse_data "$TMP/term.out" >"$TMP/term.data"
    grep -v '^\[DONE\]$' "$TMP/term.data" | jq -s . >"$TMP/b" 2>/dev/null || echo null >"$TMP/b"
    check "SIGTERM: the running stream ends with [DONE]" \
        "last lines: $(tail -n 2 "$TMP/term.data" | head -c 300 | tr '\n' ' ')" \
        [ "$(tail -n 1 "$TMP/term.data")" = "[DONE]" ]
    check "SIGTERM: the stream was running when the signal came" "it had already ended" [ $done_early = 0 ]
    check "SIGTERM: the stream finished its 300 tokens (finish_reason length)" \
        "it ended with: $(grep -v '^\[DONE\]$' "$TMP/term.data" | tail -n 1 | head -c 300)" \
        jtrue '[.[] | select(.choices|length>0)][-1].choices[0].finish_reason=="length"'
    check "SIGTERM: new connections are refused (or 503) while draining" "/health gave $after" \
        sh -c "[ '$after' = 000 ] || [ '$after' = 503 ]"
    # up to 30 s to exit (no background watchdog: it would hold our stdout open)
    reap "$mpid"
    mrc=$reaped
    check "SIGTERM: serve exits 0" "exit status $mrc; stderr: $(tail -c 300 "$TMP/main.err")" [ $mrc = 0 ]
else
    notok "SIGTERM: the stream starts" "$(head -c 300 "$TMP/term.out")"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
