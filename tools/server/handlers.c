/* tools/server/handlers.c: chat and text completions. Parses the body (request.c), checks the
 * model name, turns messages or prompts into token ids (the chat format, or text with BOS, or
 * ids as given), checks the lengths against max_seq_len as vLLM does, opens and encodes a chat
 * request's images (images.c), submits one scheduler request per prompt, and either streams
 * (stream.c) or waits for every choice and answers with one OpenAI JSON object. Owns nothing
 * beyond the call: the job (and with it the images) is released before returning (or handed
 * to the stream). */
#include "handlers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "http.h"
#include "images.h"
#include "structured.h"
#include "dialog.h"

// ---- JSON pieces ----

/* The length of the valid UTF-8 sequence at S (N bytes left), or 0 if there is none. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t k = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!k || k > n) return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
    if (c == 0xED && s[1] > 0x9F) return 0; /* surrogates */
    if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
    if (c == 0xF4 && s[1] > 0x8F) return 0; /* over U+10FFFF */
    return k;
}

json_t *srv_json_text(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t bad = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(u + i, n - i);
        if (!k) bad++, k = 1;
        i += k;
    }
    if (!bad) return json_stringn(s, n);
    char *t = malloc(n + 2 * bad + 1);
    if (!t) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(u + i, n - i);
        if (!k) {
            memcpy(t + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(t + o, s + i, k);
            o += k;
            i += k;
        }
    }
    json_t *j = json_stringn(t, o);
    free(t);
    return j;
}

/* A log-probability (-inf, from a -inf logit, as OpenAI's -9999). */
static json_t *jlp(float x) {
    return json_real(isfinite(x) ? (double)x : x > 0 ? 9999.0 : -9999.0);
}

static json_t *token_text(const mlm_tokenizer *tok, int32_t id) {
    size_t n = 0;
    const char *b = mlm_tokenizer_token_bytes(tok, id, &n);
    return srv_json_text(b ? b : "", b ? n : 0);
}

static json_t *token_bytes(const mlm_tokenizer *tok, int32_t id) {
    size_t n = 0;
    const char *b = mlm_tokenizer_token_bytes(tok, id, &n);
    json_t *a = json_array();
    for (size_t i = 0; a && b && i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)b[i]));
    return a;
}

/* {"token","logprob","bytes"} of chat logprobs. */
static json_t *chat_entry(const mlm_tokenizer *tok, int32_t id, float lp) {
    return json_pack("{s:o, s:o, s:o}", "token", token_text(tok, id), "logprob", jlp(lp),
                     "bytes", token_bytes(tok, id));
}

json_t *srv_json_logprobs(const srv_job *j, const srv_choice *c, int64_t from, int64_t to) {
    const mlm_tokenizer *tok = j->srv->tok;
    int K = j->top_k;
    if (j->kind == SRV_CHAT) {
        json_t *content = json_array();
        for (int64_t i = from; content && i < to; i++) {
            const srv_tok *t = &c->toks[i];
            json_t *e = chat_entry(tok, t->id, t->logprob), *top = json_array();
            for (int k = 0; top && K > 0 && k < c->n_top[i]; k++)
                json_array_append_new(top, chat_entry(tok, c->top_ids[i * K + k], c->top_lp[i * K + k]));
            if (e && top) json_object_set_new(e, "top_logprobs", top);
            else json_decref(top);
            json_array_append_new(content, e);
        }
        return json_pack("{s:o}", "content", content);
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int64_t i = from; tokens && lps && tops && offs && i < to; i++) {
        const srv_tok *t = &c->toks[i];
        json_array_append_new(tokens, token_text(tok, t->id));
        json_array_append_new(lps, jlp(t->logprob));
        json_array_append_new(offs, json_integer((json_int_t)t->cp_off));
        /* OpenAI: the K most likely, and always the sampled token */
        json_t *d = json_object();
        for (int k = 0; d && K > 0 && k < c->n_top[i]; k++) {
            json_t *key = token_text(tok, c->top_ids[i * K + k]);
            if (key) json_object_set_new(d, json_string_value(key), jlp(c->top_lp[i * K + k]));
            json_decref(key);
        }
        json_t *key = token_text(tok, t->id);
        if (d && key && !json_object_get(d, json_string_value(key)))
            json_object_set_new(d, json_string_value(key), jlp(t->logprob));
        json_decref(key);
        json_array_append_new(tops, d);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

json_t *srv_json_usage(const srv_job *j) {
    int64_t prompt = 0, gen = 0, cached = 0;
    for (int i = 0; i < j->n_choices; i++) { /* a prompt counts once, however many samples */
        if (i % j->n_per_prompt == 0) {
            prompt += j->choices[i].n_prompt;
            cached += j->choices[i].n_cached;
        }
        gen += j->choices[i].n_generated;
    }
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)prompt,
                     "completion_tokens", (json_int_t)gen, "total_tokens",
                     (json_int_t)(prompt + gen), "prompt_tokens_details", "cached_tokens",
                     (json_int_t)cached);
}

