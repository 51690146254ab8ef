/* tests/unit/test_server_tools.c: OpenAI tool calls (tools/server/toolcall.c) against
 * tests/data/tools/tool_prompts.json (tests/fixtures/make_tool_prompt_fixtures.py): every
 * dialog with tools, rendered and encoded with the real tokenizer of its chat format, gives
 * the ids of the chat template's text as transformers renders it and tiktoken / tokenizers
 * tokenize it; replies parse to the calls the Python reference parsers find; JSON is written
 * as Python's json.dumps writes it. Plus the render errors, the streaming hold-back, the call
 * schema and the call ids. Requests are built by hand, not by srv_request_parse. */
#include <jansson.h>
#include <stdint.h>

#include "../tools/server/toolcall.h"
#include "harness.h"
#include "meshlm.h"

#define FIXTURE "tests/data/tools/tool_prompts.json"

static json_t *g_doc; /* the fixture */

static const char *str(const json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

// ---- a request by hand ----

/* R with the fixture's MESSAGES (OpenAI-style) and TOOLS (borrowed), as the request parser
 * would fill it: null content is "", arguments parsed into ARGS. */
static void build_request(srv_request *r, const json_t *messages, json_t *tools) {
    memset(r, 0, sizeof *r);
    r->kind = SRV_CHAT;
    r->n_messages = (int)json_array_size(messages);
    r->messages = calloc((size_t)r->n_messages, sizeof *r->messages);
    for (int i = 0; i < r->n_messages; i++) {
        const json_t *m = json_array_get(messages, (size_t)i);
        srv_message *d = &r->messages[i];
        d->role = dup_or_empty(str(m, "role"));
        d->content = dup_or_empty(str(m, "content"));
        if (str(m, "tool_call_id")) d->tool_call_id = strdup(str(m, "tool_call_id"));
        if (str(m, "reasoning_content")) d->reasoning = strdup(str(m, "reasoning_content"));
        const json_t *calls = json_object_get(m, "tool_calls");
        d->n_tool_calls = (int)json_array_size(calls);
        d->tool_calls =
            d->n_tool_calls ? calloc((size_t)d->n_tool_calls, sizeof *d->tool_calls) : NULL;
        for (int k = 0; k < d->n_tool_calls; k++) {
            const json_t *c = json_array_get(calls, (size_t)k);
            const json_t *f = json_object_get(c, "function");
            srv_tool_call *t = &d->tool_calls[k];
            t->id = dup_or_empty(str(c, "id"));
            t->name = dup_or_empty(str(f, "name"));
            t->arguments = dup_or_empty(str(f, "arguments"));
            t->args = json_loads(t->arguments, 0, NULL);
        }
    }
    r->tools = json_incref(tools); /* srv_request_deinit drops it */
    r->n_tools = (int)json_array_size(tools);
    r->tool_choice = SRV_TOOLS_AUTO;
    r->parallel_tool_calls = 1;
}

// ---- prompts ----

static uint64_t fnv64(const int32_t *ids, int64_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++)
            h = (h ^ (((uint32_t)ids[i] >> (8 * b)) & 0xFF)) * 0x100000001b3ull;
    return h;
}

/* Prints where the decoded ids first differ from the template's text. */
static void explain(const mlm_tokenizer *tok, const mlm_tokens *ids, const char *want) {
    char *got = NULL;
    size_t n = 0;
    mlm_error err;
    if (mlm_tokenizer_decode(tok, ids->ids, ids->n, &got, &n, &err) != MLM_OK) return;
    size_t i = 0;
    while (i < n && want[i] && got[i] == want[i])
        i++;
    size_t from = i > 60 ? i - 60 : 0;
    printf("    decoded text differs at byte %zu:\n    got  ...%.*s\n    want ...%.*s\n", i,
           (int)(n - from < 120 ? n - from : 120), got + from, 120, want + from);
    free(got);
}

/* IDS against fixture prompt P's count and FNV-1a-64 of the template's ids (WHAT names the
 * format or template), explaining a difference. */
