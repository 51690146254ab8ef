#!/usr/bin/env python3
"""bench/chat_questions.py: simple questions through `meshlm chat`, one fresh conversation each,
in chat's defaults and in greedy runs without the loop guard (bf16, f32, native), counting the
right answers (bench/chat_questions.tsv: each question with a regex an answer must match, and
for numeric answers the number its last number must be, so that "8 legs ... no, 20 legs" is
wrong) and
the answers that loop (ran to -n, or a stretch of 4+ characters repeated 4 times in a row).

    bench/chat_questions.py [-m MODEL] [-n N] [--show]

MODEL: the default model when absent. Prints one row per setting; --show prints every answer.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = [
    ("chat's default (no options)", []),
    ("bf16 greedy, no guard", ["--optimizations", "bf16", "--dry-multiplier", "0"]),
    ("f32 greedy, no guard", ["--optimizations", "f32", "--dry-multiplier", "0"]),
    ("native greedy, no guard", ["--optimizations", "native", "--dry-multiplier", "0"]),
]
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
LOOP = re.compile(r"(.{4,}?)\1{3,}", re.S)


def ask(meshlm, model, n, flags, question):
    cmd = [meshlm, "chat", "-v", "-n", str(n)] + (["-m", model] if model else []) + flags
    r = subprocess.run(cmd, input=question + "\n", capture_output=True, text=True, timeout=600)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    stop = re.search(r"stop: ([a-z ]+)\]", r.stderr)
    profile = re.search(r"profile (\S+):", r.stderr)
    return r.stdout.strip(), stop.group(1) if stop else "?", profile.group(1) if profile else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--show", action="store_true")
    a = ap.parse_args()
    meshlm = os.path.join(ROOT, "build", "meshlm")
    qs = []
    with open(os.path.join(ROOT, "bench", "chat_questions.tsv"), encoding="utf-8") as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                f3 = line.rstrip("\n").split("\t")
                qs.append((f3[0], re.compile(f3[1], re.I), f3[2] if len(f3) > 2 else None))
    print(f"{len(qs)} questions, -n {a.n}, model {a.model or 'the default'}")
    print("| setting | profile | right | loops |")
    print("|---|---|---|---|")
    for name, flags in SETTINGS:
        right = loops = 0
        profile = "?"
        for q, pat, last in qs:
            ans, stop, profile = ask(meshlm, a.model, a.n, flags, q)
            nums = NUMBER.findall(ans)
            ok = bool(pat.search(ans)) and (last is None or not nums or float(nums[-1]) == float(last))
            loop = stop == "length" or bool(LOOP.search(ans))
            right += ok
            loops += loop
            if a.show:
                print(f"  [{name}] {'right' if ok else 'WRONG'}{' LOOP' if loop else ''}: {q} -> "
                      f"{ans[:200]!r}")
        print(f"| {name} | {profile} | {right}/{len(qs)} | {loops} |", flush=True)


if __name__ == "__main__":
    main()
