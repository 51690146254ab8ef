"""tests/server/openai_test.py: `meshlm serve` driven by the official openai Python client.

Starts real servers on models/default (and on the SmolLM2 GGUF when it is there) and checks
chat and completions, streamed and not, against `meshlm generate --json` on the same prompt
(greedy texts, token counts, log-probabilities), seeds, stop strings, max_tokens, usage in
streams, 32 concurrent streams against their results alone, prefix-cache hits against a
--no-prefix-cache server, blocks freed when a client closes a stream, and the client's error
classes; and images, as the client's typed image_url content parts with data: URLs, on a tiny
Llama 3.2 Vision model made by `meshlm synth` (random weights, the real Llama 3 tokenizer)
against `meshlm generate --image`. Expected values come from `meshlm generate` or from the
same server's alone runs; serve --draft-ngram (speculative decoding by prompt lookup) and
serve --draft-model (the model drafting for itself in bf16) under 8 concurrent streams against
the plain server's texts, with their /metrics counters, and a sampled request's seed repeating;
and a tiny Qwen3 model's <think> block as reasoning_content (streamed and not) against
transformers' greedy reply, thinking switched off, and a forced tool call round trip.
Run from the repository root (tests/server/test_openai.sh does); MESHLM names the binary.
Prints "ok - NAME" / "not ok - NAME: DETAILS" and closes with "N passed, N failed".
"""

import atexit
import base64
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request

import openai
from openai import OpenAI
from openai.types.chat import (ChatCompletionContentPartImageParam,
                               ChatCompletionContentPartTextParam,
                               ChatCompletionUserMessageParam)

MESHLM = os.environ.get("MESHLM", "build/meshlm")
MODEL = "models/default"
SMOL = "models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ALIAS = "tiny"
KEY = "sekrit-key"
MAX_SEQ = 1024
TOL = 1e-4

passed = 0
failed = 0
skipped = 0
servers = []


def ok(name):
    global passed
    passed += 1
    print(f"ok - {name}", flush=True)


def not_ok(name, details):
    global failed
    failed += 1
    details = str(details).replace("\n", " ")
    if len(details) > 600:
        details = details[:600] + "..."
    print(f"not ok - {name}: {details}", flush=True)


def check(name, cond, details=""):
    if cond:
        ok(name)
    else:
        not_ok(name, details)
    return bool(cond)


def skip(name, why):
    global skipped
    skipped += 1
    print(f"ok - {name} # SKIP {why}", flush=True)


def run_test(fn, *args):
    """Runs one group of checks; an exception is one failure named after the group."""
    t0 = time.time()
    try:
        fn(*args)
        print(f"# {fn.__name__}: {time.time() - t0:.1f} s", flush=True)
    except Exception as e:  # noqa: BLE001 - any error is a failed check, with its trace
        tb = traceback.format_exc().strip().splitlines()
        dead = [f"{s.cmd} exited {s.proc.returncode}, stderr {s.stderr_tail()!r}"
                for s in servers if s.proc.poll() is not None]
        not_ok(fn.__name__, f"{type(e).__name__}: {e} [{' | '.join(tb[-3:])}]"
               + (f"; {'; '.join(dead)}" if dead else ""))


# ---- servers ----