static void check_ids(const mlm_tokenizer *tok, const mlm_tokens *ids, const json_t *p,
                      const char *what) {
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv64(ids->ids, ids->n));
    int same = ids->n == json_integer_value(json_object_get(p, "n_ids")) &&
               strcmp(hash, str(p, "ids_fnv64")) == 0;
    CHECKF(same, "%s/%s: %lld ids (fnv %s), the template's text has %lld (fnv %s)", what,
           str(p, "name"), (long long)ids->n, hash,
           (long long)json_integer_value(json_object_get(p, "n_ids")), str(p, "ids_fnv64"));
    if (!same) explain(tok, ids, str(p, "text"));
}

/* Renders, encodes and compares every fixture prompt of FORMAT with TOK; the count checked. */
static int check_prompts(const mlm_tokenizer *tok, const char *format) {
    const char *have = mlm_tokenizer_chat_format(tok);
    CHECKF(have && strcmp(have, format) == 0, "tokenizer format %s, want %s", have ? have : "none",
           format);
    json_t *prompts = json_object_get(g_doc, "prompts"), *p;
    size_t i;
    int n = 0;
    json_array_foreach(prompts, i, p) {
        if (strcmp(str(p, "format"), format) != 0) continue;
        n++;
        srv_request r;
        build_request(&r, json_object_get(p, "messages"), json_object_get(p, "tools"));
        srv_tool_prompt tp;
        srv_error e = {0};
        int ok = srv_tools_render(&r, format, mlm_tokenizer_chat_system(tok), &tp, &e);
        CHECKF(ok, "%s/%s: %s", format, str(p, "name"), e.message);
        if (ok) {
            mlm_tokens ids;
            mlm_tokens_init(&ids);
            mlm_error err;
            CHECK_OK(mlm_tokenizer_encode_chat(tok, tp.msgs, tp.n_msgs, 1, &ids, &err), &err);
            check_ids(tok, &ids, p, format);
            mlm_tokens_deinit(&ids);
            srv_tool_prompt_deinit(&tp);
        }
        srv_request_deinit(&r);
    }
    return n;
}

static mlm_tokenizer *load(const char *path) {
    mlm_tokenizer *tok = NULL;
    mlm_error err;
    CHECK_OK(mlm_tokenizer_load(path, &tok, &err), &err);
    return tok;
}

TEST(llama3_prompts_match_template) {
    mlm_tokenizer *tok = load("tests/data/tokenizer/llama3");
    if (tok) CHECK(check_prompts(tok, "llama3") >= 10);
    mlm_tokenizer_free(tok);
}

TEST(chatml_newline_prompts_match_template) {
    mlm_tokenizer *tok = load("tests/data/tokenizer/smollm2");
    if (tok) CHECK(check_prompts(tok, "chatml-newline") >= 10);
    mlm_tokenizer_free(tok);
}

TEST(phi4_chatml_prompts_match_template) {
    mlm_tokenizer *tok = load("tests/data/tokenizer/phi4");
    if (tok) CHECK(check_prompts(tok, "chatml") >= 8);
    mlm_tokenizer_free(tok);
}

/* Qwen2.5's and Qwen3's own chat templates (tests/data/qwen/chat/prompts.json, made by
 * tests/fixtures/make_qwen_chat_fixtures.py with transformers' apply_chat_template): every
 * dialog, with tools or without, thinking on, off or the template's default, reasoning in
 * the content or in reasoning_content, through the server's srv_chat_encode, gives the ids
 * of the template's text. */
