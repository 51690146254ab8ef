"""tests/server/structured_test.py: structured output, tool calls and n on `meshlm serve`, driven
by the official openai Python client, validity judged by Python's json and jsonschema.

Usage: structured_test.py DEFAULT_PORT [SMOL_PORT] (tests/server/test_structured.sh starts the
servers: models/default as "tiny", a babble model with the real Llama 3 tokenizer and chat
format; SmolLM2-135M-Instruct as "smol", a real instruct model with ChatML tool calls; no
SMOL_PORT: its checks say SKIP). Checks:
  - response_format json_schema (the 13 schemas of tests/data/grammar/schemas.json, whose
    strings are bounded so that even babble ends its documents) and json_object, on chat and
    completions, greedy and sampled, on both models: every reply json.loads, validates with
    jsonschema.Draft202012Validator, and finishes with "stop";
  - greedy constrained (and seeded sampled) replies equal alone and in a batch of 8;
  - schema keywords outside the subset: a 400 naming the keyword and the schema's field;
  - tools: tool_choice required / named / none / auto, parallel_tool_calls, streamed and not,
    and the round trip of a call and its result back to the model;
  - n: choice k equals the request made with seed S+k, indices, streamed n, several prompts,
    n out of range, and usage summed over the choices.
Expected values are never hard-coded: validity comes from json and jsonschema, equality is
meshlm against itself under other batch compositions. Prints "ok - NAME" / "not ok - NAME:
DETAILS" and closes with "N passed, N failed[, N skipped]".
"""

import concurrent.futures
import json
import os
import re
import sys
import threading
import time
import traceback
import urllib.request

import jsonschema
import openai
from openai import OpenAI

SCHEMAS_PATH = "tests/data/grammar/schemas.json"
MAX_TOKENS = 400  # room for every bounded document of SCHEMAS_PATH

passed = 0
failed = 0
skipped = 0
out_lock = threading.Lock()


def ok(name):
    global passed
    with out_lock:
        passed += 1
        print(f"ok - {name}", flush=True)


def not_ok(name, details):
    global failed
    details = str(details).replace("\n", "\\n")
    if len(details) > 900:
        details = details[:900] + "..."
    with out_lock:
        failed += 1
        print(f"not ok - {name}: {details}", flush=True)


def check(name, cond, details=""):
    if cond:
        ok(name)
    else:
        not_ok(name, details)
    return bool(cond)


def skip(name, why):
    global skipped
    with out_lock:
        skipped += 1
        print(f"ok - {name} # SKIP {why}", flush=True)


def run_test(fn, *args):
    """Runs one group of checks; an exception is one failure named after the group."""
    label = fn.__name__ + "".join(f" {a.alias}" for a in args[:1] if isinstance(a, Server))
    t0 = time.time()
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - any error is a failed check, with its trace
        tb = traceback.format_exc().strip().splitlines()
        not_ok(label, f"{type(e).__name__}: {e} [{' | '.join(tb[-3:])}]")
    print(f"# {label}: {time.time() - t0:.1f} s", flush=True)


class Server:
    """A running `meshlm serve` (started by the shell script) and a client for it."""

    def __init__(self, port, alias):
        self.port = port
        self.alias = alias
        self.cli = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                          timeout=300)

    def chat(self, **kw):
        return self.cli.chat.completions.create(model=self.alias, **kw)

    def comp(self, **kw):
        return self.cli.completions.create(model=self.alias, **kw)

    def metric(self, name):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as r:
            text = r.read().decode()
        for line in text.splitlines():
            m = re.match(r"^" + re.escape(name) + r"(\{[^}]*\})? (\S+)", line)
            if m:
                return float(m.group(2))
        return None


