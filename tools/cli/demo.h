/* tools/cli/demo.h: `meshlm demo`, shared between its files: the configuration (a preset plus
 * overrides), prompts, the run's results and the report. */
#ifndef MESHLM_CLI_DEMO_H
#define MESHLM_CLI_DEMO_H

#include "cli.h"

typedef struct demo_config {
    const char *preset;
    const char *prompts;   /* prompt file (JSON list of {prompt, context, max_length}) */
    int instruct;
    int repeat_batches;
    int32_t max_seq_len;
    int32_t batch_size;
    int32_t max_generated_tokens;
    int paged_attention;
    int32_t block_size, max_num_blocks;
    float temperature, top_p;
    int32_t top_k;
    int per_user_sampling; /* batch-32: the seeds' linspace per user */
    int stop_at_eos;
    int rotate;            /* ci-eval: prompts shift by one slot per repeat batch */
    int token_accuracy;
    const char *reference; /* .refpt for token accuracy */
    tool_precision prec;
    const char *model;
    const char *report, *expect;
    int n_threads;
    int32_t prefill_chunk; /* prompt tokens per step */
    int quiet;             /* no per-user output */
    int dp;                /* the preset's data-parallel lanes (batch_size users each), 0: 1 */
    tool_draft draft;      /* --draft-model / --draft-ngram: a speculative pass after the plain */
} demo_config;

/* The presets' names, NULL-terminated, and filling CFG from one (0 if unknown). */
extern const char *const demo_preset_names[];
int demo_preset(const char *name, demo_config *cfg);

/* Prompts after loading: the text given to the tokenizer, and its tokens. */
typedef struct demo_prompt {
    char *text;   /* owned: instruct-wrapped context + question, or the plain prompt */
    mlm_tokens ids;
} demo_prompt;

/* Reads FILE (the seeds' JSON shape): a list of objects with "prompt" (string), optional
 * "context" (a file path relative to FILE's folder, or inline text) and "max_length" (the
 * context's first characters to keep). 0 after a message naming the file and field. */
int demo_prompts_read(const char *file, int instruct, demo_prompt **out, int *n);
void demo_prompts_free(demo_prompt *p, int n);

/* Per-run measurements, as the seeds define them. */
typedef struct demo_metrics {
    double ttft_ms;           /* prefill time / batch */
    double prefill_tps;       /* prompt tokens / prefill time */
    double decode_tps_user;   /* (N - 1) / time of decode iterations 1..N-1 */
    double decode_tps;        /* decode_tps_user x batch */
    double step_ms;           /* mean decode iteration latency, iteration 0 excluded */
    double peak_gb;           /* peak resident memory */
    double load_s;
    int determinism_checks; /* pairs of outputs of the same prompt compared */
    int n_lanes;            /* data-parallel lanes (1 without), each of TP tp ranks */
    int tp;
    double lane_tps[64], lane_tps_user[64]; /* each lane's decode tok/s and tok/s/user */
    /* The speculative pass (spec = 1), both passes measured alike: tokens after each user's
     * first over the time after prefill, per user. */
    int spec;
    double plain_tps_user, spec_tps_user, speedup, tokens_per_step;
    int64_t drafted, accepted;
    int spec_checks;  /* greedy outputs compared with the plain pass's */
    int spec_sampled; /* sampled outputs (a valid draw of the same distribution, not compared) */
} demo_metrics;

/* One lane's timings, as mlm_gen_stats sums them over its repeat batches (int32-aligned for
 * the gather: doubles first, then int64s). */
typedef struct demo_lane_stats {
    double prefill_s, decode_s, first_s, peak_gb;
    int64_t prefill_tokens, decode_tokens, steps;
} demo_lane_stats;

/* On a mesh of DP lanes (collective over all its ranks): every lane leader's N outputs and
 * stats MINE go to rank 0, into ALL (dp x N, lane-major; the tokens malloc'd) and STATS (dp).
 * 0 after a message. demo_lanes.c. */
int demo_lanes_gather(const mlm_mesh *mesh, const mlm_gen_output *outs, int n,
                      const demo_lane_stats *mine, mlm_gen_output *all, demo_lane_stats *stats);

/* The speculative pass (demo_draft.c): a scheduler with the draft for C's batches. */
typedef struct demo_spec demo_spec;
typedef struct demo_spec_stats {
    double prefill_s, decode_s;             /* until every user's first token; after */
    int64_t decode_tokens, decode_steps;    /* after each user's first token */
    int64_t drafted, accepted;
} demo_spec_stats;
mlm_status demo_spec_create(const demo_config *c, const mlm_model *m, int32_t prefill_chunk,
                            demo_spec **out, mlm_error *err);
void demo_spec_free(demo_spec *d);
/* Runs N users (<= 32) at once; OUT[u] gets user u's tokens (the stop id included) and STATS
 * add this batch's figures. */
mlm_status demo_spec_batch(demo_spec *d, const mlm_gen_user *users, int n, mlm_gen_output *out,
                           demo_spec_stats *stats, mlm_error *err);

/* Prints the report (and writes --report / checks --expect); top1 < 0 when there is no token
 * accuracy. Returns the exit code: 1 when FAILURES is not empty or a target is missed. */
int demo_report(const demo_config *c, const char *model, const mlm_model *m,
                const demo_metrics *mt, const char *failures, int n_users, char **prompts,
                char **outputs, double top1, double top5);
/* Token accuracy of the loaded model against C's reference (accuracy.c). */
int demo_token_accuracy(const demo_config *c, const char *model, mlm_model *m, double *top1,
                        double *top5);

#endif
