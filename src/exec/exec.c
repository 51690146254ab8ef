/* exec/exec.c: the step executor. One step function serves prefill, decode and their mix:
 * it checks the batch (tokens, sequences, positions in order), reserves KV pages for every
 * sequence it extends (all or nothing, so running out is a clean MLM_ERR_CAPACITY), and runs
 * the model's forward pass with scratch allocated once at creation. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "exec/exec.h"
#include "exec/image.h"
#include "kv/kv.h"
#include "model/forward.h"

struct mlm_exec {
    const mlm_model *model; /* borrowed */
    mlm_exec_params p;
    mlm_kv kv;
    void *scratch;          /* owned, for mlm_forward */
    mlm_pool *pool;         /* owned: n_threads - 1 workers */
    int32_t *kv_idx;        /* owned (max_step_tokens) */
    const int32_t **blocks; /* owned (max_step_tokens) */
    int32_t *step_len;      /* owned (max_seqs): entries each sequence gets in this step */
    /* leading or following under TP (mesh): one step's message, and a follower's logits */
    int32_t *msg; /* owned (msg_cap ints) */
    int64_t msg_cap;
    float *follow_logits; /* owned (max_step_logits x n_vocab), followers only */
    int8_t *flags;        /* owned (max_step_tokens): a follower's logits flags */
    /* Llama 3.2 Vision: the image K/V (one block a tile), the images of each sequence, and a
     * step's cross-attention view of its tokens */
    mlm_kv xkv;
    seq_images *images;      /* owned (max_seqs) */
    const int32_t **xblocks; /* owned (max_step_tokens) */
    int32_t *xn;             /* owned (max_step_tokens) */
};

/* A leader's step message, after a header of 3 ints {n, n_seqs, ints that follow}: per token
 * its id, position, KV entry index, index among the step's sequences and logits flag; then per
 * sequence its page count and pages. n = 0 ends the followers. */
enum { HDR = 3, PER_TOKEN = 5 };

static int64_t msg_ints(const mlm_exec_params *p, int32_t max_blocks_per_seq) {
    return HDR + (int64_t)p->max_step_tokens * PER_TOKEN +
           (int64_t)p->max_seqs * (1 + max_blocks_per_seq);
}

static int leading(const mlm_exec *e) { return e->p.lead && e->model->tp_size > 1; }

mlm_exec_params mlm_exec_default_params(void) {
    mlm_exec_params p = {.max_seqs = 1,
                         .max_seq_len = 4096,
                         .block_size = 64,
                         .max_num_blocks = 0,
                         .max_step_tokens = 512,
                         .max_step_logits = 0,
                         .kv_dtype = MLM_KV_FROM_PROFILE,
                         .n_threads = 0,
                         .max_images = 1,
                         .image_tiles = 0};
    return p;
}

mlm_status mlm_exec_params_resolve(mlm_exec_params *p, mlm_dtype profile_kv, const mlm_config *c,
                                   mlm_error *err) {
    if (p->max_seqs < 1 || p->max_seq_len < 1 || p->block_size < 1 || p->max_step_tokens < 1 ||
        p->max_num_blocks < 0 || p->max_step_logits < 0 || p->n_threads < 0)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "executor: max_seqs, max_seq_len, block_size and max_step_tokens must "
                             "be positive");
    if (p->max_images < 0 || p->max_images > MLM_MAX_IMAGES || p->image_tiles < 0)
        return mlm_error_set(
            err, MLM_ERR_INVALID_ARG,
            "executor: max_images %d outside [0, %d] (MLM_MAX_IMAGES), or negative "
            "image_tiles",
            p->max_images, MLM_MAX_IMAGES);
    if (p->kv_dtype == MLM_KV_FROM_PROFILE) p->kv_dtype = profile_kv;
    if (p->kv_dtype != MLM_DTYPE_F32 && p->kv_dtype != MLM_DTYPE_BF16 && p->kv_dtype != MLM_DTYPE_BFP8)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "executor: KV dtype %s is not f32, bf16 or bfp8",
                             mlm_dtype_name(p->kv_dtype));
    if (!p->max_num_blocks)
        p->max_num_blocks = p->max_seqs * ((p->max_seq_len + p->block_size - 1) / p->block_size);
    if (!p->max_step_logits) p->max_step_logits = p->max_seqs;
    if (p->max_step_logits > p->max_step_tokens) p->max_step_logits = p->max_step_tokens;
    if (!p->n_threads) p->n_threads = mlm_cpu_count();
    if (c->family == MLM_FAMILY_MLLAMA && p->max_images > 0 && !p->image_tiles)
        p->image_tiles = p->max_seqs * p->max_images * c->vision.max_tiles;
    return MLM_OK;
}

