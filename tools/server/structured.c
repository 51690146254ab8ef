/* tools/server/structured.c: what a request constrains its replies to (structured.h). With
 * tool_choice "required" or a named function, the reply is a call: the format's call schema
 * (mlm_tool_call_schema), wrapped for ChatML in "<tool_call>\n" ... "\n</tool_call>" blocks (up to 8
 * with parallel_tool_calls, one otherwise); Llama 3 writes one bare call. Else
 * response_format's schema, or any JSON object for json_object. The vocabulary trie is built
 * once, on the first such request. */
#include "structured.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "dialog.h"

static mlm_token_trie *server_trie(srv_server *srv, srv_error *e) {
    pthread_mutex_lock(&srv->trie_mu);
    if (!srv->trie) {
        mlm_error err = {0};
        if (mlm_token_trie_create(srv->tok, &srv->trie, &err) != MLM_OK)
            srv_fail(e, 500, "server_error", "", "", "%s", err.msg);
    }
    mlm_token_trie *t = srv->trie;
    pthread_mutex_unlock(&srv->trie_mu);
    return t;
}

int srv_structured_setup(srv_server *srv, const srv_request *r, srv_job *j, srv_error *e) {
    mlm_chat_kind kind = mlm_tokenizer_chat_kind(srv->tok);
    int oom = 0;
    if (r->kind == SRV_CHAT && kind != MLM_CHAT_NONE && (j->tools = srv_tools_text(r, &oom))) {
        j->tool_kind = kind;
        if (getrandom(&j->rng, sizeof j->rng, 0) != (ssize_t)sizeof j->rng)
            j->rng = (uint64_t)(uintptr_t)j ^ 0x9E3779B97F4A7C15ull;
    }
    if (oom) return srv_fail(e, 500, "server_error", "", "", "out of memory");
    int call = j->tools && (r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED);
    if (!call && r->format == SRV_FORMAT_TEXT) return 1;
    char *text = NULL;
    const char *param = "response_format.json_schema.schema";
    mlm_grammar_wrap wrap;
    const mlm_grammar_wrap *w = NULL;
    mlm_error err = {0};
    mlm_status st = MLM_OK;
    if (call) {
        const char *only = r->tool_choice == SRV_TOOLS_NAMED ? r->tool_choice_name : NULL;
        st = mlm_tool_call_schema(kind, j->tools, only, &text, &wrap, &err);
        if (st == MLM_ERR_NOMEM) return srv_fail(e, 500, "server_error", "", "", "%s", err.msg);
        if (st) return srv_fail(e, 400, "invalid_request_error", "tools", "", "%s", err.msg);
        param = "tools";
        if (wrap.before) { /* calls in tags: parallel ones with tool_choice required */
            wrap.max_values = r->parallel_tool_calls && r->tool_choice == SRV_TOOLS_REQUIRED ? 8 : 1;
            w = &wrap;
        }
    } else if (r->format == SRV_FORMAT_JSON_SCHEMA && r->schema) {
        text = json_dumps(r->schema, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text) return srv_fail(e, 500, "server_error", "", "", "out of memory");
    }
    st = mlm_grammar_compile(text, text ? strlen(text) : 0, w, &j->grammar, &err);
    free(text);
    if (st == MLM_ERR_NOMEM) return srv_fail(e, 500, "server_error", "", "", "%s", err.msg);
    if (st) return srv_fail(e, 400, "invalid_request_error", param, "invalid_schema", "%s", err.msg);
    mlm_token_trie *trie = server_trie(srv, e);
    if (!trie) return 0;
    if (!(j->matchers = calloc((size_t)j->n_choices, sizeof *j->matchers)))
        return srv_fail(e, 500, "server_error", "", "", "out of memory");
    for (int i = 0; i < j->n_choices; i++)
        if (mlm_matcher_create(j->grammar, trie, &j->matchers[i], &err))
            return srv_fail(e, 500, "server_error", "", "", "%s", err.msg);
    return 1;
}
