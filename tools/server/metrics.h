/* tools/server/metrics.h: the server's Prometheus metrics: request counters by endpoint and
 * status, token and image counters, the vision encoder's seconds, and TTFT /
 * time-per-output-token / end-to-end latency histograms, rendered in the Prometheus text
 * format (version 0.0.4) together with the scheduler's gauges. Thread-safe: observers run on
 * HTTP and engine threads. */
#ifndef MESHLM_SERVER_METRICS_H
#define MESHLM_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "meshlm.h"

#define SRV_HIST_BUCKETS 16

typedef struct srv_hist {
    const double *bounds; /* upper bounds in seconds, ascending (static), N_BOUNDS of them */
    int n_bounds;
    uint64_t counts[SRV_HIST_BUCKETS + 1]; /* per bucket (not cumulative); the last is +Inf */
    double sum;
    uint64_t n;
} srv_hist;

typedef struct srv_metrics {
    pthread_mutex_t mu;
    /* requests finished, by endpoint and HTTP status: rows are "chat", "completions",
     * "models", "health", "metrics", "other"; columns a small list of statuses (200, 400,
     * 401, 404, 405, 413, 500, 503, other) */
    uint64_t requests[6][9];
    uint64_t prompt_tokens, generation_tokens;
    uint64_t finish[5]; /* by mlm_finish, per choice */
    uint64_t images, images_encoded; /* image parts received in requests; images encoded */
    double vision_s;                 /* seconds in the vision encoder, over every image encoded */
    srv_hist ttft, tpot, e2e;
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_deinit(srv_metrics *m);
/* Counts a finished HTTP request to PATH ("/v1/chat/completions", ...) with STATUS. */
void srv_metrics_request(srv_metrics *m, const char *path, int status);
/* Counts one finished choice: its tokens, why it finished, its time to first token (skipped
 * when N_GEN is 0), mean time per output token after the first (skipped when N_GEN < 2) and
 * end-to-end time (seconds); NaN or negative times are never recorded. */
void srv_metrics_choice(srv_metrics *m, int32_t n_prompt, int32_t n_gen, mlm_finish finish,
                        double ttft_s, double tpot_s, double e2e_s);
/* Counts N image parts received in a chat request (parsed, before any check of the model). */
void srv_metrics_images(srv_metrics *m, int n);
/* Counts one image run through the vision encoder in SECONDS (NaN or negative: not added). */
void srv_metrics_vision(srv_metrics *m, double seconds);
/* Renders everything, with the scheduler's stats S (NULL: its gauges are left out) and MODEL_NAME
 * as a label, into a malloc'd NUL-terminated text. Metric names start with meshlm_ (e.g.
 * meshlm_requests_total{endpoint,status}, meshlm_prompt_tokens_total,
 * meshlm_generation_tokens_total, meshlm_queue_depth, meshlm_running_sequences,
 * meshlm_kv_blocks_used, meshlm_kv_blocks_free, meshlm_kv_blocks_cached,
 * meshlm_prefix_cache_hit_tokens_total, meshlm_preemptions_total,
 * meshlm_time_to_first_token_seconds, meshlm_time_per_output_token_seconds,
 * meshlm_e2e_request_latency_seconds, meshlm_images_total, meshlm_images_encoded_total,
 * meshlm_vision_encoder_seconds_total). NULL when out of memory. */
char *srv_metrics_render(srv_metrics *m, const mlm_sched_stats *s, const char *model_name);

#endif
