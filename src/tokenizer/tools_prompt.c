/* tokenizer/tools_prompt.c: a dialog with tools as the chat templates write it (tools.h):
 * the templates' tool prompts rebuilt as (role, content) messages, then framed by
 * mlm_tokenizer_encode_chat_opts. The text must match the Jinja templates byte for byte, so
 * JSON is written as Python's json.dumps writes it (jansson's own dump differs in separators
 * and in reals) and trimming is Python's str.strip (pytext.c). */
#include "tokenizer/tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/pytext.h"

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

/* The static spelling of a role (NULL for one the chat formats do not take). */
static const char *static_role(const char *role) {
    static const char *const ROLES[] = {"system", "user", "assistant", "tool", "ipython"};
    for (size_t i = 0; role && i < sizeof ROLES / sizeof ROLES[0]; i++)
        if (strcmp(role, ROLES[i]) == 0) return ROLES[i];
    return NULL;
}

static int is_role(const mlm_chat_turn *m, const char *role) {
    return m->role && strcmp(m->role, role) == 0;
}

/* M's content ("" for none). */
static const char *content_of(const mlm_chat_turn *m) { return m->content ? m->content : ""; }

static mlm_status oom(mlm_error *err) { return mlm_error_set(err, MLM_ERR_NOMEM, "out of memory"); }

static mlm_status unknown_role(const mlm_chat_turn *m, int i, mlm_error *err) {
    return mlm_error_set(err, MLM_ERR_INVALID_ARG, "messages[%d]: unknown role '%s'", i,
                         m->role ? m->role : "(none)");
}

/* Appends (ROLE, the string B built) to P. */
static mlm_status push(mlm_tools_prompt *p, const char *role, mlm_sbuf *b, mlm_error *err) {
    char *s = mlm_sb_take(b);
    if (!s) return oom(err);
    p->msgs[p->n_msgs].role = role;
    p->msgs[p->n_msgs++].content = s;
    return MLM_OK;
}

/* A call's arguments as the template writes `arguments | tojson`: the parsed object dumped
 * again; text that is no JSON goes in as a JSON string, as the template would dump a str. */
static void call_args(mlm_sbuf *b, const mlm_tool_call *c) {
    const char *text = c->arguments ? c->arguments : "{}";
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    if (v)
        mlm_py_tojson(b, v);
    else
        mlm_py_string(b, text, strlen(text));
    json_decref(v);
}

static mlm_status llama3_render(const mlm_chat_turn *m, int n, const json_t *tools,
                                mlm_tools_prompt *p, mlm_error *err) {
    int i = 0;
    mlm_status st;
    mlm_sbuf b = {0};
    mlm_sb_str(&b, LLAMA3_SYSTEM);
    if (n > 0 && is_role(&m[0], "system")) mlm_py_add_trimmed(&b, content_of(&m[i++]));
    if ((st = push(p, "system", &b, err))) return st;
    if (i >= n)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "messages: with tools, this model's chat template needs a message "
                             "after the system message to put the tools in");
    mlm_sb_str(&b, LLAMA3_TOOLS);
    for (size_t k = 0; k < json_array_size(tools); k++) {
        char *t = mlm_py_dumps(json_array_get(tools, k), 4, ",", ": ");
        if (!t) {
            free(b.s);
            return oom(err);
        }
        mlm_sb_str(&b, t);
        mlm_sb_str(&b, "\n\n");
        free(t);
    }
    mlm_py_add_trimmed(&b, content_of(&m[i++]));
    if ((st = push(p, "user", &b, err))) return st;
    for (; i < n; i++) {
        const char *role = static_role(m[i].role);
        if (!role) return unknown_role(&m[i], i, err);
        if (strcmp(role, "tool") == 0 || strcmp(role, "ipython") == 0) {
            /* the template's `content | tojson`: a string is iterable in Jinja */
            mlm_py_string(&b, content_of(&m[i]), strlen(content_of(&m[i])));
            role = "ipython";
        } else if (m[i].n_calls > 0) {
            if (m[i].n_calls != 1)
                return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                     "messages[%d].tool_calls: this model's chat template takes "
                                     "one tool call per assistant message; messages[%d] has %d",
                                     i, i, (int)m[i].n_calls);
            mlm_sb_str(&b, "{\"name\": \"");
            mlm_sb_str(&b, m[i].calls[0].name ? m[i].calls[0].name : "");
            mlm_sb_str(&b, "\", \"parameters\": ");
            call_args(&b, &m[i].calls[0]);
            mlm_sb_str(&b, "}");
            role = "assistant";
        } else {
            mlm_py_add_trimmed(&b, content_of(&m[i]));
        }
        if ((st = push(p, role, &b, err))) return st;
    }
    return MLM_OK;
}

