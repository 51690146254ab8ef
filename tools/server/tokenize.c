/* tools/server/tokenize.c: POST /tokenize and POST /detokenize, as llama-server answers them:
 * text to the model's token ids ({"tokens": [...]}) and ids back to text ({"content": ...},
 * invalid UTF-8 replaced by U+FFFD per maximal subpart). Parsing is request.c's. */
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "http.h"

enum MHD_Result srv_handle_tokenize(srv_server *srv, struct MHD_Connection *conn, const char *path,
                                    const char *body, size_t len, int detokenize) {
    srv_tok_request q;
    srv_error e;
    if (!srv_tokenize_parse(body, len, detokenize, &q, &e))
        return srv_http_send_error(srv, conn, path, &e);
    json_t *o = NULL;
    mlm_error err = {0};
    int32_t n_vocab = mlm_tokenizer_n_vocab(srv->tok);
    if (detokenize) {
        for (int32_t k = 0; k < q.n_ids; k++)
            if (q.ids[k] >= n_vocab) {
                char param[48];
                snprintf(param, sizeof param, "tokens[%d]", (int)k);
                srv_fail(&e, 400, "invalid_request_error", param, "invalid_value",
                         "Invalid '%s': token id %d is not in the vocabulary [0, %d).", param,
                         (int)q.ids[k], (int)n_vocab);
                srv_tok_request_deinit(&q);
                return srv_http_send_error(srv, conn, path, &e);
            }
        /* the streaming detokenizer: invalid UTF-8 becomes one U+FFFD per maximal subpart,
         * as Python's bytes.decode(errors="replace") */
        size_t cap = srv->detok_cap, len_out = 0, size = 4 * cap;
        char *text = malloc(size);
        mlm_detok dt;
        mlm_detok_init(&dt);
        for (int32_t k = 0; text && k <= q.n_ids && !err.status; k++) {
            if (len_out + cap > size) { /* room for one more token's bytes */
                char *t = realloc(text, size *= 2);
                if (!t) free(text);
                text = t;
                if (!text) break;
            }
            size_t n = 0;
            if (k == q.n_ids)
                len_out += mlm_detok_flush(&dt, text + len_out, cap);
            else if (!mlm_detok_push(&dt, srv->tok, q.ids[k], text + len_out, cap, &n, &err))
                len_out += n;
        }
        if (text && !err.status) {
            json_t *t = srv_json_text(text, len_out);
            o = t ? json_pack("{s:o}", "content", t) : NULL;
        }
        free(text);
    } else {
        mlm_tokens ids;
        mlm_tokens_init(&ids);
        mlm_encode_params ep = mlm_encode_default_params();
        ep.add_bos = q.add_special && mlm_tokenizer_bos_id(srv->tok) >= 0;
        ep.parse_special = q.parse_special;
        if (mlm_tokenizer_encode(srv->tok, q.content, q.len, &ep, &ids, &err) == MLM_OK) {
            json_t *a = json_array();
            for (int64_t i = 0; a && i < ids.n; i++)
                if (json_array_append_new(a, json_integer(ids.ids[i]))) {
                    json_decref(a);
                    a = NULL;
                }
            o = a ? json_pack("{s:o}", "tokens", a) : NULL;
        }
        mlm_tokens_deinit(&ids);
    }
    srv_tok_request_deinit(&q);
    if (err.status) {
        srv_fail(&e, 500, "server_error", "", NULL, "%s", err.msg);
        json_decref(o);
        return srv_http_send_error(srv, conn, path, &e);
    }
    char *out = o ? json_dumps(o, SRV_JSON_FLAGS) : NULL;
    json_decref(o);
    return srv_http_send(srv, conn, path, 200, "application/json", out, out ? strlen(out) : 0);
}
