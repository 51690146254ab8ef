/* exec/generate.c: batched generation over the executor (see mlm_exec_generate in meshlm.h):
 * flat prefill steps for all users, then one decode step per iteration for every live user,
 * each user sampling with its own sampler and stopping at its own stop ids. The scratch is
 * allocated once per call, outside the step loop. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "meshlm.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void mlm_gen_output_deinit(mlm_gen_output *o) {
    free(o->tokens);
    memset(o, 0, sizeof *o);
}

typedef struct state {
    int32_t *tok, *seq, *pos; /* one step's batch (max_step_tokens) */
    int8_t *want;
    int32_t *owner;           /* user of each logits row */
    float *logits;            /* (max_step_logits, n_vocab) */
    mlm_sampler *samplers;    /* (n_users) */
    int n_samplers;
} state;

static void state_free(state *s) {
    free(s->tok), free(s->seq), free(s->pos), free(s->want), free(s->owner), free(s->logits);
    for (int i = 0; i < s->n_samplers; i++) mlm_sampler_deinit(&s->samplers[i]);
    free(s->samplers);
}

static int is_stop(const mlm_gen_user *u, int32_t id) {
    for (int32_t i = 0; i < u->n_stop_ids; i++)
        if (u->stop_ids[i] == id) return 1;
    return 0;
}

/* Appends ID to user U's output; returns whether U is done. */
static int push(const mlm_gen_user *u, mlm_gen_output *o, int32_t id) {
    o->tokens[o->n++] = id;
    if (is_stop(u, id)) o->stopped = 1;
    return o->stopped || o->n >= u->max_new_tokens;
}

/* Runs the step of S's first N entries and lets each of the N_LOGITS users that asked for
 * logits (S->owner, in batch order) sample its next token. */
static mlm_status step_and_sample(mlm_exec *e, state *s, int32_t n, int32_t n_logits,
                                  const mlm_gen_user *users, mlm_gen_output *out, uint8_t *done,
                                  int32_t V, mlm_error *err) {
    mlm_batch b = {.n = n, .tokens = s->tok, .seq = s->seq, .pos = s->pos, .logits = s->want};
    mlm_status st = mlm_exec_step(e, &b, s->logits, err);
    for (int32_t k = 0; !st && k < n_logits; k++) {
        int32_t w = s->owner[k];
        done[w] = (uint8_t)push(&users[w], &out[w],
                                mlm_sampler_sample(&s->samplers[w], s->logits + (size_t)k * V));
    }
    return st;
}

/* User U's images at its prompt's image tokens, in order. */
static mlm_status bind_images(mlm_exec *e, int32_t u, const mlm_gen_user *us, mlm_error *err) {
    if (!us->n_images) return MLM_OK;
    int32_t image = mlm_model_image_token(mlm_exec_model(e)), pos[MLM_MAX_IMAGES], n = 0;
    for (int32_t i = 0; i < us->n_prompt; i++)
        if (us->prompt[i] == image && image >= 0 && n < MLM_MAX_IMAGES) pos[n++] = i;
    if (n != us->n_images)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "generate: user %d: the prompt holds %d image tokens, %d images were "
                             "given",
                             u, n, us->n_images);
    return mlm_exec_seq_set_images(e, u, us->images, pos, n, err);
}

