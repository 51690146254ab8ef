/* tests/unit/test_server_metrics.c: the server's Prometheus metrics (tools/server/metrics.c):
 * cumulative histogram buckets for known observations (bounds are inclusive, as Prometheus'
 * le), request and finish counters, the scheduler's gauges, label escaping, a concurrent
 * count, and that the rendered text parses line by line as the text format 0.0.4. */
#include <pthread.h>
#include <stdint.h>

#include "../tools/server/metrics.h"
#include "harness.h"

#define M "model_name=\"m\""

/* The value of the sample line that starts with exactly "SERIES " (name{labels}), or NAN. */
static double sample(const char *text, const char *series) {
    size_t n = strlen(series);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        if (strncmp(l, series, n) == 0 && l[n] == ' ') return strtod(l + n + 1, NULL);
    return NAN;
}

static int is_name_char(char c, int first) {
    return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (!first && c >= '0' && c <= '9');
}

/* Checks one sample line: name{k="v",...} value. Returns 1 when well formed, with the metric
 * name copied into NAME (size 128). */
static int parse_sample(const char *l, size_t len, char *name) {
    size_t i = 0;
    while (i < len && is_name_char(l[i], i == 0))
        i++;
    if (i == 0 || i >= 128) return 0;
    memcpy(name, l, i);
    name[i] = 0;
    if (i < len && l[i] == '{') {
        i++;
        for (;;) {
            size_t k = i;
            while (i < len && is_name_char(l[i], i == k))
                i++;
            if (i == k || i + 1 >= len || l[i] != '=' || l[i + 1] != '"') return 0;
            for (i += 2; i < len && l[i] != '"'; i++)
                if (l[i] == '\\') {
                    if (i + 1 >= len || !strchr("\\\"n", l[i + 1])) return 0;
                    i++;
                }
            if (i >= len) return 0;
            i++;
            if (i < len && l[i] == ',') {
                i++;
                continue;
            }
            if (i < len && l[i] == '}') {
                i++;
                break;
            }
            return 0;
        }
    }
    if (i >= len || l[i] != ' ') return 0;
    char num[64];
    size_t vn = len - i - 1;
    if (vn == 0 || vn >= sizeof num) return 0;
    memcpy(num, l + i + 1, vn);
    num[vn] = 0;
    char *end;
    strtod(num, &end);
    return *end == 0;
}

/* Every line is "# HELP name text", "# TYPE name type" or a sample whose family was declared
 * by a TYPE line before it; the text ends with a newline. Returns the number of samples. */
static int check_format(const char *text) {
    CHECK(text && *text && text[strlen(text) - 1] == '\n');
    char types[64][128];
    int n_types = 0, n_samples = 0;
    for (const char *l = text; *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        char name[128];
        if (len >= 7 && strncmp(l, "# TYPE ", 7) == 0) {
            const char *sp = memchr(l + 7, ' ', len - 7);
            CHECKF(sp != NULL, "TYPE line: %.*s", (int)len, l);
            if (sp && n_types < 64) {
                snprintf(types[n_types], 128, "%.*s", (int)(sp - l - 7), l + 7);
                const char *t = sp + 1;
                size_t tl = len - (size_t)(t - l);
                CHECKF((tl == 7 && !strncmp(t, "counter", 7)) ||
                           (tl == 5 && !strncmp(t, "gauge", 5)) ||
                           (tl == 9 && !strncmp(t, "histogram", 9)),
                       "type: %.*s", (int)len, l);
                for (int k = 0; k < n_types; k++)
                    CHECKF(strcmp(types[k], types[n_types]) != 0, "TYPE twice: %s", types[k]);
                n_types++;
            }
        } else if (len >= 7 && strncmp(l, "# HELP ", 7) == 0) {
        } else {
            int ok = parse_sample(l, len, name);
            CHECKF(ok, "bad line: '%.*s'", (int)len, l);
            if (ok) {
                int declared = 0;
                for (int k = 0; k < n_types; k++) {
                    size_t tn = strlen(types[k]);
                    const char *rest = name + tn;
                    if (strncmp(name, types[k], tn) == 0 &&
                        (!*rest || !strcmp(rest, "_bucket") || !strcmp(rest, "_sum") ||
                         !strcmp(rest, "_count")))
                        declared = 1;
                }
                CHECKF(declared, "no TYPE before %s", name);
                CHECKF(strncmp(name, "meshlm_", 7) == 0, "name %s", name);
                n_samples++;
            }
        }
        l += len + (nl ? 1 : 0);
    }
    return n_samples;
}

