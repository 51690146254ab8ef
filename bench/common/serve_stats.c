/* bench/common/serve_stats.c: bench/serve's samples and summary (see serve.h): growing
 * vectors of seconds, nearest-rank percentiles and means, the merge of the clients' stats, and
 * the report as text or one JSON line. Prints figures; never judges them. */
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- samples ----

void serve_dv_push(dvec *d, double x) {
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 256;
        double *t = realloc(d->v, cap * sizeof *t);
        if (!t) return; /* a lost sample, not a wrong one */
        d->v = t;
        d->cap = cap;
    }
    d->v[d->n++] = x;
}

static void dv_append(dvec *d, const dvec *s) {
    for (size_t i = 0; i < s->n; i++)
        serve_dv_push(d, s->v[i]);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile P of D (sorted in place); NAN when empty. */
static double pct(dvec *d, double p) {
    if (!d->n) return NAN;
    qsort(d->v, d->n, sizeof *d->v, cmp_double);
    size_t k = (size_t)ceil(p / 100.0 * (double)d->n);
    return d->v[k ? k - 1 : 0];
}

static double mean(const dvec *d) {
    double s = 0;
    for (size_t i = 0; i < d->n; i++)
        s += d->v[i];
    return d->n ? s / (double)d->n : NAN;
}

void serve_stats_merge(stats *all, stats *s) {
    all->ok += s->ok;
    all->errors += s->errors;
    all->disconnects += s->disconnects;
    all->unfinished += s->unfinished;
    all->tokens += s->tokens;
    all->tokens_ok += s->tokens_ok;
    all->window_events += s->window_events;
    all->prompt_tokens += s->prompt_tokens;
    all->n_prompt_usage += s->n_prompt_usage;
    dv_append(&all->ttft, &s->ttft);
    dv_append(&all->tpot, &s->tpot);
    dv_append(&all->itl, &s->itl);
    dv_append(&all->e2e, &s->e2e);
    if (!all->first_error[0] && s->first_error[0])
        memcpy(all->first_error, s->first_error, sizeof all->first_error);
    serve_stats_free(s);
}

void serve_stats_free(stats *s) {
    free(s->ttft.v);
    free(s->tpot.v);
    free(s->itl.v);
    free(s->e2e.v);
}

// ---- report ----

static void json_num(FILE *f, const char *name, double v, const char *fmt) {
    fprintf(f, ",\"%s\":", name);
    if (isnan(v))
        fprintf(f, "null");
    else
        fprintf(f, fmt, v);
}

static void json_str(FILE *f, const char *name, const char *v) {
    sbuf b = {0};
    serve_sb_add(&b, "", 0);
    serve_sb_json(&b, v ? v : "");
    fprintf(f, ",\"%s\":\"%s\"", name, b.p);
    free(b.p);
}

void serve_report(const opts *o, stats *all, double wall, double drain) {
    double tps = wall > 0 ? (double)all->tokens / wall : 0;
    double wtps = (double)all->window_events / (double)o->seconds;
    double ttft50 = pct(&all->ttft, 50) * 1e3, ttft99 = pct(&all->ttft, 99) * 1e3;
    double tpot50 = pct(&all->tpot, 50) * 1e3, tpot99 = pct(&all->tpot, 99) * 1e3;
    double itl50 = pct(&all->itl, 50) * 1e3, itl99 = pct(&all->itl, 99) * 1e3;
    double e2e50 = pct(&all->e2e, 50), ttft_mean = mean(&all->ttft) * 1e3;
    double prompt_mean =
        all->n_prompt_usage ? (double)all->prompt_tokens / (double)all->n_prompt_usage : NAN;
    if (o->json) {
        FILE *f = stdout;
        fprintf(f, "{\"bench\":\"serve\"");
        json_str(f, "label", o->label);
        json_str(f, "url", o->url);
        json_str(f, "endpoint", o->endpoint);
        fprintf(f,
                ",\"clients\":%ld,\"seconds\":%ld,\"max_tokens\":%ld,\"prompt_words\":%ld,"
                "\"shared_prefix\":%ld,\"disconnect_every\":%ld,\"requests_ok\":%ld,"
                "\"errors\":%ld,\"disconnects\":%ld,\"unfinished\":%ld,\"output_tokens\":%lld,"
                "\"output_tokens_ok\":%lld",
                o->clients, o->seconds, o->max_tokens, o->prompt_words, o->shared_prefix,
                o->disconnect_every, all->ok, all->errors, all->disconnects, all->unfinished,
                all->tokens, all->tokens_ok);
        json_num(f, "wall_s", wall, "%.3f");
        json_num(f, "drain_s", drain, "%.3f");
        json_num(f, "tokens_per_s", tps, "%.2f");
        json_num(f, "window_tokens_per_s", wtps, "%.2f");
        json_num(f, "prompt_tokens_mean", prompt_mean, "%.1f");
        json_num(f, "ttft_ms_p50", ttft50, "%.2f");
        json_num(f, "ttft_ms_p99", ttft99, "%.2f");
        json_num(f, "ttft_ms_mean", ttft_mean, "%.2f");
        json_num(f, "tpot_ms_p50", tpot50, "%.3f");
        json_num(f, "tpot_ms_p99", tpot99, "%.3f");
        json_num(f, "itl_ms_p50", itl50, "%.3f");
        json_num(f, "itl_ms_p99", itl99, "%.3f");
        json_num(f, "e2e_s_p50", e2e50, "%.3f");
        json_str(f, "first_error", all->first_error);
        fprintf(f, "}\n");
        return;
    }
    printf("bench/serve%s%s: http://%s%s, %ld clients, %ld s (+%.1f s drain), max_tokens %ld, "
           "prompt %ld words%s",
           o->label ? " " : "", o->label ? o->label : "", o->hostport, o->path, o->clients,
           o->seconds, drain, o->max_tokens, o->prompt_words, o->prompt_file ? " (file)" : "");
    if (o->shared_prefix) printf(" + %ld shared", o->shared_prefix);
    if (o->disconnect_every) printf(", disconnect every %ld", o->disconnect_every);
    printf("\n");
    printf("  requests    %ld ok, %ld errors, %ld disconnects, %ld unfinished\n", all->ok,
           all->errors, all->disconnects, all->unfinished);
    if (all->first_error[0]) printf("  first error %s\n", all->first_error);
    printf("  tokens      %lld output", all->tokens);
    if (all->ok) printf(" (%.1f per ok request)", (double)all->tokens_ok / (double)all->ok);
    if (all->disconnects) printf(", %lld of them before hang-ups", all->tokens - all->tokens_ok);
    if (!isnan(prompt_mean)) printf(", %.1f prompt tokens per request", prompt_mean);
    printf("\n");
    printf("  throughput  %.2f output tok/s over %.2f s; %.2f tok/s in the first %ld s (text "
           "events)\n",
           tps, wall, wtps, o->seconds);
    printf("  TTFT        p50 %9.2f ms   p99 %9.2f ms   mean %9.2f ms\n", ttft50, ttft99,
           ttft_mean);
    printf("  TPOT        p50 %9.3f ms   p99 %9.3f ms\n", tpot50, tpot99);
    printf("  ITL         p50 %9.3f ms   p99 %9.3f ms\n", itl50, itl99);
    printf("  latency     p50 %9.3f s\n", e2e50);
}