static int check_qwen(const char *template) {
    char dir[96];
    snprintf(dir, sizeof dir, "tests/data/qwen/chat/%s", template);
    mlm_tokenizer *tok = load(dir);
    if (!tok) return 0;
    CHECK(strcmp(mlm_tokenizer_chat_format(tok), "chatml-newline") == 0);
    CHECK(mlm_tokenizer_chat_thinks(tok) == (strcmp(template, "qwen3") == 0));
    json_error_t jerr;
    json_t *doc = json_load_file("tests/data/qwen/chat/prompts.json", 0, &jerr);
    CHECKF(doc, "prompts.json: %s", jerr.text);
    json_t *p;
    size_t i;
    int n = 0;
    json_array_foreach(doc, i, p) {
        if (strcmp(str(p, "template"), template) != 0) continue;
        n++;
        srv_request r;
        json_t *tools = json_object_get(p, "tools");
        build_request(&r, json_object_get(p, "messages"), json_is_array(tools) ? tools : NULL);
        const json_t *think = json_object_get(p, "enable_thinking");
        r.thinking = json_is_boolean(think) ? (json_is_true(think) ? MLM_THINK_ON : MLM_THINK_OFF)
                                            : MLM_THINK_DEFAULT;
        mlm_tokens ids;
        mlm_tokens_init(&ids);
        srv_error e = {0};
        int ok;
        if (json_is_true(json_object_get(p, "add_generation_prompt"))) {
            ok = srv_chat_encode(tok, "qwen", &r, &ids, &e);
        } else { /* the library's call: the server always asks for a generation prompt */
            mlm_chat_message m[16];
            const char *reasoning[16];
            mlm_error err;
            for (int k = 0; k < r.n_messages && k < 16; k++) {
                m[k] = (mlm_chat_message){r.messages[k].role, r.messages[k].content};
                reasoning[k] = r.messages[k].reasoning;
            }
            mlm_chat_opts o = {0, r.thinking, reasoning};
            ok = r.n_messages <= 16 && !r.tools &&
                 mlm_tokenizer_encode_chat_opts(tok, m, r.n_messages, &o, &ids, &err) == MLM_OK;
        }
        CHECKF(ok, "%s/%s: %s", template, str(p, "name"), e.message);
        check_ids(tok, &ids, p, template);
        mlm_tokens_deinit(&ids);
        srv_request_deinit(&r);
    }
    json_decref(doc);
    mlm_tokenizer_free(tok);
    return n;
}

TEST(qwen25_prompts_match_template) { CHECK(check_qwen("qwen2.5") >= 18); }

TEST(qwen3_prompts_match_template) { CHECK(check_qwen("qwen3") >= 30); }

/* The llama3 messages' text itself, for one dialog, as a readable example of the form. */
TEST(llama3_render_text) {
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                               "\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]",
                               0, NULL);
    json_t *msgs = json_loads(
        "[{\"role\":\"system\",\"content\":\" S \"},{\"role\":\"user\",\"content\":\"Q \"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":"
        "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1.50}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"ok \\\"1\\\"\"}]",
        0, NULL);
    srv_request r;
    build_request(&r, msgs, tools);
    srv_tool_prompt tp;
    srv_error e = {0};
    CHECK(srv_tools_render(&r, "llama3", NULL, &tp, &e) == 1);
    CHECK(tp.n_msgs == 4);
    if (tp.n_msgs == 4) {
        CHECK(strcmp(tp.msgs[0].role, "system") == 0);
        CHECK(strcmp(tp.msgs[0].content, "Environment: ipython\nCutting Knowledge Date: December "
                                         "2023\nToday Date: 26 Jul 2024\n\nS") == 0);
        CHECK(strcmp(tp.msgs[1].role, "user") == 0);
        const char *tail = "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": "
                           "\"f\",\n        \"parameters\": {\n            \"type\": \"object\",\n"
                           "            \"properties\": {}\n        }\n    }\n}\n\nQ";
        size_t lc = strlen(tp.msgs[1].content), lt = strlen(tail);
        CHECKF(lc > lt && strcmp(tp.msgs[1].content + lc - lt, tail) == 0, "'%s'",
               tp.msgs[1].content);
        CHECK(strcmp(tp.msgs[2].content, "{\"name\": \"f\", \"parameters\": {\"x\": 1.5}}") == 0);
        CHECK(strcmp(tp.msgs[3].role, "ipython") == 0);
        CHECK(strcmp(tp.msgs[3].content, "\"ok \\\"1\\\"\"") == 0);
    }
    srv_tool_prompt_deinit(&tp);
    srv_tool_prompt_deinit(&tp); /* twice: a no-op */
    srv_request_deinit(&r);
    json_decref(msgs);
    json_decref(tools);
}