class Server:
    """A `meshlm serve` child on a free port; stopped at exit."""

    def __init__(self, model, alias, *args, env=None):
        self.alias = alias
        cmd = [MESHLM, "serve", "-m", model, "--port", "0", "--host", "127.0.0.1",
               "--threads", "2", "--alias", alias, *args]
        self.cmd = " ".join(cmd)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.port = None
        self.err = []
        self._line = threading.Event()
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        servers.append(self)

    def _read_out(self):
        for line in self.proc.stdout:
            m = re.match(r"^meshlm serve: listening on http://\S+:(\d+) \(model .*\)$",
                         line.rstrip("\n"))
            if m and self.port is None:
                self.port = int(m.group(1))
                self._line.set()
        self._line.set()

    def _read_err(self):
        for line in self.proc.stderr:
            self.err.append(line)
            del self.err[:-20]

    def wait(self, timeout=60):
        """The port, once the server printed its line; None when it exited or took too long."""
        self._line.wait(timeout)
        return self.port

    def client(self, api_key="none"):
        return OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=api_key,
                      max_retries=0, timeout=60)

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def metric(self, name):
        """NAME's value from /metrics (with or without labels), or None."""
        with urllib.request.urlopen(self.url("/metrics"), timeout=10) as r:
            text = r.read().decode()
        for line in text.splitlines():
            m = re.match(r"^" + re.escape(name) + r"(\{[^}]*\})? (\S+)", line)
            if m:
                return float(m.group(2))
        return None

    def wait_metric(self, name, value, seconds=5.0):
        t_end = time.time() + seconds
        v = self.metric(name)
        while v != value and time.time() < t_end:
            time.sleep(0.1)
            v = self.metric(name)
        return v

    def stderr_tail(self):
        return "".join(self.err)[-400:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@atexit.register
def stop_servers():
    for s in servers:
        try:
            s.stop()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def generate(model, prompt, n, instruct=False, system=None, logprobs=None, images=(),
             env=None):
    """`meshlm generate --json` on PROMPT (with --image for each of IMAGES): its JSON object."""
    cmd = [MESHLM, "generate", "-m", model, "-p", prompt, "-n", str(n), "--json",
           "--threads", "2"]
    if instruct:
        cmd.append("--instruct")
    if system is not None:
        cmd += ["--system", system]
    if logprobs is not None:
        cmd += ["--logprobs", str(logprobs)]
    for im in images:
        cmd += ["--image", im]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... exited {r.returncode}: {r.stderr[-300:]}")
    return json.loads(r.stdout)


def n_prompt_tokens(model, text):
    """The number of tokens `meshlm generate -p TEXT` would prefill (BOS included), counted by
    `meshlm tokenize` (generate would prefill them: slow under ASan)."""
    r = subprocess.run([MESHLM, "tokenize", "-m", model, "--bos", text], capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"meshlm tokenize exited {r.returncode}: {r.stderr[-300:]}")
    return len(r.stdout.split())


def finish_of(gen):
    return "stop" if gen["stop_reason"] == "stop" else "length"


def join_stream(stream):
    """Content of a chat (or text of a completions) stream, its chunks and its usage."""
    parts, chunks, usage = [], [], None
    for ch in stream:
        chunks.append(ch)
        if ch.usage is not None:
            usage = ch.usage
        for c in ch.choices:
            d = getattr(c, "delta", None)
            if d is not None:
                parts.append(d.content or "")
            else:
                parts.append(c.text or "")
    return "".join(parts), chunks, usage


def last_finish(chunks):
    fins = [c.choices[0].finish_reason for c in chunks if c.choices]
    return fins[-1] if fins else None, fins


# ---- the checks ----

main = cli = None
P1 = "The old man looked at the sea and said"
N1 = 16


def test_models():
    ids = [m.id for m in cli.models.list().data]
    check("/v1/models lists the alias", ALIAS in ids, ids)


def test_chat():
    want = generate(MODEL, P1, N1, instruct=True)
    r = cli.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": P1}],
                                    max_tokens=N1, temperature=0)
    got = r.choices[0].message.content
    check("chat: greedy text equals meshlm generate --instruct", got == want["text"],
          f"server {got!r} vs generate {want['text']!r}")
    check("chat: finish_reason", r.choices[0].finish_reason == finish_of(want),
          f"{r.choices[0].finish_reason} vs generate {want['stop_reason']}")
    u = r.usage
    check("chat: usage", u.prompt_tokens == len(want["prompt_ids"]) and
          u.completion_tokens == len(want["generated_ids"]) and
          u.total_tokens == u.prompt_tokens + u.completion_tokens,
          f"{u} vs prompt {len(want['prompt_ids'])}, generated {len(want['generated_ids'])}")
    s = cli.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": P1}],
                                    max_tokens=N1, temperature=0, stream=True,
                                    stream_options={"include_usage": True})
    text, chunks, usage = join_stream(s)
    check("chat stream: greedy text equals meshlm generate --instruct", text == want["text"],
          f"stream {text!r} vs generate {want['text']!r}")
    check("chat stream: first delta has role assistant",
          chunks and chunks[0].choices and chunks[0].choices[0].delta.role == "assistant",
          chunks[:1])
    fin, fins = last_finish(chunks)
    check("chat stream: finish_reason on the last choice chunk only",
          fin == finish_of(want) and all(f is None for f in fins[:-1]), fins)
    check("chat stream: include_usage gives a last chunk with usage and no choices",
          usage is not None and chunks[-1].usage is not None and chunks[-1].choices == [] and
          usage.completion_tokens == len(want["generated_ids"]) and
          usage.prompt_tokens == len(want["prompt_ids"]), chunks[-1] if chunks else None)


def test_completions():
    want = generate(MODEL, P1, N1)
    r = cli.completions.create(model=ALIAS, prompt=P1, max_tokens=N1, temperature=0)
    got = r.choices[0].text
    check("completions: greedy text equals meshlm generate -p", got == want["text"],
          f"server {got!r} vs generate {want['text']!r}")
    check("completions: finish_reason and usage",
          r.choices[0].finish_reason == finish_of(want) and
          r.usage.prompt_tokens == len(want["prompt_ids"]) and
          r.usage.completion_tokens == len(want["generated_ids"]),
          f"{r.choices[0].finish_reason} {r.usage} vs {want['stop_reason']} "
          f"{len(want['prompt_ids'])}/{len(want['generated_ids'])}")
    s = cli.completions.create(model=ALIAS, prompt=P1, max_tokens=N1, temperature=0,
                               stream=True, stream_options={"include_usage": True})
    text, chunks, usage = join_stream(s)
    check("completions stream: greedy text equals meshlm generate -p", text == want["text"],
          f"stream {text!r} vs generate {want['text']!r}")
    fin, fins = last_finish(chunks)
    check("completions stream: finish_reason last, include_usage",
          fin == finish_of(want) and usage is not None and
          usage.completion_tokens == len(want["generated_ids"]), f"{fins} {usage}")


def repeats(text):
    """The most times one 4-word stretch occurs in TEXT."""
    w = text.split()
    grams = [tuple(w[i:i + 4]) for i in range(len(w) - 3)]
    return max((grams.count(g) for g in set(grams)), default=0)


