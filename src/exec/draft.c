/* exec/draft.c: the draft model of speculative decoding (see draft.h). */
#include "exec/draft.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "exec/exec.h"
#include "sample/speculative.h"

struct mlm_drafter {
    mlm_exec *exec; /* owned */
    mlm_kv *kv;     /* borrowed from exec */
    int32_t n_vocab, max_batch, chunk;
    float p_min;
    /* one step's batch, sized at creation */
    int32_t *b_tok, *b_seq, *b_pos;
    int8_t *b_want;
    int32_t *row_ask; /* (max_batch) the ask of each logits row */
    float *logits;    /* (max_batch, n_vocab) */
};

mlm_status mlm_drafter_create(const mlm_model *draft, const mlm_sched_params *p, int32_t n_vocab,
                              float p_min, mlm_drafter **out, mlm_error *err) {
    *out = NULL;
    const mlm_config *c = mlm_model_config(draft);
    if (c->n_vocab != n_vocab)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "draft model: its vocabulary has %d tokens, the model's %d (a draft "
                             "must share the model's tokenizer)",
                             c->n_vocab, n_vocab);
    if (c->family == MLM_FAMILY_MLLAMA)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "draft model: a vision model cannot draft (use a text model)");
    if (!(p_min >= 0 && p_min <= 1))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "draft model: p_min %g must be in [0, 1]",
                             p_min);
    mlm_drafter *d = calloc(1, sizeof *d);
    if (!d) return mlm_error_set(err, MLM_ERR_NOMEM, "draft model: out of memory");
    d->n_vocab = n_vocab, d->max_batch = p->max_batch, d->chunk = p->prefill_chunk;
    d->p_min = p_min;
    mlm_exec_params xp = mlm_exec_default_params();
    xp.max_seqs = p->max_batch;
    xp.max_seq_len = p->max_seq_len;
    xp.block_size = p->block_size;
    /* the model's pool, and each slot's drafted tokens past it (the draft shares no prefix
     * blocks, so a pool the model shares may still run short: that sequence then waits) */
    int32_t per_draft = (p->max_draft + p->block_size) / p->block_size;
    xp.max_num_blocks = p->kv_blocks + p->max_batch * per_draft;
    xp.max_step_tokens = p->max_batch + p->prefill_chunk;
    xp.max_step_logits = p->max_batch;
    xp.kv_dtype = p->kv_dtype;
    xp.n_threads = p->n_threads;
    mlm_status st = mlm_exec_create(draft, &xp, &d->exec, err);
    if (st) {
        mlm_drafter_free(d);
        return st;
    }
    d->kv = mlm_exec_kv(d->exec);
    size_t T = (size_t)xp.max_step_tokens, B = (size_t)p->max_batch;
    d->b_tok = malloc(T * sizeof(int32_t)), d->b_seq = malloc(T * sizeof(int32_t));
    d->b_pos = malloc(T * sizeof(int32_t)), d->b_want = malloc(T);
    d->row_ask = malloc(B * sizeof(int32_t));
    d->logits = malloc(B * (size_t)n_vocab * sizeof(float));
    if (!d->b_tok || !d->b_seq || !d->b_pos || !d->b_want || !d->row_ask || !d->logits) {
        mlm_drafter_free(d);
        return mlm_error_set(err, MLM_ERR_NOMEM, "draft model: out of memory");
    }
    *out = d;
    return MLM_OK;
}

void mlm_drafter_free(mlm_drafter *d) {
    if (!d) return;
    mlm_exec_free(d->exec);
    free(d->b_tok), free(d->b_seq), free(d->b_pos), free(d->b_want), free(d->row_ask);
    free(d->logits);
    free(d);
}

void mlm_drafter_keep(mlm_drafter *d, int32_t slot, int32_t n) {
    if (!d) return;
    if (n <= 0) {
        mlm_exec_seq_reset(d->exec, slot, 0, NULL);
        return;
    }
    if (mlm_exec_seq_len(d->exec, slot) > n) mlm_exec_seq_truncate(d->exec, slot, n, NULL);
}

/* Adds K tokens of ask A (from position POS, TOKS) to the batch at *N, the last one wanting
 * its logits when WANT; 0 (and the ask dropped: it drafts nothing) when the pool cannot
 * hold them. */
