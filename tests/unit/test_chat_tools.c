/* tests/unit/test_chat_tools.c: OpenAI tool calls in the chat formats (src/tokenizer/tools_*.c)
 * against tests/data/tools/tool_prompts.json (tests/fixtures/make_tool_prompt_fixtures.py):
 * every dialog with tools, encoded by mlm_tokenizer_encode_dialog with the real tokenizer of
 * its chat format, gives the ids of the chat template's text as transformers renders it and
 * tiktoken / tokenizers tokenize it; replies parse to the calls the Python reference parsers
 * find; JSON is written as Python's json.dumps writes it. Plus the render errors, the
 * streaming hold-back, the call schema and the call ids. */
#include <jansson.h>
#include <stdint.h>

#include "harness.h"
#include "helpers.h"
#include "meshlm.h"
#include "tokenizer/pytext.h"
#include "tokenizer/tools.h"

#define FIXTURE "tests/data/tools/tool_prompts.json"

static json_t *g_doc; /* the fixture */

static const char *str(const json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

// ---- a dialog from the fixture ----

#define MAX_TURNS 16
#define MAX_CALLS 32

/* A fixture dialog as the library's turns; strings borrowed from the fixture. */
typedef struct dialog {
    mlm_chat_turn turns[MAX_TURNS];
    mlm_tool_call calls[MAX_CALLS];
    char *tools; /* owned JSON text, or NULL */
    mlm_chat_dialog d;
} dialog;

/* D with MESSAGES (OpenAI-style) and TOOLS (a JSON array or NULL), a generation prompt, the
 * default thinking; 0 when the fixture holds more than the arrays take. */
static int build_dialog(dialog *d, const json_t *messages, const json_t *tools) {
    memset(d, 0, sizeof *d);
    int n = (int)json_array_size(messages), n_calls = 0;
    if (n > MAX_TURNS) return 0;
    for (int i = 0; i < n; i++) {
        const json_t *m = json_array_get(messages, (size_t)i);
        mlm_chat_turn *t = &d->turns[i];
        t->role = str(m, "role");
        t->content = str(m, "content");
        t->reasoning = str(m, "reasoning_content");
        const json_t *calls = json_object_get(m, "tool_calls");
        t->calls = &d->calls[n_calls];
        t->n_calls = (int32_t)json_array_size(calls);
        if (n_calls + t->n_calls > MAX_CALLS) return 0;
        for (int k = 0; k < t->n_calls; k++) {
            const json_t *c = json_array_get(calls, (size_t)k);
            const json_t *f = json_object_get(c, "function");
            d->calls[n_calls++] = (mlm_tool_call){str(c, "id"), str(f, "name"), str(f, "arguments")};
        }
    }
    d->tools = json_is_array(tools) ? json_dumps(tools, JSON_COMPACT) : NULL;
    d->d = (mlm_chat_dialog){d->turns, n, d->tools, 1, MLM_THINK_DEFAULT};
    return 1;
}

/* The chat format named NAME (mlm_tokenizer_chat_format's names; others: none). */
static mlm_chat_kind kind_of(const char *name) {
    return strcmp(name, "llama3") == 0           ? MLM_CHAT_LLAMA3
           : strcmp(name, "chatml") == 0         ? MLM_CHAT_CHATML
           : strcmp(name, "chatml-newline") == 0 ? MLM_CHAT_CHATML_NL
                                                 : MLM_CHAT_NONE;
}

// ---- prompts ----

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

/* Encodes dialog D with TOK and compares the ids with fixture prompt P's count and FNV-1a-64
 * of the template's ids (WHAT names the format or template), explaining a difference; frees
 * D's tools text. */
static void check_dialog(const mlm_tokenizer *tok, dialog *d, const json_t *p, const char *what) {
    mlm_tokens ids;
    mlm_tokens_init(&ids);
    mlm_error err = {0};
    mlm_status st = mlm_tokenizer_encode_dialog(tok, &d->d, &ids, &err);
    CHECKF(st == MLM_OK, "%s/%s: %s", what, str(p, "name"), err.msg);
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)helper_fnv64_ids(ids.ids, ids.n));
    int same = ids.n == json_integer_value(json_object_get(p, "n_ids")) &&
               strcmp(hash, str(p, "ids_fnv64")) == 0;
    CHECKF(same, "%s/%s: %lld ids (fnv %s), the template's text has %lld (fnv %s)", what,
           str(p, "name"), (long long)ids.n, hash,
           (long long)json_integer_value(json_object_get(p, "n_ids")), str(p, "ids_fnv64"));
    if (!same) explain(tok, &ids, str(p, "text"));
    mlm_tokens_deinit(&ids);
    free(d->tools);
}