static mlm_sched_stats some_stats(void) {
    mlm_sched_stats s;
    memset(&s, 0, sizeof s);
    s.waiting = 3;
    s.running = 5;
    s.kv_blocks_total = 100;
    s.kv_blocks_used = 40;
    s.kv_blocks_cached = 15;
    s.prompt_tokens = 900;
    s.computed_tokens = 700;
    s.prefix_hit_tokens = 200;
    s.generated_tokens = 1234;
    s.preemptions = 2;
    s.steps = 77;
    return s;
}

TEST(empty_render_parses) {
    srv_metrics m;
    srv_metrics_init(&m);
    char *t = srv_metrics_render(&m, NULL, "m");
    CHECK(t != NULL);
    if (!t) return;
    CHECK(check_format(t) > 0);
    CHECK(strstr(t, "meshlm_requests_total{") == NULL); /* only nonzero cells */
    CHECK(strstr(t, "# TYPE meshlm_requests_total counter") != NULL);
    CHECK(strstr(t, "meshlm_queue_depth") == NULL); /* no scheduler yet */
    CHECK(sample(t, "meshlm_time_to_first_token_seconds_bucket{" M ",le=\"+Inf\"}") == 0);
    CHECK(sample(t, "meshlm_e2e_request_latency_seconds_count{" M "}") == 0);
    CHECK(sample(t, "meshlm_request_finish_total{" M ",reason=\"stop\"}") == 0);
    free(t);
    srv_metrics_deinit(&m);
}

TEST(histogram_buckets_are_cumulative) {
    srv_metrics m;
    srv_metrics_init(&m);
    /* TTFT: 0.0005 and 0.001 (on the bound) in le=0.001, 0.003 in 0.005, 0.2 in 0.25, 11 in
     * +Inf. TPOT: 0.02 (n_gen 2), 3 (+Inf); n_gen 1 gives none. e2e: 0.3, 1.2, 61. */
    srv_metrics_choice(&m, 10, 2, MLM_FINISH_STOP, 0.0005, 0.02, 0.3);
    srv_metrics_choice(&m, 10, 1, MLM_FINISH_LENGTH, 0.001, 0.5, 1.2);
    srv_metrics_choice(&m, 10, 5, MLM_FINISH_STOP, 0.003, 3, 61);
    srv_metrics_choice(&m, 10, 9, MLM_FINISH_CANCELLED, 0.2, NAN, -1);
    srv_metrics_choice(&m, 10, 3, MLM_FINISH_ERROR, 11, -0.5, NAN);
    srv_metrics_choice(&m, 10, 0, MLM_FINISH_ERROR, 0.5, 0.5, 0); /* no token: no TTFT */
    char *t = srv_metrics_render(&m, NULL, "m");
    CHECK(t != NULL);
    if (!t) return;
    check_format(t);
    static const char *le[] = {"0.001", "0.005", "0.01", "0.02", "0.04", "0.06",
                               "0.08",  "0.1",   "0.25", "0.5",  "0.75", "1",
                               "2.5",   "5",     "7.5",  "10",   "+Inf"};
    static const int want[] = {2, 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 5};
    for (int i = 0; i < 17; i++) {
        char series[160];
        snprintf(series, sizeof series,
                 "meshlm_time_to_first_token_seconds_bucket{" M ",le=\"%s\"}", le[i]);
        double v = sample(t, series);
        CHECKF(v == want[i], "%s = %g, want %d", series, v, want[i]);
    }
    CHECK(sample(t, "meshlm_time_to_first_token_seconds_count{" M "}") == 5);
    CHECK_NEAR(sample(t, "meshlm_time_to_first_token_seconds_sum{" M "}"), 11.2045, 1e-9);

    CHECK(sample(t, "meshlm_time_per_output_token_seconds_bucket{" M ",le=\"0.01\"}") == 0);
    CHECK(sample(t, "meshlm_time_per_output_token_seconds_bucket{" M ",le=\"0.025\"}") == 1);
    CHECK(sample(t, "meshlm_time_per_output_token_seconds_bucket{" M ",le=\"2.5\"}") == 1);
    CHECK(sample(t, "meshlm_time_per_output_token_seconds_bucket{" M ",le=\"+Inf\"}") == 2);
    CHECK(isnan(sample(t, "meshlm_time_per_output_token_seconds_bucket{" M ",le=\"5\"}")));
    CHECK(sample(t, "meshlm_time_per_output_token_seconds_count{" M "}") == 2);
    CHECK_NEAR(sample(t, "meshlm_time_per_output_token_seconds_sum{" M "}"), 3.02, 1e-9);

    CHECK(sample(t, "meshlm_e2e_request_latency_seconds_bucket{" M ",le=\"0.3\"}") == 2);
    CHECK(sample(t, "meshlm_e2e_request_latency_seconds_bucket{" M ",le=\"1\"}") == 2);
    CHECK(sample(t, "meshlm_e2e_request_latency_seconds_bucket{" M ",le=\"1.5\"}") == 3);
    CHECK(sample(t, "meshlm_e2e_request_latency_seconds_bucket{" M ",le=\"60\"}") == 3);
    CHECK(sample(t, "meshlm_e2e_request_latency_seconds_bucket{" M ",le=\"+Inf\"}") == 4);
    CHECK(sample(t, "meshlm_e2e_request_latency_seconds_count{" M "}") == 4);
    CHECK_NEAR(sample(t, "meshlm_e2e_request_latency_seconds_sum{" M "}"), 62.5, 1e-9);

    CHECK(sample(t, "meshlm_prompt_tokens_total{" M "}") == 60);
    CHECK(sample(t, "meshlm_generation_tokens_total{" M "}") == 20);
    CHECK(sample(t, "meshlm_request_finish_total{" M ",reason=\"stop\"}") == 2);
    CHECK(sample(t, "meshlm_request_finish_total{" M ",reason=\"length\"}") == 1);
    CHECK(sample(t, "meshlm_request_finish_total{" M ",reason=\"cancelled\"}") == 1);
    CHECK(sample(t, "meshlm_request_finish_total{" M ",reason=\"error\"}") == 2);
    free(t);
    srv_metrics_deinit(&m);
}