TEST(render_errors) {
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", 0, NULL);
    json_t *only_system = json_loads("[{\"role\":\"system\",\"content\":\"S\"}]", 0, NULL);
    json_t *two_calls = json_loads(
        "[{\"role\":\"user\",\"content\":\"Q\"},{\"role\":\"assistant\",\"content\":\"\","
        "\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},"
        "{\"id\":\"b\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]",
        0, NULL);
    srv_request r;
    srv_tool_prompt tp;
    srv_error e = {0};
    build_request(&r, only_system, tools);
    CHECK(srv_tools_render(&r, "llama3", NULL, &tp, &e) == 0);
    CHECK(e.http == 400 && strcmp(e.param, "messages") == 0);
    CHECK(tp.msgs == NULL && tp.n_msgs == 0);
    /* ChatML takes a dialog of only a system message */
    CHECK(srv_tools_render(&r, "chatml", NULL, &tp, &e) == 1 && tp.n_msgs == 1);
    srv_tool_prompt_deinit(&tp);
    srv_request_deinit(&r);
    build_request(&r, two_calls, tools);
    memset(&e, 0, sizeof e);
    CHECK(srv_tools_render(&r, "llama3", NULL, &tp, &e) == 0);
    CHECKF(e.http == 400 && strcmp(e.param, "messages[1].tool_calls") == 0, "%d %s", e.http,
           e.param);
    CHECK(srv_tools_render(&r, "chatml-newline", NULL, &tp, &e) == 1 && tp.n_msgs == 3);
    if (tp.n_msgs == 3)
        CHECK(strcmp(tp.msgs[2].content, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n"
                                         "</tool_call>\n<tool_call>\n{\"name\": \"f\", "
                                         "\"arguments\": {}}\n</tool_call>") == 0);
    srv_tool_prompt_deinit(&tp);
    memset(&e, 0, sizeof e);
    CHECK(srv_tools_render(&r, "gpt2", NULL, &tp, &e) == 0 && e.http == 400);
    srv_request_deinit(&r);
    json_decref(only_system);
    json_decref(two_calls);
    json_decref(tools);
}

// ---- replies ----

static int is_call_id(const char *id) {
    if (!id || strlen(id) != 29 || strncmp(id, "call_", 5) != 0) return 0;
    for (int i = 5; i < 29; i++)
        if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
              (id[i] >= '0' && id[i] <= '9')))
            return 0;
    return 1;
}

