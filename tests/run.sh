#!/bin/sh
# Runs each test binary given as an argument, echoes its output, and sums the
# closing "N passed, N failed[, N skipped]" lines. Exits 1 on any failure, on a
# binary that crashes, or on one that does not print its closing line.
total_p=0; total_f=0; total_s=0; bad=0
for t in "$@"; do
  echo "== $t"
  out=$("$t" 2>&1); rc=$?
  printf '%s\n' "$out"
  last=$(printf '%s\n' "$out" | tail -n 1)
  p=$(printf '%s' "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\1/p')
  f=$(printf '%s' "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\2/p')
  s=$(printf '%s' "$last" | sed -n 's/.*, \([0-9]*\) skipped$/\1/p')
  if [ -z "$p" ]; then echo "$t: no closing line (exit $rc)"; total_f=$((total_f + 1)); bad=1; continue; fi
  [ -z "$s" ] && s=0
  total_p=$((total_p + p)); total_f=$((total_f + f)); total_s=$((total_s + s))
  if [ "$rc" -ne 0 ] || [ "$f" -ne 0 ]; then bad=1; fi
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "$t: exit $rc"; total_f=$((total_f + 1)); fi
done
echo "$total_p passed, $total_f failed, $total_s skipped"
exit $bad