mlm_status mlm_exec_create(const mlm_model *model, const mlm_exec_params *params, mlm_exec **out,
                           mlm_error *err) {
    *out = NULL;
    mlm_exec_params p = params ? *params : mlm_exec_default_params();
    mlm_status st = mlm_exec_params_resolve(&p, mlm_model_kv_dtype(model), &model->cfg, err);
    if (st) return st;
    mlm_exec *e = calloc(1, sizeof *e);
    if (!e) return mlm_error_set(err, MLM_ERR_NOMEM, "executor: out of memory");
    e->model = model;
    e->p = p;
    const mlm_config *c = &model->local; /* this rank's KV heads under TP */
    st = mlm_kv_init(&e->kv, model->n_self, (int64_t)c->n_kv_head * c->head_dim,
                     (mlm_wtype)mlm_wtype_of_dtype(p.kv_dtype), p.block_size, p.max_num_blocks,
                     p.max_seqs, p.max_seq_len, err);
    if (st) {
        free(e);
        return st;
    }
    size_t bytes = mlm_forward_scratch_size(&model->cfg, model->tp_size, p.max_step_tokens,
                                            p.max_step_logits, p.n_threads);
    e->scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
    e->kv_idx = malloc((size_t)p.max_step_tokens * sizeof *e->kv_idx);
    e->blocks = malloc((size_t)p.max_step_tokens * sizeof *e->blocks);
    e->step_len = calloc((size_t)p.max_seqs, sizeof *e->step_len);
    if (!e->scratch || !e->kv_idx || !e->blocks || !e->step_len) {
        mlm_exec_free(e);
        return mlm_error_set(err, MLM_ERR_NOMEM, "executor: cannot allocate %zu bytes of scratch",
                             bytes);
    }
    if ((st = mlm_pool_create(p.n_threads, &e->pool, err)) ||
        (st = mlm_exec_images_init(e->model, &e->p, &e->xkv, &e->images, err))) {
        mlm_exec_free(e);
        return st;
    }
    if (e->images && (!(e->xblocks = calloc((size_t)p.max_step_tokens, sizeof *e->xblocks)) ||
                      !(e->xn = calloc((size_t)p.max_step_tokens, sizeof *e->xn)))) {
        mlm_exec_free(e);
        return mlm_error_set(err, MLM_ERR_NOMEM, "executor: out of memory");
    }
    if (model->tp_size > 1) {
        e->msg_cap = msg_ints(&p, e->kv.max_blocks_per_seq);
        e->flags = malloc((size_t)p.max_step_tokens);
        if (!(e->msg = malloc((size_t)e->msg_cap * sizeof *e->msg)) || !e->flags) {
            mlm_exec_free(e);
            return mlm_error_set(err, MLM_ERR_NOMEM, "executor: out of memory");
        }
    }
    *out = e;
    return MLM_OK;
}

void mlm_exec_free(mlm_exec *e) {
    if (!e) return;
    if (leading(e) && e->msg) { /* the followers' end */
        int32_t end[HDR] = {0, 0, 0};
        mlm_comm_bcast(e->model->tp, end, sizeof end, 0, NULL);
    }
    free(e->msg);
    free(e->flags);
    free(e->follow_logits);
    mlm_pool_free(e->pool);
    mlm_kv_deinit(&e->kv);
    mlm_exec_images_deinit(&e->xkv, e->images);
    free(e->xblocks);
    free(e->xn);
    free(e->scratch);
    free(e->kv_idx);
    free(e->blocks);
    free(e->step_len);
    free(e);
}

