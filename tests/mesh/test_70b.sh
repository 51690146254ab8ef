#!/bin/sh
# tests/mesh/test_70b.sh: Llama 3.1-70B's TP8 path on one machine. `meshlm synth --preset
# llama-3.1-70b --layers 2` keeps every real shape (8192 wide, 64/8 heads, n_ff 28672, the
# 128256-token vocabulary) but two layers: 7.6 GB in bf16. mesh_logits (tests/mesh/mesh_logits.c)
# loads it in the f32 profile at TP8 and at TP1 and checks:
#   - the logits of TP8 byte-identical to TP1's at every position;
#   - each TP8 rank's peak RSS is 1/8 of TP1's plus 300 MB, and the weights it owns are 1/8;
#   - Meta's 8-shard form of the same model (same seed): rank r reads what it needs of the
#     shards in place, so its peak RSS while loading is 1/8 too (no repacking), and its
#     logits equal the HF TP8 run's.
# SKIP without mpirun or jq, with under 20 GB of MemAvailable or of free disk in $TMPDIR.
# About 2.5 minutes on 2 cores; one heavy step at a time (TP1 in f32 holds 15.3 GB).
# MESHLM names the meshlm binary, MESH_BIN the folder of the mesh test programs.
MESHLM=${MESHLM:-build/meshlm}
MESH_BIN=${MESH_BIN:-build/tests/mesh}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok - $1"; }
notok() { fail=$((fail + 1)); echo "not ok - $1"; }
skip() {
    echo "SKIP: $1"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
}
gb() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1e9 }'; }
NEED=20000000000 # bytes of memory and of disk

command -v mpirun >/dev/null 2>&1 ||
    skip "mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)"
command -v jq >/dev/null 2>&1 || skip "jq is not installed (it reads mesh_logits' JSON line)"
# under `make asan` the 15.3 GB of f32 weights get ASan's shadow and quarantine on top, past
# this machine's memory, and the run would take many times as long
if ldd "$MESH_BIN/mesh_logits" 2>/dev/null | grep -q libasan; then
    skip "an AddressSanitizer build: TP1's 15.3 GB of f32 weights plus ASan's shadow memory do not fit a 24 GB machine (make test runs this check)"
fi
avail=$(awk '/^MemAvailable:/ { printf "%.0f", $2 * 1024 }' /proc/meminfo)
[ "${avail:-0}" -ge $NEED ] ||
    skip "MemAvailable is $(gb "${avail:-0}") GB, under the 20 GB TP1 needs (15.3 GB of f32 weights, plus the 7.6 GB checkpoint it maps)"
BASE=${TMPDIR:-/tmp}
disk=$(df -Pk "$BASE" | awk 'NR == 2 { printf "%.0f", $4 * 1024 }')
[ "${disk:-0}" -ge $NEED ] ||
    skip "$BASE has $(gb "${disk:-0}") GB free, under the 20 GB asked for the 7.6 GB checkpoints"
"$MESHLM" synth --help 2>/dev/null | grep -q -- '--layers' ||
    skip "$MESHLM synth has no --layers"
. tests/mesh/mpirun.sh # MPIRUN and the ranks' environment
TMP=$(mktemp -d "$BASE/meshlm-70b.XXXXXX") || skip "cannot make a folder in $BASE"
trap 'rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM
START=$(date +%s)

# synth FMT: the 2-layer 70B (bf16, seed 0) into $TMP/FMT; 0 on success.
synth() {
    t=$(date +%s)
    if "$MESHLM" synth --preset llama-3.1-70b --layers 2 --format "$1" --out "$TMP/$1" \
        >/dev/null 2>"$TMP/synth.err"; then
        ok "synth llama-3.1-70b --layers 2 --format $1: $(gb "$(du -sb "$TMP/$1" | cut -f1)") GB in $(($(date +%s) - t)) s"
        return 0
    fi
    notok "synth llama-3.1-70b --layers 2 --format $1: $(tail -n 2 "$TMP/synth.err" | tr '\n' ' ')"
    return 1
}

# run NP FMT NAME: mesh_logits at TP NP on $TMP/FMT: $TMP/NAME.f32 (logits), NAME.json.
run() {
    t=$(date +%s)
    if timeout 400 $MPIRUN -np "$1" "$MESH_BIN/mesh_logits" "$TMP/$2" --profile f32 \
        --out "$TMP/$3.f32" >"$TMP/$3.json" 2>"$TMP/$3.err" && [ -s "$TMP/$3.f32" ] &&
        jq -e . "$TMP/$3.json" >/dev/null 2>&1; then
        ok "mesh_logits -np $1 $2 f32: loaded and ran in $(($(date +%s) - t)) s (load $(jq -r '[.ranks[].load_s] | max' "$TMP/$3.json") s)"
        return 0
    fi
    notok "mesh_logits -np $1 $2 f32: $(tail -n 3 "$TMP/$3.err" | tr '\n' ' ')"
    return 1
}