/* A tools array declaring the functions NAMES. */
static json_t *declare(const json_t *names) {
    json_t *tools = json_array(), *n;
    size_t i;
    json_array_foreach(names, i, n) json_array_append_new(
        tools, json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", n));
    return tools;
}

TEST(replies_parse_as_reference) {
    json_t *replies = json_object_get(g_doc, "replies"), *c;
    size_t i;
    uint64_t rng = 42;
    CHECK(json_array_size(replies) >= 20);
    json_array_foreach(replies, i, c) {
        const char *fmt = str(c, "format"), *name = str(c, "name"), *text = str(c, "text");
        json_t *tools = declare(json_object_get(c, "tools"));
        srv_tool_reply t;
        CHECK(srv_tools_parse(tools, fmt, text, strlen(text), &rng, &t) == 1);
        const char *want = str(c, "content");
        CHECKF(want ? t.content && strcmp(t.content, want) == 0 : t.content == NULL,
               "%s/%s: content '%s', want '%s'", fmt, name, t.content ? t.content : "(null)",
               want ? want : "(null)");
        json_t *calls = json_object_get(c, "calls");
        CHECKF(t.n_calls == (int)json_array_size(calls), "%s/%s: %d calls, want %zu", fmt, name,
               t.n_calls, json_array_size(calls));
        for (int k = 0; k < t.n_calls && k < (int)json_array_size(calls); k++) {
            json_t *w = json_array_get(calls, (size_t)k);
            CHECKF(strcmp(t.calls[k].name, str(w, "name")) == 0, "%s/%s: call %d is %s", fmt, name,
                   k, t.calls[k].name);
            CHECKF(strcmp(t.calls[k].arguments, str(w, "arguments")) == 0,
                   "%s/%s: call %d arguments\n    got  %s\n    want %s", fmt, name, k,
                   t.calls[k].arguments, str(w, "arguments"));
            CHECK(json_is_object(t.calls[k].args));
            CHECKF(is_call_id(t.calls[k].id), "%s", t.calls[k].id);
            if (k) CHECK(strcmp(t.calls[k].id, t.calls[k - 1].id) != 0);
        }
        srv_tool_reply_deinit(&t);
        json_decref(tools);
    }
}

TEST(call_ids_follow_the_rng) {
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", 0, NULL);
    const char *text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    uint64_t a = 7, b = 7, c = 8;
    srv_tool_reply ta, tb, tc;
    CHECK(srv_tools_parse(tools, "chatml", text, strlen(text), &a, &ta) == 1);
    CHECK(srv_tools_parse(tools, "chatml", text, strlen(text), &b, &tb) == 1);
    CHECK(srv_tools_parse(tools, "chatml", text, strlen(text), &c, &tc) == 1);
    CHECK(ta.n_calls == 1 && tb.n_calls == 1 && tc.n_calls == 1);
    if (ta.n_calls && tb.n_calls && tc.n_calls) {
        CHECK(strcmp(ta.calls[0].id, tb.calls[0].id) == 0);
        CHECK(strcmp(ta.calls[0].id, tc.calls[0].id) != 0);
        CHECK(a == b && a != 7);
    }
    srv_tool_reply_deinit(&ta);
    srv_tool_reply_deinit(&tb);
    srv_tool_reply_deinit(&tc);
    /* an unknown format has no calls: the reply is content */
    CHECK(srv_tools_parse(tools, "gpt2", text, strlen(text), &a, &ta) == 1);
    CHECK(ta.n_calls == 0 && ta.content && strcmp(ta.content, text) == 0);
    srv_tool_reply_deinit(&ta);
    json_decref(tools);
}

/* mlm_chat_split_reasoning: where a growing reply's reasoning and content lie, and what is
 * held back because it may still become a tag; the split of a finished reply is
 * Python's str.partition around the tags (the server test checks it against transformers'
 * replies), and growing a reply never moves what was settled. */
TEST(reasoning_split) {
    static const struct {
        const char *text;
        int final, has;
        size_t rb, re, cb, settled;
    } cases[] = {
        {"", 0, 0, 0, 0, 0, 0},
        {"", 1, 0, 0, 0, 0, 0},
        {" \n<thi", 0, 0, 0, 0, 0, 0},          /* may still become <think> */
        {" \n<thi", 1, 0, 0, 0, 0, 6},          /* finished: all content */
        {"<think>", 0, 1, 7, 7, 7, 7},
        {"<think>ab</thi", 0, 1, 7, 9, 9, 9},   /* "</thi" may close it */
        {"<think>ab</thi", 1, 1, 7, 14, 14, 14}, /* cut off: all reasoning */
        {"<think>ab</think>\n\nok", 1, 1, 7, 9, 17, 21},
        {"<think>ab</think>", 0, 1, 7, 9, 17, 17},
        {"\n<think>\n</think>x</think>", 1, 1, 8, 9, 17, 26},
        {"Hello <think>", 0, 0, 0, 0, 0, 13},   /* not at the start: content */
        {"<thinking>", 0, 0, 0, 0, 0, 10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mlm_reasoning_split sp;
        mlm_chat_split_reasoning(cases[i].text, strlen(cases[i].text), cases[i].final, &sp);
        CHECKF(sp.has_reasoning == cases[i].has && sp.reasoning_begin == cases[i].rb &&
                   sp.reasoning_end == cases[i].re && sp.content_begin == cases[i].cb &&
                   sp.settled == cases[i].settled,
               "case %zu '%s' (final %d): %d [%zu, %zu) content %zu settled %zu", i,
               cases[i].text, cases[i].final, sp.has_reasoning, sp.reasoning_begin,
               sp.reasoning_end, sp.content_begin, sp.settled);
    }
    const char *reply = "  <think>\nfirst, then </think>\n\nanswer </think> done";
    mlm_reasoning_split end, sp;
    mlm_chat_split_reasoning(reply, strlen(reply), 1, &end);
    for (size_t n = 0; n <= strlen(reply); n++) {
        mlm_chat_split_reasoning(reply, n, 0, &sp);
        CHECKF(sp.settled <= n && (!sp.has_reasoning || (sp.reasoning_begin == end.reasoning_begin &&
                                                         sp.reasoning_end <= end.reasoning_end)),
               "at %zu: settled %zu, reasoning [%zu, %zu)", n, sp.settled, sp.reasoning_begin,
               sp.reasoning_end);
        if (sp.settled > end.reasoning_end) CHECK(sp.content_begin == end.content_begin);
    }
}

TEST(stream_hold_back) {
    static const struct {
        const char *format, *text;
        size_t safe;
    } cases[] = {
        {"llama3", "", 0},
        {"llama3", " \n", 0},
        {"llama3", " {\"name\"", 0},
        {"llama3", "<|python", 0},
        {"llama3", "<|python_tag|>{", 0},
        {"llama3", "<|pi", 4},
        {"llama3", "Hello", 5},
        {"llama3", "\n Hi {", 6},
        {"chatml", "Hello", 5},
        {"chatml", "Hello <", 5},
        {"chatml", "Hello\n<tool", 5},
        {"chatml", "Hello\n<tool_call>\n{", 5},
        {"chatml", "Hello <b>", 9},
        {"chatml", "Hello \u3000\n", 5},
        {"chatml-newline", "\n<tool_call>", 0},
        {"chatml-newline", "a<tool_call>x<", 1},
        {"chatml-newline", "2 < 3", 5},
        {"gpt2", "{", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t got = srv_tools_stream_safe(cases[i].format, cases[i].text, strlen(cases[i].text));
        CHECKF(got == cases[i].safe, "%s '%s': %zu, want %zu", cases[i].format, cases[i].text, got,
               cases[i].safe);
    }
    /* never decreasing as a reply grows */
    const char *reply = "Sure, let me see.  \n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n"
                        "</tool_call>";
    size_t last = 0;
    for (size_t n = 0; n <= strlen(reply); n++) {
        size_t s = srv_tools_stream_safe("chatml-newline", reply, n);
        CHECKF(s >= last && s <= n, "at %zu: %zu after %zu", n, s, last);
        last = s;
    }
    CHECK(last == strlen("Sure, let me see."));
    /* a character still cut short may be whitespace: held back (U+3000 byte by byte) */
    const char *ideo = "Hi\xe3\x80\x80";
    for (size_t n = 2; n <= 5; n++) {
        CHECKF(srv_tools_stream_safe("chatml", ideo, n) == 2, "chatml at %zu", n);
        CHECKF(srv_tools_stream_safe("llama3", ideo + 2, n - 2) == 0, "llama3 at %zu", n);
    }
}

// ---- the call schema ----

TEST(call_schema) {
    srv_request r;
    memset(&r, 0, sizeof r);
    r.tools = json_loads(
        "[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"x\":{\"type\":\"number\"}}}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"b\"}}]",
        0, NULL);
    r.n_tools = 2;
    r.tool_choice = SRV_TOOLS_REQUIRED;
    CHECK(strcmp(srv_tools_args_key("llama3"), "parameters") == 0);
    CHECK(strcmp(srv_tools_args_key("chatml"), "arguments") == 0);
    CHECK(strcmp(srv_tools_args_key("chatml-newline"), "arguments") == 0);
    CHECK(srv_tools_args_key("gpt2") == NULL);
    json_t *s = srv_tools_call_schema(&r, "llama3");
    char *text = s ? json_dumps(s, JSON_COMPACT) : NULL;
    CHECKF(text &&
               strcmp(text, "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"name\":{\"const\":"
                            "\"a\"},\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{"
                            "\"type\":\"number\"}}}},\"required\":[\"name\",\"parameters\"],"
                            "\"additionalProperties\":false},{\"type\":\"object\","
                            "\"properties\":{\"name\":{\"const\":\"b\"},\"parameters\":{\"type\":"
                            "\"object\",\"properties\":{}}},\"required\":[\"name\","
                            "\"parameters\"],\"additionalProperties\":false}]}") == 0,
           "%s", text ? text : "(null)");
    free(text);
    json_decref(s);
    r.tool_choice = SRV_TOOLS_NAMED;
    r.tool_choice_name = strdup("b");
    s = srv_tools_call_schema(&r, "chatml");
    text = s ? json_dumps(s, JSON_COMPACT) : NULL;
    CHECKF(text && strcmp(text, "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"b\"},"
                                "\"arguments\":{\"type\":\"object\",\"properties\":{}}},"
                                "\"required\":[\"name\",\"arguments\"],\"additionalProperties\":"
                                "false}") == 0,
           "%s", text ? text : "(null)");
    free(text);
    json_decref(s);
    free(r.tool_choice_name);
    r.tool_choice_name = strdup("nope");
    CHECK(srv_tools_call_schema(&r, "chatml") == NULL);
    r.tool_choice = SRV_TOOLS_NONE;
    CHECK(srv_tools_call_schema(&r, "llama3") == NULL);
    r.tool_choice = SRV_TOOLS_AUTO;
    s = srv_tools_call_schema(&r, "llama3");
    CHECK(json_array_size(json_object_get(s, "anyOf")) == 2);
    json_decref(s);
    CHECK(srv_tools_declared(r.tools, "a") && srv_tools_declared(r.tools, "b"));
    CHECK(!srv_tools_declared(r.tools, "c") && !srv_tools_declared(NULL, "a"));
    free(r.tool_choice_name);
    json_decref(r.tools);
}

// ---- JSON as Python writes it ----

TEST(json_dumps_as_python) {
    json_t *cases = json_object_get(g_doc, "dumps"), *c;
    size_t i;
    CHECK(json_array_size(cases) >= 2);
    json_array_foreach(cases, i, c) {
        json_t *v = json_object_get(c, "value");
        static const struct {
            const char *key;
            int indent;
            const char *item, *colon;
        } styles[] = {
            {"default", -1, ", ", ": "}, {"indent4", 4, ",", ": "}, {"compact", -1, ",", ":"}};
        for (size_t k = 0; k < 3; k++) {
            char *got = srv_json_dumps(v, styles[k].indent, styles[k].item, styles[k].colon);
            const char *want = str(c, styles[k].key);
            size_t at = 0;
            while (got && want && got[at] && got[at] == want[at])
                at++;
            CHECKF(got && want && strcmp(got, want) == 0,
                   "case %zu %s: differs at %zu: got '%.40s', want '%.40s'", i, styles[k].key, at,
                   got ? got + at : "(null)", want ? want + at : "(null)");
            free(got);
        }
    }
    CHECK(srv_json_dumps(NULL, -1, ",", ":") == NULL);
}

int main(void) {
    json_error_t err;
    g_doc = json_load_file(FIXTURE, 0, &err);
    if (!g_doc) {
        printf("cannot read %s: %s (line %d)\n", FIXTURE, err.text, err.line);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    RUN(llama3_prompts_match_template);
    RUN(chatml_newline_prompts_match_template);
    RUN(phi4_chatml_prompts_match_template);
    RUN(qwen25_prompts_match_template);
    RUN(qwen3_prompts_match_template);
    RUN(llama3_render_text);
    RUN(render_errors);
    RUN(replies_parse_as_reference);
    RUN(call_ids_follow_the_rng);
    RUN(reasoning_split);
    RUN(stream_hold_back);
    RUN(call_schema);
    RUN(json_dumps_as_python);
    json_decref(g_doc);
    return HARNESS_END();
}
