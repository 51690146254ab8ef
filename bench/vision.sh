#!/bin/sh
# bench/vision.sh: Llama 3.2 Vision's figures with their baselines from the same run: the
# matmul kernels alone (the encoder is compute-bound: its GFLOP/s against theirs), then
# bench/vision on the synthetic 11B (load, encoder on a 1-tile and a 4-tile image, image K/V,
# TTFT with an image, decode against the read bandwidth, peak RSS). Run from the repository
# root after `make`; MESHLM_BENCH_* variables pass through (see bench/vision.c).
set -eu
BUILD=${BUILD:-build}
echo "== $BUILD/bench/matmul (the kernels' GFLOP/s: the encoder's baseline)"
"$BUILD/bench/matmul"
echo "== $BUILD/bench/vision"
/usr/bin/time -v "$BUILD/bench/vision" "$@" 2>/tmp/bench-vision-time.$$ || { cat /tmp/bench-vision-time.$$; exit 1; }
grep -E 'Maximum resident|Elapsed' /tmp/bench-vision-time.$$
rm -f /tmp/bench-vision-time.$$