def pmap(fn, items, workers=8):
    """FN over ITEMS on WORKERS threads, results in order (exceptions re-raised)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(fn, items))


def json_schema_format(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def invalid(schema, text):
    """None when TEXT is a JSON document valid under SCHEMA, else why not."""
    try:
        doc = json.loads(text)
    except (TypeError, ValueError) as e:
        return f"not JSON ({e})"
    errs = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=str)
    return f"invalid: {errs[0].message}" if errs else None


NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
NUMBER_PREFIX = re.compile(r"-?((0|[1-9][0-9]*)(\.[0-9]*)?([eE][+-]?[0-9]*)?)?")
STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
STRING_PREFIX = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{0,4})?)*')


def object_prefix(text):
    """Whether TEXT is a prefix of a JSON object (what json_object allows a reply cut by
    max_tokens to be): a small JSON scanner that accepts running out of text anywhere."""
    i, n = 0, len(text)
    stack = []           # open containers, '{' or '['
    want = "object"      # object (the first value), value, key, key_or_end, value_or_end,
                         # colon, comma_or_end, done
    while i < n:
        ch = text[i]
        if ch in " \t\n\r":
            i += 1
            continue
        if want == "done":
            return False
        closer = "}" if stack and stack[-1] == "{" else "]"
        if want in ("key_or_end", "value_or_end", "comma_or_end") and ch == closer:
            stack.pop()
            i += 1
            want = "comma_or_end" if stack else "done"
            continue
        if want == "comma_or_end":
            if ch != ",":
                return False
            want = "key" if stack[-1] == "{" else "value"
            i += 1
            continue
        if want == "colon":
            if ch != ":":
                return False
            want = "value"
            i += 1
            continue
        if want == "object" and ch != "{":
            return False
        if want in ("key", "key_or_end") or ch == '"':
            if ch != '"':
                return False
            m = STRING.match(text, i)
            if not m:  # an unterminated string is fine at the end of the text only
                return STRING_PREFIX.match(text, i).end() == n
            i = m.end()
            want = "colon" if want in ("key", "key_or_end") else "comma_or_end"
            continue
        if ch in "{[":
            stack.append(ch)
            want = "key_or_end" if ch == "{" else "value_or_end"
            i += 1
            continue
        for lit in ("true", "false", "null"):
            if text.startswith(lit, i) or lit.startswith(text[i:]):
                if not text.startswith(lit, i):
                    return True
                i += len(lit)
                break
        else:
            if NUMBER_PREFIX.match(text, i).end() == n:  # a number that may go on
                return True
            m = NUMBER.match(text, i)
            if not m:
                return False
            i = m.end()
        want = "comma_or_end"
    return True


SCHEMAS = {}


# ---- structured output ----


def chat_prompt(name, schema):
    return [{"role": "system", "content": "You answer with JSON only."},
            {"role": "user", "content": f"Write an example '{name}' document following this JSON "
                                        f"Schema: {json.dumps(schema)}"}]


def comp_prompt(name, schema):
    return f"JSON Schema: {json.dumps(schema)}\nAn example '{name}' document of this schema:\n"


def structured_request(srv, job):
    """JOB: (group, endpoint, schema name or None for json_object, temperature, seed).
    Returns (group, name, text, finish_reason)."""
    group, endpoint, name, temp, seed = job
    schema = SCHEMAS[name] if name else None
    fmt = json_schema_format(name, schema) if name else {"type": "json_object"}
    kw = dict(max_tokens=MAX_TOKENS, temperature=temp)
    if seed is not None:
        kw["seed"] = seed
    if endpoint == "chat":
        msgs = chat_prompt(name, schema) if name else [
            {"role": "user", "content": "Describe a cat as a JSON object."}]
        r = srv.chat(messages=msgs, response_format=fmt, **kw)
        return group, name, r.choices[0].message.content, r.choices[0].finish_reason
    prompt = comp_prompt(name, schema) if name else "A cat, described as a JSON object:\n"
    r = srv.comp(prompt=prompt, extra_body={"response_format": fmt}, **kw)
    return group, name, r.choices[0].text, r.choices[0].finish_reason


def test_structured(srv, totals):
    names = list(SCHEMAS)
    jobs = [("chat json_schema greedy", "chat", n, 0.0, None) for n in names]
    jobs += [("completions json_schema greedy", "completions", n, 0.0, None) for n in names[::3]]
    jobs += [("chat json_schema sampled", "chat", n, 0.8 + 0.05 * i, 100 + i)
             for i, n in enumerate(names[1::3] + names[2::4])]
    jobs += [("completions json_schema sampled", "completions", n, 1.0, 200 + i)
             for i, n in enumerate(names[2::3])]
    # any JSON object: unbounded, so a reply may run to max_tokens (babble always does): then
    # it must be a prefix of an object; a real model also ends some
    jobs += [("json_object", "chat", None, 0.0, None), ("json_object", "completions", None, 0.9, 1)]
    if srv.alias == "smol":
        jobs += [("json_object", "completions", None, 0.0, None),
                 ("json_object", "chat", None, 0.9, 1)]
    results = pmap(lambda j: structured_request(srv, j), jobs)
    groups = {}
    n_objects = n_ended = 0
    for job, (group, name, text, finish) in zip(jobs, results):
        g = groups.setdefault(group, [0, []])
        g[0] += 1
        if name is None:
            n_objects += 1
            n_ended += finish == "stop"
            why = invalid({"type": "object"}, text) if finish == "stop" else \
                None if object_prefix(text) else f"finish_reason {finish}, not an object's prefix"
        else:
            why = invalid(SCHEMAS[name], text)
            if why is None and finish != "stop":
                why = f"finish_reason {finish}"
        if why:
            g[1].append(f"{job[1]} {name or 'json_object'} t={job[3]} seed={job[4]}: {why}; "
                        f"{text!r:.200}")
    for group, (n, bad) in groups.items():
        if group == "json_object":
            check(f"{srv.alias} json_object: {n - len(bad)}/{n} replies are a JSON object "
                  f"({n_ended} ended, finish stop) or its prefix (finish length)", not bad,
                  " | ".join(bad))
        else:
            check(f"{srv.alias} {group}: {n - len(bad)}/{n} replies parse, validate, finish stop",
                  not bad, " | ".join(bad))
    if srv.alias == "smol":
        check("smol json_object: the real model ends at least one object", n_ended > 0,
              f"{n_ended} of {n_objects}")
    totals[0] += len(jobs)
    totals[1] += len(jobs) - sum(len(b) for _, b in groups.values())


def test_batch_invariance(srv):
    """Greedy constrained requests (and seeded sampled ones) alone, then all together."""
    def req(spec):
        kind, name, temp, seed, extra = spec
        kw = dict(max_tokens=MAX_TOKENS, temperature=temp)
        if seed is not None:
            kw["seed"] = seed
        if kind == "chat":
            fmt = {"response_format": json_schema_format(name, SCHEMAS[name])} if name else {}
            msgs = chat_prompt(name, SCHEMAS[name]) if name else [
                {"role": "user", "content": "Tell me a long story about a lighthouse."}]
            kw.update(extra)
            r = srv.chat(messages=msgs, **fmt, **kw)
            return r.choices[0].message.content
        r = srv.comp(prompt=comp_prompt(name, SCHEMAS[name]),
                     extra_body={"response_format": json_schema_format(name, SCHEMAS[name])},
                     **kw)
        return r.choices[0].text

    specs = [("chat", "nested", 0.0, None, {}),
             ("completions", "refs", 0.0, None, {}),
             ("chat", "array_of_objects", 0.0, None, {}),
             ("chat", "person", 0.0, None, {}),
             ("chat", "enums", 1.0, 7, {}),
             ("completions", "numbers", 0.9, 8, {}),
             ("chat", "optional", 1.0, 9, {}),
             ("chat", None, 1.0, 10, {"max_tokens": 160, "extra_body": {"ignore_eos": True}})]
    alone = [req(s) for s in specs]
    steps0 = srv.metric("meshlm_steps_total")
    toks0 = srv.metric("meshlm_scheduler_generated_tokens_total")
    barrier = threading.Barrier(len(specs))

    def together_one(s):
        barrier.wait()
        return req(s)

    together = pmap(together_one, specs, workers=len(specs))
    steps = srv.metric("meshlm_steps_total") - steps0
    toks = srv.metric("meshlm_scheduler_generated_tokens_total") - toks0
    check(f"{srv.alias} batch: the 8 concurrent requests ran batched ({toks:.0f} tokens in "
          f"{steps:.0f} steps)", toks > steps, f"{toks} tokens, {steps} steps")
    for i in range(4):
        check(f"{srv.alias} batch: greedy json_schema {specs[i][0]} '{specs[i][1]}' alone equals "
              "it among 7 others", alone[i] == together[i],
              f"alone {alone[i]!r:.300} vs together {together[i]!r:.300}")
    bad = [f"{s[0]} {s[1]} seed {s[3]}: {a!r:.150} vs {t!r:.150}"
           for s, a, t in zip(specs[4:], alone[4:], together[4:]) if a != t]
    check(f"{srv.alias} batch: seeded sampled requests alone equal them in the batch", not bad,
          " | ".join(bad))
    bad = [f"{s[1]}: {invalid(SCHEMAS[s[1]], t)}" for s, t in zip(specs[:7], together[:7])
           if invalid(SCHEMAS[s[1]], t)]
    check(f"{srv.alias} batch: the batched constrained replies validate", not bad, bad)


def expect_400(name, param, needle, fn):
    try:
        fn()
        not_ok(name, "no error")
    except openai.BadRequestError as e:
        body = e.body if isinstance(e.body, dict) else {}
        body = body.get("error", body)  # the client gives the error object itself
        check(name, body.get("param") == param and needle in str(body.get("message")),
              f"status {e.status_code}, body {e.body}")


def test_unsupported_schema(srv):
    msgs = [{"role": "user", "content": "hi"}]
    param = "response_format.json_schema.schema"
    pattern = {"type": "string", "pattern": "^a"}
    minimum = {"type": "object", "properties": {"x": {"type": "number", "minimum": 3}}}
    expect_400(f"{srv.alias} chat: schema with 'pattern' is a 400 naming it and {param}", param,
               "pattern", lambda: srv.chat(messages=msgs, max_tokens=4,
                                           response_format=json_schema_format("p", pattern)))
    expect_400(f"{srv.alias} chat: schema with 'minimum' on a number is a 400 naming it", param, "minimum",
               lambda: srv.chat(messages=msgs, max_tokens=4,
                                response_format=json_schema_format("m", minimum)))
    expect_400(f"{srv.alias} completions: schema with 'pattern' is a 400 naming it", param,
               "pattern", lambda: srv.comp(prompt="hi", max_tokens=4, extra_body={
                   "response_format": json_schema_format("p", pattern)}))
    expect_400(f"{srv.alias} completions: schema with 'minimum' on a number is a 400 naming it", param,
               "minimum", lambda: srv.comp(prompt="hi", max_tokens=4, extra_body={
                   "response_format": json_schema_format("m", minimum)}))
    bad_tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "^a"}}}}}
    expect_400(f"{srv.alias} tools: required call to parameters with 'pattern' is a 400 naming "
               "it and tools", "tools", "pattern",
               lambda: srv.chat(messages=msgs, max_tokens=4, tools=[bad_tool],
                                tool_choice="required"))


# ---- tools ----

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 20},
                                  "unit": {"enum": ["c", "f"]}},
                   "required": ["city"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The current time in a time zone.",
    "parameters": {"type": "object",
                   "properties": {"tz": {"type": "string", "maxLength": 20}},
                   "required": ["tz"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def bad_calls(calls, names=None):
    """Why CALLS ((name, arguments) pairs) are not calls of declared functions (NAMES, default
    all) with valid arguments; None when they are."""
    if not calls:
        return "no calls"
    for name, args in calls:
        if name not in (names or PARAMS):
            return f"call of {name!r}, not of {names or list(PARAMS)}"
        why = invalid(PARAMS[name], args)
        if why:
            return f"{name} arguments {args!r}: {why}"
    return None


def message_calls(msg):
    return [(c.function.name, c.function.arguments) for c in (msg.tool_calls or [])]


def join_chat_stream(stream):
    """A chat stream's pieces per choice index: texts, tool calls [(id, name, arguments)],
    finish reasons, every chunk's choice indices, the usage, and what broke OpenAI's shape of
    tool-call deltas."""
    texts, calls, finishes, indices, shape = {}, {}, {}, [], []
    usage = None
    for ch in stream:
        if ch.usage is not None:
            usage = ch.usage
        for c in ch.choices:
            i = c.index
            indices.append(i)
            d = c.delta
            texts[i] = texts.get(i, "") + (d.content or "")
            for tc in d.tool_calls or []:
                mine = calls.setdefault(i, {})
                fn = tc.function
                if tc.index not in mine:
                    if not tc.id or not (fn and fn.name):
                        shape.append(f"choice {i} call {tc.index}: first delta without id/name")
                    mine[tc.index] = [tc.id, fn and fn.name, (fn and fn.arguments) or ""]
                else:
                    if tc.id or (fn and fn.name):
                        shape.append(f"choice {i} call {tc.index}: id/name repeated")
                    mine[tc.index][2] += (fn and fn.arguments) or ""
            if c.finish_reason is not None:
                if i in finishes:
                    shape.append(f"choice {i}: two finish_reasons")
                finishes[i] = c.finish_reason
    calls = {i: [tuple(v) for _, v in sorted(m.items())] for i, m in calls.items()}
    return texts, calls, finishes, indices, usage, shape


def history(msgs, call_triples, content=None):
    """MSGS + the assistant's calls ((id, name, arguments)) + a tool result for each."""
    out = list(msgs) + [{"role": "assistant", "content": content, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
        for i, n, a in call_triples]}]
    for i, n, _ in call_triples:
        result = {"temperature": 18, "unit": "c", "sky": "clear"} if n == "get_weather" \
            else {"time": "14:05"}
        out.append({"role": "tool", "tool_call_id": i, "content": json.dumps(result)})
    return out