def test_loop_guard():
    # The tiny model's greedy text loops ("the scene of the" again and again). OpenAI's
    # semantics: no guard unless asked; llama-server's dry_multiplier turns it on.
    n = 64
    want = generate(MODEL, P1, n)
    plain = cli.completions.create(model=ALIAS, prompt=P1, max_tokens=n, temperature=0)
    check("loop guard: off unless asked (greedy text equals meshlm generate -p)",
          plain.choices[0].text == want["text"],
          f"server {plain.choices[0].text!r} vs generate {want['text']!r}")
    guarded = cli.completions.create(model=ALIAS, prompt=P1, max_tokens=n, temperature=0,
                                     extra_body={"dry_multiplier": 0.8})
    a, b = repeats(want["text"]), repeats(guarded.choices[0].text)
    check("loop guard: dry_multiplier 0.8 breaks the greedy loop", a >= 4 and b < a,
          f"a 4-word stretch {a} times plain, {b} times guarded: {guarded.choices[0].text!r}")


def test_speculation(draft, how="--draft-ngram"):
    # serve --draft-ngram: 8 concurrent greedy streams give the plain server's texts; the
    # tiny model's loops are what prompt lookup drafts, so /metrics counts accepted drafts.
    # The same with --draft-model (the model drafting for itself in another profile).
    prompts, n = varied_prompts(8), 48
    dcli = draft.client()

    def one(c, i):
        s = c.completions.create(model=ALIAS, prompt=prompts[i], max_tokens=n, temperature=0,
                                 stream=True)
        return join_stream(s)[0]

    plain = [one(cli, i) for i in range(len(prompts))]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as ex:
        spec = list(ex.map(lambda i: one(dcli, i), range(len(prompts))))
    diff = [(i, plain[i], spec[i]) for i in range(len(prompts)) if plain[i] != spec[i]]
    check(f"speculation: 8 concurrent streams under {how} equal the plain server's",
          not diff, f"{len(diff)} differ, e.g. {diff[:1]}")
    drafted = draft.metric("meshlm_draft_tokens_total")
    accepted = draft.metric("meshlm_draft_accepted_tokens_total")
    check(f"speculation ({how}): /metrics counts drafted and accepted tokens",
          drafted and accepted and 0 < accepted <= drafted, f"{drafted} drafted, {accepted} accepted")
    r = dcli.completions.create(model=ALIAS, prompt=prompts[0], max_tokens=n, temperature=0,
                                extra_body={"speculative.n_max": 0})
    check(f"speculation ({how}): a request's speculative.n_max 0 turns it off (same text, "
          "no drafts)",
          r.choices[0].text == plain[0] and
          draft.metric("meshlm_draft_tokens_total") == drafted,
          f"{r.choices[0].text!r}, drafted {draft.metric('meshlm_draft_tokens_total')}")
    if how == "--draft-ngram":
        return

    def sampled(seed):
        return dcli.completions.create(model=ALIAS, prompt=prompts[1], max_tokens=24,
                                       temperature=1.0, seed=seed).choices[0].text

    before = draft.metric("meshlm_draft_tokens_total")
    a, b = sampled(99), sampled(99)
    check(f"speculation ({how}): a sampled request speculates and its seed repeats its text",
          a == b and draft.metric("meshlm_draft_tokens_total") > before, f"{a!r} vs {b!r}")


def test_seed():
    msgs = [{"role": "user", "content": "Write about the river."}]

    def sample(seed):
        r = cli.chat.completions.create(model=ALIAS, messages=msgs, max_tokens=8,
                                        temperature=1.0, seed=seed)
        return r.choices[0].message.content

    a, b = sample(1234), sample(1234)
    check("seed: the same seed repeats a sampled answer", a == b, f"{a!r} vs {b!r}")
    others = [sample(s) for s in (1, 2, 3, 4, 5)]
    check("seed: a different seed differs (one of five)", any(o != a for o in others),
          f"all equal to {a!r}")


def pick_stop(text):
    """A word of TEXT (with its leading space) from its later part, first seen past offset 0."""
    words = text.split()
    for w in words[len(words) // 3:]:
        cand = " " + w
        if text.find(cand) > 0:
            return cand
    return None


def test_stop_and_length():
    text = generate(MODEL, P1, 32)["text"]
    stop = pick_stop(text)
    if stop is None:
        skip("stop: the stop text is not returned", f"no usable word in {text!r}")
    else:
        r = cli.completions.create(model=ALIAS, prompt=P1, max_tokens=32, temperature=0,
                                   stop=[stop])
        exp = text[:text.find(stop)]
        got = r.choices[0].text
        check(f"stop {stop!r}: text up to it, finish_reason stop",
              got == exp and r.choices[0].finish_reason == "stop",
              f"got {got!r} ({r.choices[0].finish_reason}) vs {exp!r}")
        s = cli.completions.create(model=ALIAS, prompt=P1, max_tokens=32, temperature=0,
                                   stop=[stop], stream=True)
        st, chunks, _ = join_stream(s)
        fin, _ = last_finish(chunks)
        check(f"stop {stop!r} in a stream: text up to it, finish_reason stop",
              st == exp and fin == "stop", f"got {st!r} ({fin}) vs {exp!r}")
    wc = generate(MODEL, P1, 32, instruct=True)["text"]
    cstop = pick_stop(wc)
    if cstop is None:
        skip("chat stop: the stop text is not returned", f"no usable word in {wc!r}")
    else:
        r = cli.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": P1}],
                                        max_tokens=32, temperature=0, stop=cstop)
        exp = wc[:wc.find(cstop)]
        check(f"chat stop {cstop!r}: text up to it, finish_reason stop",
              r.choices[0].message.content == exp and r.choices[0].finish_reason == "stop",
              f"got {r.choices[0].message.content!r} ({r.choices[0].finish_reason}) vs {exp!r}")
    r = cli.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "Go on."}],
                                    max_tokens=7, temperature=0, extra_body={"ignore_eos": True})
    check("max_tokens 7: finish_reason length, completion_tokens 7",
          r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 7,
          f"{r.choices[0].finish_reason} {r.usage}")


