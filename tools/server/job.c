/* tools/server/job.c: the life of one HTTP generation request between its submission and its
 * response: the scheduler callback (engine thread) that turns token events into text, stop
 * string matches and logprobs under the job's mutex, the HTTP side's waits (with disconnect
 * checks), cancelling, and the two-sided reference count that frees the job. Formats nothing:
 * handlers.c reads the choices under the mutex and writes the responses. */
#include "job.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int srv_fd_closed(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL | POLLRDHUP)) return 1;
    if (p.revents & POLLIN) {
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) return 1;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 1;
    }
    return 0;
}

// ---- creating and freeing ----

static void job_free(srv_job *j) {
    for (int i = 0; i < j->n_choices; i++) {
        srv_choice *c = &j->choices[i];
        free(c->text);
        free(c->toks);
        free(c->top_ids);
        free(c->top_lp);
        free(c->n_top);
    }
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    for (int i = 0; i < j->n_images; i++)
        mlm_image_free(j->images[i]);
    free(j->images);
    for (int i = 0; j->matchers && i < j->n_choices; i++) mlm_matcher_free(j->matchers[i]);
    free(j->matchers);
    mlm_grammar_free(j->grammar);
    free(j->tools);
    free(j->choices);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

srv_job *srv_job_create(srv_server *srv, const srv_request *r, int n_choices) {
    if (n_choices < 1) return NULL;
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->choices = calloc((size_t)n_choices, sizeof *j->choices);
    if (!j->choices) {
        free(j);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->srv = srv;
    j->refs = 1;
    j->n_choices = n_choices;
    j->n_per_prompt = r->n >= 1 && n_choices % r->n == 0 ? r->n : 1;
    j->kind = r->kind;
    j->reasoning = r->kind == SRV_CHAT && srv->reasoning;
    j->stream = r->stream;
    j->include_usage = r->include_usage;
    j->logprobs = r->logprobs ? 1 : 0;
    j->top_k = r->logprobs ? r->top_logprobs : 0;
    if (j->top_k < 0) j->top_k = 0;
    if (j->top_k > 127) j->top_k = 127;
    j->fd = -1;
    for (int i = 0; i < n_choices; i++) {
        j->choices[i].job = j;
        j->choices[i].index = i;
        mlm_detok_init(&j->choices[i].detok);
    }
    for (int i = 0; i < r->n_stop && i < 4; i++) {
        if (!r->stop[i] || !r->stop[i][0]) continue;
        size_t n = strlen(r->stop[i]);
        char *s = malloc(n + 1);
        if (!s) {
            job_free(j);
            return NULL;
        }
        memcpy(s, r->stop[i], n + 1);
        j->stop[j->n_stop] = s;
        j->stop_len[j->n_stop++] = n;
    }
    pthread_mutex_lock(&srv->mu);
    j->next = srv->jobs;
    if (srv->jobs) srv->jobs->prev = j;
    srv->jobs = j;
    srv->n_jobs++;
    pthread_mutex_unlock(&srv->mu);
    return j;
}

// ---- the engine callback ----

/* Makes room for ADD more bytes of text. */
static int text_reserve(srv_choice *c, size_t add) {
    if (c->cap - c->len >= add) return 1;
    size_t cap = c->cap ? c->cap : 256;
    while (cap - c->len < add) {
        if (cap > SIZE_MAX / 2) return 0;
        cap *= 2;
    }
    char *t = realloc(c->text, cap);
    if (!t) return 0;
    c->text = t;
    c->cap = cap;
    return 1;
}

static int64_t count_cp(const char *s, size_t n) {
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* After text was appended from byte FROM on: cuts it at the first stop string that matches
 * (returns 1), else holds back the longest tail that could begin one. A match can only start
 * inside the held-back tail or the new bytes, so SAFE never moves back. */
static int match_stops(srv_job *j, srv_choice *c, size_t from) {
    if (!j->n_stop) {
        c->safe = c->len;
        return 0;
    }
    size_t best = SIZE_MAX;
    for (int s = 0; s < j->n_stop; s++) {
        size_t n = j->stop_len[s];
        if (n > c->len) continue;
        size_t start = from >= n - 1 ? from - (n - 1) : 0;
        const char *hit = memmem(c->text + start, c->len - start, j->stop[s], n);
        if (hit && (size_t)(hit - c->text) < best) best = (size_t)(hit - c->text);
    }
    if (best != SIZE_MAX) {
        c->len = best;
        c->safe = best;
        c->cut = 1;
        c->n_cp = count_cp(c->text, c->len);
        return 1;
    }
    size_t held = 0;
    for (int s = 0; s < j->n_stop; s++) {
        size_t n = j->stop_len[s];
        for (size_t k = n - 1 < c->len ? n - 1 : c->len; k > held; k--) {
            if (!memcmp(c->text + c->len - k, j->stop[s], k)) {
                held = k;
                break;
            }
        }
    }
    size_t safe = c->len - held;
    if (safe > c->safe) c->safe = safe;
    return 0;
}

/* Records token EV (not a stop id) of C: its text and logprobs. Returns 1 to end the request
 * (a stop string matched, or out of memory: then C's error says so). */
static int push_token(srv_job *j, srv_choice *c, const mlm_sched_event *ev) {
    const srv_server *srv = j->srv;
    if (c->n_toks == c->cap_toks) {
        int64_t cap = c->cap_toks ? c->cap_toks * 2 : 64;
        srv_tok *t = realloc(c->toks, (size_t)cap * sizeof *t);
        if (!t) goto nomem;
        c->toks = t;
        if (j->logprobs && j->top_k > 0) {
            int32_t *ti = realloc(c->top_ids, (size_t)cap * (size_t)j->top_k * sizeof *ti);
            if (ti) c->top_ids = ti;
            float *tl = realloc(c->top_lp, (size_t)cap * (size_t)j->top_k * sizeof *tl);
            if (tl) c->top_lp = tl;
            int8_t *nt = realloc(c->n_top, (size_t)cap);
            if (nt) c->n_top = nt;
            if (!ti || !tl || !nt) goto nomem;
        }
        c->cap_toks = cap;
    }
    if (!text_reserve(c, srv->detok_cap)) goto nomem;
    size_t n = 0, from = c->len;
    mlm_error err = {0};
    if (mlm_detok_push(&c->detok, srv->tok, ev->token, c->text + c->len, c->cap - c->len, &n,
                       &err) != MLM_OK)
        n = 0;
    srv_tok *t = &c->toks[c->n_toks];
    t->id = ev->token;
    t->logprob = (float)ev->logprob;
    t->off = c->len;
    t->len = n;
    t->cp_off = c->n_cp;
    if (j->logprobs && j->top_k > 0) {
        int k = ev->n_top < j->top_k ? ev->n_top : j->top_k;
        if (k < 0 || !ev->top_ids || !ev->top_logprobs) k = 0;
        memcpy(c->top_ids + c->n_toks * j->top_k, ev->top_ids, (size_t)k * sizeof(int32_t));
        for (int i = 0; i < k; i++) /* the answer's precision: a float each */
            c->top_lp[c->n_toks * j->top_k + i] = (float)ev->top_logprobs[i];
        c->n_top[c->n_toks] = (int8_t)k;
    }
    c->n_toks++;
    c->len += n;
    c->n_cp += count_cp(c->text + from, n);
    return match_stops(j, c, from);
nomem:
    snprintf(c->error, sizeof c->error, "out of memory for the response text");
    return 1;
}

static int on_event(void *user, const mlm_sched_event *ev) {
    srv_choice *c = user;
    srv_job *j = c->job;
    srv_server *srv = j->srv;
    double now = srv_now();
    int stop = 0, last = 0;
    pthread_mutex_lock(&j->mu);
    if (ev->token >= 0) {
        if (!c->n_events) c->t_first = now;
        c->t_last = now;
        c->n_events++;
        if (!c->cut && !c->error[0] && !ev->is_stop_id) stop = push_token(j, c, ev);
    }
    c->n_prompt = ev->n_prompt;
    c->n_cached = ev->n_cached;
    if (ev->n_generated > c->n_generated) c->n_generated = ev->n_generated;
    if (ev->finish != MLM_FINISH_NONE) {
        if (!c->cut && !c->error[0] && text_reserve(c, 64)) {
            size_t from = c->len;
            c->len += mlm_detok_flush(&c->detok, c->text + c->len, c->cap - c->len);
            c->n_cp += count_cp(c->text + from, c->len - from);
            match_stops(j, c, from);
        }
        c->safe = c->len;
        c->finish = ev->finish;
        if (c->error[0]) c->finish = MLM_FINISH_ERROR; /* our own failure (memory) */
        if (ev->finish == MLM_FINISH_ERROR)
            snprintf(c->error, sizeof c->error, "%s", ev->error ? ev->error : "engine error");
        c->done = 1;
        j->n_done++;
        last = --j->refs == 0;
        double ttft = c->n_events ? c->t_first - c->t_submit : 0;
        double tpot = c->n_events > 1 ? (c->t_last - c->t_first) / (double)(c->n_events - 1) : 0;
        srv_metrics_choice(srv->metrics, c->n_prompt, c->n_generated, c->finish, ttft, tpot,
                           now - c->t_submit);
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (last) job_free(j);
    return stop && ev->finish == MLM_FINISH_NONE;
}

// ---- submitting, cancelling, waiting ----

mlm_status srv_job_submit(srv_job *j, int i, mlm_request_params *req, mlm_error *err) {
    srv_choice *c = &j->choices[i];
    req->on_event = on_event;
    req->user = c;
    req->logprobs = j->logprobs ? j->top_k : -1;
    pthread_mutex_lock(&j->mu);
    if (j->cancelled) {
        pthread_mutex_unlock(&j->mu);
        return mlm_error_set(err, MLM_ERR_CANCELLED,
                             "the request was cancelled (the server stops)");
    }
    j->refs++; /* before submitting: the final event may come before submit returns */
    c->submitted = 1;
    c->t_submit = j->t_start > 0 ? j->t_start : srv_now();
    j->n_submitted++;
    pthread_mutex_unlock(&j->mu);
    uint64_t id = 0;
    mlm_status st = mlm_sched_submit(j->srv->sched, req, &id, err);
    pthread_mutex_lock(&j->mu);
    if (st == MLM_OK) {
        c->id = id;
    } else {
        j->refs--;
        c->submitted = 0;
        j->n_submitted--;
    }
    pthread_mutex_unlock(&j->mu);
    return st;
}

void srv_job_cancel(srv_job *j) {
    uint64_t ids[64];
    int more = 1;
    /* in rounds of 64 ids, so that the mutex is not held while calling into the scheduler */
    for (int from = 0; more; from += 64) {
        int n = 0;
        pthread_mutex_lock(&j->mu);
        j->cancelled = 1;
        for (int i = from; i < j->n_choices && n < 64; i++) {
            srv_choice *c = &j->choices[i];
            if (c->submitted && !c->done && c->id) ids[n++] = c->id;
        }
        more = from + 64 < j->n_choices;
        pthread_mutex_unlock(&j->mu);
        for (int i = 0; i < n; i++) mlm_sched_cancel(j->srv->sched, ids[i]);
    }
}

int srv_job_wait_started(srv_job *j, int i) {
    for (;;) {
        pthread_mutex_lock(&j->mu);
        const srv_choice *c = &j->choices[i];
        int started = c->n_events > 0 || c->done || !c->submitted;
        if (!started) {
            srv_job_wait_ms(j, 50);
            started = c->n_events > 0 || c->done;
        }
        pthread_mutex_unlock(&j->mu);
        if (started) return 1;
        if (srv_fd_closed(j->fd) || atomic_load(&j->srv->aborting)) {
            srv_job_cancel(j);
            return 0;
        }
    }
}

int srv_job_wait(srv_job *j) {
    for (;;) {
        pthread_mutex_lock(&j->mu);
        if (j->n_done >= j->n_submitted) {
            pthread_mutex_unlock(&j->mu);
            return 1;
        }
        srv_job_wait_ms(j, 50);
        int done = j->n_done >= j->n_submitted;
        pthread_mutex_unlock(&j->mu);
        if (done) return 1;
        if (srv_fd_closed(j->fd) || atomic_load(&j->srv->aborting)) {
            srv_job_cancel(j);
            return 0;
        }
    }
}

void srv_job_release(srv_job *j) {
    if (!j) return;
    srv_job_cancel(j);
    srv_server *srv = j->srv;
    pthread_mutex_lock(&srv->mu);
    if (j->prev) j->prev->next = j->next;
    else srv->jobs = j->next;
    if (j->next) j->next->prev = j->prev;
    srv->n_jobs--;
    pthread_mutex_unlock(&srv->mu);
    pthread_mutex_lock(&j->mu);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (last) job_free(j);
}

void srv_jobs_cancel_all(srv_server *srv) {
    /* The list's mutex is held while cancelling: srv_job_release takes it before it drops
     * the HTTP reference, so no job on the list can be freed meanwhile. The engine callback
     * never takes it, so this cannot deadlock with the job mutexes srv_job_cancel takes. */
    pthread_mutex_lock(&srv->mu);
    for (srv_job *j = srv->jobs; j; j = j->next) srv_job_cancel(j);
    pthread_mutex_unlock(&srv->mu);
}

int srv_jobs_count(srv_server *srv) {
    pthread_mutex_lock(&srv->mu);
    int n = srv->n_jobs;
    pthread_mutex_unlock(&srv->mu);
    return n;
}

void srv_job_wait_ms(srv_job *j, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}
