/* tools/server/metrics.c: the server's counters (requests, tokens, finish reasons, images, the
 * vision encoder's seconds) and latency histograms, and their rendering in the Prometheus
 * text format 0.0.4 (# HELP / # TYPE, cumulative _bucket{le} lines, _sum, _count) together
 * with the scheduler's gauges and counters. Every sample carries
 * model_name="..." . One mutex guards an srv_metrics; the histogram bounds are static. */
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bucket upper bounds in seconds, as vLLM's (so dashboards written for it fit). */
static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                     0.25,  0.5,   0.75, 1,    2.5,  5,    7.5,  10};
static const double tpot_bounds[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                     0.3,  0.4,   0.5,  0.75,  1,   2.5};
static const double e2e_bounds[] = {0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))
_Static_assert(N_OF(ttft_bounds) <= SRV_HIST_BUCKETS, "ttft buckets");
_Static_assert(N_OF(tpot_bounds) <= SRV_HIST_BUCKETS, "tpot buckets");
_Static_assert(N_OF(e2e_bounds) <= SRV_HIST_BUCKETS, "e2e buckets");

static const char *const endpoints[6] = {"chat",   "completions", "models",
                                         "health", "metrics",     "other"};
static const int statuses[8] = {200, 400, 401, 404, 405, 413, 500, 503}; /* column 8: other */
static const char *const reasons[5] = {NULL, "stop", "length", "cancelled", "error"};

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->ttft.bounds = ttft_bounds, m->ttft.n_bounds = N_OF(ttft_bounds);
    m->tpot.bounds = tpot_bounds, m->tpot.n_bounds = N_OF(tpot_bounds);
    m->e2e.bounds = e2e_bounds, m->e2e.n_bounds = N_OF(e2e_bounds);
}

void srv_metrics_deinit(srv_metrics *m) {
    if (m) pthread_mutex_destroy(&m->mu);
}

static int endpoint_row(const char *path) {
    static const char *const paths[5] = {"/v1/chat/completions", "/v1/completions", "/v1/models",
                                         "/health", "/metrics"};
    for (int i = 0; path && i < 5; i++)
        if (strcmp(path, paths[i]) == 0) return i;
    return 5;
}

void srv_metrics_request(srv_metrics *m, const char *path, int status) {
    int col = 8;
    for (int i = 0; i < 8; i++)
        if (statuses[i] == status) col = i;
    pthread_mutex_lock(&m->mu);
    m->requests[endpoint_row(path)][col]++;
    pthread_mutex_unlock(&m->mu);
}

/* Counts X (seconds) into H: the first bucket whose bound is >= X, else +Inf. Negative and NaN
 * times (a clock going back, a caller's bug) are not observed. */
static void observe(srv_hist *h, double x) {
    if (!(x >= 0)) return;
    int b = 0;
    while (b < h->n_bounds && x > h->bounds[b])
        b++;
    h->counts[b]++;
    h->sum += x;
    h->n++;
}

