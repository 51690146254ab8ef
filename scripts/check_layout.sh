#!/bin/sh
# scripts/check_layout.sh: the import check (`make check-layout`, run by `make test`). Arrows
# point down the stack only: a folder of src/ includes headers of its own folder and of folders
# below it, never of one beside or above it; tools/ uses the public header (include/meshlm.h)
# and its own headers only. The stack, bottom first (README's Layout):
#   0 core
#   1 tensor, dist, sample, image
#   2 format, backend
#   3 tokenizer, config, kv
#   4 model
#   5 exec, synth, export
# Prints every include that breaks it, with its file and line, and fails if there is one.
cd "$(dirname "$0")/.." || exit 2

rank() {
    case "$1" in
    core) echo 0 ;;
    tensor | dist | sample | image) echo 1 ;;
    format | backend) echo 2 ;;
    tokenizer | config | kv) echo 3 ;;
    model) echo 4 ;;
    exec | synth | export) echo 5 ;;
    *) echo -1 ;;
    esac
}

bad=0
for dir in src/*/; do
    from=$(basename "$dir")
    rf=$(rank "$from")
    if [ "$rf" -lt 0 ]; then
        echo "check-layout: src/$from/ is not in the stack (scripts/check_layout.sh)"
        bad=$((bad + 1))
        continue
    fi
    # "folder/file.h" includes; system headers (<...>) are not the stack's business
    grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[a-z_]+/' "$dir"*.c "$dir"*.h 2>/dev/null |
        sed -E 's/^([^:]+):([0-9]+):.*#[[:space:]]*include[[:space:]]+"([a-z_]+)\/.*/\1 \2 \3/' >/tmp/check_layout.$$
    while read -r file line to; do
        [ "$to" = "$from" ] && continue
        rt=$(rank "$to")
        if [ "$rt" -lt 0 ] || [ "$rt" -ge "$rf" ]; then
            echo "check-layout: $file:$line: src/$from/ includes $to/, which is not below it"
            bad=$((bad + 1))
        fi
    done </tmp/check_layout.$$
    rm -f /tmp/check_layout.$$
done

# tools/: the public header and tools' own headers (common/, cli/, server/ and same-folder files)
grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' tools --include='*.c' --include='*.h' |
    grep -vE '#[[:space:]]*include[[:space:]]+"(meshlm\.h|common/[a-z_]+\.h|cli/[a-z_]+\.h|server/[a-z_]+\.h|[a-z_]+\.h)"' >/tmp/check_layout.$$
while IFS= read -r hit; do
    echo "check-layout: ${hit%%:*}: tools/ includes more than include/meshlm.h: ${hit#*#}"
    bad=$((bad + 1))
done </tmp/check_layout.$$
rm -f /tmp/check_layout.$$
# a same-folder header of tools/ must be one of tools/' own files
for h in $(grep -rhoE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[a-z_]+\.h"' tools | sed -E 's/.*"([a-z_]+\.h)"/\1/' | sort -u); do
    [ "$h" = meshlm.h ] && continue
    if ! find tools -name "$h" | grep -q .; then
        echo "check-layout: tools/ includes $h, which is not one of its own headers"
        bad=$((bad + 1))
    fi
done

if [ "$bad" -gt 0 ]; then
    echo "check-layout: $bad include(s) break the stack"
    exit 1
fi
echo "check-layout: every include points down the stack"