def close(a, b):
    return abs(a - b) <= TOL


def test_logprobs():
    n = 8
    want = generate(MODEL, P1, n, instruct=True, logprobs=5)
    r = cli.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": P1}],
                                    max_tokens=n, temperature=0, logprobs=True, top_logprobs=5)
    content = r.choices[0].logprobs.content if r.choices[0].logprobs else None
    check("chat logprobs: one entry per generated token",
          content is not None and len(content) == len(want["generated_ids"]),
          f"{None if content is None else len(content)} vs {len(want['generated_ids'])}")
    content = content or []
    bad = []
    for i, (c, w) in enumerate(zip(content, want["logprobs"])):
        tops = [t.logprob for t in c.top_logprobs]
        wtops = [t[1] for t in w["top"]]
        if not close(c.logprob, w["logprob"]) or len(tops) != 5 or \
                not all(close(a, b) for a, b in zip(tops, wtops)):
            bad.append((i, c.logprob, w["logprob"], tops, wtops))
    check("chat logprobs: logprob and top_logprobs match meshlm generate --logprobs 5 (1e-4)",
          content and not bad, bad[:2])
    check("chat logprobs: greedy token is the top entry",
          content and all(c.top_logprobs and c.token == c.top_logprobs[0].token and
                          close(c.logprob, c.top_logprobs[0].logprob) for c in content),
          [(c.token, c.logprob, c.top_logprobs[:1]) for c in content[:3]])
    joined = b"".join(bytes(c.bytes or []) for c in content)
    check("chat logprobs: the tokens' bytes join to the content",
          joined == (r.choices[0].message.content or "").encode(),
          f"{joined!r} vs {r.choices[0].message.content!r}")

    want = generate(MODEL, P1, n, logprobs=5)
    r = cli.completions.create(model=ALIAS, prompt=P1, max_tokens=n, temperature=0, logprobs=5)
    lp = r.choices[0].logprobs
    check("completions logprobs: tokens, token_logprobs, top_logprobs, text_offset",
          lp is not None and len(lp.tokens or []) == len(want["generated_ids"]) and
          len(lp.token_logprobs or []) == len(lp.tokens) and
          len(lp.top_logprobs or []) == len(lp.tokens) and
          len(lp.text_offset or []) == len(lp.tokens), lp)
    if lp is None or not lp.tokens:
        return
    bad = []
    for i, (t, top, w) in enumerate(zip(lp.token_logprobs, lp.top_logprobs, want["logprobs"])):
        vals = sorted(top.values(), reverse=True)
        wtops = [x[1] for x in w["top"]]
        # Two ids that decode to the same text share one key: each value must be one of ours.
        if not close(t, w["logprob"]) or not vals or \
                not all(any(close(v, x) for x in wtops) for v in vals) or \
                (len(vals) == 5 and not all(close(a, b) for a, b in zip(vals, wtops))):
            bad.append((i, t, w["logprob"], vals, wtops))
    check("completions logprobs: match meshlm generate --logprobs 5 (1e-4)", not bad, bad[:2])
    check("completions logprobs: greedy token's logprob is the top one",
          all(top and close(t, max(top.values())) for t, top in
              zip(lp.token_logprobs, lp.top_logprobs)), lp.token_logprobs[:3])
    offs = lp.text_offset
    check("completions logprobs: text_offset advances by each token's length",
          all(offs[i + 1] - offs[i] == len(lp.tokens[i]) for i in range(len(offs) - 1)) and
          "".join(lp.tokens) == r.choices[0].text, f"{offs} {lp.tokens}")


def varied_prompts(n):
    """N different lines of the novel the tiny model was trained on (its answers to made-up
    prompts hardly differ), or numbered sentences when the text is not there."""
    path = "tests/data/text/frankenstein.txt"
    lines = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            lines = [ln.strip() for ln in f if len(ln.strip()) > 40]
        lines = lines[100::37]
    lines = list(dict.fromkeys(lines))[:n]
    while len(lines) < n:
        lines.append(f"Chapter {len(lines)}: the house by the river, and what was in it")
    return lines


