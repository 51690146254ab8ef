/* tools/server/toolcall.c: OpenAI tool calls in meshlm's chat formats (see toolcall.h): the
 * templates' tool prompts rebuilt as (role, content) messages, the calls read back from a
 * reply, and the schema of one call. The prompt text must match the Jinja templates byte for
 * byte, so JSON is written as Python's json.dumps writes it (jansson's own dump differs in
 * separators and in reals) and trimming is Python's str.strip (pytext.c). Every string built here is
 * malloc'd and handed to the caller's struct; nothing is kept between calls. */
#include "toolcall.h"

#include "pytext.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- the prompt ----

static const char LLAMA3_SYSTEM[] = "Environment: ipython\n"
                                    "Cutting Knowledge Date: December 2023\n"
                                    "Today Date: 26 Jul 2024\n\n";
static const char LLAMA3_TOOLS[] =
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\n"
    "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument "
    "name and its value}.Do not use variables.\n\n";
static const char HERMES_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char HERMES_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";

/* The static spelling of a request role (NULL for one the chat formats do not take). */
static const char *static_role(const char *role) {
    static const char *const ROLES[] = {"system", "user", "assistant", "tool", "ipython"};
    for (size_t i = 0; i < sizeof ROLES / sizeof ROLES[0]; i++)
        if (strcmp(role, ROLES[i]) == 0) return ROLES[i];
    return NULL;
}

/* M's content ("" for none). */
static const char *content_of(const srv_message *m) { return m->content ? m->content : ""; }

/* Appends (ROLE, the string B built) to P; 0 when out of memory. */
static int push(srv_tool_prompt *p, const char *role, srv_sbuf *b) {
    char *s = srv_sb_take(b);
    if (!s) return 0;
    p->msgs[p->n_msgs].role = role;
    p->msgs[p->n_msgs++].content = s;
    return 1;
}

/* A call's arguments as the template writes `arguments | srv_tojson`: the parsed object dumped
 * again; text that is no JSON goes in as a JSON string, as the template would dump a str. */
static void call_args(srv_sbuf *b, const srv_tool_call *c) {
    if (c->args) {
        srv_tojson(b, c->args);
        return;
    }
    const char *text = c->arguments ? c->arguments : "{}";
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    if (v)
        srv_tojson(b, v);
    else
        srv_py_string(b, text, strlen(text));
    json_decref(v);
}

static int oom(srv_error *e) { return srv_fail(e, 500, "server_error", "", "", "out of memory"); }

static int llama3_render(const srv_request *r, srv_tool_prompt *p, srv_error *e) {
    const srv_message *m = r->messages;
    int n = r->n_messages, i = 0;
    srv_sbuf b = {0};
    srv_sb_str(&b, LLAMA3_SYSTEM);
    if (n > 0 && strcmp(m[0].role, "system") == 0) srv_add_trimmed(&b, content_of(&m[i++]));
    if (!push(p, "system", &b)) return oom(e);
    if (i >= n)
        return srv_fail(e, 400, "invalid_request_error", "messages", "",
                        "With tools, this model's chat template needs a message after the "
                        "system message to put the tools in.");
    srv_sb_str(&b, LLAMA3_TOOLS);
    size_t n_tools = json_array_size(r->tools);
    for (size_t k = 0; k < n_tools; k++) {
        char *t = srv_json_dumps(json_array_get(r->tools, k), 4, ",", ": ");
        if (!t) {
            free(b.s);
            return oom(e);
        }
        srv_sb_str(&b, t);
        srv_sb_str(&b, "\n\n");
        free(t);
    }
    srv_add_trimmed(&b, content_of(&m[i++]));
    if (!push(p, "user", &b)) return oom(e);
    for (; i < n; i++) {
        const char *role = static_role(m[i].role);
        if (!role)
            return srv_fail(e, 400, "invalid_request_error", "messages", "",
                            "messages[%d]: unknown role '%s'.", i, m[i].role);
        if (strcmp(role, "tool") == 0 || strcmp(role, "ipython") == 0) {
            /* the template's `content | srv_tojson`: a string is iterable in Jinja */
            srv_py_string(&b, content_of(&m[i]), strlen(content_of(&m[i])));
            role = "ipython";
        } else if (m[i].n_tool_calls > 0) {
            if (m[i].n_tool_calls != 1) {
                char param[64];
                snprintf(param, sizeof param, "messages[%d].tool_calls", i);
                return srv_fail(e, 400, "invalid_request_error", param, "",
                                "This model's chat template takes one tool call per assistant "
                                "message; messages[%d] has %d.",
                                i, m[i].n_tool_calls);
            }
            srv_sb_str(&b, "{\"name\": \"");
            srv_sb_str(&b, m[i].tool_calls[0].name);
            srv_sb_str(&b, "\", \"parameters\": ");
            call_args(&b, &m[i].tool_calls[0]);
            srv_sb_str(&b, "}");
            role = "assistant";
        } else {
            srv_add_trimmed(&b, content_of(&m[i]));
        }
        if (!push(p, role, &b)) return oom(e);
    }
    return 1;
}

