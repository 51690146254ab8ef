/* tools/server/stream.c: streamed completions as server-sent events (`data: <json>\n\n`), sent
 * with chunked encoding from an MHD content reader. The reader runs on the connection's
 * thread: it waits on the job's condvar (50 ms at a time, checking the socket for a closed
 * peer in between) and turns whatever text is safe to show into chunks, one per token that
 * yields text (tokens without text of their own join the next chunk's logprobs), then each
 * choice's finish chunk, the usage chunk when asked for, and `data: [DONE]`. A failed choice
 * gives an error event and ends the stream. The stream owns its output buffer and the job's
 * HTTP reference, released in the free callback. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "handlers.h"
#include "http.h"

typedef struct stream {
    srv_server *srv; /* borrowed */
    srv_job *job;    /* one reference, owned */
    char *out;       /* owned: events not yet handed to MHD, [POS, LEN) */
    size_t len, cap, pos;
    int role_sent;   /* chat: the first chunk ({"role":"assistant"}) */
    int ended;       /* [DONE] is in OUT */
} stream;

static int out_append(stream *s, const char *a, size_t na, const char *b, size_t nb) {
    size_t need = s->len + na + nb + 2;
    if (need > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < need) cap *= 2;
        char *t = realloc(s->out, cap);
        if (!t) return 0;
        s->out = t;
        s->cap = cap;
    }
    memcpy(s->out + s->len, a, na);
    memcpy(s->out + s->len + na, b, nb);
    memcpy(s->out + s->len + na + nb, "\n\n", 2);
    s->len += na + nb + 2;
    return 1;
}

/* Appends `data: O\n\n` (O's reference is taken). */
static int send_event(stream *s, json_t *o) {
    char *t = o ? json_dumps(o, SRV_JSON_FLAGS) : NULL;
    json_decref(o);
    if (!t) return 0;
    int ok = out_append(s, "data: ", 6, t, strlen(t));
    free(t);
    return ok;
}