static int feed(mlm_drafter *d, mlm_draft_ask *a, int32_t ai, const int32_t *toks, int32_t pos,
                int32_t k, int want, int32_t *n, int32_t *n_rows) {
    int32_t need = mlm_kv_pages_needed(d->kv, a->slot, pos + k);
    if (need > d->kv->n_free) {
        mlm_exec_seq_reset(d->exec, a->slot, 0, NULL); /* frees its pages for the others */
        a->max = 0;
        return 0;
    }
    mlm_kv_grow(d->kv, a->slot, pos + k);
    for (int32_t j = 0; j < k; j++, (*n)++) {
        d->b_tok[*n] = toks[j], d->b_seq[*n] = a->slot, d->b_pos[*n] = pos + j;
        d->b_want[*n] = want && j == k - 1;
    }
    if (want) d->row_ask[(*n_rows)++] = ai;
    return 1;
}

static mlm_status run(mlm_drafter *d, int32_t n, mlm_error *err) {
    if (!n) return MLM_OK;
    mlm_batch b = {.n = n, .tokens = d->b_tok, .seq = d->b_seq, .pos = d->b_pos, .logits = d->b_want};
    return mlm_exec_step(d->exec, &b, d->logits, err);
}

/* Feeds every ask the tokens its sequence has not seen but its last, a chunk at a time. */
static mlm_status catch_up(mlm_drafter *d, mlm_draft_ask *asks, int32_t n_asks, mlm_error *err) {
    for (;;) {
        int32_t n = 0, rows = 0, budget = d->chunk;
        for (int32_t i = 0; i < n_asks && budget > 0; i++) {
            mlm_draft_ask *a = &asks[i];
            int32_t len = mlm_exec_seq_len(d->exec, a->slot), left = a->n_tokens - 1 - len;
            if (a->max <= 0 || left <= 0) continue;
            int32_t k = left < budget ? left : budget;
            if (feed(d, a, i, a->tokens + len, len, k, 0, &n, &rows)) budget -= k;
        }
        if (!n) return MLM_OK;
        mlm_status st = run(d, n, err);
        if (st) return st;
    }
}

/* The most likely token under LOGITS (ties to the lowest id). */
static int32_t best_of(const float *logits, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[b]) b = i;
    return b;
}

/* The probability of token BEST, the most likely, under LOGITS (softmax at temperature 1). */
static float top_prob(const float *logits, int32_t n, int32_t best) {
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)logits[i] - (double)logits[best]);
    return (float)(1.0 / sum);
}

mlm_status mlm_drafter_propose(mlm_drafter *d, mlm_draft_ask *asks, int32_t n_asks, mlm_error *err) {
    for (int32_t i = 0; i < n_asks; i++) {
        asks[i].n_out = 0;
        int32_t len = mlm_exec_seq_len(d->exec, asks[i].slot);
        if (len > asks[i].n_tokens - 1) mlm_drafter_keep(d, asks[i].slot, asks[i].n_tokens - 1);
    }
    mlm_status st = catch_up(d, asks, n_asks, err);
    if (st) return st;
    /* step 0 feeds each sequence's last token; step s > 0 its draft s */
    for (int32_t s = 0;; s++) {
        int32_t n = 0, rows = 0;
        for (int32_t i = 0; i < n_asks; i++) {
            mlm_draft_ask *a = &asks[i];
            if (a->max <= 0 || a->n_out != s || s >= a->max) continue;
            const int32_t *t = s ? &a->out[s - 1] : &a->tokens[a->n_tokens - 1];
            feed(d, a, i, t, a->n_tokens - 1 + s, 1, 1, &n, &rows);
        }
        if (!n) return MLM_OK;
        if ((st = run(d, n, err))) {
            for (int32_t i = 0; i < n_asks; i++) asks[i].n_out = 0;
            return st;
        }
        for (int32_t r = 0; r < rows; r++) {
            mlm_draft_ask *a = &asks[d->row_ask[r]];
            const float *lg = d->logits + (size_t)r * d->n_vocab;
            int32_t best = best_of(lg, d->n_vocab);
            /* not confident: stop (the softmax only when a p_min asks for it) */
            if (d->p_min > 0 && top_prob(lg, d->n_vocab, best) < d->p_min) continue;
            if (!a->sampler) {
                a->out[a->n_out++] = best;
                continue;
            }
            float *q = a->q + (size_t)a->n_out * d->n_vocab;
            mlm_sampler_dist(a->sampler, lg, q);
            a->out[a->n_out++] = mlm_sampler_draw(a->sampler, q);
        }
    }
}
