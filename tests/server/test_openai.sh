#!/bin/sh
# tests/server/test_openai.sh: runs tests/server/openai_test.py (`meshlm serve` driven by the
# official openai Python client) when python3 and its openai package are there; otherwise says
# SKIP with the reason. Runs from the repository root; MESHLM names the binary. The client
# comes from .venv-test/ (made by scripts/setup.sh) when it is there, else from python3's own.
PY=python3
if [ -x .venv-test/bin/python3 ] && .venv-test/bin/python3 -c "import openai" >/dev/null 2>&1; then
    PY=.venv-test/bin/python3
fi
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "SKIP: python3 is not installed"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
if ! "$PY" -c "import openai" >/dev/null 2>&1; then
    echo "SKIP: the python3 openai package is not installed (pip install openai)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
exec "$PY" "$(dirname "$0")/openai_test.py" "$@"