/* Encodes and compares every fixture prompt of FORMAT with TOK; the count checked. */
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
        dialog d;
        CHECKF(build_dialog(&d, json_object_get(p, "messages"), json_object_get(p, "tools")),
               "%s/%s: too many messages for the test", format, str(p, "name"));
        check_dialog(tok, &d, p, format);
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
 * the content or in reasoning_content, through mlm_tokenizer_encode_dialog (the server's
 * call), gives the ids of the template's text. */
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
        dialog d;
        CHECKF(build_dialog(&d, json_object_get(p, "messages"), json_object_get(p, "tools")),
               "%s/%s: too many messages for the test", template, str(p, "name"));
        const json_t *think = json_object_get(p, "enable_thinking");
        d.d.thinking = json_is_boolean(think) ? (json_is_true(think) ? MLM_THINK_ON : MLM_THINK_OFF)
                                              : MLM_THINK_DEFAULT;
        d.d.add_generation_prompt = json_is_true(json_object_get(p, "add_generation_prompt"));
        check_dialog(tok, &d, p, template);
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
    dialog d;
    CHECK(build_dialog(&d, msgs, tools));
    mlm_tools_prompt tp;
    mlm_error err;
    CHECK_OK(mlm_tools_render(MLM_CHAT_LLAMA3, d.turns, d.d.n_msgs, tools, NULL, &tp, &err), &err);
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
    mlm_tools_prompt_deinit(&tp);
    mlm_tools_prompt_deinit(&tp); /* twice: a no-op */
    free(d.tools);
    json_decref(msgs);
    json_decref(tools);
}

/* Whether ERR is INVALID_ARG naming FIELD first ("FIELD: ..."), as the server reads it. */
static int names_field(const mlm_error *err, const char *field) {
    size_t n = strlen(field);
    return err->status == MLM_ERR_INVALID_ARG && strncmp(err->msg, field, n) == 0 &&
           err->msg[n] == ':';
}