TEST(request_counters_by_endpoint) {
    srv_metrics m;
    srv_metrics_init(&m);
    srv_metrics_request(&m, "/v1/chat/completions", 200);
    srv_metrics_request(&m, "/v1/chat/completions", 200);
    srv_metrics_request(&m, "/v1/chat/completions", 400);
    srv_metrics_request(&m, "/v1/completions", 503);
    srv_metrics_request(&m, "/v1/models", 200);
    srv_metrics_request(&m, "/health", 200);
    srv_metrics_request(&m, "/metrics", 200);
    srv_metrics_request(&m, "/nope", 404);
    srv_metrics_request(&m, NULL, 405);
    srv_metrics_request(&m, "/v1/chat/completions/", 418); /* not the endpoint; odd status */
    char *t = srv_metrics_render(&m, NULL, "m");
    CHECK(t != NULL);
    if (!t) return;
    int n = check_format(t);
    CHECK(n > 0);
#define REQ(ep, st) sample(t, "meshlm_requests_total{" M ",endpoint=\"" ep "\",status=\"" st "\"}")
    CHECK(REQ("chat", "200") == 2);
    CHECK(REQ("chat", "400") == 1);
    CHECK(REQ("completions", "503") == 1);
    CHECK(REQ("models", "200") == 1);
    CHECK(REQ("health", "200") == 1);
    CHECK(REQ("metrics", "200") == 1);
    CHECK(REQ("other", "404") == 1);
    CHECK(REQ("other", "405") == 1);
    CHECK(REQ("other", "other") == 1);
    CHECK(isnan(REQ("chat", "500"))); /* zero cells are left out */
#undef REQ
    int lines = 0;
    for (const char *p = strstr(t, "meshlm_requests_total{"); p;
         p = strstr(p + 1, "meshlm_requests_total{"))
        lines++;
    CHECK(lines == 9);
    free(t);
    srv_metrics_deinit(&m);
}