static mlm_status check_seq(const mlm_exec *e, int32_t seq, mlm_error *err) {
    if (seq < 0 || seq >= e->p.max_seqs)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "executor: sequence %d is outside [0, %d)",
                             seq, e->p.max_seqs);
    return MLM_OK;
}

mlm_status mlm_exec_seq_reset(mlm_exec *e, int32_t seq, int32_t start, mlm_error *err) {
    mlm_status st = check_seq(e, seq, err);
    if (st) return st;
    if (start < 0)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "executor: negative start position %d",
                             start);
    mlm_kv_reset(&e->kv, seq, start);
    if (e->images) mlm_exec_images_reset(&e->xkv, &e->images[seq], seq);
    return MLM_OK;
}

mlm_status mlm_exec_seq_set_pages(mlm_exec *e, int32_t seq, const int32_t *blocks, int32_t n,
                                  mlm_error *err) {
    mlm_status st = check_seq(e, seq, err);
    if (st) return st;
    return mlm_kv_set_pages(&e->kv, seq, blocks, n, err);
}

mlm_status mlm_exec_seq_truncate(mlm_exec *e, int32_t seq, int32_t pos, mlm_error *err) {
    mlm_status st = check_seq(e, seq, err);
    if (st) return st;
    const mlm_kv_seq *s = &e->kv.seqs[seq];
    if (pos < s->start || pos > s->start + s->len)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "executor: sequence %d holds positions [%d, %d); cannot cut it at %d",
                             seq, s->start, s->start + s->len, pos);
    if (e->images && e->images[seq].n && e->images[seq].pos[e->images[seq].n - 1] >= pos)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "executor: sequence %d has an image at or after position %d", seq, pos);
    mlm_kv_truncate(&e->kv, seq, pos - s->start);
    return MLM_OK;
}

int32_t mlm_exec_seq_len(const mlm_exec *e, int32_t seq) {
    if (seq < 0 || seq >= e->p.max_seqs) return -1;
    return e->kv.seqs[seq].start + e->kv.seqs[seq].len;
}

/* Checks tokens, sequences and positions; fills step_len. */
static mlm_status check_batch(mlm_exec *e, const mlm_batch *b, int32_t *n_logits, mlm_error *err) {
    const mlm_config *c = &e->model->cfg;
    if (b->n < 1 || b->n > e->p.max_step_tokens)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "executor: a step takes 1 to %d tokens (max_step_tokens), got %d",
                             e->p.max_step_tokens, b->n);
    memset(e->step_len, 0, (size_t)e->p.max_seqs * sizeof *e->step_len);
    *n_logits = 0;
    for (int32_t i = 0; i < b->n; i++) {
        int32_t seq = b->seq[i], tok = b->tokens[i];
        mlm_status st = check_seq(e, seq, err);
        if (st) return st;
        if ((tok < 0 || tok >= c->n_vocab) && !(e->images && tok == c->image_token_id))
            return mlm_error_set(
                err, MLM_ERR_INVALID_ARG,
                "executor: token %d (batch entry %d) is outside the vocabulary [0, %d)", tok, i,
                c->n_vocab);
        const mlm_kv_seq *s = &e->kv.seqs[seq];
        int32_t expect = s->start + s->len + e->step_len[seq];
        if (b->pos[i] != expect)
            return mlm_error_set(
                err, MLM_ERR_INVALID_ARG,
                "executor: sequence %d expects position %d next, batch entry %d has %d", seq,
                expect, i, b->pos[i]);
        if (e->images && (st = mlm_exec_images_check(&e->images[seq], seq, tok, b->pos[i],
                                                     c->image_token_id, err)))
            return st;
        if (s->len + e->step_len[seq] >= e->p.max_seq_len)
            return mlm_error_set(err, MLM_ERR_CAPACITY,
                                 "executor: sequence %d is full (max_seq_len %d)", seq,
                                 e->p.max_seq_len);
        e->step_len[seq]++;
        *n_logits += b->logits && b->logits[i];
    }
    if (*n_logits > e->p.max_step_logits)
        return mlm_error_set(
            err, MLM_ERR_INVALID_ARG,
            "executor: %d tokens ask for logits, at most %d per step (max_step_logits)", *n_logits,
            e->p.max_step_logits);
    return MLM_OK;
}