void srv_metrics_choice(srv_metrics *m, int32_t n_prompt, int32_t n_gen, mlm_finish finish,
                        double ttft_s, double tpot_s, double e2e_s) {
    pthread_mutex_lock(&m->mu);
    if (n_prompt > 0) m->prompt_tokens += (uint64_t)n_prompt;
    if (n_gen > 0) m->generation_tokens += (uint64_t)n_gen;
    if ((int)finish >= 0 && (int)finish < 5) m->finish[finish]++;
    if (n_gen >= 1) observe(&m->ttft, ttft_s); /* no first token, no TTFT */
    if (n_gen >= 2) observe(&m->tpot, tpot_s);
    observe(&m->e2e, e2e_s);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_images(srv_metrics *m, int n) {
    if (n <= 0) return;
    pthread_mutex_lock(&m->mu);
    m->images += (uint64_t)n;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_vision(srv_metrics *m, double seconds) {
    pthread_mutex_lock(&m->mu);
    m->images_encoded++;
    if (seconds >= 0) m->vision_s += seconds;
    pthread_mutex_unlock(&m->mu);
}

// ---- rendering ----

typedef struct buf {
    char *p;
    size_t len, cap;
    int oom;
    const char *labels; /* model_name="..." (escaped), on every sample */
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n + 1;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
}

static void head(buf *b, const char *name, const char *type, const char *help) {
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(buf *b, const char *name, const char *help, long long v) {
    head(b, name, "gauge", help);
    put(b, "%s{%s} %lld\n", name, b->labels, v);
}

static void counter(buf *b, const char *name, const char *help, unsigned long long v) {
    head(b, name, "counter", help);
    put(b, "%s{%s} %llu\n", name, b->labels, v);
}

static void histogram(buf *b, const char *name, const char *help, const srv_hist *h) {
    head(b, name, "histogram", help);
    unsigned long long cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        put(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, b->labels, h->bounds[i], cum);
    }
    cum += h->counts[h->n_bounds];
    put(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, b->labels, cum);
    put(b, "%s_sum{%s} %.17g\n", name, b->labels, h->sum);
    put(b, "%s_count{%s} %llu\n", name, b->labels, (unsigned long long)h->n);
}

/* model_name="NAME" with backslash, double quote and newline escaped; NULL when out of memory. */
static char *model_label(const char *name) {
    if (!name) name = "";
    size_t n = strlen(name);
    char *s = malloc(2 * n + sizeof "model_name=\"\"");
    if (!s) return NULL;
    char *o = s + sprintf(s, "model_name=\"");
    for (const char *c = name; *c; c++) {
        if (*c == '\\' || *c == '"')
            *o++ = '\\', *o++ = *c;
        else if (*c == '\n')
            *o++ = '\\', *o++ = 'n';
        else
            *o++ = *c;
    }
    *o++ = '"';
    *o = 0;
    return s;
}

static void sched_metrics(buf *b, const mlm_sched_stats *s) {
    gauge(b, "meshlm_queue_depth", "Requests waiting to be scheduled.", s->waiting);
    gauge(b, "meshlm_running_sequences", "Sequences in the running batch.", s->running);
    gauge(b, "meshlm_kv_blocks_total", "KV cache blocks in the pool.", s->kv_blocks_total);
    gauge(b, "meshlm_kv_blocks_used", "KV cache blocks held by sequences.", s->kv_blocks_used);
    gauge(b, "meshlm_kv_blocks_cached",
          "KV cache blocks held only by the prefix cache (evictable).", s->kv_blocks_cached);
    long long free_blocks = (long long)s->kv_blocks_total - s->kv_blocks_used - s->kv_blocks_cached;
    gauge(b, "meshlm_kv_blocks_free", "KV cache blocks neither used nor cached.",
          free_blocks > 0 ? free_blocks : 0);
    counter(b, "meshlm_prefix_cache_hit_tokens_total", "Prompt tokens taken from the prefix cache.",
            (unsigned long long)(s->prefix_hit_tokens > 0 ? s->prefix_hit_tokens : 0));
    counter(b, "meshlm_computed_prompt_tokens_total",
            "Prompt tokens computed (cache misses and recomputation).",
            (unsigned long long)(s->computed_tokens > 0 ? s->computed_tokens : 0));
    counter(b, "meshlm_preemptions_total", "Sequences preempted to free KV cache.",
            (unsigned long long)(s->preemptions > 0 ? s->preemptions : 0));
    counter(b, "meshlm_draft_tokens_total",
            "Speculative tokens verified (serve --draft-ngram).",
            (unsigned long long)(s->draft_tokens > 0 ? s->draft_tokens : 0));
    counter(b, "meshlm_draft_accepted_tokens_total", "Speculative tokens accepted.",
            (unsigned long long)(s->draft_accepted > 0 ? s->draft_accepted : 0));
    counter(b, "meshlm_steps_total", "Scheduler steps run.",
            (unsigned long long)(s->steps > 0 ? s->steps : 0));
    counter(b, "meshlm_scheduler_generated_tokens_total", "Tokens sampled by the scheduler.",
            (unsigned long long)(s->generated_tokens > 0 ? s->generated_tokens : 0));
}

char *srv_metrics_render(srv_metrics *m, const mlm_sched_stats *s, const char *model_name) {
    buf b = {0};
    b.labels = model_label(model_name);
    b.cap = 8192;
    b.p = malloc(b.cap);
    if (!b.labels || !b.p) {
        free((char *)b.labels);
        free(b.p);
        return NULL;
    }
    b.p[0] = 0;
    if (s) sched_metrics(&b, s);
    pthread_mutex_lock(&m->mu);
    head(&b, "meshlm_requests_total", "counter", "HTTP requests finished, by endpoint and status.");
    for (int r = 0; r < 6; r++)
        for (int c = 0; c < 9; c++) {
            if (!m->requests[r][c]) continue;
            char st[16];
            if (c < 8)
                snprintf(st, sizeof st, "%d", statuses[c]);
            else
                snprintf(st, sizeof st, "other");
            put(&b, "meshlm_requests_total{%s,endpoint=\"%s\",status=\"%s\"} %llu\n", b.labels,
                endpoints[r], st, (unsigned long long)m->requests[r][c]);
        }
    counter(&b, "meshlm_prompt_tokens_total", "Prompt tokens of finished choices.",
            (unsigned long long)m->prompt_tokens);
    counter(&b, "meshlm_generation_tokens_total", "Tokens generated for finished choices.",
            (unsigned long long)m->generation_tokens);
    head(&b, "meshlm_request_finish_total", "counter", "Finished choices, by finish reason.");
    for (int f = 1; f < 5; f++)
        put(&b, "meshlm_request_finish_total{%s,reason=\"%s\"} %llu\n", b.labels, reasons[f],
            (unsigned long long)m->finish[f]);
    counter(&b, "meshlm_images_total", "Images received in chat requests (image_url parts).",
            (unsigned long long)m->images);
    counter(&b, "meshlm_images_encoded_total", "Images run through the vision encoder.",
            (unsigned long long)m->images_encoded);
    head(&b, "meshlm_vision_encoder_seconds_total", "counter",
         "Seconds spent in the vision encoder (HTTP threads, before submission).");
    put(&b, "meshlm_vision_encoder_seconds_total{%s} %.17g\n", b.labels, m->vision_s);
    histogram(&b, "meshlm_time_to_first_token_seconds", "Time to first token in seconds.",
              &m->ttft);
    histogram(&b, "meshlm_time_per_output_token_seconds",
              "Mean time per output token after the first, in seconds.", &m->tpot);
    histogram(&b, "meshlm_e2e_request_latency_seconds",
              "End-to-end latency of a choice, in seconds.", &m->e2e);
    pthread_mutex_unlock(&m->mu);
    free((char *)b.labels);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
