/* tests/fuzz/fuzz_server_request.c: libFuzzer target for the server's request parser
 * (tools/server/request.c): the input is an HTTP body, parsed as both a chat completions and
 * a completions request, and (its bytes as base64 text) by the data: URL decoder. On success
 * the documented invariants must hold (content parts in order, images only in user messages,
 * each with its bytes, counted right); on failure the error must render as JSON that parses
 * back. The body is also parsed as /tokenize and /detokenize requests. Violations abort,
 * which libFuzzer reports. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static void check_ok(const srv_request *r, srv_kind kind) {
    REQUIRE(r->kind == kind);
    if (kind == SRV_CHAT) {
        REQUIRE(r->n_messages >= 1 && r->messages && r->n_prompts == 0);
        int n_images = 0;
        for (int i = 0; i < r->n_messages; i++) {
            const srv_message *m = &r->messages[i];
            const char *role = m->role;
            REQUIRE(role && m->content);
            REQUIRE(!strcmp(role, "system") || !strcmp(role, "user") ||
                    !strcmp(role, "assistant") || !strcmp(role, "tool"));
            REQUIRE(m->n_parts >= 0 && (m->n_parts == 0 || m->parts));
            int imgs = 0;
            size_t text = 0;
            for (int k = 0; k < m->n_parts; k++) {
                const srv_part *p = &m->parts[k];
                REQUIRE((p->text != NULL) != (p->image != NULL));
                if (p->image) {
                    REQUIRE(p->n_image >= 1);
                    imgs++;
                } else {
                    text += strlen(p->text);
                }
            }
            REQUIRE(imgs == m->n_images);
            if (imgs) REQUIRE(!strcmp(role, "user"));
            if (m->n_parts) REQUIRE(strlen(m->content) <= text); /* joined (NULs cut) */
            n_images += imgs;
        }
        REQUIRE(n_images == r->n_images);
    } else {
        REQUIRE(r->n_prompts >= 1 && r->prompts && r->n_messages == 0);
        for (int i = 0; i < r->n_prompts; i++) {
            const srv_prompt *p = &r->prompts[i];
            REQUIRE((p->text != NULL) != (p->ids != NULL));
            if (p->ids) REQUIRE(p->n_ids >= 1);
            for (int32_t k = 0; p->ids && k < p->n_ids; k++)
                REQUIRE(p->ids[k] >= 0);
        }
    }
    REQUIRE(r->n_stop >= 0 && r->n_stop <= 4);
    for (int i = 0; i < r->n_stop; i++)
        REQUIRE(r->stop[i] && r->stop[i][0]);
    REQUIRE(r->max_tokens == -1 || r->max_tokens >= 1);
    if (r->has_temperature) REQUIRE(r->temperature >= 0 && r->temperature <= 2);
    if (r->has_top_p) REQUIRE(r->top_p > 0 && r->top_p <= 1);
    if (r->has_top_k) REQUIRE(r->top_k >= -1);
    REQUIRE(r->presence_penalty >= -2 && r->presence_penalty <= 2);
    REQUIRE(r->frequency_penalty >= -2 && r->frequency_penalty <= 2);
    REQUIRE(r->top_logprobs >= 0 && r->top_logprobs <= 20);
    if (r->top_logprobs) REQUIRE(r->logprobs);
    if (r->include_usage) REQUIRE(r->stream);
}

static void check_error(const srv_error *e) {
    REQUIRE(e->http == 400 || e->http == 500);
    REQUIRE(memchr(e->message, 0, sizeof e->message) && e->message[0]);
    char *text = srv_error_json(e);
    REQUIRE(text);
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    REQUIRE(j);
    json_t *err = json_object_get(j, "error");
    REQUIRE(json_is_string(json_object_get(err, "message")));
    REQUIRE(json_is_string(json_object_get(err, "type")));
    json_t *param = json_object_get(err, "param");
    REQUIRE(e->param[0] ? json_is_string(param) : json_is_null(param));
    json_decref(j);
    free(text);
}

/* The base64 decoder on any text: it never writes past its bound (ASan), and what it accepts
 * is whole groups of four characters (whitespace aside) giving three bytes each, less one per
 * '=' of padding. */
static void check_base64(const uint8_t *data, size_t size) {
    unsigned char *out = malloc(size / 4 * 3 + 3);
    REQUIRE(out);
    size_t n = 0, bad = 0;
    if (srv_base64_decode((const char *)data, size, out, &n, &bad)) {
        size_t sig = 0, pad = 0;
        for (size_t i = 0; i < size; i++) {
            uint8_t c = data[i];
            sig += c != ' ' && c != '\t' && c != '\r' && c != '\n';
            pad += c == '=';
        }
        REQUIRE(sig % 4 == 0 && pad <= 2 && n == sig / 4 * 3 - pad);
    } else {
        REQUIRE(bad <= size);
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check_base64(data, size);
    for (int k = 0; k < 2; k++) {
        srv_kind kind = k ? SRV_COMPLETION : SRV_CHAT;
        srv_request r;
        srv_error e;
        memset(&e, 0, sizeof e);
        if (srv_request_parse((const char *)data, size, kind, &r, &e)) {
            check_ok(&r, kind);
            srv_request_deinit(&r);
        } else {
            check_error(&e);
        }
        srv_request_deinit(&r); /* zeroed either way: a no-op */
    }
    for (int detok = 0; detok < 2; detok++) { /* the same body as /tokenize and /detokenize */
        srv_tok_request q;
        srv_error e;
        memset(&e, 0, sizeof e);
        if (srv_tokenize_parse((const char *)data, size, detok, &q, &e)) {
            if (detok)
                REQUIRE(q.n_ids >= 0 && (q.n_ids == 0 || q.ids) && !q.content);
            else
                REQUIRE(q.content && !q.content[q.len] && !q.ids);
            for (int32_t i = 0; i < q.n_ids; i++)
                REQUIRE(q.ids[i] >= 0);
            srv_tok_request_deinit(&q);
        } else {
            check_error(&e);
        }
    }
    return 0;
}