static int hermes_render(const srv_request *r, const char *default_system, srv_tool_prompt *p,
                         srv_error *e) {
    const srv_message *m = r->messages;
    int n = r->n_messages, i = 0;
    const char *sys = default_system;
    if (n > 0 && strcmp(m[0].role, "system") == 0) sys = content_of(&m[i++]);
    srv_sbuf b = {0};
    if (sys) {
        srv_sb_str(&b, sys);
        srv_sb_str(&b, "\n\n");
    }
    srv_sb_str(&b, HERMES_HEAD);
    for (size_t k = 0; k < json_array_size(r->tools); k++) {
        srv_sb_str(&b, "\n");
        srv_tojson(&b, json_array_get(r->tools, k));
    }
    srv_sb_str(&b, HERMES_TAIL);
    if (!push(p, "system", &b)) return oom(e);
    for (; i < n; i++) {
        const char *role = static_role(m[i].role);
        if (!role || strcmp(role, "ipython") == 0)
            return srv_fail(e, 400, "invalid_request_error", "messages", "",
                            "messages[%d]: unknown role '%s'.", i, m[i].role);
        if (strcmp(role, "tool") == 0) {
            /* consecutive results: one user turn, one <tool_response> block each */
            for (int first = i; i < n && strcmp(m[i].role, "tool") == 0; i++) {
                if (i > first) srv_sb_str(&b, "\n");
                srv_sb_str(&b, "<tool_response>\n");
                srv_sb_str(&b, content_of(&m[i]));
                srv_sb_str(&b, "\n</tool_response>");
            }
            i--;
            role = "user";
        } else if (strcmp(role, "assistant") == 0 && m[i].n_tool_calls > 0) {
            if (content_of(&m[i])[0]) {
                srv_sb_str(&b, content_of(&m[i]));
                srv_sb_str(&b, "\n");
            }
            for (int k = 0; k < m[i].n_tool_calls; k++) {
                if (k) srv_sb_str(&b, "\n");
                srv_sb_str(&b, "<tool_call>\n{\"name\": \"");
                srv_sb_str(&b, m[i].tool_calls[k].name);
                srv_sb_str(&b, "\", \"arguments\": ");
                call_args(&b, &m[i].tool_calls[k]);
                srv_sb_str(&b, "}\n</tool_call>");
            }
        } else {
            srv_sb_str(&b, content_of(&m[i]));
        }
        if (!push(p, role, &b)) return oom(e);
        if (strcmp(role, "assistant") == 0) p->reasoning[p->n_msgs - 1] = m[i].reasoning;
    }
    return 1;
}

int srv_tools_render(const srv_request *r, const char *format, const char *default_system,
                     srv_tool_prompt *out, srv_error *e) {
    memset(out, 0, sizeof *out);
    int llama3 = format && strcmp(format, "llama3") == 0;
    int chatml = format && (strcmp(format, "chatml") == 0 || strcmp(format, "chatml-newline") == 0);
    if (!llama3 && !chatml)
        return srv_fail(e, 400, "invalid_request_error", "tools", "",
                        "This model's chat format (%s) has no tool calls.",
                        format ? format : "none");
    out->msgs = calloc((size_t)r->n_messages + 2, sizeof *out->msgs);
    out->reasoning = calloc((size_t)r->n_messages + 2, sizeof *out->reasoning);
    if (!out->msgs || !out->reasoning) {
        srv_tool_prompt_deinit(out);
        return oom(e);
    }
    int ok = llama3 ? llama3_render(r, out, e) : hermes_render(r, default_system, out, e);
    if (!ok) srv_tool_prompt_deinit(out);
    return ok;
}