/* The leader's half: batch B (checked, pages reserved, kv_idx set) to the followers. */
static mlm_status send_step(mlm_exec *e, const mlm_batch *b, mlm_error *err) {
    int32_t *m = e->msg, n = b->n, n_seqs = 0;
    int32_t *tok = m + HDR, *pos = tok + n, *idx = pos + n, *which = idx + n, *want = which + n;
    int32_t *tables = want + n, *t = tables;
    for (int32_t i = 0; i < n; i++) {
        tok[i] = b->tokens[i], pos[i] = b->pos[i], idx[i] = e->kv_idx[i];
        want[i] = b->logits && b->logits[i];
        /* a sequence's tokens are consecutive in the step or not: look back for its index */
        int32_t j = i > 0 && b->seq[i] == b->seq[i - 1] ? which[i - 1] : -1;
        for (int32_t k = 0; j < 0 && k < i; k++)
            if (b->seq[k] == b->seq[i]) j = which[k];
        if (j < 0) {
            const mlm_kv_seq *s = &e->kv.seqs[b->seq[i]];
            j = n_seqs++;
            *t++ = s->n_blocks;
            memcpy(t, s->blocks, (size_t)s->n_blocks * sizeof *t);
            t += s->n_blocks;
        }
        which[i] = j;
    }
    m[0] = n, m[1] = n_seqs, m[2] = (int32_t)(t - (m + HDR));
    mlm_status st = mlm_comm_bcast(e->model->tp, m, HDR * sizeof *m, 0, err);
    return st ? st : mlm_comm_bcast(e->model->tp, m + HDR, (size_t)m[2] * sizeof *m, 0, err);
}

mlm_status mlm_exec_follow(mlm_exec *e, mlm_error *err) {
    const mlm_model *mod = e->model;
    if (mod->tp_size < 2 || mod->tp_rank == 0)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "executor: only TP ranks other than 0 follow (this is rank %d of %d)",
                             mod->tp_rank, mod->tp_size);
    size_t V = (size_t)mod->cfg.n_vocab;
    if (!e->follow_logits &&
        !(e->follow_logits = malloc((size_t)e->p.max_step_logits * V * sizeof(float))))
        return mlm_error_set(err, MLM_ERR_NOMEM, "executor: out of memory");
    const int32_t *seq_pages[512];
    for (;;) {
        int32_t *m = e->msg;
        mlm_status st = mlm_comm_bcast(mod->tp, m, HDR * sizeof *m, 0, err);
        if (st) return st;
        int32_t n = m[0], n_seqs = m[1], ints = m[2];
        if (n == 0) return MLM_OK;
        if (n < 0 || n > e->p.max_step_tokens || n_seqs < 1 || n_seqs > e->p.max_seqs ||
            n_seqs > 512 || ints < PER_TOKEN * n || ints > e->msg_cap - HDR)
            return mlm_error_set(
                err, MLM_ERR_INTERNAL,
                "executor: a step message of %d tokens, %d sequences, %d ints does "
                "not fit this executor",
                n, n_seqs, ints);
        if ((st = mlm_comm_bcast(mod->tp, m + HDR, (size_t)ints * sizeof *m, 0, err))) return st;
        int32_t *tok = m + HDR, *pos = tok + n, *idx = pos + n, *which = idx + n, *want = which + n;
        const int32_t *t = want + n;
        for (int32_t j = 0; j < n_seqs; j++) {
            seq_pages[j] = t + 1;
            t += 1 + t[0];
        }
        for (int32_t i = 0; i < n; i++) {
            if (which[i] < 0 || which[i] >= n_seqs)
                return mlm_error_set(err, MLM_ERR_INTERNAL,
                                     "executor: a step message names "
                                     "sequence %d of %d",
                                     which[i], n_seqs);
            e->kv_idx[i] = idx[i];
            e->blocks[i] = seq_pages[which[i]];
            e->flags[i] = (int8_t)want[i];
        }
        mlm_fwd_batch fb = {.n = n,
                            .tokens = tok,
                            .pos = pos,
                            .blocks = e->blocks,
                            .kv_idx = e->kv_idx,
                            .want_logits = e->flags};
        if ((st = mlm_forward(mod, &fb, e->kv.layers, e->scratch, e->pool, e->follow_logits, err)))
            return st;
    }
}

