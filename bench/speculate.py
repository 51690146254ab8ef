#!/usr/bin/env python3
"""bench/speculate.py: speculative decoding against plain decoding, in one run.

For each prompt, `meshlm generate --instruct --json` greedy with and without speculation on the
same model and profile: whether the ids and logprobs are equal (they must be), decode tok/s of
each and their ratio, and the drafted and accepted tokens. The drafts come from prompt lookup
(--draft-ngram), or with --draft-model from a draft model (e.g. SmolLM2's Q4_1 file in `native`
drafting for the same file in `f32`). The prompts are six chat questions and two whose answers
copy their input (where prompt lookup pays).

    bench/speculate.py [-m MODEL] [--optimizations P] [-n N] [--draft-max K] [--runs R]
                       [--draft-model PATH [--draft-optimizations P] [--draft-p-min P]]

The better of R runs (default 3) of each is kept: the machines are shared and noisy.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = [
    ("chat", "What is the capital of France?"),
    ("chat", "Write a short poem about the sea."),
    ("chat", "Explain how a bicycle works."),
    ("chat", "Give me three tips for learning a new language."),
    ("chat", "What is photosynthesis?"),
    ("chat", "Tell me a story about a dragon."),
    ("copy", "Repeat this text exactly, word for word: The quick brown fox jumps over the lazy "
             "dog. It was the best of times, it was the worst of times, it was the age of "
             "wisdom, it was the age of foolishness, it was the epoch of belief, it was the "
             "epoch of incredulity."),
    ("copy", "Fix the spelling and repeat the rest unchanged: Teh committee met on Tuesday to "
             "discus the budjet for the new library, the repairs to the town hall roof, and the "
             "plan for the summer festival in the park by the river."),
]


def run(meshlm, a, prompt, draft):
    cmd = [meshlm, "generate", "--instruct", "--json", "--logprobs", "1", "-n", str(a.n),
           "-p", prompt] + (["-m", a.model] if a.model else []) + \
          (["--optimizations", a.optimizations] if a.optimizations else []) + \
          (["--draft-max", str(a.draft_max)] if draft else []) + \
          ([] if not draft else ["--draft-ngram"] if not a.draft_model else
           ["--draft-model", a.draft_model, "--draft-p-min", str(a.draft_p_min)] +
           (["--draft-optimizations", a.draft_optimizations] if a.draft_optimizations else []))
    best = None
    for _ in range(a.runs):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode:
            sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
        d = json.loads(r.stdout)
        if best is None or d["stats"]["decode_tok_s"] > best["stats"]["decode_tok_s"]:
            best = d
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model")
    ap.add_argument("--optimizations")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--draft-max", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--draft-model")
    ap.add_argument("--draft-optimizations")
    ap.add_argument("--draft-p-min", type=float, default=0.0)
    a = ap.parse_args()
    meshlm = os.path.join(ROOT, "build", "meshlm")
    print(f"model {a.model or 'the default'}, profile {a.optimizations or 'its default'}, "
          f"-n {a.n}, --draft-max {a.draft_max}, best of {a.runs}")
    if a.draft_model:
        print(f"draft model {a.draft_model}, profile {a.draft_optimizations or 'its default'}, "
              f"--draft-p-min {a.draft_p_min}")
    method = "draft model" if a.draft_model else "prompt lookup"
    print(f"| prompt | kind | tokens | same ids and logprobs | plain tok/s | {method} tok/s "
          "| speed-up | drafted | accepted |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, (kind, p) in enumerate(PROMPTS):
        x, y = run(meshlm, a, p, False), run(meshlm, a, p, True)
        same = x["generated_ids"] == y["generated_ids"] and x["logprobs"] == y["logprobs"]
        sx, sy = x["stats"]["decode_tok_s"], y["stats"]["decode_tok_s"]
        print(f"| {i + 1} | {kind} | {len(x['generated_ids'])} | {'yes' if same else '**NO**'} | "
              f"{sx:.1f} | {sy:.1f} | {sy / sx:.2f}x | {y['stats']['draft_tokens']} | "
              f"{y['stats']['draft_accepted']} |", flush=True)


if __name__ == "__main__":
    main()