int srv_chat_encode(const mlm_tokenizer *tok, const char *alias, const srv_request *r,
                    mlm_tokens *out, srv_error *e) {
    const char *fmt = mlm_tokenizer_chat_format(tok);
    mlm_chat_opts opts = {1, r->thinking, NULL};
    mlm_error err = {0};
    mlm_status st;
    srv_tool_prompt tp = {0};
    int n = r->n_messages;
    if (r->tools && r->tool_choice != SRV_TOOLS_NONE && fmt) { /* the template's tool form */
        if (!srv_tools_render(r, fmt, mlm_tokenizer_chat_system(tok), &tp, e)) return 0;
        n = tp.n_msgs;
    } else {
        tp.msgs = calloc((size_t)r->n_messages, sizeof *tp.msgs);
        tp.reasoning = calloc((size_t)r->n_messages, sizeof *tp.reasoning);
        if (!tp.msgs || !tp.reasoning) {
            srv_tool_prompt_deinit(&tp);
            return oom(e);
        }
        for (int i = 0; i < r->n_messages; i++) { /* borrowed: tp.n_msgs stays 0 */
            tp.msgs[i].role = r->messages[i].role;
            tp.msgs[i].content = content_of(&r->messages[i]);
            tp.reasoning[i] = r->messages[i].reasoning;
        }
    }
    opts.reasoning = tp.reasoning;
    st = mlm_tokenizer_encode_chat_opts(tok, tp.msgs, n, &opts, out, &err);
    srv_tool_prompt_deinit(&tp);
    if (st == MLM_ERR_UNSUPPORTED)
        return srv_fail(e, 400, "invalid_request_error", "messages", "",
                        "The model `%s` has no chat format; use /v1/completions.", alias);
    if (st == MLM_ERR_INVALID_ARG)
        return srv_fail(e, 400, "invalid_request_error", "messages", "", "%s", err.msg);
    if (st) return srv_fail(e, 500, "server_error", "", "", "%s", err.msg);
    return 1;
}

void srv_tool_prompt_deinit(srv_tool_prompt *p) {
    if (!p) return;
    for (int i = 0; i < p->n_msgs; i++)
        free((char *)p->msgs[i].content);
    free(p->msgs);
    free(p->reasoning);
    memset(p, 0, sizeof *p);
}

// ---- the reply ----

int srv_tools_declared(const json_t *tools, const char *name) {
    for (size_t i = 0; name && i < json_array_size(tools); i++) {
        json_t *f = json_object_get(json_array_get(tools, i), "function");
        const char *n = json_string_value(json_object_get(f, "name"));
        if (n && strcmp(n, name) == 0) return 1;
    }
    return 0;
}