def test_concurrent():
    prompts = varied_prompts(32)
    n = 12

    def one(i):
        # Even ones chat, odd ones completions: both endpoints share the batch.
        if i % 2 == 0:
            s = cli.chat.completions.create(model=ALIAS,
                                            messages=[{"role": "user", "content": prompts[i]}],
                                            max_tokens=n, temperature=0, stream=True)
        else:
            s = cli.completions.create(model=ALIAS, prompt=prompts[i], max_tokens=n,
                                       temperature=0, stream=True)
        return join_stream(s)[0]

    alone = [one(i) for i in range(len(prompts))]
    peak, done = [0.0], threading.Event()

    def watch():
        while not done.is_set():
            v = main.metric("meshlm_running_sequences")
            peak[0] = max(peak[0], v or 0.0)
            time.sleep(0.01)

    w = threading.Thread(target=watch, daemon=True)
    w.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as ex:
            together = list(ex.map(one, range(len(prompts))))
    finally:
        done.set()
        w.join()
    diff = [(i, alone[i], together[i]) for i in range(len(prompts)) if alone[i] != together[i]]
    check("32 concurrent streams each equal their result alone", not diff,
          f"{len(diff)} differ, e.g. {diff[:1]}")
    check("32 concurrent streams: the alone texts are not all the same", len(set(alone)) > 1,
          alone[:2])
    check("32 concurrent streams ran batched (meshlm_running_sequences peaked above 1)",
          peak[0] > 1, f"peak {peak[0]}")


def prefix_request(c, system, user):
    return c.chat.completions.create(model=ALIAS, max_tokens=12, temperature=0,
                                     messages=[{"role": "system", "content": system},
                                               {"role": "user", "content": user}])


def cached_of(r):
    d = r.usage.prompt_tokens_details
    return d.cached_tokens if d is not None else None


def test_prefix_cache(nocache):
    system = ("You are the keeper of a lighthouse on a northern island. " * 12 +
              f"Today is day {os.getpid()}.")
    hits0 = main.metric("meshlm_prefix_cache_hit_tokens_total")
    r1 = prefix_request(cli, system, "What did you see last night?")
    r2 = prefix_request(cli, system, "What did you see last night?")
    r3 = prefix_request(cli, system, "Where is the boat?")
    hits1 = main.metric("meshlm_prefix_cache_hit_tokens_total")
    c2, c3 = cached_of(r2), cached_of(r3)
    check("prefix cache: the repeated request has cached_tokens > 0 (and < prompt_tokens)",
          c2 is not None and 0 < c2 < r2.usage.prompt_tokens,
          f"cached {c2} of {r2.usage.prompt_tokens}; first had {cached_of(r1)}")
    check("prefix cache: a request sharing the system prompt has cached_tokens > 0",
          c3 is not None and 0 < c3 < r3.usage.prompt_tokens,
          f"cached {c3} of {r3.usage.prompt_tokens}")
    check("prefix cache: meshlm_prefix_cache_hit_tokens_total grows by the cached tokens",
          hits0 is not None and hits1 is not None and c2 and c3 and hits1 - hits0 >= c2 + c3,
          f"{hits0} -> {hits1}, cached {c2} + {c3}")
    t1, t2, t3 = (r.choices[0].message.content for r in (r1, r2, r3))
    check("prefix cache: the cached run's output equals the first", t1 == t2, f"{t1!r} vs {t2!r}")
    if nocache is None:
        not_ok("prefix cache: equal to --no-prefix-cache", "that server did not start")
        return
    nc = nocache.client()
    n1 = prefix_request(nc, system, "What did you see last night?")
    n2 = prefix_request(nc, system, "What did you see last night?")
    n3 = prefix_request(nc, system, "Where is the boat?")
    check("prefix cache: outputs equal a --no-prefix-cache server's",
          (t1, t3) == (n1.choices[0].message.content, n3.choices[0].message.content),
          f"{(t1, t3)} vs {(n1.choices[0].message.content, n3.choices[0].message.content)}")
    check("--no-prefix-cache: cached_tokens is 0", cached_of(n2) in (0, None), cached_of(n2))


def test_close_mid_stream():
    s = cli.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "Talk."}],
                                    max_tokens=800, temperature=0, stream=True,
                                    extra_body={"ignore_eos": True})
    got = 0
    for _ in s:
        got += 1
        if got == 3:
            break
    used = main.metric("meshlm_kv_blocks_used")
    s.close()
    check("closed stream: blocks were in use while it ran", used is not None and used > 0, used)
    after = main.wait_metric("meshlm_kv_blocks_used", 0.0, 5.0)
    check("closed stream: meshlm_kv_blocks_used back to 0 within 5 s", after == 0.0, after)


def test_errors(keyed):
    msgs = [{"role": "user", "content": "hi"}]
    try:
        cli.chat.completions.create(model=ALIAS, messages=msgs, extra_body={"max_tokens": "ten"})
        not_ok("wrong type: BadRequestError", "no error")
    except openai.BadRequestError as e:
        param = (e.body or {}).get("param") if isinstance(e.body, dict) else None
        check("wrong type: BadRequestError with param max_tokens", param == "max_tokens",
              f"body {e.body}")
    long = "the quick brown fox jumps over the lazy dog. " * 200
    try:
        cli.completions.create(model=ALIAS, prompt=long, max_tokens=4)
        not_ok("over-long prompt: BadRequestError", "no error")
    except openai.BadRequestError as e:
        n = n_prompt_tokens(MODEL, long)
        msg = str(e.body.get("message") if isinstance(e.body, dict) else e.message)
        check(f"over-long prompt: BadRequestError naming {n} and {MAX_SEQ}",
              re.search(rf"(?<!\d){n}(?!\d)", msg) and re.search(rf"(?<!\d){MAX_SEQ}(?!\d)", msg),
              msg)
    try:
        cli.chat.completions.create(model="no-such-model", messages=msgs, max_tokens=2)
        not_ok("unknown model: NotFoundError", "no error")
    except openai.NotFoundError as e:
        code = e.body.get("code") if isinstance(e.body, dict) else None
        check("unknown model: NotFoundError, code model_not_found", code == "model_not_found",
              e.body)
    if keyed is None:
        not_ok("wrong key: AuthenticationError", "the --api-key server did not start")
        return
    try:
        keyed.client(api_key="wrong-" + KEY).chat.completions.create(
            model=ALIAS, messages=msgs, max_tokens=2)
        not_ok("wrong key: AuthenticationError", "no error")
    except openai.AuthenticationError:
        ok("wrong key: AuthenticationError")
    r = keyed.client(api_key=KEY).chat.completions.create(model=ALIAS, messages=msgs,
                                                          max_tokens=2, temperature=0)
    check("right key: an answer", r.choices[0].message.content is not None, r)