def test_tools(srv):
    a = srv.alias
    # required, not streamed
    r = srv.chat(messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=200,
                 temperature=0)
    c = r.choices[0]
    calls = message_calls(c.message)
    check(f"{a} tools required: finish_reason tool_calls, calls of declared functions with "
          "valid arguments", c.finish_reason == "tool_calls" and bad_calls(calls) is None,
          f"{c.finish_reason}, {bad_calls(calls)}: {c.message}")
    ids = [t.id for t in c.message.tool_calls or []]
    check(f"{a} tools required: each call has a distinct id and type function",
          ids and all(isinstance(i, str) and i for i in ids) and len(set(ids)) == len(ids) and
          all(t.type == "function" for t in c.message.tool_calls), c.message.tool_calls)
    # the round trip: the result goes back, the model answers in text
    if calls:
        triples = [(t.id, t.function.name, t.function.arguments) for t in c.message.tool_calls]
        msgs = history(ASK, triples, c.message.content)
        r2 = srv.chat(messages=msgs, tools=TOOLS, tool_choice="none", max_tokens=40,
                      temperature=0)
        c2 = r2.choices[0]
        check(f"{a} tools round trip: with the tool result and tool_choice none, a text answer",
              isinstance(c2.message.content, str) and c2.message.content.strip() and
              not c2.message.tool_calls and c2.finish_reason in ("stop", "length"),
              f"{c2.finish_reason}: {c2.message}")
        r3 = srv.chat(messages=msgs, tools=TOOLS, tool_choice="auto", max_tokens=40,
                      temperature=0)
        c3 = r3.choices[0]
        calls3 = message_calls(c3.message)
        auto_ok = (c3.finish_reason == "tool_calls" and bad_calls(calls3) is None) or \
            (c3.finish_reason in ("stop", "length") and isinstance(c3.message.content, str) and
             not calls3)
        check(f"{a} tools round trip: tool_choice auto gives text or valid calls", auto_ok,
              f"{c3.finish_reason}: {c3.message}")
    # required, streamed
    s = srv.chat(messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=200,
                 temperature=0, stream=True)
    texts, scalls, fins, indices, _, shape = join_chat_stream(s)
    st = scalls.get(0, [])
    check(f"{a} tools stream: every chunk has choice index 0", indices and set(indices) == {0},
          sorted(set(indices)))
    check(f"{a} tools stream: a delta with id and name, then arguments, per call", not shape and st,
          shape or "no tool_calls deltas")
    check(f"{a} tools stream: the assembled calls parse and validate, finish_reason tool_calls",
          fins.get(0) == "tool_calls" and bad_calls([(n, x) for _, n, x in st]) is None,
          f"{fins}, {bad_calls([(n, x) for _, n, x in st])}: {st}")
    check(f"{a} tools stream: the greedy calls equal the non-streamed ones",
          [(n, x) for _, n, x in st] == calls, f"stream {st} vs {calls}")
    if st:
        s2 = srv.chat(messages=history(ASK, st, texts.get(0) or None), tools=TOOLS,
                      tool_choice="none", max_tokens=40, temperature=0, stream=True)
        t2, c2, f2, i2, _, _ = join_chat_stream(s2)
        check(f"{a} tools stream round trip: the answer to the result streams as text",
              t2.get(0, "").strip() and not c2 and f2.get(0) in ("stop", "length") and
              set(i2) == {0}, f"{f2} {t2} {c2}")
    # a named function
    for tc in (TIME, WEATHER):
        name = tc["function"]["name"]
        r = srv.chat(messages=ASK, tools=TOOLS, max_tokens=200, temperature=0,
                     tool_choice={"type": "function", "function": {"name": name}})
        c = r.choices[0]
        calls = message_calls(c.message)
        check(f"{a} tool_choice named {name}: exactly one call, of {name}, valid arguments",
              c.finish_reason == "tool_calls" and len(calls) == 1 and
              bad_calls(calls, [name]) is None, f"{c.finish_reason}: {calls}")


