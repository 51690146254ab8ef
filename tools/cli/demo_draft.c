/* tools/cli/demo_draft.c: the demo's speculative pass (--draft-model, --draft-ngram). After
 * the plain batches, the same users run again through a scheduler that drafts and verifies;
 * the report puts the two side by side: the speculative outputs against the plain ones
 * (greedy users must match token for token), the drafted and accepted tokens, and decode speed
 * with and without speculation measured the same way. */
#include <stdlib.h>
#include <string.h>

#include "demo.h"

struct demo_spec {
    mlm_sched *s;
    int32_t max_draft; /* tokens a request drafts per step */
};

/* One user's request in flight: its output so far. */
typedef struct spec_user {
    mlm_gen_output *out;
    int32_t cap;
    int done;
    mlm_status st;
    mlm_error *err;
} spec_user;

mlm_status demo_spec_create(const demo_config *c, const mlm_model *m, int32_t prefill_chunk,
                            demo_spec **out, mlm_error *err) {
    mlm_sched_params sp = mlm_sched_default_params();
    sp.max_batch = sp.max_queue = c->batch_size;
    sp.max_seq_len = c->max_seq_len;
    sp.kv_blocks = c->max_num_blocks;
    sp.block_size = c->block_size;
    sp.prefill_chunk = prefill_chunk;
    sp.prefix_cache = 0; /* repeated prompts are read again, as in the plain batches */
    sp.n_threads = c->n_threads;
    sp.max_images = 0;
    tool_draft_params(&c->draft, &sp);
    demo_spec *d = calloc(1, sizeof *d);
    if (!d) return mlm_error_set(err, MLM_ERR_NOMEM, "demo: out of memory");
    mlm_status st = mlm_sched_create(m, &sp, &d->s, err);
    if (st) {
        free(d);
        return st;
    }
    d->max_draft = tool_draft_max(&c->draft);
    *out = d;
    return MLM_OK;
}

void demo_spec_free(demo_spec *d) {
    if (!d) return;
    mlm_sched_free(d->s);
    free(d);
}

/* Keeps every token, the stop id included, as mlm_exec_generate does. */
static int on_event(void *user, const mlm_sched_event *ev) {
    spec_user *u = user;
    if (ev->token >= 0 && u->out->n < u->cap) {
        u->out->tokens[u->out->n++] = ev->token;
        if (ev->is_stop_id) u->out->stopped = 1;
    }
    if (ev->finish) {
        u->done = 1;
        if (ev->finish == MLM_FINISH_ERROR)
            u->st = mlm_error_set(u->err, MLM_ERR_INTERNAL, "demo: speculative pass: %s",
                                  ev->error ? ev->error : "step failed");
    }
    return 0;
}

mlm_status demo_spec_batch(demo_spec *d, const mlm_gen_user *users, int n, mlm_gen_output *out,
                           demo_spec_stats *stats, mlm_error *err) {
    spec_user su[32];
    mlm_status st = MLM_OK;
    if (n > 32) return mlm_error_set(err, MLM_ERR_INVALID_ARG, "demo: %d users, at most 32", n);
    memset(out, 0, (size_t)n * sizeof *out);
    mlm_sched_stats s0;
    mlm_sched_get_stats(d->s, &s0);
    double t0 = tool_now();
    for (int u = 0; !st && u < n; u++) {
        su[u] = (spec_user){.out = &out[u], .cap = users[u].max_new_tokens, .err = err};
        if (!(out[u].tokens = malloc((size_t)users[u].max_new_tokens * sizeof(int32_t))))
            st = mlm_error_set(err, MLM_ERR_NOMEM, "demo: out of memory");
        mlm_request_params q = mlm_request_default_params();
        q.prompt = users[u].prompt, q.n_prompt = users[u].n_prompt;
        q.max_new_tokens = users[u].max_new_tokens;
        q.sampling = users[u].sampling;
        q.stop_ids = users[u].stop_ids, q.n_stop_ids = users[u].n_stop_ids;
        q.draft.max = d->max_draft;
        q.on_event = on_event, q.user = &su[u];
        uint64_t id;
        if (!st) st = mlm_sched_submit(d->s, &q, &id, err);
    }
    /* prefill ends when every user has its first token; decode runs from then to the end */
    double t_prefilled = 0;
    int64_t first_steps = 0;
    for (int left = n; !st && left;) {
        int did = 0;
        st = mlm_sched_step(d->s, &did, err);
        int got = 0;
        left = 0;
        for (int u = 0; u < n; u++)
            got += out[u].n > 0, left += !su[u].done;
        if (!t_prefilled && got == n) {
            t_prefilled = tool_now();
            mlm_sched_stats sn;
            mlm_sched_get_stats(d->s, &sn);
            first_steps = sn.steps - s0.steps;
        }
    }
    for (int u = 0; !st && u < n; u++)
        st = su[u].st;
    mlm_sched_stats s1;
    mlm_sched_get_stats(d->s, &s1);
    double t1 = tool_now();
    if (!st) {
        stats->prefill_s += t_prefilled - t0;
        stats->decode_s += t1 - t_prefilled;
        for (int u = 0; u < n; u++)
            stats->decode_tokens += out[u].n - 1;
        stats->decode_steps += s1.steps - s0.steps - first_steps;
        stats->drafted += s1.draft_tokens - s0.draft_tokens;
        stats->accepted += s1.draft_accepted - s0.draft_accepted;
    }
    return st;
}