int64_t srv_choice_n_toks(const srv_choice *c) {
    if (!c->cut) return c->n_toks;
    int64_t n = 0;
    while (n < c->n_toks && c->toks[n].off < c->len) n++;
    return n;
}

mlm_reasoning_split srv_choice_split(const srv_job *j, const srv_choice *c) {
    mlm_reasoning_split sp = {0, 0, 0, 0, c->len};
    if (j->reasoning) mlm_chat_split_reasoning(c->text ? c->text : "", c->len, c->done, &sp);
    return sp;
}

const char *srv_finish_reason(mlm_finish f) {
    return f == MLM_FINISH_LENGTH ? "length" : "stop";
}

// ---- from a request to token ids ----

/* One prompt's ids, and the limits checked for it. */
typedef struct prompt_ids {
    mlm_tokens ids;
    int32_t max_new;
} prompt_ids;

static int tokenize(srv_server *srv, const srv_request *r, prompt_ids *p, int n, srv_error *e) {
    mlm_error err = {0};
    if (r->kind == SRV_CHAT && r->n_images) return srv_images_prompt(srv, r, &p[0].ids, e);
    if (r->kind == SRV_CHAT) return srv_chat_encode(srv->tok, srv->alias, r, &p[0].ids, e);
    int32_t n_vocab = mlm_tokenizer_n_vocab(srv->tok);
    for (int i = 0; i < n; i++) {
        const srv_prompt *q = &r->prompts[i];
        if (q->text) {
            mlm_encode_params ep = mlm_encode_default_params();
            ep.add_bos = mlm_tokenizer_bos_id(srv->tok) >= 0;
            mlm_status st = mlm_tokenizer_encode(srv->tok, q->text, strlen(q->text), &ep, &p[i].ids, &err);
            if (st) return srv_fail(e, st == MLM_ERR_NOMEM ? 500 : 400,
                                    st == MLM_ERR_NOMEM ? "server_error" : "invalid_request_error",
                                    "prompt", "", "%s", err.msg);
        } else {
            for (int32_t k = 0; k < q->n_ids; k++) {
                if (q->ids[k] < 0 || q->ids[k] >= n_vocab)
                    return srv_fail(e, 400, "invalid_request_error", "prompt", "",
                                    "Token id %d is out of vocabulary (the model has %d tokens).",
                                    q->ids[k], n_vocab);
                if (mlm_tokens_push(&p[i].ids, q->ids[k]))
                    return srv_fail(e, 500, "server_error", "", "", "out of memory");
            }
        }
        if (p[i].ids.n == 0)
            return srv_fail(e, 400, "invalid_request_error", "prompt", "", "The prompt is empty.");
    }
    return 1;
}

/* vLLM's length checks: the prompt must leave room for a token, and an explicit max_tokens
 * must fit beside it. */
static int check_lengths(srv_server *srv, const srv_request *r, prompt_ids *p, int n, srv_error *e) {
    const char *what = r->kind == SRV_CHAT ? "messages" : "prompt";
    int64_t L = srv->max_seq_len;
    for (int i = 0; i < n; i++) {
        int64_t np = p[i].ids.n;
        if (np >= L)
            return srv_fail(e, 400, "invalid_request_error", what, "",
                            "This model's maximum context length is %lld tokens. However, your %s "
                            "resulted in %lld tokens. Please reduce the length of the %s.",
                            (long long)L, what, (long long)np, what);
        if (r->max_tokens >= 0 && np + r->max_tokens > L)
            return srv_fail(e, 400, "invalid_request_error", "max_tokens", "",
                            "This model's maximum context length is %lld tokens. However, you "
                            "requested %lld tokens (%lld in the %s, %lld in the completion). "
                            "Please reduce the length of the %s or completion.",
                            (long long)L, (long long)(np + r->max_tokens), (long long)np, what,
                            (long long)r->max_tokens, what);
        p[i].max_new = (int32_t)(r->max_tokens >= 0 ? r->max_tokens : L - np);
    }
    return 1;
}