TEST(scheduler_gauges) {
    srv_metrics m;
    srv_metrics_init(&m);
    mlm_sched_stats s = some_stats();
    char *t = srv_metrics_render(&m, &s, "m");
    CHECK(t != NULL);
    if (!t) return;
    check_format(t);
    CHECK(sample(t, "meshlm_queue_depth{" M "}") == 3);
    CHECK(sample(t, "meshlm_running_sequences{" M "}") == 5);
    CHECK(sample(t, "meshlm_kv_blocks_total{" M "}") == 100);
    CHECK(sample(t, "meshlm_kv_blocks_used{" M "}") == 40);
    CHECK(sample(t, "meshlm_kv_blocks_cached{" M "}") == 15);
    CHECK(sample(t, "meshlm_kv_blocks_free{" M "}") == 45);
    CHECK(sample(t, "meshlm_prefix_cache_hit_tokens_total{" M "}") == 200);
    CHECK(sample(t, "meshlm_computed_prompt_tokens_total{" M "}") == 700);
    CHECK(sample(t, "meshlm_preemptions_total{" M "}") == 2);
    CHECK(sample(t, "meshlm_steps_total{" M "}") == 77);
    CHECK(sample(t, "meshlm_scheduler_generated_tokens_total{" M "}") == 1234);
    CHECK(strstr(t, "# TYPE meshlm_queue_depth gauge\n") != NULL);
    CHECK(strstr(t, "# TYPE meshlm_steps_total counter\n") != NULL);
    CHECK(strstr(t, "# HELP meshlm_time_to_first_token_seconds ") != NULL);
    CHECK(strstr(t, "# TYPE meshlm_time_to_first_token_seconds histogram\n") != NULL);
    free(t);
    srv_metrics_deinit(&m);
}

TEST(model_name_is_escaped) {
    srv_metrics m;
    srv_metrics_init(&m);
    mlm_sched_stats s = some_stats();
    char *t = srv_metrics_render(&m, &s, "a\"b\\c\nd");
    CHECK(t != NULL);
    if (!t) return;
    check_format(t);
    CHECK(sample(t, "meshlm_queue_depth{model_name=\"a\\\"b\\\\c\\nd\"}") == 3);
    free(t);
    t = srv_metrics_render(&m, &s, NULL);
    CHECK(t && sample(t, "meshlm_queue_depth{model_name=\"\"}") == 3);
    free(t);
    srv_metrics_deinit(&m);
}

enum { THREADS = 8, PER_THREAD = 5000 };

static void *hammer(void *arg) {
    srv_metrics *m = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        srv_metrics_request(m, "/v1/completions", 200);
        srv_metrics_choice(m, 3, 2, MLM_FINISH_LENGTH, 0.05, 0.01, 0.9);
    }
    return NULL;
}

TEST(concurrent_observers) {
    srv_metrics m;
    srv_metrics_init(&m);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, hammer, &m);
    for (int r = 0; r < 20; r++)
        free(srv_metrics_render(&m, NULL, "m")); /* while they run */
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    char *t = srv_metrics_render(&m, NULL, "m");
    CHECK(t != NULL);
    if (!t) return;
    const double n = THREADS * PER_THREAD;
    CHECK(sample(t, "meshlm_requests_total{" M ",endpoint=\"completions\",status=\"200\"}") == n);
    CHECK(sample(t, "meshlm_prompt_tokens_total{" M "}") == 3 * n);
    CHECK(sample(t, "meshlm_time_to_first_token_seconds_bucket{" M ",le=\"0.04\"}") == 0);
    CHECK(sample(t, "meshlm_time_to_first_token_seconds_bucket{" M ",le=\"0.06\"}") == n);
    CHECK(sample(t, "meshlm_time_per_output_token_seconds_count{" M "}") == n);
    CHECK(sample(t, "meshlm_e2e_request_latency_seconds_bucket{" M ",le=\"1\"}") == n);
    CHECK(sample(t, "meshlm_request_finish_total{" M ",reason=\"length\"}") == n);
    free(t);
    srv_metrics_deinit(&m);
}

int main(void) {
    RUN(empty_render_parses);
    RUN(histogram_buckets_are_cumulative);
    RUN(request_counters_by_endpoint);
    RUN(scheduler_gauges);
    RUN(model_name_is_escaped);
    RUN(concurrent_observers);
    return HARNESS_END();
}
