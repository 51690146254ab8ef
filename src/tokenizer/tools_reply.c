/* tokenizer/tools_reply.c: the tool calls in a model's reply (tools.h): found in a finished
 * reply as vLLM's llama3_json and hermes parsers find them, held back while a streamed reply
 * may still become one, and the JSON Schema one call must satisfy for constrained decoding. */
#include "tokenizer/tools.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/pytext.h"

static int is_chatml(mlm_chat_kind kind) {
    return kind == MLM_CHAT_CHATML || kind == MLM_CHAT_CHATML_NL;
}

int mlm_tools_declared(const json_t *tools, const char *name) {
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
    if (!name || !mlm_tools_declared(tools, name) || !json_is_object(a)) return NULL;
    *args = a;
    return name;
}

/* Appends a call of NAME with ARGS to OUT; 0 when out of memory. */
static int add_call(mlm_tool_reply *out, const char *name, const json_t *args, uint64_t *rng) {
    static const char ALNUM[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    mlm_tool_call *calls = realloc(out->calls, (size_t)(out->n_calls + 1) * sizeof *calls);
    if (!calls) return 0;
    out->calls = calls;
    mlm_tool_call *c = &calls[out->n_calls];
    char *id = malloc(5 + 24 + 1);
    c->id = id;
    c->name = strdup(name);
    c->arguments = mlm_py_dumps(args, -1, ",", ":");
    out->n_calls++; /* counted even when incomplete, so that deinit frees the parts */
    if (!id || !c->name || !c->arguments) return 0;
    memcpy(id, "call_", 5);
    for (int i = 0; i < 24; i++)
        id[5 + i] = ALNUM[next_random(rng) % 62];
    id[29] = 0;
    return 1;
}

/* OBJ (released here) as a call into OUT, its arguments under FIRST or else SECOND: 1 taken,
 * 0 no call of a declared function, -1 out of memory. */
static int take_call(const json_t *tools, json_t *obj, const char *first, const char *second,
                     uint64_t *rng, mlm_tool_reply *out) {
    json_t *args = NULL;
    const char *name = read_call(tools, obj, first, second, &args);
    int r = name ? (add_call(out, name, args, rng) ? 1 : -1) : 0;
    json_decref(obj);
    return r;
}

/* Calls: {"name", "parameters"|"arguments"} objects filling TEXT[A, B), each followed by
 * ';' or whitespace. 1 found, 0 not a call list, -1 out of memory. */
static int llama3_calls(const json_t *tools, const char *text, size_t a, size_t b, uint64_t *rng,
                        mlm_tool_reply *out) {
    while (a < b) {
        json_error_t err;
        json_t *obj = json_loadb(text + a, b - a, JSON_DISABLE_EOF_CHECK, &err);
        int r = take_call(tools, obj, "parameters", "arguments", rng, out);
        if (r != 1) return r;
        a += (size_t)err.position;
        for (size_t k; a < b; a += k) /* separators: ';' and whitespace, any mix */
            if ((k = text[a] == ';' ? 1 : mlm_py_space_len((const unsigned char *)text + a, b - a)) == 0)
                break;
    }
    return 1;
}

/* Calls: every <tool_call> block from START on. 1 found, 0 not calls, -1 out of memory. */
static int hermes_calls(const json_t *tools, const char *text, size_t len, const char *start,
                        uint64_t *rng, mlm_tool_reply *out) {
    static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";
    const char *end = text + len;
    while (start) {
        const char *body = start + sizeof OPEN - 1;
        const char *close = memmem(body, (size_t)(end - body), CLOSE, sizeof CLOSE - 1);
        const char *stop = close ? close : end;
        json_t *obj = json_loadb(body, (size_t)(stop - body), 0, NULL);
        int r = take_call(tools, obj, "arguments", "parameters", rng, out);
        if (r != 1) return r;
        if (!close) break;
        const char *next = close + sizeof CLOSE - 1;
        start = memmem(next, (size_t)(end - next), OPEN, sizeof OPEN - 1);
    }
    return 1;
}

mlm_status mlm_tool_reply_parse(mlm_chat_kind kind, const char *tools_text, const char *text,
                                size_t len, uint64_t *rng, mlm_tool_reply *out, mlm_error *err) {
    memset(out, 0, sizeof *out);
    json_t *tools = NULL;
    mlm_status st = mlm_tools_load(tools_text, &tools, err);
    if (st) return st;
    uint64_t local = 0;
    if (!rng) rng = &local;
    int found = 0;
    size_t n_content = 0; /* with calls: the content's length (0: none) */
    if (kind == MLM_CHAT_LLAMA3) {
        size_t a = mlm_py_skip_space(text, 0, len), b = mlm_py_rstrip_end(text, a, len);
        static const char TAG[] = "<|python_tag|>";
        if (b - a >= sizeof TAG - 1 && memcmp(text + a, TAG, sizeof TAG - 1) == 0)
            a = mlm_py_skip_space(text, a + sizeof TAG - 1, b);
        if (a < b && text[a] == '{') found = llama3_calls(tools, text, a, b, rng, out);
    } else if (is_chatml(kind)) {
        const char *start = memmem(text, len, "<tool_call>", 11);
        if (start) found = hermes_calls(tools, text, len, start, rng, out);
        if (start) n_content = mlm_py_rstrip_end(text, 0, (size_t)(start - text));
    }
    json_decref(tools);
    if (found < 0) {
        mlm_tool_reply_deinit(out);
        return mlm_error_set(err, MLM_ERR_NOMEM, "out of memory");
    }
    if (!found) { /* no call after all: the reply is content */
        mlm_tool_reply_deinit(out);
        n_content = len;
    }
    if (n_content > 0 || !found) {
        out->content = malloc(n_content + 1);
        if (!out->content) {
            mlm_tool_reply_deinit(out);
            return mlm_error_set(err, MLM_ERR_NOMEM, "out of memory");
        }
        memcpy(out->content, text, n_content);
        out->content[n_content] = 0;
    }
    return MLM_OK;
}

void mlm_tool_reply_deinit(mlm_tool_reply *t) {
    if (!t) return;
    for (int i = 0; i < t->n_calls; i++) {
        free((char *)t->calls[i].id);
        free((char *)t->calls[i].name);
        free((char *)t->calls[i].arguments);
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

size_t mlm_tool_reply_settled(mlm_chat_kind kind, const char *text, size_t len) {
    if (kind == MLM_CHAT_LLAMA3) {
        len = whole_chars(text, len);
        static const char TAG[] = "<|python_tag|>";
        size_t a = mlm_py_skip_space(text, 0, len), rest = len - a, k = sizeof TAG - 1;
        if (a == len || text[a] == '{') return 0;
        if (memcmp(text + a, TAG, rest < k ? rest : k) == 0) return 0;
        return len;
    }
    if (is_chatml(kind)) {
        len = whole_chars(text, len);
        static const char OPEN[] = "<tool_call>";
        const char *at = memmem(text, len, OPEN, sizeof OPEN - 1);
        size_t cut = at ? (size_t)(at - text) : len;
        for (size_t k = sizeof OPEN - 2; !at && k > 0; k--) /* a tail that may become one */
            if (k <= len && memcmp(text + len - k, OPEN, k) == 0) {
                cut = len - k;
                break;
            }
        return mlm_py_rstrip_end(text, 0, cut);
    }
    return len;
}

// ---- constrained calls ----

const char *mlm_tools_args_key(mlm_chat_kind kind) {
    return kind == MLM_CHAT_LLAMA3 ? "parameters" : is_chatml(kind) ? "arguments" : NULL;
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

json_t *mlm_tools_call_schema(mlm_chat_kind kind, const json_t *tools, const char *only) {
    const char *key = mlm_tools_args_key(kind);
    json_t *alts = key ? json_array() : NULL;
    if (!alts) return NULL;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *f = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || (only && strcmp(name, only) != 0)) continue;
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

mlm_status mlm_tool_call_schema(mlm_chat_kind kind, const char *tools_text, const char *only,
                                char **schema, mlm_grammar_wrap *wrap, mlm_error *err) {
    *schema = NULL;
    if (wrap) memset(wrap, 0, sizeof *wrap);
    if (kind == MLM_CHAT_NONE)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED, "tools: this model has no chat format");
    json_t *tools = NULL;
    mlm_status st = mlm_tools_load(tools_text, &tools, err);
    if (st) return st;
    int named = 0; /* functions with a name: with none allowed there is no schema */
    for (size_t i = 0; !only && i < json_array_size(tools); i++)
        named += json_string_value(json_object_get(
                     json_object_get(json_array_get(tools, i), "function"), "name")) != NULL;
    if (only ? !mlm_tools_declared(tools, only) : !named) {
        json_decref(tools);
        return only ? mlm_error_set(err, MLM_ERR_INVALID_ARG, "tools: no function named '%s'", only)
                    : mlm_error_set(err, MLM_ERR_INVALID_ARG, "tools: no function");
    }
    json_t *s = mlm_tools_call_schema(kind, tools, only); /* NULL: out of memory */
    json_decref(tools);
    *schema = s ? json_dumps(s, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(s);
    if (!*schema) return mlm_error_set(err, MLM_ERR_NOMEM, "out of memory");
    if (wrap && is_chatml(kind)) *wrap = (mlm_grammar_wrap){"<tool_call>\n", "\n</tool_call>", "\n", 1, 1};
    return MLM_OK;
}