static uint64_t random_u64(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&x;
    }
    return x;
}

/* Choice K of a prompt's N samples with seed SEED + K when the request gives one (so choice
 * K is the same request made with that seed), else with a random seed of its own. */
static mlm_sampler_params sampling_for(const srv_server *srv, const srv_request *r, int k) {
    mlm_sampler_params sp = srv->defaults;
    if (r->has_temperature) sp.temperature = (float)r->temperature;
    if (r->has_top_p) sp.top_p = (float)r->top_p;
    if (r->has_top_k) sp.top_k = r->top_k < 0 ? 0 : (int32_t)r->top_k;
    sp.seed = r->has_seed ? r->seed + (uint64_t)k : random_u64();
    return sp;
}

/* Submits choice I of J: prompt I / R->n, sample I % R->n. 0 with E filled on failure (every
 * submitted choice is cancelled then). */
static int submit_one(srv_job *j, const srv_request *r, prompt_ids *p, int i, srv_error *e) {
    srv_server *srv = j->srv;
    const prompt_ids *pi = &p[i / r->n];
    mlm_request_params q = mlm_request_default_params();
    q.prompt = pi->ids.ids;
    q.n_prompt = (int32_t)pi->ids.n;
    q.max_new_tokens = pi->max_new;
    q.sampling = sampling_for(srv, r, i % r->n);
    q.presence_penalty = (float)r->presence_penalty;
    q.frequency_penalty = (float)r->frequency_penalty;
    q.dry.multiplier = (float)r->dry_multiplier;
    q.dry.base = (float)r->dry_base;
    q.dry.allowed_length = (int32_t)r->dry_allowed_length;
    q.dry.last_n = (int32_t)r->dry_penalty_last_n;
    q.dry.breakers = srv->dry_breakers;
    q.draft.max = r->spec_n_max >= 0 && r->spec_n_max < srv->draft_max ? (int32_t)r->spec_n_max
                                                                       : srv->draft_max;
    if (!r->ignore_eos) {
        q.stop_ids = r->kind == SRV_CHAT ? srv->stop_chat : srv->stop_base;
        q.n_stop_ids = r->kind == SRV_CHAT ? srv->n_stop_chat : srv->n_stop_base;
    }
    q.images = j->images; /* owned by the job: they outlive every final event */
    q.n_images = j->n_images;
    q.matcher = j->matchers ? j->matchers[i] : NULL; /* the job's, freed with it */
    mlm_error err = {0};
    mlm_status st = srv_job_submit(j, i, &q, &err);
    if (st == MLM_OK) return 1;
    srv_job_cancel(j);
    if (st == MLM_ERR_CANCELLED)
        return srv_fail(e, 503, "server_error", "", "shutting_down", "The server is shutting down.");
    if (st == MLM_ERR_CAPACITY)
        return srv_fail(e, 503, "server_error", "", "queue_full", "The server is busy (%s).",
                        err.msg);
    if (st == MLM_ERR_INVALID_ARG)
        return srv_fail(e, 400, "invalid_request_error", "", "", "%s", err.msg);
    return srv_fail(e, 500, "server_error", "", "", "%s", err.msg);
}

/* Submits every choice of J: the first sample of each prompt, and with n > 1 the others once
 * that one has computed the prompt, so that they take its KV blocks from the prefix cache
 * instead of computing them again. *GONE is set when the client went away meanwhile. */
static int submit_all(srv_job *j, const srv_request *r, prompt_ids *p, srv_error *e, int *gone) {
    for (int i = 0; i < j->n_choices; i += r->n)
        if (!submit_one(j, r, p, i, e)) return 0;
    if (r->n == 1) return 1;
    for (int i = 0; i < j->n_choices; i += r->n)
        if (!srv_job_wait_started(j, i)) {
            *gone = 1;
            return 0;
        }
    for (int i = 0; i < j->n_choices; i++)
        if (i % r->n && !submit_one(j, r, p, i, e)) return 0;
    return 1;
}

// ---- whole responses ----