TEST(render_errors) {
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", 0, NULL);
    json_t *only_system = json_loads("[{\"role\":\"system\",\"content\":\"S\"}]", 0, NULL);
    json_t *two_calls = json_loads(
        "[{\"role\":\"user\",\"content\":\"Q\"},{\"role\":\"assistant\",\"content\":\"\","
        "\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},"
        "{\"id\":\"b\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]",
        0, NULL);
    json_t *bad_role = json_loads("[{\"role\":\"user\",\"content\":\"Q\"},{\"role\":\"robot\"}]",
                                  0, NULL);
    dialog d;
    mlm_tools_prompt tp;
    mlm_error err = {0};
    build_dialog(&d, only_system, tools);
    CHECK(mlm_tools_render(MLM_CHAT_LLAMA3, d.turns, 1, tools, NULL, &tp, &err) != MLM_OK);
    CHECKF(names_field(&err, "messages"), "%s", err.msg);
    CHECK(tp.msgs == NULL && tp.n_msgs == 0);
    /* ChatML takes a dialog of only a system message */
    CHECK(mlm_tools_render(MLM_CHAT_CHATML, d.turns, 1, tools, NULL, &tp, &err) == MLM_OK &&
          tp.n_msgs == 1);
    mlm_tools_prompt_deinit(&tp);
    free(d.tools);
    build_dialog(&d, two_calls, tools);
    CHECK(mlm_tools_render(MLM_CHAT_LLAMA3, d.turns, 2, tools, NULL, &tp, &err) != MLM_OK);
    CHECKF(names_field(&err, "messages[1].tool_calls"), "%s", err.msg);
    CHECK(mlm_tools_render(MLM_CHAT_CHATML_NL, d.turns, 2, tools, NULL, &tp, &err) == MLM_OK &&
          tp.n_msgs == 3);
    if (tp.n_msgs == 3)
        CHECK(strcmp(tp.msgs[2].content, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n"
                                         "</tool_call>\n<tool_call>\n{\"name\": \"f\", "
                                         "\"arguments\": {}}\n</tool_call>") == 0);
    mlm_tools_prompt_deinit(&tp);
    CHECK(mlm_tools_render(MLM_CHAT_NONE, d.turns, 2, tools, NULL, &tp, &err) ==
          MLM_ERR_UNSUPPORTED);
    free(d.tools);
    build_dialog(&d, bad_role, tools);
    for (int k = MLM_CHAT_LLAMA3; k <= MLM_CHAT_CHATML_NL; k++) {
        CHECK(mlm_tools_render((mlm_chat_kind)k, d.turns, 2, tools, NULL, &tp, &err) != MLM_OK);
        CHECKF(names_field(&err, "messages[1]"), "%s", err.msg);
    }
    free(d.tools);
    /* through the public call: tools that are no array, and the same refusals */
    mlm_tokenizer *tok = NULL;
    CHECK_OK(mlm_tokenizer_load("tests/data/tokenizer/llama3", &tok, &err), &err);
    if (tok) {
        mlm_tokens ids;
        mlm_tokens_init(&ids);
        build_dialog(&d, two_calls, tools);
        CHECK(mlm_tokenizer_encode_dialog(tok, &d.d, &ids, &err) != MLM_OK);
        CHECKF(names_field(&err, "messages[1].tool_calls"), "%s", err.msg);
        d.d.tools = "{\"type\": \"function\"}";
        CHECK(mlm_tokenizer_encode_dialog(tok, &d.d, &ids, &err) != MLM_OK);
        CHECKF(names_field(&err, "tools"), "%s", err.msg);
        d.d.tools = "[";
        CHECK(mlm_tokenizer_encode_dialog(tok, &d.d, &ids, &err) != MLM_OK);
        CHECKF(names_field(&err, "tools"), "%s", err.msg);
        CHECK(ids.n == 0);
        d.d.tools = NULL; /* without tools, calls are not written: the two-call dialog encodes */
        CHECK_OK(mlm_tokenizer_encode_dialog(tok, &d.d, &ids, &err), &err);
        free(d.tools);
        mlm_tokens_deinit(&ids);
        mlm_tokenizer_free(tok);
    }
    json_decref(only_system);
    json_decref(two_calls);
    json_decref(bad_role);
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
        char *tools_text = json_dumps(tools, JSON_COMPACT);
        mlm_tool_reply t;
        mlm_error err;
        CHECK_OK(mlm_tool_reply_parse(kind_of(fmt), tools_text, text, strlen(text), &rng, &t, &err),
                 &err);
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
            json_t *args = json_loads(t.calls[k].arguments, 0, NULL);
            CHECK(json_is_object(args));
            json_decref(args);
            CHECKF(is_call_id(t.calls[k].id), "%s", t.calls[k].id);
            if (k) CHECK(strcmp(t.calls[k].id, t.calls[k - 1].id) != 0);
        }
        mlm_tool_reply_deinit(&t);
        free(tools_text);
        json_decref(tools);
    }
}