def test_smollm2(smol):
    prompt = "Say hello."
    want = generate(SMOL, prompt, 64, instruct=True)
    c = smol.client()
    r = c.chat.completions.create(model="smol", messages=[{"role": "user", "content": prompt}],
                                  max_tokens=64, temperature=0)
    got = r.choices[0].message.content
    check("smollm2 chat: greedy text equals meshlm generate --instruct", got == want["text"],
          f"server {got!r} vs generate {want['text']!r}")
    n_gen = len(want["generated_ids"])
    check(f"smollm2 chat: finish_reason {finish_of(want)}, completion_tokens {n_gen}",
          r.choices[0].finish_reason == finish_of(want) and
          r.usage.completion_tokens in ((n_gen, n_gen + 1) if want["stop_reason"] == "stop"
                                        else (n_gen,)),
          f"{r.choices[0].finish_reason} {r.usage}")
    s = c.chat.completions.create(model="smol", messages=[{"role": "user", "content": prompt}],
                                  max_tokens=64, temperature=0, stream=True,
                                  stream_options={"include_usage": True})
    text, chunks, usage = join_stream(s)
    fin, _ = last_finish(chunks)
    check("smollm2 chat stream: equal text and finish_reason",
          text == want["text"] and fin == finish_of(want) and usage is not None,
          f"{text!r} ({fin}) vs {want['text']!r}")
    system = "You are a helpful assistant who answers in one short sentence."
    want = generate(SMOL, "What is the capital of France?", 32, instruct=True, system=system)
    r = c.chat.completions.create(model="smol", max_tokens=32, temperature=0,
                                  messages=[{"role": "system", "content": system},
                                            {"role": "user",
                                             "content": "What is the capital of France?"}])
    check("smollm2 chat with a system message equals meshlm generate --system",
          r.choices[0].message.content == want["text"],
          f"{r.choices[0].message.content!r} vs {want['text']!r}")


# ---- reasoning (Qwen3's <think> blocks) ----

THINK = "tests/data/qwen/chat/think_model"


def join_reasoning_stream(stream):
    """reasoning_content and content of a chat stream, joined, and the finish_reason."""
    reasoning, content, fin = [], [], None
    for ch in stream:
        for c in ch.choices:
            d = c.delta
            r = getattr(d, "reasoning_content", None)
            if r is None and d.model_extra:
                r = d.model_extra.get("reasoning_content")
            if r:
                reasoning.append(r)
            if d.content:
                content.append(d.content)
            fin = c.finish_reason or fin
    return "".join(reasoning), "".join(content), fin


def message_reasoning(m):
    r = getattr(m, "reasoning_content", None)
    return r if r is not None else (m.model_extra or {}).get("reasoning_content")