/* splitmix64 */
static uint64_t next_random(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* OBJ's function name when it is a call of a declared function, its arguments in *ARGS
 * (borrowed); NULL otherwise. FIRST is the key tried first for the arguments. */
static const char *read_call(const json_t *tools, json_t *obj, const char *first,
                             const char *second, json_t **args) {
    if (!json_is_object(obj)) return NULL;
    const char *name = json_string_value(json_object_get(obj, "name"));
    json_t *a = json_object_get(obj, first);
    if (!a) a = json_object_get(obj, second);
    if (!name || !srv_tools_declared(tools, name) || !json_is_object(a)) return NULL;
    *args = a;
    return name;
}

/* Appends a call of NAME with ARGS (borrowed) to OUT; 0 when out of memory. */
static int add_call(srv_tool_reply *out, const char *name, json_t *args, uint64_t *rng) {
    static const char ALNUM[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    srv_tool_call *calls = realloc(out->calls, (size_t)(out->n_calls + 1) * sizeof *calls);
    if (!calls) return 0;
    out->calls = calls;
    srv_tool_call *c = &calls[out->n_calls];
    memset(c, 0, sizeof *c);
    c->id = malloc(5 + 24 + 1);
    c->name = strdup(name);
    c->arguments = srv_json_dumps(args, -1, ",", ":");
    c->args = json_incref(args);
    out->n_calls++; /* counted even when incomplete, so that deinit frees the parts */
    if (!c->id || !c->name || !c->arguments) return 0;
    memcpy(c->id, "call_", 5);
    for (int i = 0; i < 24; i++)
        c->id[5 + i] = ALNUM[next_random(rng) % 62];
    c->id[29] = 0;
    return 1;
}

/* Calls: {"name", "parameters"|"arguments"} objects filling TEXT[A, B), each followed by
 * ';' or whitespace. 1 found, 0 not a call list, -1 out of memory. */
static int llama3_calls(const json_t *tools, const char *text, size_t a, size_t b, uint64_t *rng,
                        srv_tool_reply *out) {
    while (a < b) {
        json_error_t err;
        json_t *obj = json_loadb(text + a, b - a, JSON_DISABLE_EOF_CHECK, &err);
        json_t *args = NULL;
        const char *name = read_call(tools, obj, "parameters", "arguments", &args);
        int ok = name ? add_call(out, name, args, rng) : 0;
        json_decref(obj);
        if (!name) return 0;
        if (!ok) return -1;
        a += (size_t)err.position;
        for (size_t k; a < b; a += k) /* separators: ';' and whitespace, any mix */
            if ((k = text[a] == ';' ? 1 : srv_space_len((const unsigned char *)text + a, b - a)) == 0)
                break;
    }
    return 1;
}

/* Calls: every <tool_call> block from START on. 1 found, 0 not calls, -1 out of memory. */
static int hermes_calls(const json_t *tools, const char *text, size_t len, const char *start,
                        uint64_t *rng, srv_tool_reply *out) {
    static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";
    const char *end = text + len;
    while (start) {
        const char *body = start + sizeof OPEN - 1;
        const char *close = memmem(body, (size_t)(end - body), CLOSE, sizeof CLOSE - 1);
        const char *stop = close ? close : end;
        json_t *obj = json_loadb(body, (size_t)(stop - body), 0, NULL);
        json_t *args = NULL;
        const char *name = read_call(tools, obj, "arguments", "parameters", &args);
        int ok = name ? add_call(out, name, args, rng) : 0;
        json_decref(obj);
        if (!name) return 0;
        if (!ok) return -1;
        if (!close) break;
        const char *next = close + sizeof CLOSE - 1;
        start = memmem(next, (size_t)(end - next), OPEN, sizeof OPEN - 1);
    }
    return 1;
}

int srv_tools_parse(const json_t *tools, const char *format, const char *text, size_t len,
                    uint64_t *rng, srv_tool_reply *out) {
    memset(out, 0, sizeof *out);
    uint64_t local = 0;
    if (!rng) rng = &local;
    int found = 0;
    size_t n_content = 0; /* with calls: the content's length (0: none) */
    if (format && strcmp(format, "llama3") == 0) {
        size_t a = srv_skip_space(text, 0, len), b = srv_rstrip_end(text, a, len);
        static const char TAG[] = "<|python_tag|>";
        if (b - a >= sizeof TAG - 1 && memcmp(text + a, TAG, sizeof TAG - 1) == 0)
            a = srv_skip_space(text, a + sizeof TAG - 1, b);
        if (a < b && text[a] == '{') found = llama3_calls(tools, text, a, b, rng, out);
    } else if (format && (strcmp(format, "chatml") == 0 || strcmp(format, "chatml-newline") == 0)) {
        const char *start = memmem(text, len, "<tool_call>", 11);
        if (start) found = hermes_calls(tools, text, len, start, rng, out);
        if (start) n_content = srv_rstrip_end(text, 0, (size_t)(start - text));
    }
    if (found < 0) {
        srv_tool_reply_deinit(out);
        return 0;
    }
    if (!found) { /* no call after all: the reply is content */
        srv_tool_reply_deinit(out);
        n_content = len;
    }
    if (n_content > 0 || !found) {
        out->content = malloc(n_content + 1);
        if (!out->content) {
            srv_tool_reply_deinit(out);
            return 0;
        }
        memcpy(out->content, text, n_content);
        out->content[n_content] = 0;
    }
    return 1;
}

void srv_tool_reply_deinit(srv_tool_reply *t) {
    if (!t) return;
    for (int i = 0; i < t->n_calls; i++) {
        free(t->calls[i].id);
        free(t->calls[i].name);
        free(t->calls[i].arguments);
        json_decref(t->calls[i].args);
    }
    free(t->calls);
    free(t->content);
    memset(t, 0, sizeof *t);
}

/* LEN less a UTF-8 sequence cut short at the end of TEXT (it may yet be whitespace). */
static size_t whole_chars(const char *text, size_t len) {
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned char c = (unsigned char)text[len - back];
        if ((c & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? len - back : len;
    }
    return len;
}

size_t srv_tools_stream_safe(const char *format, const char *text, size_t len) {
    len = whole_chars(text, len);
    if (format && strcmp(format, "llama3") == 0) {
        static const char TAG[] = "<|python_tag|>";
        size_t a = srv_skip_space(text, 0, len), rest = len - a, k = sizeof TAG - 1;
        if (a == len || text[a] == '{') return 0;
        if (memcmp(text + a, TAG, rest < k ? rest : k) == 0) return 0;
        return len;
    }
    if (format && (strcmp(format, "chatml") == 0 || strcmp(format, "chatml-newline") == 0)) {
        static const char OPEN[] = "<tool_call>";
        const char *at = memmem(text, len, OPEN, sizeof OPEN - 1);
        size_t cut = at ? (size_t)(at - text) : len;
        for (size_t k = sizeof OPEN - 2; !at && k > 0; k--) /* a tail that may become one */
            if (k <= len && memcmp(text + len - k, OPEN, k) == 0) {
                cut = len - k;
                break;
            }
        return srv_rstrip_end(text, 0, cut);
    }
    return len;
}

// ---- constrained calls ----

const char *srv_tools_args_key(const char *format) {
    if (!format) return NULL;
    if (strcmp(format, "llama3") == 0) return "parameters";
    if (strcmp(format, "chatml") == 0 || strcmp(format, "chatml-newline") == 0) return "arguments";
    return NULL;
}

/* The schema of a call of the function F (a tool's "function" object) with KEY. */
static json_t *call_schema(const json_t *f, const char *key) {
    json_t *params = json_object_get(f, "parameters");
    params =
        params ? json_deep_copy(params) : json_pack("{s:s, s:{}}", "type", "object", "properties");
    if (!params) return NULL;
    return json_pack("{s:s, s:{s:{s:s}, s:o}, s:[s, s], s:b}", "type", "object", "properties",
                     "name", "const", json_string_value(json_object_get(f, "name")), key, params,
                     "required", "name", key, "additionalProperties", 0);
}

json_t *srv_tools_call_schema(const srv_request *r, const char *format) {
    const char *key = srv_tools_args_key(format);
    if (!key || !r->tools || r->tool_choice == SRV_TOOLS_NONE) return NULL;
    json_t *alts = json_array();
    if (!alts) return NULL;
    for (size_t i = 0; i < json_array_size(r->tools); i++) {
        json_t *f = json_object_get(json_array_get(r->tools, i), "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name) continue;
        if (r->tool_choice == SRV_TOOLS_NAMED &&
            (!r->tool_choice_name || strcmp(name, r->tool_choice_name) != 0))
            continue;
        if (json_array_append_new(alts, call_schema(f, key)) != 0) {
            json_decref(alts);
            return NULL;
        }
    }
    json_t *out = NULL;
    if (json_array_size(alts) == 1)
        out = json_incref(json_array_get(alts, 0));
    else if (json_array_size(alts) > 1)
        out = json_pack("{s:O}", "anyOf", alts);
    json_decref(alts);
    return out;
}