TEST(call_ids_follow_the_rng) {
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
    const char *text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    uint64_t a = 7, b = 7, c = 8;
    mlm_tool_reply ta, tb, tc;
    mlm_error err;
    CHECK(mlm_tool_reply_parse(MLM_CHAT_CHATML, tools, text, strlen(text), &a, &ta, &err) == MLM_OK);
    CHECK(mlm_tool_reply_parse(MLM_CHAT_CHATML, tools, text, strlen(text), &b, &tb, &err) == MLM_OK);
    CHECK(mlm_tool_reply_parse(MLM_CHAT_CHATML, tools, text, strlen(text), &c, &tc, &err) == MLM_OK);
    CHECK(ta.n_calls == 1 && tb.n_calls == 1 && tc.n_calls == 1);
    if (ta.n_calls && tb.n_calls && tc.n_calls) {
        CHECK(strcmp(ta.calls[0].id, tb.calls[0].id) == 0);
        CHECK(strcmp(ta.calls[0].id, tc.calls[0].id) != 0);
        CHECK(a == b && a != 7);
    }
    mlm_tool_reply_deinit(&ta);
    mlm_tool_reply_deinit(&tb);
    mlm_tool_reply_deinit(&tc);
    /* a format without tool calls finds none: the reply is content */
    CHECK(mlm_tool_reply_parse(MLM_CHAT_NONE, tools, text, strlen(text), &a, &ta, &err) == MLM_OK);
    CHECK(ta.n_calls == 0 && ta.content && strcmp(ta.content, text) == 0);
    mlm_tool_reply_deinit(&ta);
    /* no tools declared: no call */
    CHECK(mlm_tool_reply_parse(MLM_CHAT_CHATML, NULL, text, strlen(text), &a, &ta, &err) == MLM_OK);
    CHECK(ta.n_calls == 0 && ta.content && strcmp(ta.content, text) == 0);
    mlm_tool_reply_deinit(&ta);
    CHECK(mlm_tool_reply_parse(MLM_CHAT_CHATML, "{}", text, strlen(text), &a, &ta, &err) ==
          MLM_ERR_INVALID_ARG);
    CHECK(ta.content == NULL && ta.n_calls == 0);
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
        size_t got = mlm_tool_reply_settled(kind_of(cases[i].format), cases[i].text, strlen(cases[i].text));
        CHECKF(got == cases[i].safe, "%s '%s': %zu, want %zu", cases[i].format, cases[i].text, got,
               cases[i].safe);
    }
    /* never decreasing as a reply grows */
    const char *reply = "Sure, let me see.  \n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n"
                        "</tool_call>";
    size_t last = 0;
    for (size_t n = 0; n <= strlen(reply); n++) {
        size_t s = mlm_tool_reply_settled(MLM_CHAT_CHATML_NL, reply, n);
        CHECKF(s >= last && s <= n, "at %zu: %zu after %zu", n, s, last);
        last = s;
    }
    CHECK(last == strlen("Sure, let me see."));
    /* a character still cut short may be whitespace: held back (U+3000 byte by byte) */
    const char *ideo = "Hi\xe3\x80\x80";
    for (size_t n = 2; n <= 5; n++) {
        CHECKF(mlm_tool_reply_settled(MLM_CHAT_CHATML, ideo, n) == 2, "chatml at %zu", n);
        CHECKF(mlm_tool_reply_settled(MLM_CHAT_LLAMA3, ideo + 2, n - 2) == 0, "llama3 at %zu", n);
    }
}

// ---- the call schema ----

/* The internal schema as JSON text (NULL when there is none). */
static char *schema_text(mlm_chat_kind kind, const json_t *tools, const char *only) {
    json_t *s = mlm_tools_call_schema(kind, tools, only);
    char *text = s ? json_dumps(s, JSON_COMPACT) : NULL;
    json_decref(s);
    return text;
}