/* A reply's calls as OpenAI's tool_calls array. */
json_t *srv_json_tool_calls(const mlm_tool_reply *t) {
    json_t *a = json_array();
    for (int k = 0; a && k < t->n_calls; k++)
        json_array_append_new(a, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", t->calls[k].id, "type",
                                           "function", "function", "name", t->calls[k].name,
                                           "arguments", t->calls[k].arguments));
    return a;
}

/* Adds "reasoning_content" to chat message M when reply C has a <think> block. */
static void add_reasoning(json_t *m, const srv_choice *c, const mlm_reasoning_split *sp) {
    if (m && sp->has_reasoning)
        json_object_set_new(m, "reasoning_content",
                            srv_json_text(c->text + sp->reasoning_begin,
                                          sp->reasoning_end - sp->reasoning_begin));
}

static json_t *choice_json(srv_job *j, const srv_choice *c) {
    int64_t nt = srv_choice_n_toks(c);
    json_t *lp = j->logprobs ? srv_json_logprobs(j, c, 0, nt) : json_null();
    const char *fr = srv_finish_reason(c->finish);
    const char *text = c->text ? c->text : "";
    mlm_reasoning_split sp = srv_choice_split(j, c); /* C is done: the final split */
    const char *body = text + sp.content_begin; /* the content: the reply after its reasoning */
    size_t body_len = c->len - sp.content_begin;
    mlm_tool_reply t = {0};
    mlm_error err;
    if (j->tool_kind && c->finish == MLM_FINISH_STOP &&
        mlm_tool_reply_parse(j->tool_kind, j->tools, body, body_len, &j->rng, &t, &err))
        return NULL;
    if (t.n_calls) {
        json_t *content = t.content ? srv_json_text(t.content, strlen(t.content)) : json_null();
        json_t *o = json_pack("{s:i, s:{s:s, s:o, s:o}, s:o, s:s}", "index", c->index, "message",
                              "role", "assistant", "content", content, "tool_calls",
                              srv_json_tool_calls(&t), "logprobs", lp, "finish_reason",
                              "tool_calls");
        add_reasoning(json_object_get(o, "message"), c, &sp);
        mlm_tool_reply_deinit(&t);
        return o;
    }
    mlm_tool_reply_deinit(&t);
    if (j->kind == SRV_CHAT) {
        /* after a <think> block an empty content is null, as vLLM writes it */
        json_t *content = sp.has_reasoning && !body_len ? json_null()
                                                        : srv_json_text(body, body_len);
        json_t *o = json_pack("{s:i, s:{s:s, s:o}, s:o, s:s}", "index", c->index, "message",
                              "role", "assistant", "content", content, "logprobs", lp,
                              "finish_reason", fr);
        add_reasoning(json_object_get(o, "message"), c, &sp);
        return o;
    }
    json_t *text_json = srv_json_text(text, c->len);
    return json_pack("{s:i, s:o, s:o, s:s}", "index", c->index, "text", text_json, "logprobs", lp,
                     "finish_reason", fr);
}

/* The response of a finished job, or an error for a choice that failed (the mutex held). */
static json_t *response_json(srv_job *j, srv_error *e) {
    for (int i = 0; i < j->n_choices; i++) {
        const srv_choice *c = &j->choices[i];
        if (c->finish == MLM_FINISH_ERROR) {
            srv_fail(e, 500, "server_error", "", "", "%s", c->error);
            return NULL;
        }
        if (c->finish == MLM_FINISH_CANCELLED) {
            srv_fail(e, 503, "server_error", "", "shutting_down", "The server is shutting down.");
            return NULL;
        }
    }
    json_t *choices = json_array();
    for (int i = 0; choices && i < j->n_choices; i++)
        json_array_append_new(choices, choice_json(j, &j->choices[i]));
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", j->id, "object",
                          j->kind == SRV_CHAT ? "chat.completion" : "text_completion", "created",
                          (json_int_t)j->created, "model", j->srv->alias, "choices", choices,
                          "usage", srv_json_usage(j));
    if (!o) srv_fail(e, 500, "server_error", "", "", "out of memory");
    return o;
}

// ---- the handler ----