def test_reasoning(think):
    """A tiny Qwen3 model whose greedy reply (transformers', tests/data/qwen/chat/think_model/
    expected.json) opens with a <think> block: the reply's text between <think> and </think>
    comes back as reasoning_content, what follows as content, streamed the same; with
    chat_template_kwargs enable_thinking false the prompt closes an empty block and the
    reply is all content; a call forced by tool_choice required round-trips."""
    with open(os.path.join(THINK, "expected.json"), encoding="utf-8") as f:
        want = json.load(f)
    text = want["on"]["text"]
    head, _, content = text.partition("</think>")
    reasoning = head[len("<think>"):]
    c = think.client()
    msgs = [{"role": "user", "content": want["user"]}]
    r = c.chat.completions.create(model="think", messages=msgs, max_tokens=16, temperature=0)
    m = r.choices[0].message
    check("qwen3 reasoning: reasoning_content is the text inside <think>...</think> of "
          "transformers' greedy reply, content what follows",
          message_reasoning(m) == reasoning and m.content == (content or None),
          f"{message_reasoning(m)!r} / {m.content!r} vs {text!r}")
    check("qwen3 reasoning: completion_tokens and finish_reason as transformers' reply",
          r.usage.completion_tokens == len(want["on"]["ids"]) and
          r.choices[0].finish_reason == "stop", f"{r.usage} {r.choices[0].finish_reason}")
    s = c.chat.completions.create(model="think", messages=msgs, max_tokens=16, temperature=0,
                                  stream=True)
    sr, sc, fin = join_reasoning_stream(s)
    check("qwen3 reasoning stream: reasoning_content and content deltas join to the same split",
          sr == reasoning and sc == content and fin == "stop", f"{sr!r} / {sc!r} ({fin})")
    off = c.chat.completions.create(model="think", messages=msgs, max_tokens=16, temperature=0,
                                    extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    mo = off.choices[0].message
    check("qwen3 enable_thinking false: transformers' reply to the closed-block prompt, all "
          "content", mo.content == want["off"]["text"] and message_reasoning(mo) is None,
          f"{mo.content!r} / {message_reasoning(mo)!r} vs {want['off']['text']!r}")
    # the model's previous reply sent back with its reasoning: accepted (the template drops
    # the reasoning of turns before the last query)
    history = msgs + [{"role": "assistant", "content": m.content or "",
                       "reasoning_content": message_reasoning(m)},
                      {"role": "user", "content": "And of Spain?"}]
    r2 = c.chat.completions.create(model="think", messages=history, max_tokens=16, temperature=0)
    check("qwen3 reasoning: a history with reasoning_content is answered",
          r2.choices[0].finish_reason in ("stop", "length"), r2)
    # no arguments: this model repeats its chain inside any string, so a string never ends
    tools = [{"type": "function", "function": {
        "name": "get_time", "description": "The time in UTC",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}}]
    r3 = c.chat.completions.create(model="think", messages=msgs, tools=tools,
                                   tool_choice="required", parallel_tool_calls=False,
                                   max_tokens=400, temperature=0)
    calls = r3.choices[0].message.tool_calls or []
    args_ok = False
    try:
        args_ok = len(calls) >= 1 and all(
            t.function.name == "get_time" and json.loads(t.function.arguments) == {}
            for t in calls)
    except ValueError:
        pass
    check("qwen3 tools: tool_choice required gives valid Hermes calls (<tool_call> an added "
          "token)", r3.choices[0].finish_reason == "tool_calls" and args_ok, r3.choices[0])
    if calls:
        back = msgs + [{"role": "assistant", "content": None,
                        "tool_calls": [t.model_dump() for t in calls]}] + \
            [{"role": "tool", "tool_call_id": t.id, "content": "22 C"} for t in calls]
        r4 = c.chat.completions.create(model="think", messages=back, tools=tools,
                                       tool_choice="none", max_tokens=16, temperature=0)
        check("qwen3 tools: the call's result goes back and is answered without calls",
              not r4.choices[0].message.tool_calls and
              r4.choices[0].finish_reason in ("stop", "length"), r4.choices[0])


# ---- images (Llama 3.2 Vision) ----

VPNG = "tests/data/mllama/images/e_2tile.png"
VJPG = "tests/data/image/jpeg_progressive_120x90.jpg"
VT = "What is in this image?"
VN = 12


def data_url(path, media):
    with open(path, "rb") as f:
        return f"data:{media};base64," + base64.b64encode(f.read()).decode()


def image_part(path, media, detail="auto"):
    return ChatCompletionContentPartImageParam(
        type="image_url", image_url={"url": data_url(path, media), "detail": detail})


def text_part(text):
    return ChatCompletionContentPartTextParam(type="text", text=text)


def bad_image_request(client, model, content, what, naming, param, needle):
    """A user message of CONTENT parts is a BadRequestError whose param is PARAM and whose
    message holds NEEDLE."""
    try:
        client.chat.completions.create(model=model, max_tokens=2,
                                       messages=[{"role": "user", "content": content}])
        not_ok(f"{what} is a BadRequestError", "no error")
    except openai.BadRequestError as e:
        body = e.body if isinstance(e.body, dict) else {}
        check(f"{what} is a BadRequestError naming {naming}",
              body.get("param") == param and needle in str(body.get("message")), body)


def test_vision(vis, vmodel, venv):
    c = vis.client()
    # the image first: the CLI puts images first when the prompt has no <|image|> marker
    want = generate(vmodel, VT, VN, instruct=True, images=[VPNG], env=venv)
    msg = ChatCompletionUserMessageParam(role="user", content=[image_part(VPNG, "image/png", "low"),
                                                               text_part(VT)])
    r = c.chat.completions.create(model="vision", messages=[msg], max_tokens=VN, temperature=0)
    got = r.choices[0].message.content
    check("vision: a typed image_url part (PNG) gets the text of meshlm generate --image",
          got and got == want["text"], f"server {got!r} vs generate {want['text']!r}")
    check("vision: usage.prompt_tokens equals generate's (the image token counts one)",
          r.usage.prompt_tokens == len(want["prompt_ids"]) and
          r.usage.completion_tokens == len(want["generated_ids"]),
          f"{r.usage} vs prompt {len(want['prompt_ids'])}, generated {len(want['generated_ids'])}")
    s = c.chat.completions.create(model="vision", messages=[msg], max_tokens=VN, temperature=0,
                                  stream=True, stream_options={"include_usage": True})
    text, chunks, usage = join_stream(s)
    check("vision stream: the deltas join to the same text, usage prompt_tokens equal",
          text == want["text"] and usage is not None and
          usage.prompt_tokens == len(want["prompt_ids"]),
          f"stream {text!r} ({usage}) vs generate {want['text']!r}")
    # the text first, then a JPEG: the CLI with the marker after the text
    want = generate(vmodel, VT + "<|image|>", VN, instruct=True, images=[VJPG], env=venv)
    r = c.chat.completions.create(
        model="vision", max_tokens=VN, temperature=0,
        messages=[{"role": "user", "content": [text_part(VT), image_part(VJPG, "image/jpeg")]}])
    check("vision: text then a JPEG equals meshlm generate -p 'TEXT<|image|>'",
          r.choices[0].message.content == want["text"] and
          r.usage.prompt_tokens == len(want["prompt_ids"]),
          f"{r.choices[0].message.content!r} ({r.usage.prompt_tokens}) vs {want['text']!r} "
          f"({len(want['prompt_ids'])})")
    https = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    bad_image_request(c, "vision", [text_part(VT), https], "vision: an https URL",
                      "the part's url", "messages[0].content[1].image_url.url", "data:")
    bad_image_request(c, "vision", [image_part(VPNG, "image/png"),
                                    image_part(VJPG, "image/jpeg")],
                      "vision: two images over --max-images 1", "the second",
                      "messages[0].content[1]", "--max-images")
    bad_image_request(cli, ALIAS, [image_part(VJPG, "image/jpeg"), text_part(VT)],
                      "vision: an image to a text-only model", "the part",
                      "messages[0].content[0]", "takes no images")


T0 = time.time()


def main_():
    global main, cli
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        print(f"SKIP: {MODEL} is missing (run from the repository root)")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    if not os.access(MESHLM, os.X_OK):
        not_ok("meshlm binary", f"{MESHLM} is not an executable (set MESHLM)")
        print(f"{passed} passed, {failed} failed")
        return 1
    main = Server(MODEL, ALIAS, "--max-seq-len", str(MAX_SEQ))
    nocache = Server(MODEL, ALIAS, "--max-seq-len", str(MAX_SEQ), "--no-prefix-cache")
    keyed = Server(MODEL, ALIAS, "--api-key", KEY, "--max-seq-len", "256")
    draft = Server(MODEL, ALIAS, "--max-seq-len", str(MAX_SEQ), "--draft-ngram")
    drafter = Server(MODEL, ALIAS, "--max-seq-len", str(MAX_SEQ), "--draft-model", MODEL,
                     "--draft-optimizations", "bf16")
    smol = Server(SMOL, "smol", "--max-seq-len", "1024", "--max-batch", "4") \
        if os.path.exists(SMOL) else None
    ttmp = tempfile.TemporaryDirectory(prefix="meshlm-think-")
    atexit.register(ttmp.cleanup)
    think = Server(THINK, "think", "--max-seq-len", "1024", "--max-batch", "4",
                   env=dict(os.environ, MESHLM_CACHE=os.path.join(ttmp.name, "cache")))
    # a tiny Llama 3.2 Vision model, its weight cache in the same temporary folder
    vtmp = tempfile.TemporaryDirectory(prefix="meshlm-openai-")
    atexit.register(vtmp.cleanup)
    vmodel = os.path.join(vtmp.name, "vision")
    venv = dict(os.environ, MESHLM_CACHE=os.path.join(vtmp.name, "cache"))
    synth = subprocess.run([MESHLM, "synth", "--preset", "tiny-mllama-llama3", "--out", vmodel],
                           capture_output=True, text=True, timeout=120,
                           env=dict(venv, MESHLM_TEST_PRESETS="1"))
    vis = Server(vmodel, "vision", "--max-seq-len", "512", env=venv) \
        if synth.returncode == 0 else None
    if not main.wait():
        not_ok("serve starts", f"no 'listening on' line from {main.cmd}; stderr "
               f"{main.stderr_tail()!r}")
        print(f"{passed} passed, {failed} failed")
        return 1
    ok(f"serve starts and prints its port ({main.port})")
    print(f"# servers up: {time.time() - T0:.1f} s", flush=True)
    cli = main.client()
    nocache = nocache if nocache.wait() else None
    keyed = keyed if keyed.wait() else None
    for t in (test_models, test_chat, test_completions, test_loop_guard, test_seed,
              test_stop_and_length,
              test_logprobs, test_concurrent, test_close_mid_stream):
        run_test(t)
    run_test(test_prefix_cache, nocache)
    run_test(test_errors, keyed)
    if draft.wait():
        run_test(test_speculation, draft)
    else:
        not_ok("speculation: serve --draft-ngram starts", draft.stderr_tail())
    if drafter.wait():
        run_test(test_speculation, drafter, "--draft-model")
    else:
        not_ok("speculation: serve --draft-model starts", drafter.stderr_tail())
    if vis is None:
        not_ok("vision: meshlm synth --preset tiny-mllama-llama3", synth.stderr[-300:])
    elif not vis.wait():
        not_ok("vision: serve starts", vis.stderr_tail())
    else:
        run_test(test_vision, vis, vmodel, venv)
    if think.wait():
        run_test(test_reasoning, think)
    else:
        not_ok("qwen3 think model: serve starts", think.stderr_tail())
    if smol is None:
        skip("smollm2 chat checks", f"{SMOL} is missing (scripts/setup.sh fetches it)")
    elif not smol.wait():
        not_ok("smollm2 serve starts", smol.stderr_tail())
    else:
        run_test(test_smollm2, smol)
    print(f"# tests done: {time.time() - T0:.1f} s", flush=True)
    if skipped:
        print(f"{passed} passed, {failed} failed, {skipped} skipped")
    else:
        print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main_())