static mlm_status hermes_render(const mlm_chat_turn *m, int n, const json_t *tools,
                                const char *default_system, mlm_tools_prompt *p,
                                mlm_error *err) {
    int i = 0;
    mlm_status st;
    const char *sys = default_system;
    if (n > 0 && is_role(&m[0], "system")) sys = content_of(&m[i++]);
    mlm_sbuf b = {0};
    if (sys) {
        mlm_sb_str(&b, sys);
        mlm_sb_str(&b, "\n\n");
    }
    mlm_sb_str(&b, HERMES_HEAD);
    for (size_t k = 0; k < json_array_size(tools); k++) {
        mlm_sb_str(&b, "\n");
        mlm_py_tojson(&b, json_array_get(tools, k));
    }
    mlm_sb_str(&b, HERMES_TAIL);
    if ((st = push(p, "system", &b, err))) return st;
    for (; i < n; i++) {
        const char *role = static_role(m[i].role);
        if (!role || strcmp(role, "ipython") == 0) return unknown_role(&m[i], i, err);
        if (strcmp(role, "tool") == 0) {
            /* consecutive results: one user turn, one <tool_response> block each */
            for (int first = i; i < n && is_role(&m[i], "tool"); i++) {
                if (i > first) mlm_sb_str(&b, "\n");
                mlm_sb_str(&b, "<tool_response>\n");
                mlm_sb_str(&b, content_of(&m[i]));
                mlm_sb_str(&b, "\n</tool_response>");
            }
            i--;
            role = "user";
        } else if (strcmp(role, "assistant") == 0 && m[i].n_calls > 0) {
            if (content_of(&m[i])[0]) {
                mlm_sb_str(&b, content_of(&m[i]));
                mlm_sb_str(&b, "\n");
            }
            for (int k = 0; k < m[i].n_calls; k++) {
                if (k) mlm_sb_str(&b, "\n");
                mlm_sb_str(&b, "<tool_call>\n{\"name\": \"");
                mlm_sb_str(&b, m[i].calls[k].name ? m[i].calls[k].name : "");
                mlm_sb_str(&b, "\", \"arguments\": ");
                call_args(&b, &m[i].calls[k]);
                mlm_sb_str(&b, "}\n</tool_call>");
            }
        } else {
            mlm_sb_str(&b, content_of(&m[i]));
        }
        if ((st = push(p, role, &b, err))) return st;
        if (strcmp(role, "assistant") == 0) p->reasoning[p->n_msgs - 1] = m[i].reasoning;
    }
    return MLM_OK;
}

mlm_status mlm_tools_render(mlm_chat_kind kind, const mlm_chat_turn *msgs, int n,
                            const json_t *tools, const char *default_system,
                            mlm_tools_prompt *out, mlm_error *err) {
    memset(out, 0, sizeof *out);
    if (kind == MLM_CHAT_NONE)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED, "tools: this model has no chat format");
    out->msgs = calloc((size_t)n + 2, sizeof *out->msgs);
    out->reasoning = calloc((size_t)n + 2, sizeof *out->reasoning);
    mlm_status st;
    if (!out->msgs || !out->reasoning)
        st = oom(err);
    else if (kind == MLM_CHAT_LLAMA3)
        st = llama3_render(msgs, n, tools, out, err);
    else
        st = hermes_render(msgs, n, tools, default_system, out, err);
    if (st) mlm_tools_prompt_deinit(out);
    return st;
}

void mlm_tools_prompt_deinit(mlm_tools_prompt *p) {
    if (!p) return;
    for (int i = 0; i < p->n_msgs; i++)
        free((char *)p->msgs[i].content);
    free(p->msgs);
    free(p->reasoning);
    memset(p, 0, sizeof *p);
}

mlm_status mlm_tools_load(const char *text, json_t **out, mlm_error *err) {
    *out = NULL;
    if (!text) return MLM_OK;
    json_error_t je;
    json_t *v = json_loads(text, 0, &je);
    if (!v)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "tools: not JSON: %s (line %d)", je.text,
                             je.line);
    if (!json_is_array(v)) {
        json_decref(v);
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "tools: not a JSON array");
    }
    *out = v;
    return MLM_OK;
}

mlm_status mlm_tokenizer_encode_dialog(const mlm_tokenizer *tok, const mlm_chat_dialog *d,
                                       mlm_tokens *out, mlm_error *err) {
    mlm_chat_kind kind = mlm_tokenizer_chat_kind(tok);
    if (d->n_msgs < 0 || (d->n_msgs > 0 && !d->msgs))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "messages: %d messages at %p",
                             (int)d->n_msgs, (const void *)d->msgs);
    mlm_chat_opts opts = {d->add_generation_prompt, d->thinking, NULL};
    mlm_tools_prompt tp = {0};
    json_t *tools = NULL;
    mlm_status st = kind == MLM_CHAT_NONE ? MLM_OK : mlm_tools_load(d->tools, &tools, err);
    if (st) return st;
    int n = d->n_msgs;
    if (tools) { /* the template's tool form */
        st = mlm_tools_render(kind, d->msgs, n, tools, mlm_tokenizer_chat_system(tok), &tp, err);
        json_decref(tools);
        if (st) return st;
        n = tp.n_msgs;
    } else {
        tp.msgs = calloc((size_t)n + 1, sizeof *tp.msgs);
        tp.reasoning = calloc((size_t)n + 1, sizeof *tp.reasoning);
        if (!tp.msgs || !tp.reasoning) {
            mlm_tools_prompt_deinit(&tp);
            return oom(err);
        }
        for (int i = 0; i < n; i++) { /* borrowed: tp.n_msgs stays 0 */
            tp.msgs[i].role = d->msgs[i].role;
            tp.msgs[i].content = content_of(&d->msgs[i]);
            tp.reasoning[i] = d->msgs[i].reasoning;
        }
    }
    opts.reasoning = tp.reasoning;
    st = mlm_tokenizer_encode_chat_opts(tok, tp.msgs, n, &opts, out, err);
    mlm_tools_prompt_deinit(&tp);
    return st;
}