mlm_status mlm_exec_step(mlm_exec *e, const mlm_batch *b, float *out, mlm_error *err) {
    int32_t n_logits = 0;
    mlm_status st = check_batch(e, b, &n_logits, err);
    if (st) return st;
    if (n_logits && !out)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "executor: logits asked for, no output buffer");
    /* Reserve every page first: all or nothing. */
    int32_t need = 0;
    for (int32_t s = 0; s < e->p.max_seqs; s++)
        if (e->step_len[s])
            need += mlm_kv_pages_needed(&e->kv, s, e->kv.seqs[s].len + e->step_len[s]);
    if (need > e->kv.n_free)
        return mlm_error_set(err, MLM_ERR_CAPACITY,
                             "kv cache: out of blocks: this step needs %d more, %d of %d are free "
                             "(block_size %d)",
                             need, e->kv.n_free, e->kv.max_num_blocks, e->kv.block_size);
    for (int32_t s = 0; s < e->p.max_seqs; s++)
        if (e->step_len[s]) mlm_kv_grow(&e->kv, s, e->kv.seqs[s].len + e->step_len[s]);
    for (int32_t i = 0; i < b->n; i++) {
        mlm_kv_seq *s = &e->kv.seqs[b->seq[i]];
        e->kv_idx[i] = b->pos[i] - s->start;
        e->blocks[i] = s->blocks;
    }
    mlm_fwd_batch fb = {.n = b->n,
                        .tokens = b->tokens,
                        .pos = b->pos,
                        .blocks = e->blocks,
                        .kv_idx = e->kv_idx,
                        .want_logits = b->logits};
    if (e->images) {
        for (int32_t i = 0; i < b->n; i++)
            mlm_exec_images_view(&e->images[b->seq[i]], &e->xkv.seqs[b->seq[i]], b->pos[i],
                                 e->model->vision.n_tok, &e->xblocks[i], &e->xn[i]);
        fb.xkv = e->xkv.layers, fb.xblocks = e->xblocks, fb.xn = e->xn;
    }
    if (leading(e) && (st = send_step(e, b, err))) return st;
    if ((st = mlm_forward(e->model, &fb, e->kv.layers, e->scratch, e->pool, out, err))) return st;
    for (int32_t s = 0; s < e->p.max_seqs; s++) e->kv.seqs[s].len += e->step_len[s];
    return MLM_OK;
}

const mlm_exec_params *mlm_exec_get_params(const mlm_exec *e) { return &e->p; }
const mlm_model *mlm_exec_model(const mlm_exec *e) { return e->model; }
mlm_kv *mlm_exec_kv(mlm_exec *e) { return &e->kv; }

int32_t mlm_exec_image_tiles(const mlm_exec *e, int32_t *total) {
    if (total) *total = e->images ? e->xkv.max_num_blocks : 0;
    return e->images ? e->xkv.n_free : 0;
}

mlm_status mlm_exec_seq_set_images(mlm_exec *e, int32_t seq, mlm_image *const *images,
                                   const int32_t *pos, int32_t n, mlm_error *err) {
    mlm_status st = check_seq(e, seq, err);
    if (st) return st;
    if (!e->images)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "executor: the model (%s) takes no images",
                             mlm_family_name(e->model->cfg.family));
    return mlm_exec_images_bind(e->model, &e->p, &e->xkv, e->images, seq, mlm_exec_seq_len(e, seq),
                                images, pos, n, e->scratch, e->pool, err);
}