mlm_status mlm_exec_generate(mlm_exec *e, const mlm_gen_user *users, int32_t n_users,
                             const int32_t *const *pages, int32_t n_pages, mlm_gen_output *out,
                             mlm_gen_stats *stats, mlm_error *err) {
    const mlm_exec_params *p = mlm_exec_get_params(e);
    int32_t V = mlm_model_config(mlm_exec_model(e))->n_vocab;
    memset(stats, 0, sizeof *stats);
    if (n_users < 1 || n_users > p->max_seqs || n_users > p->max_step_tokens)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "generate: %d users, the executor takes 1 to %d (max_seqs)", n_users,
                             p->max_seqs);
    memset(out, 0, (size_t)n_users * sizeof *out);
    for (int32_t u = 0; u < n_users; u++) {
        if (users[u].n_prompt < 1 || users[u].max_new_tokens < 1)
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "generate: user %d needs a prompt and max_new_tokens >= 1", u);
        if ((int64_t)users[u].n_prompt + users[u].max_new_tokens > p->max_seq_len)
            return mlm_error_set(
                err, MLM_ERR_CAPACITY,
                "generate: user %d: prompt %d + %d new tokens exceed max_seq_len %d", u,
                users[u].n_prompt, users[u].max_new_tokens, p->max_seq_len);
    }
    state s = {0};
    int32_t T = p->max_step_tokens, L = p->max_step_logits;
    s.tok = malloc((size_t)T * sizeof *s.tok), s.seq = malloc((size_t)T * sizeof *s.seq);
    s.pos = malloc((size_t)T * sizeof *s.pos), s.want = malloc((size_t)T);
    s.owner = malloc((size_t)T * sizeof *s.owner);
    s.logits = malloc((size_t)L * (size_t)V * sizeof *s.logits);
    s.samplers = calloc((size_t)n_users, sizeof *s.samplers);
    mlm_status st = MLM_OK;
    if (!s.tok || !s.seq || !s.pos || !s.want || !s.owner || !s.logits || !s.samplers)
        st = mlm_error_set(err, MLM_ERR_NOMEM, "generate: out of memory");
    for (int32_t u = 0; !st && u < n_users; u++) {
        st = mlm_sampler_init(&s.samplers[u], &users[u].sampling, V, err);
        if (!st) s.n_samplers++;
        out[u].tokens = st ? NULL : malloc((size_t)users[u].max_new_tokens * sizeof(int32_t));
        if (!st && !out[u].tokens)
            st = mlm_error_set(err, MLM_ERR_NOMEM, "generate: out of memory");
        if (!st) st = mlm_exec_seq_reset(e, u, 0, err);
    }
    /* every user's old pages are free before any new table is set */
    for (int32_t u = 0; !st && pages && u < n_users; u++)
        st = mlm_exec_seq_set_pages(e, u, pages[u], n_pages, err);
    for (int32_t u = 0; !st && u < n_users; u++)
        st = bind_images(e, u, &users[u], err);
    uint8_t *done = st ? NULL : calloc((size_t)n_users, 1);
    if (!st && !done) st = mlm_error_set(err, MLM_ERR_NOMEM, "generate: out of memory");
    /* prefill: users' prompts one after another in steps of at most T tokens and L logits */
    double t0 = now();
    int32_t u = 0, off = 0;
    while (!st && u < n_users) {
        int32_t n = 0, n_logits = 0;
        while (u < n_users && n < T) {
            const mlm_gen_user *us = &users[u];
            int32_t take = us->n_prompt - off < T - n ? us->n_prompt - off : T - n;
            int last = off + take == us->n_prompt;
            if (last && n_logits == L) break; /* no room for its logits in this step */
            for (int32_t i = 0; i < take; i++) {
                s.tok[n + i] = us->prompt[off + i], s.seq[n + i] = u, s.pos[n + i] = off + i;
                s.want[n + i] = 0;
            }
            n += take;
            if (last) {
                s.want[n - 1] = 1;
                s.owner[n_logits++] = u;
                u++, off = 0;
            } else {
                off += take;
            }
        }
        st = step_and_sample(e, &s, n, n_logits, users, out, done, V, err);
        stats->prefill_tokens += n;
    }
    stats->prefill_s = now() - t0;
    /* decode: every live user's last token at its own position, in steps of at most L users */
    for (int32_t it = 0; !st; it++) {
        double ti = now();
        int32_t live = 0;
        for (int32_t v0 = 0; !st && v0 < n_users;) {
            int32_t n = 0;
            for (; v0 < n_users && n < L; v0++) {
                if (done[v0]) continue;
                s.tok[n] = out[v0].tokens[out[v0].n - 1], s.seq[n] = v0;
                s.pos[n] = users[v0].n_prompt + out[v0].n - 1, s.want[n] = 1, s.owner[n] = v0;
                n++;
            }
            if (!n) break;
            st = step_and_sample(e, &s, n, n, users, out, done, V, err);
            live += n;
        }
        if (!live) break;
        double dt = now() - ti;
        stats->decode_steps++;
        if (it == 0) stats->first_decode_s = dt;
        else stats->decode_s += dt, stats->decode_tokens += live;
    }
    free(done);
    state_free(&s);
    if (st)
        for (int32_t k = 0; k < n_users; k++) mlm_gen_output_deinit(&out[k]);
    return st;
}