PROMPTS = ["What is the weather in Paris right now?",
           "Is it raining in Tokyo? And what time is it there?",
           "I am flying to Oslo tomorrow, how cold is it?",
           "Tell me the time in Europe/Berlin.",
           "Weather for Lima in fahrenheit please."]


def test_tools_sampled(srv):
    """Sampled tool_choice required calls over several prompts; parallel_tool_calls false."""
    a = srv.alias

    def one(k):
        r = srv.chat(messages=[{"role": "user", "content": PROMPTS[k % 5]}], tools=TOOLS,
                     tool_choice="required", max_tokens=300, temperature=1.0, seed=40 + k)
        return r.choices[0]

    got = pmap(one, range(10))
    bad = [f"{PROMPTS[k % 5]!r} seed {40 + k}: {c.finish_reason}, "
           f"{bad_calls(message_calls(c.message))}: {c.message}"
           for k, c in enumerate(got)
           if c.finish_reason != "tool_calls" or bad_calls(message_calls(c.message))]
    n_calls = sum(len(c.message.tool_calls or []) for c in got)
    check(f"{a} tools required, sampled, 5 prompts x 2 seeds: every reply is calls of declared "
          f"functions with valid arguments ({n_calls} calls)", not bad, " | ".join(bad))

    def single(k):
        r = srv.chat(messages=[{"role": "user", "content": PROMPTS[1]}], tools=TOOLS,
                     tool_choice="required", parallel_tool_calls=False, max_tokens=300,
                     temperature=1.0, seed=60 + k)
        return r.choices[0]

    got = pmap(single, range(4))
    bad = [f"seed {60 + k}: {c.finish_reason}, {message_calls(c.message)}"
           for k, c in enumerate(got)
           if c.finish_reason != "tool_calls" or len(c.message.tool_calls or []) != 1 or
           bad_calls(message_calls(c.message))]
    check(f"{a} parallel_tool_calls false, required: exactly one valid call (4 seeds)", not bad,
          " | ".join(bad))
    r = srv.chat(messages=[{"role": "user", "content": PROMPTS[1]}], tools=TOOLS,
                 tool_choice="required", max_tokens=300, temperature=1.0, seed=80, n=2)
    bad = [f"choice {c.index}: {c.finish_reason} {bad_calls(message_calls(c.message))}"
           for c in r.choices
           if c.finish_reason != "tool_calls" or bad_calls(message_calls(c.message))]
    check(f"{a} tools required with n=2: both choices are valid calls, indices 0 and 1",
          [c.index for c in r.choices] == [0, 1] and not bad, bad or [c.index for c in r.choices])