enum MHD_Result srv_handle_generate(srv_server *srv, struct MHD_Connection *conn,
                                    const char *path, srv_kind kind, const char *body,
                                    size_t len) {
    srv_request r;
    srv_error e;
    if (atomic_load(&srv->draining)) {
        srv_fail(&e, 503, "server_error", "", "shutting_down", "The server is shutting down.");
        return srv_http_send_error(srv, conn, path, &e);
    }
    double t_arrival = srv_now();
    if (!srv_request_parse(body, len, kind, &r, &e)) return srv_http_send_error(srv, conn, path, &e);
    if (r.model && strcmp(r.model, srv->alias) && strcmp(r.model, srv->model_path)) {
        char shown[200];
        snprintf(shown, sizeof shown, "%s", r.model);
        srv_request_deinit(&r);
        srv_fail(&e, 404, "invalid_request_error", "model", "model_not_found",
                 "The model `%s` does not exist.", shown);
        return srv_http_send_error(srv, conn, path, &e);
    }
    srv_metrics_images(srv->metrics, r.n_images);
    if (r.n_images && !srv_images_check(srv, &r, &e)) {
        srv_request_deinit(&r);
        return srv_http_send_error(srv, conn, path, &e);
    }
    int n = kind == SRV_CHAT ? 1 : r.n_prompts; /* prompts; each gives r.n choices */
    prompt_ids *p = n > 0 ? calloc((size_t)n, sizeof *p) : NULL;
    srv_job *j = NULL;
    int ok = p != NULL, gone = 0;
    if (!ok) srv_fail(&e, n > 0 ? 500 : 400, n > 0 ? "server_error" : "invalid_request_error",
                      "", "", n > 0 ? "out of memory" : "no prompt");
    for (int i = 0; ok && i < n; i++) mlm_tokens_init(&p[i].ids);
    if (ok) ok = tokenize(srv, &r, p, n, &e) && check_lengths(srv, &r, p, n, &e);
    if (ok && !(j = srv_job_create(srv, &r, n * r.n)))
        ok = srv_fail(&e, 500, "server_error", "", "", "out of memory");
    if (ok) ok = srv_structured_setup(srv, &r, j, &e);
    if (ok) {
        uint64_t a = random_u64(), b = random_u64();
        snprintf(j->id, sizeof j->id, "%s-%016llx%08llx", kind == SRV_CHAT ? "chatcmpl" : "cmpl",
                 (unsigned long long)a, (unsigned long long)(b & 0xffffffffu));
        j->created = (int64_t)time(NULL);
        j->fd = srv_http_conn_fd(conn);
    }
    if (ok && r.n_images) { /* the images' decoding and encoding count in the latencies */
        j->t_start = t_arrival;
        ok = srv_images_open(srv, &r, j, &e) && srv_images_encode(srv, &r, j, &e, &gone);
    }
    if (ok) ok = submit_all(j, &r, p, &e, &gone);
    for (int i = 0; p && i < n; i++) mlm_tokens_deinit(&p[i].ids);
    free(p);
    srv_request_deinit(&r);
    if (gone) { /* the client went away (or the server stops) while the images were encoded
                 or the first choice read the prompt */
        srv_job_release(j);
        if (atomic_load(&srv->aborting)) {
            srv_fail(&e, 503, "server_error", "", "shutting_down", "The server is shutting down.");
            return srv_http_send_error(srv, conn, path, &e);
        }
        srv_metrics_request(srv->metrics, path, 499);
        return MHD_NO;
    }
    if (!ok) {
        srv_job_release(j);
        return srv_http_send_error(srv, conn, path, &e);
    }
    if (j->stream) return srv_stream_start(srv, conn, path, j);

    if (!srv_job_wait(j)) {
        srv_job_release(j);
        if (atomic_load(&srv->aborting)) {
            srv_fail(&e, 503, "server_error", "", "shutting_down", "The server is shutting down.");
            return srv_http_send_error(srv, conn, path, &e);
        }
        srv_metrics_request(srv->metrics, path, 499); /* the client closed the connection */
        return MHD_NO;
    }
    pthread_mutex_lock(&j->mu);
    json_t *o = response_json(j, &e);
    pthread_mutex_unlock(&j->mu);
    srv_job_release(j);
    if (!o) return srv_http_send_error(srv, conn, path, &e);
    char *text = json_dumps(o, SRV_JSON_FLAGS);
    json_decref(o);
    return srv_http_send(srv, conn, path, 200, "application/json", text, text ? strlen(text) : 0);
}
