#!/bin/sh
# The batch-1 decode GEMVs read one weight panel at a time on AMD and several side by side
# elsewhere (src/core/cpu.h). test_matmul checks this machine's choice against the scalar
# twins; this runs it again with the other one (MESHLM_DECODE_PANELS), so both paths are
# checked on every machine.
dir=$(dirname "${MESH_BIN:-build/tests/mesh}")
if grep -q AuthenticAMD /proc/cpuinfo 2>/dev/null; then other=many; else other=1; fi
echo "# test_matmul with MESHLM_DECODE_PANELS=$other"
MESHLM_DECODE_PANELS=$other exec "$dir/test_matmul"