# ---- n ----


def test_n(srv):
    a = srv.alias
    msgs = [{"role": "user", "content": "Tell me about the sea."}]
    S = 1234
    r = srv.chat(messages=msgs, n=3, seed=S, temperature=1.0, max_tokens=12)
    singles = pmap(lambda k: srv.chat(messages=msgs, n=1, seed=S + k, temperature=1.0,
                                      max_tokens=12), range(3))
    got = [c.message.content for c in r.choices]
    want = [x.choices[0].message.content for x in singles]
    check(f"{a} n=3: indices 0, 1, 2", [c.index for c in r.choices] == [0, 1, 2],
          [c.index for c in r.choices])
    check(f"{a} n=3 seed {S}: choice k equals n=1 with seed {S}+k", got == want,
          f"n=3 {got} vs n=1 {want}")
    check(f"{a} n=3 sampled: the choices are not all equal", len(set(got)) > 1, got)
    u = r.usage
    check(f"{a} n=3 usage: completion_tokens is the sum over the choices",
          u.completion_tokens == sum(x.usage.completion_tokens for x in singles) and
          u.total_tokens == u.prompt_tokens + u.completion_tokens,
          f"{u} vs n=1 completion_tokens {[x.usage.completion_tokens for x in singles]}")
    check(f"{a} n=3 usage: prompt_tokens counts the prompt once (as OpenAI and vLLM)",
          u.prompt_tokens == singles[0].usage.prompt_tokens,
          f"n=3 prompt_tokens {u.prompt_tokens} vs n=1 {singles[0].usage.prompt_tokens}")

    # the other choices take the first one's prompt blocks from the prefix cache
    long_msgs = [{"role": "user", "content": "Tell me about the sea, the tides, the reefs and "
                  "the ships. " * 12 + f"(n check {S})"}]
    before = srv.metric("meshlm_prefix_cache_hit_tokens_total") or 0
    h = srv.chat(messages=long_msgs, n=4, seed=S, temperature=1.0, max_tokens=4)
    hits = (srv.metric("meshlm_prefix_cache_hit_tokens_total") or 0) - before
    need = 3 * (h.usage.prompt_tokens - 64)
    check(f"{a} n=4: choices 1..3 take the prompt's blocks from the prefix cache",
          hits >= need, f"{hits} hit tokens for a {h.usage.prompt_tokens}-token prompt, "
          f"want >= {need}")

    g = srv.chat(messages=msgs, n=4, temperature=0, max_tokens=16)
    g1 = srv.chat(messages=msgs, n=1, temperature=0, max_tokens=16)
    texts = [c.message.content for c in g.choices]
    check(f"{a} n=4 greedy: four equal choices, equal to n=1, indices 0..3",
          len(texts) == 4 and set(texts) == {g1.choices[0].message.content} and
          [c.index for c in g.choices] == [0, 1, 2, 3],
          f"{texts} vs {g1.choices[0].message.content!r}")

    S2 = 99
    ns = srv.chat(messages=msgs, n=2, seed=S2, temperature=1.0, max_tokens=12)
    s = srv.chat(messages=msgs, n=2, seed=S2, temperature=1.0, max_tokens=12, stream=True,
                 stream_options={"include_usage": True})
    texts, calls, fins, indices, usage, shape = join_chat_stream(s)
    check(f"{a} n=2 stream: chunks carry index 0 and 1, each with its finish_reason",
          set(indices) == {0, 1} and set(fins) == {0, 1} and not shape,
          f"{sorted(set(indices))} {fins} {shape}")
    want = [c.message.content for c in ns.choices]
    check(f"{a} n=2 stream: the assembled texts equal the non-streamed n=2 with the same seed",
          [texts.get(0), texts.get(1)] == want, f"stream {texts} vs {want}")
    check(f"{a} n=2 stream: include_usage equals the non-streamed usage",
          usage is not None and usage.completion_tokens == ns.usage.completion_tokens and
          usage.prompt_tokens == ns.usage.prompt_tokens, f"{usage} vs {ns.usage}")

    expect_400(f"{a} n=9 is a 400 naming n", "n", "n",
               lambda: srv.chat(messages=msgs, n=9, max_tokens=4))
    expect_400(f"{a} n=0 is a 400 naming n", "n", "n",
               lambda: srv.chat(messages=msgs, n=0, max_tokens=4))

    prompts = ["Once upon a time", "The capital of France"]
    c = srv.comp(prompt=prompts, n=2, seed=S, temperature=1.0, max_tokens=8)
    alone = pmap(lambda pk: srv.comp(prompt=prompts[pk[0]], n=1, seed=S + pk[1], temperature=1.0,
                                     max_tokens=8), [(0, 0), (0, 1), (1, 0), (1, 1)])
    check(f"{a} completions 2 prompts x n=2: 4 choices, indices 0..3",
          [x.index for x in c.choices] == [0, 1, 2, 3], [x.index for x in c.choices])
    got = [x.text for x in c.choices]
    want = [x.choices[0].text for x in alone]
    check(f"{a} completions 2 prompts x n=2: choice 2p+k equals prompt p alone with seed {S}+k "
          "(choice 2 is prompt 1 with seed S)", got == want, f"{got} vs {want}")
    check(f"{a} completions 2 prompts x n=2 usage: completion_tokens is the sum",
          c.usage.completion_tokens == sum(x.usage.completion_tokens for x in alone),
          f"{c.usage} vs {[x.usage.completion_tokens for x in alone]}")
    check(f"{a} completions 2 prompts x n=2 usage: prompt_tokens counts each prompt once",
          c.usage.prompt_tokens == alone[0].usage.prompt_tokens + alone[2].usage.prompt_tokens,
          f"{c.usage.prompt_tokens} vs {alone[0].usage.prompt_tokens} + "
          f"{alone[2].usage.prompt_tokens}")

    # n with a schema: one matcher per choice
    name = "nested"
    fmt = json_schema_format(name, SCHEMAS[name])
    r = srv.chat(messages=chat_prompt(name, SCHEMAS[name]), n=3, seed=S, temperature=1.0,
                 max_tokens=MAX_TOKENS, response_format=fmt)
    singles = pmap(lambda k: srv.chat(messages=chat_prompt(name, SCHEMAS[name]), n=1, seed=S + k,
                                      temperature=1.0, max_tokens=MAX_TOKENS,
                                      response_format=fmt), range(3))
    got = [x.message.content for x in r.choices]
    bad = [f"{k}: {x.finish_reason} {invalid(SCHEMAS[name], x.message.content)}"
           for k, x in enumerate(r.choices)
           if x.finish_reason != "stop" or invalid(SCHEMAS[name], x.message.content)]
    check(f"{a} n=3 json_schema: every choice validates and finishes stop", not bad, bad)
    check(f"{a} n=3 json_schema seed {S}: choice k equals n=1 with seed {S}+k",
          got == [x.choices[0].message.content for x in singles],
          f"{got} vs {[x.choices[0].message.content for x in singles]}")


def main():
    global SCHEMAS
    t0 = time.time()
    with open(SCHEMAS_PATH) as f:
        SCHEMAS = json.load(f)
    tiny = Server(int(sys.argv[1]), "tiny")
    smol = Server(int(sys.argv[2]), "smol") if len(sys.argv) > 2 and sys.argv[2] else None
    totals = [0, 0]
    for srv in (tiny, smol):
        if srv is None:
            skip("smol: structured output, batch invariance, tools and n on SmolLM2",
                 "models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf is missing (scripts/setup.sh)")
            continue
        run_test(test_structured, srv, totals)
        run_test(test_batch_invariance, srv)
        run_test(test_tools, srv)
    print(f"# structured output: {totals[1]} of {totals[0]} replies valid", flush=True)
    run_test(test_unsupported_schema, tiny)
    if smol is not None:
        run_test(test_tools_sampled, smol)
    run_test(test_n, smol or tiny)
    print(f"# structured_test.py: {time.time() - t0:.1f} s", flush=True)
    tail = f", {skipped} skipped" if skipped else ""
    print(f"{passed} passed, {failed} failed{tail}")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