/* A chunk of choice C: DELTA (chat) or TEXT (completions), LP (or null), FINISH (or null). */
static json_t *chunk(const srv_job *j, const srv_choice *c, json_t *delta_or_text, json_t *lp,
                     const char *finish) {
    json_t *fr = finish ? json_string(finish) : json_null();
    json_t *ch = j->kind == SRV_CHAT
                     ? json_pack("{s:i, s:o, s:o, s:o}", "index", c->index, "delta", delta_or_text,
                                 "logprobs", lp ? lp : json_null(), "finish_reason", fr)
                     : json_pack("{s:i, s:o, s:o, s:o}", "index", c->index, "text", delta_or_text,
                                 "logprobs", lp ? lp : json_null(), "finish_reason", fr);
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", j->id, "object",
                          j->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion",
                          "created", (json_int_t)j->created, "model", j->srv->alias, "choices", ch);
    /* OpenAI: with include_usage every other chunk carries "usage": null */
    if (o && j->include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

/* The part of [A, B) inside [LO, HI) as a JSON string under KEY of D (nothing when empty). */
static void add_part(json_t *d, const char *key, const srv_choice *c, size_t a, size_t b,
                     size_t lo, size_t hi) {
    if (a < lo) a = lo;
    if (b > hi) b = hi;
    if (a < b) json_object_set_new(d, key, srv_json_text(c->text + a, b - a));
}

/* A chunk with C's text [C->sent, END) and the logprobs of its tokens [C->toks_sent, TO).
 * With reasoning the text goes to reasoning_content and content by where it lies in SP (the
 * reply's split now); a piece that is only a <think> tag sends nothing, its token's logprobs
 * going with the next. */
static int send_piece(stream *s, srv_choice *c, const mlm_reasoning_split *sp, size_t end,
                      int64_t to) {
    const srv_job *j = s->job;
    json_t *d;
    if (j->reasoning) {
        d = json_object();
        if (sp->has_reasoning)
            add_part(d, "reasoning_content", c, c->sent, end, sp->reasoning_begin,
                     sp->reasoning_end);
        add_part(d, "content", c, c->sent, end, sp->content_begin, c->len);
        if (d && !json_object_size(d)) {
            json_decref(d);
            c->sent = end;
            return 1;
        }
    } else {
        json_t *text = srv_json_text(c->text + c->sent, end - c->sent);
        d = j->kind == SRV_CHAT ? json_pack("{s:o}", "content", text) : text;
    }
    json_t *lp = j->logprobs ? srv_json_logprobs(j, c, c->toks_sent, to) : NULL;
    c->sent = end;
    c->toks_sent = to;
    return send_event(s, chunk(j, c, d, lp, NULL));
}

static int send_error(stream *s, int http, const char *code, const char *msg) {
    srv_error e;
    srv_fail(&e, http, "server_error", "", code, "%s", msg);
    char *t = srv_error_json(&e);
    if (!t) return 0;
    int ok = out_append(s, "data: ", 6, t, strlen(t));
    free(t);
    return ok;
}

static size_t tok_end(const srv_choice *c, int64_t k) {
    size_t e = c->toks[k].off + c->toks[k].len;
    return e < c->len ? e : c->len;
}

/* Everything of choice C that can be sent now. Returns 0 when out of memory. Sets *FAILED
 * when C ended in an error (its event is out). */
/* The finish of choice C when its reply holds tool calls T: the content before them, then per
 * call a chunk with its id and name and one with its arguments, as OpenAI streams them. */
static int send_calls(stream *s, srv_choice *c, const mlm_tool_reply *t,
                      const mlm_reasoning_split *sp, int64_t nt) {
    const srv_job *j = s->job;
    size_t keep = sp->content_begin + (t->content ? strlen(t->content) : 0);
    if (keep > c->len) keep = c->len;
    if (c->sent < keep && !send_piece(s, c, sp, keep, nt)) return 0;
    for (int k = 0; k < t->n_calls; k++) {
        json_t *head = json_pack("{s:[{s:i, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index", k,
                                 "id", t->calls[k].id, "type", "function", "function", "name",
                                 t->calls[k].name, "arguments", "");
        json_t *args = json_pack("{s:[{s:i, s:{s:s}}]}", "tool_calls", "index", k, "function",
                                 "arguments", t->calls[k].arguments);
        if (!send_event(s, chunk(j, c, head, NULL, NULL)) || !send_event(s, chunk(j, c, args, NULL, NULL)))
            return 0;
    }
    c->finish_sent = 1;
    return send_event(s, chunk(j, c, json_object(), NULL, "tool_calls"));
}

static int produce_choice(stream *s, srv_choice *c, int *failed) {
    srv_job *j = s->job;
    int64_t nt = c->done ? srv_choice_n_toks(c) : c->n_toks;
    size_t safe = c->done ? c->len : c->safe < c->len ? c->safe : c->len;
    /* the content: the reply after its reasoning (what may still become a tag held back) */
    const mlm_reasoning_split sp = srv_choice_split(j, c);
    const char *body = (c->text ? c->text : "") + sp.content_begin;
    const size_t body_len = c->len - sp.content_begin;
    if (sp.settled < safe) safe = sp.settled;
    mlm_tool_reply t = {0};
    if (j->tool_kind && !c->done) { /* what may become a call is held back */
        size_t plain = sp.content_begin + mlm_tool_reply_settled(j->tool_kind, body, body_len);
        if (plain < safe) safe = plain;
    }
    if (j->tool_kind && c->done && c->finish == MLM_FINISH_STOP) {
        mlm_error err;
        if (mlm_tool_reply_parse(j->tool_kind, j->tools, body, body_len, &j->rng, &t, &err))
            return 0;
        if (t.n_calls) {
            int ok = send_calls(s, c, &t, &sp, nt);
            mlm_tool_reply_deinit(&t);
            return ok;
        }
        mlm_tool_reply_deinit(&t);
    }
    if (c->sent > c->len) c->sent = c->len;
    if (nt < c->toks_sent) nt = c->toks_sent;
    for (;;) {
        int64_t k = c->toks_sent;
        while (k < nt && tok_end(c, k) <= c->sent) k++;
        if (k >= nt || tok_end(c, k) > safe) break;
        if (!send_piece(s, c, &sp, tok_end(c, k), k + 1)) return 0;
    }
    if (!c->done) return 1;
    if (c->finish == MLM_FINISH_ERROR || c->finish == MLM_FINISH_CANCELLED) {
        c->finish_sent = 1;
        *failed = 1;
        return c->finish == MLM_FINISH_ERROR
                   ? send_error(s, 500, "", c->error[0] ? c->error : "engine error")
                   : send_error(s, 503, "shutting_down", "server shutting down");
    }
    if ((c->sent < c->len || c->toks_sent < nt) && !send_piece(s, c, &sp, c->len, nt)) return 0;
    c->finish_sent = 1;
    json_t *d = j->kind == SRV_CHAT ? json_object() : json_string("");
    return send_event(s, chunk(j, c, d, NULL, srv_finish_reason(c->finish)));
}

/* Fills OUT with what is ready (the job's mutex held). 0 when out of memory. */
static int produce(stream *s) {
    srv_job *j = s->job;
    if (!s->role_sent) {
        s->role_sent = 1;
        for (int i = 0; j->kind == SRV_CHAT && i < j->n_choices; i++) {
            json_t *d = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
            if (!send_event(s, chunk(j, &j->choices[i], d, NULL, NULL))) return 0;
        }
    }
    int failed = 0, all = 1;
    for (int i = 0; i < j->n_choices && !failed; i++) {
        srv_choice *c = &j->choices[i];
        if (!c->finish_sent && !produce_choice(s, c, &failed)) return 0;
        all &= c->finish_sent;
    }
    if (!failed && !all) return 1;
    if (!failed && j->include_usage) {
        json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", j->id, "object",
                              j->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion",
                              "created", (json_int_t)j->created, "model", j->srv->alias,
                              "choices", "usage", srv_json_usage(j));
        if (!send_event(s, o)) return 0;
    }
    if (!out_append(s, "data: [DONE]", 12, "", 0)) return 0;
    s->ended = 1;
    return 1;
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream *s = cls;
    srv_job *j = s->job;
    for (;;) {
        if (s->pos < s->len) {
            size_t n = s->len - s->pos < max ? s->len - s->pos : max;
            memcpy(buf, s->out + s->pos, n);
            s->pos += n;
            return (ssize_t)n;
        }
        if (s->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        s->len = s->pos = 0;
        pthread_mutex_lock(&j->mu);
        int ok = produce(s);
        if (ok && !s->len) {
            srv_job_wait_ms(j, 50);
            ok = produce(s);
        }
        pthread_mutex_unlock(&j->mu);
        if (!ok) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (!s->len && (srv_fd_closed(j->fd) || atomic_load(&s->srv->aborting))) {
            srv_job_cancel(j); /* at once: the blocks go back to the pool now */
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls) {
    stream *s = cls;
    srv_job_release(s->job); /* cancels what has not finished */
    free(s->out);
    free(s);
}

enum MHD_Result srv_stream_start(srv_server *srv, struct MHD_Connection *conn, const char *path,
                                 srv_job *job) {
    stream *s = calloc(1, sizeof *s);
    struct MHD_Response *resp = NULL;
    if (s) {
        s->srv = srv;
        s->job = job;
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, reader, s, stream_free);
    }
    if (!resp) {
        free(s);
        srv_job_release(job);
        srv_error e;
        srv_fail(&e, 500, "server_error", "", "", "out of memory");
        return srv_http_send_error(srv, conn, path, &e);
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp); /* on failure this frees S and releases JOB */
    srv_metrics_request(srv->metrics, path, 200);
    return ok;
}
