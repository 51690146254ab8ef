/* tools/server/dialog.c: a chat request's dialog as token ids (dialog.h): the request's
 * messages as the library's chat turns; what the chat format writes is the library's. */
#include "dialog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *srv_tools_text(const srv_request *r, int *oom) {
    *oom = 0;
    if (!r->tools || r->tool_choice == SRV_TOOLS_NONE) return NULL;
    char *text = json_dumps(r->tools, JSON_COMPACT); /* reals with 17 digits: read back exact */
    *oom = !text;
    return text;
}

/* The field a library message names ("messages[1].tool_calls: ..."), else "messages". */
static void field_of(const char *msg, char *param, size_t cap) {
    size_t n = strcspn(msg, ": ");
    int named = (strncmp(msg, "messages", 8) == 0 || strncmp(msg, "tools", 5) == 0) &&
                msg[n] == ':' && n < cap;
    snprintf(param, cap, "%.*s", named ? (int)n : 8, named ? msg : "messages");
}

int srv_chat_encode(const mlm_tokenizer *tok, const char *alias, const srv_request *r,
                    mlm_tokens *out, srv_error *e) {
    int n = r->n_messages, n_calls = 0, oom = 0;
    for (int i = 0; i < n; i++)
        n_calls += r->messages[i].n_tool_calls;
    mlm_chat_turn *turns = calloc((size_t)n + 1, sizeof *turns);
    mlm_tool_call *calls = calloc((size_t)n_calls + 1, sizeof *calls);
    char *tools = srv_tools_text(r, &oom);
    if (!turns || !calls || oom) {
        free(turns), free(calls), free(tools);
        return srv_fail(e, 500, "server_error", "", "", "out of memory");
    }
    mlm_tool_call *c = calls;
    for (int i = 0; i < n; i++) {
        const srv_message *m = &r->messages[i];
        turns[i] = (mlm_chat_turn){m->role, m->content, m->reasoning, c, m->n_tool_calls};
        for (int k = 0; k < m->n_tool_calls; k++, c++)
            *c = (mlm_tool_call){m->tool_calls[k].id, m->tool_calls[k].name,
                                 m->tool_calls[k].arguments};
    }
    mlm_chat_dialog d = {turns, n, tools, 1, r->thinking};
    mlm_error err = {0};
    mlm_status st = mlm_tokenizer_encode_dialog(tok, &d, out, &err);
    free(turns), free(calls), free(tools);
    if (st == MLM_ERR_UNSUPPORTED)
        return srv_fail(e, 400, "invalid_request_error", "messages", "",
                        "The model `%s` has no chat format; use /v1/completions.", alias);
    if (st == MLM_ERR_INVALID_ARG) {
        char param[96];
        field_of(err.msg, param, sizeof param);
        return srv_fail(e, 400, "invalid_request_error", param, "", "%s", err.msg);
    }
    if (st) return srv_fail(e, 500, "server_error", "", "", "%s", err.msg);
    return 1;
}