TEST(call_schema) {
    const char *tools_text =
        "[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"x\":{\"type\":\"number\"}}}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"b\"}}]";
    json_t *tools = json_loads(tools_text, 0, NULL);
    CHECK(strcmp(mlm_tools_args_key(MLM_CHAT_LLAMA3), "parameters") == 0);
    CHECK(strcmp(mlm_tools_args_key(MLM_CHAT_CHATML), "arguments") == 0);
    CHECK(strcmp(mlm_tools_args_key(MLM_CHAT_CHATML_NL), "arguments") == 0);
    CHECK(mlm_tools_args_key(MLM_CHAT_NONE) == NULL);
    const char *both =
        "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"name\":{\"const\":"
        "\"a\"},\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{"
        "\"type\":\"number\"}}}},\"required\":[\"name\",\"parameters\"],"
        "\"additionalProperties\":false},{\"type\":\"object\","
        "\"properties\":{\"name\":{\"const\":\"b\"},\"parameters\":{\"type\":"
        "\"object\",\"properties\":{}}},\"required\":[\"name\","
        "\"parameters\"],\"additionalProperties\":false}]}";
    char *text = schema_text(MLM_CHAT_LLAMA3, tools, NULL);
    CHECKF(text && strcmp(text, both) == 0, "%s", text ? text : "(null)");
    free(text);
    const char *only_b = "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"b\"},"
                         "\"arguments\":{\"type\":\"object\",\"properties\":{}}},"
                         "\"required\":[\"name\",\"arguments\"],\"additionalProperties\":"
                         "false}";
    text = schema_text(MLM_CHAT_CHATML, tools, "b");
    CHECKF(text && strcmp(text, only_b) == 0, "%s", text ? text : "(null)");
    free(text);
    CHECK(mlm_tools_call_schema(MLM_CHAT_CHATML, tools, "nope") == NULL);
    CHECK(mlm_tools_call_schema(MLM_CHAT_NONE, tools, NULL) == NULL);
    CHECK(mlm_tools_declared(tools, "a") && mlm_tools_declared(tools, "b"));
    CHECK(!mlm_tools_declared(tools, "c") && !mlm_tools_declared(NULL, "a"));
    /* the public call: the same text, and the wrap of the format's calls */
    mlm_grammar_wrap wrap;
    mlm_error err;
    text = NULL;
    CHECK_OK(mlm_tool_call_schema(MLM_CHAT_LLAMA3, tools_text, NULL, &text, &wrap, &err), &err);
    CHECK(text && strcmp(text, both) == 0);
    CHECK(wrap.before == NULL && wrap.after == NULL && wrap.max_values == 0); /* a bare call */
    free(text);
    text = NULL;
    CHECK_OK(mlm_tool_call_schema(MLM_CHAT_CHATML_NL, tools_text, "b", &text, &wrap, &err), &err);
    CHECK(text && strcmp(text, only_b) == 0);
    CHECK(wrap.before && strcmp(wrap.before, "<tool_call>\n") == 0 && wrap.after &&
          strcmp(wrap.after, "\n</tool_call>") == 0 && wrap.min_values == 1 &&
          wrap.max_values == 1);
    free(text);
    CHECK(mlm_tool_call_schema(MLM_CHAT_CHATML, tools_text, "nope", &text, NULL, &err) ==
          MLM_ERR_INVALID_ARG && text == NULL);
    CHECKF(names_field(&err, "tools"), "%s", err.msg);
    CHECK(mlm_tool_call_schema(MLM_CHAT_NONE, tools_text, NULL, &text, NULL, &err) ==
          MLM_ERR_UNSUPPORTED);
    CHECK(mlm_tool_call_schema(MLM_CHAT_LLAMA3, "[]", NULL, &text, NULL, &err) ==
          MLM_ERR_INVALID_ARG);
    json_decref(tools);
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
            char *got = mlm_py_dumps(v, styles[k].indent, styles[k].item, styles[k].colon);
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
    CHECK(mlm_py_dumps(NULL, -1, ",", ":") == NULL);
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