# compare A B WHAT: logits A against B.
compare() {
    if "$MESH_BIN/mesh_logits" --compare "$TMP/$1.f32" "$TMP/$2.f32" >"$TMP/cmp.out" 2>&1; then
        ok "$3: $(tail -n 1 "$TMP/cmp.out")$(cmp -s "$TMP/$1.f32" "$TMP/$2.f32" && echo '; bit-identical')"
    else
        notok "$3: $(grep -- '<- differs' "$TMP/cmp.out" | head -n 2 | tr '\n' ' ')$(tail -n 1 "$TMP/cmp.out")"
    fi
}

# same NAME WHAT: every rank of the run has the same logits bits.
same() {
    if [ "$(jq -r .ranks_bit_identical "$TMP/$1.json")" = true ]; then
        ok "$2: every rank's logits are bit-identical"
    else
        notok "$2: the ranks' logits differ"
    fi
}

# rss NAME FIELD WHAT: every rank's FIELD (hwm_load, hwm_run) <= BOUND, the owned weights
# (RssAnon after loading) <= OWN_BOUND and mlm_model_weight_bytes = TP1's / 8.
rss() {
    worst=$(jq -r "[.ranks[].$2] | max" "$TMP/$1.json")
    all=$(jq -r "[.ranks[].$2 / 1e7 | round / 100] | map(tostring) | join(\" \")" "$TMP/$1.json")
    files=$(jq -r '[.ranks[].file_load / 1e7 | round / 100] | map(tostring) | join(" ")' "$TMP/$1.json")
    what="$3: every rank's peak RSS ($2) <= TP1's / 8 + 300 MB = $(gb "$BOUND") GB"
    if [ "$worst" -le "$BOUND" ]; then
        ok "$what: $all GB"
    else
        notok "$what: $all GB (mapped file pages after loading, RssFile: $files GB; the rank's 1/8 of the checkpoint is $(gb $((CKPT / 8))) GB)"
    fi
    own=$(jq -r '[.ranks[].anon_load] | max' "$TMP/$1.json")
    wb=$(jq -r '[.ranks[].weight_bytes] | max' "$TMP/$1.json")
    what="$3: the weights each rank owns (RssAnon) <= TP1's / 8 + 100 MB = $(gb "$OWN_BOUND") GB, mlm_model_weight_bytes = TP1's / 8"
    if [ "$own" -le "$OWN_BOUND" ] && [ $((wb * 8)) -le $((TP1_WB + 8000000)) ]; then
        ok "$what: at most $(gb "$own") GB, $(gb "$wb") GB"
    else
        notok "$what: up to $(gb "$own") GB, $(gb "$wb") GB a rank vs TP1's $(gb "$TP1_WB") GB"
    fi
}

if synth hf && run 8 hf hf8 && run 1 hf tp1; then
    same hf8 "HF TP8"
    compare hf8 tp1 "HF TP8 logits vs TP1 (f32)"
    # TP1's peak counts every checkpoint byte it maps, where memory pressure evicted none;
    # a rank's allowance over 1/8 of it: MPI and libraries (~30 MB), the zip headers of the
    # other Meta shards (~100 MB: the kernel maps whole page-cache folios around them), the
    # executor and the logits (~10 MB), about twice what was measured.
    CKPT=$(stat -c %s "$TMP"/hf/*.safetensors | awk '{ s += $1 } END { printf "%.0f", s }')
    tp1_anon=$(jq -r '.ranks[0].anon_load' "$TMP/tp1.json")
    tp1_peak=$(jq -r '.ranks[0].hwm_run' "$TMP/tp1.json")
    TP1_WB=$(jq -r '.ranks[0].weight_bytes' "$TMP/tp1.json")
    ref=$((tp1_anon + CKPT))
    [ "$tp1_peak" -gt "$ref" ] && ref=$tp1_peak
    BOUND=$((ref / 8 + 300000000))
    OWN_BOUND=$((tp1_anon / 8 + 100000000))
    echo "# TP1: peak RSS $(gb "$tp1_peak") GB (owned weights $(gb "$tp1_anon") GB + the $(gb "$CKPT") GB checkpoint mapped), mlm_model_weight_bytes $(gb "$TP1_WB") GB"
    rss hf8 hwm_run "HF TP8"
    rm -rf "$TMP/hf" "$TMP/tp1.f32"
    if synth meta && run 8 meta meta8; then
        same meta8 "Meta TP8"
        rss meta8 hwm_load "Meta TP8 (8 shards, while loading)"
        compare meta8 hf8 "Meta TP8 logits vs HF TP8 (f32)"
    fi
fi
echo "# $(($(date +%s) - START)) s in all"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
