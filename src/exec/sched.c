/* exec/sched.c: the scheduler (continuous batching, see meshlm.h): a FIFO queue of waiting
 * requests, batch slots (executor sequences) for running ones, and a step that admits, builds
 * one flat batch of decode tokens and prompt chunks, runs it, samples and reports. Full KV
 * blocks go to the prefix cache (exec/prefix.c) as they fill. The queue, cancel flags and
 * stats are shared with other threads under one mutex; everything else belongs to the engine
 * thread that calls mlm_sched_step. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "exec/draft.h"
#include "exec/exec.h"
#include "exec/prefix.h"
#include "sample/speculative.h"

#define MAX_TOP 64

typedef struct req {
    uint64_t id;
    int32_t *tokens; /* owned: prompt, then generated tokens (capacity n_prompt + max_new) */
    int32_t n_prompt, n_tokens, max_new;
    int32_t *stop_ids; /* owned */
    int32_t n_stop_ids;
    int32_t logprobs;
    float presence, frequency;
    mlm_dry_params dry;
    mlm_draft_params draft; /* max capped to the scheduler's max_draft; 0 = no speculation */
    int32_t *drafted;       /* owned (draft.max): this step's speculative tokens */
    int32_t n_drafted;      /* how many this step verifies (0: a plain step) */
    int32_t draft_cap;      /* adaptive: tokens the next draft may have (1..draft.max) */
    int32_t draft_misses;   /* verifications in a row that kept nothing */
    int32_t draft_skip;     /* steps to decode plainly before drafting again */
    int draft_model;        /* this step's draft is the draft model's (planned: n_drafted is
                               its most until the drafter has run); sampled by a request that
                               samples, Q then holding their distributions */
    float *q;               /* owned (draft.max, n_vocab): a sampling request's draft
                               distributions, allocated at its first sampled draft */
    mlm_image **images; /* owned array of borrowed images (Llama 3.2 Vision) */
    int32_t *image_pos; /* owned: their positions (the prompt's image tokens) */
    int32_t n_images, image_tiles;
    mlm_sampler sampler;
    mlm_matcher *matcher; /* borrowed (structured output); NULL: none */
    mlm_sched_callback cb;
    void *user;
    int32_t slot;        /* executor sequence while running, else -1 */
    int32_t n_computed;  /* tokens whose KV the sequence holds */
    int32_t n_cached;    /* prompt tokens from the prefix cache at first admission */
    int32_t n_blocks_keyed; /* leading full blocks whose keys are known */
    uint64_t key;        /* chain key through those blocks */
    uint64_t salt;       /* the chain key before the first block (mlm_request_params) */
    int admitted_once;
    int cancelled;       /* set under the lock */
    uint64_t admit_seq;  /* admission order, for preemption (latest first) */
    struct req *next;    /* queue link */
    struct req *live_prev, *live_next; /* every request not yet retired (under the lock) */
} req;

struct mlm_sched {
    mlm_sched_params p;
    const mlm_model *model; /* borrowed */
    mlm_exec *exec;         /* owned */
    mlm_kv *kv;             /* borrowed from exec */
    mlm_prefix prefix;
    mlm_drafter *drafter;   /* owned; NULL without a draft model */
    mlm_draft_ask *asks;    /* (max_batch) one step's draft requests */
    float *target_p;        /* (n_vocab) the target's distribution while verifying a sample */
    int32_t n_vocab;
    req **slots;            /* (max_batch) running requests, NULL = free */
    int32_t n_running;
    uint64_t admit_counter;
    /* one step's batch and outputs, sized at creation */
    int32_t *b_tok, *b_seq, *b_pos;
    int8_t *b_want;
    req **row_req;          /* (max_batch x (1 + max_draft)) request of each logits row */
    int32_t *row_k;         /* the same rows: 0, or the speculative token the row verifies */
    int32_t *fed;           /* (max_batch) tokens each slot feeds this step */
    float *logits;          /* (max_batch x (1 + max_draft), n_vocab) */
    uint32_t *mask;         /* (n_vocab / 32 rounded up) a structured request's allowed tokens */
    float *penalized;       /* (n_vocab) */
    int32_t *counts;        /* (n_vocab) zeroed between uses */
    int32_t *top_ids;       /* (MAX_TOP) */
    double *top_lp;
    int32_t *share;         /* (max_blocks_per_seq) prefix hit blocks */
    /* shared with other threads */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    req *wait_head, *wait_tail;
    int32_t n_waiting;
    req *live;              /* every submitted request not yet retired */
    int n_cancels;          /* cancel requests not yet handled */
    int woken;
    uint64_t next_id;
    mlm_sched_stats stats;
};

mlm_sched_params mlm_sched_default_params(void) {
    mlm_sched_params p = {.max_batch = 32,
                          .max_seq_len = 4096,
                          .kv_blocks = 0,
                          .block_size = 16,
                          .prefill_chunk = 256,
                          .max_queue = 64,
                          .prefix_cache = 1,
                          .max_logprobs = 20,
                          .kv_dtype = MLM_KV_FROM_PROFILE,
                          .n_threads = 0,
                          .max_images = 1,
                          .image_tiles = 0,
                          .draft_p_min = 0};
    return p;
}

mlm_draft_params mlm_draft_default_params(void) {
    mlm_draft_params p = {.max = 0, .ngram_min = 2, .ngram_max = 4};
    return p;
}

mlm_request_params mlm_request_default_params(void) {
    mlm_request_params r;
    memset(&r, 0, sizeof r);
    r.max_new_tokens = 16;
    r.sampling = mlm_sampler_default_params();
    r.logprobs = -1;
    r.dry = mlm_dry_default_params();
    r.draft = mlm_draft_default_params();
    return r;
}

const mlm_sched_params *mlm_sched_get_params(const mlm_sched *s) { return &s->p; }

void mlm_sched_exec_params(const mlm_config *cfg, const mlm_sched_params *p, mlm_exec_params *xp) {
    *xp = mlm_exec_default_params();
    xp->max_seqs = p->max_batch;
    xp->max_seq_len = p->max_seq_len;
    xp->block_size = p->block_size;
    xp->max_num_blocks = p->kv_blocks;
    int32_t draft = p->max_draft > 0 ? p->max_draft : 0;
    xp->max_step_tokens = p->max_batch * (1 + draft) + p->prefill_chunk;
    xp->max_step_logits = p->max_batch * (1 + draft);
    xp->kv_dtype = p->kv_dtype;
    xp->n_threads = p->n_threads;
    xp->lead = p->lead;
    xp->max_images = p->max_images;
    /* images wait for tiles: by default the pool holds 4 requests' images, not max_batch's */
    int32_t tiles = cfg && cfg->family == MLM_FAMILY_MLLAMA ? cfg->vision.max_tiles : 0;
    xp->image_tiles = p->image_tiles ? p->image_tiles
                                     : (p->max_batch < 4 ? p->max_batch : 4) * p->max_images * tiles;
}

// ---- creation ----

mlm_status mlm_sched_create(const mlm_model *model, const mlm_sched_params *params,
                            mlm_sched **out, mlm_error *err) {
    *out = NULL;
    mlm_sched_params p = params ? *params : mlm_sched_default_params();
    if (p.max_batch < 1 || p.max_seq_len < 2 || p.block_size < 1 || p.prefill_chunk < 1 ||
        p.max_queue < 0 || p.kv_blocks < 0 || p.max_logprobs < 0 || p.max_logprobs > MAX_TOP ||
        p.max_draft < 0 || p.max_draft > 64 || (p.draft_model && p.max_draft < 1))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "scheduler: max_batch, block_size and prefill_chunk must be positive, "
                             "max_seq_len at least 2, max_logprobs at most %d, max_draft in "
                             "[0, 64] (at least 1 with a draft model)",
                             MAX_TOP);
    int32_t per_seq = (p.max_seq_len + p.block_size - 1) / p.block_size;
    if (!p.kv_blocks) p.kv_blocks = p.max_batch * per_seq;
    /* A lone sequence must always fit the pool, so that preemption can always make room. */
    if ((int64_t)p.kv_blocks * p.block_size < p.max_seq_len) p.max_seq_len = p.kv_blocks * p.block_size;
    if (p.max_seq_len < 2)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "scheduler: %d KV blocks of %d tokens hold "
                             "less than 2 tokens",
                             p.kv_blocks, p.block_size);
    mlm_sched *s = calloc(1, sizeof *s);
    if (!s) return mlm_error_set(err, MLM_ERR_NOMEM, "scheduler: out of memory");
    s->p = p;
    s->model = model;
    s->n_vocab = mlm_model_config(model)->n_vocab;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->next_id = 1;
    mlm_exec_params xp;
    mlm_sched_exec_params(mlm_model_config(model), &p, &xp);
    s->p.image_tiles = xp.image_tiles;
    mlm_status st = mlm_exec_create(model, &xp, &s->exec, err);
    if (st) {
        mlm_sched_free(s);
        return st;
    }
    s->kv = mlm_exec_kv(s->exec);
    if (p.draft_model &&
        (st = mlm_drafter_create(p.draft_model, &s->p, s->n_vocab, p.draft_p_min, &s->drafter, err))) {
        mlm_sched_free(s);
        return st;
    }
    if ((st = mlm_prefix_init(&s->prefix, s->kv, err))) {
        mlm_sched_free(s);
        return st;
    }
    size_t T = (size_t)xp.max_step_tokens, B = (size_t)xp.max_step_logits, V = (size_t)s->n_vocab;
    s->slots = calloc((size_t)p.max_batch, sizeof *s->slots);
    s->b_tok = malloc(T * sizeof(int32_t)), s->b_seq = malloc(T * sizeof(int32_t));
    s->b_pos = malloc(T * sizeof(int32_t)), s->b_want = malloc(T);
    s->row_req = malloc(B * sizeof *s->row_req), s->row_k = malloc(B * sizeof *s->row_k);
    s->fed = malloc((size_t)p.max_batch * sizeof *s->fed);
    s->logits = malloc(B * V * sizeof(float)), s->penalized = malloc(V * sizeof(float));
    s->counts = calloc(V, sizeof(int32_t));
    s->mask = malloc((V + 31) / 32 * sizeof *s->mask);
    s->top_ids = malloc(MAX_TOP * sizeof(int32_t)), s->top_lp = malloc(MAX_TOP * sizeof(double));
    s->share = malloc((size_t)s->kv->max_blocks_per_seq * sizeof(int32_t));
    s->asks = malloc((size_t)p.max_batch * sizeof *s->asks);
    s->target_p = malloc(V * sizeof(float));
    if (!s->slots || !s->b_tok || !s->b_seq || !s->b_pos || !s->b_want || !s->row_req || !s->row_k ||
        !s->fed || !s->logits || !s->penalized || !s->counts || !s->top_ids || !s->top_lp ||
        !s->share || !s->mask || !s->asks || !s->target_p) {
        mlm_sched_free(s);
        return mlm_error_set(err, MLM_ERR_NOMEM, "scheduler: out of memory");
    }
    s->stats.kv_blocks_total = p.kv_blocks;
    *out = s;
    return MLM_OK;
}

static void req_free(req *r) {
    if (!r) return;
    free(r->tokens);
    free(r->stop_ids);
    free(r->drafted);
    free(r->q);
    free(r->images);
    free(r->image_pos);
    mlm_sampler_deinit(&r->sampler);
    free(r);
}

/* Forgets R (engine thread): out of the live list, then freed. */
static void retire(mlm_sched *s, req *r) {
    pthread_mutex_lock(&s->mu);
    if (r->live_prev) r->live_prev->live_next = r->live_next;
    else s->live = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
    pthread_mutex_unlock(&s->mu);
    req_free(r);
}

// ---- events ----

static int emit(req *r, int32_t token, int is_stop_id, mlm_finish finish, const float *logits,
                mlm_sched *s, const char *error) {
    mlm_sched_event ev = {.id = r->id,
                          .token = token,
                          .is_stop_id = is_stop_id,
                          .finish = finish,
                          .n_prompt = r->n_prompt,
                          .n_cached = r->n_cached,
                          .n_generated = r->n_tokens - r->n_prompt,
                          .error = error};
    if (logits && r->logprobs >= 0 && token >= 0) {
        int32_t n_top =
            mlm_logprobs(logits, s->n_vocab, token, r->logprobs, &ev.logprob, s->top_ids, s->top_lp);
        ev.n_top = n_top;
        ev.top_ids = s->top_ids;
        ev.top_logprobs = s->top_lp;
    }
    return r->cb ? r->cb(r->user, &ev) : 0;
}

/* Counts a finished request. */
static void count_finish(mlm_sched *s, mlm_finish f) {
    pthread_mutex_lock(&s->mu);
    s->stats.finished[f]++;
    pthread_mutex_unlock(&s->mu);
}

// ---- submission and cancelling (any thread) ----

/* A request's images: one per image token of the prompt, encoded, within max_images and the
 * pool's POOL tiles; *TILES gets the tiles they take. */
static mlm_status check_images(const mlm_sched *s, const mlm_request_params *q, int32_t image,
                               int32_t n_tokens, int32_t pool, int32_t *tiles, mlm_error *err) {
    *tiles = 0;
    if (q->n_images < 0 || (q->n_images && !q->images))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "request: bad images");
    if (q->n_images && image < 0)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "request: the model takes no images");
    if (n_tokens != q->n_images)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "request: the prompt holds %d image tokens, %d images were given",
                             n_tokens, q->n_images);
    if (q->n_images > s->p.max_images)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "request: %d images, at most %d per request (max_images)", q->n_images,
                             s->p.max_images);
    for (int32_t i = 0; i < q->n_images; i++) {
        mlm_image_info info;
        mlm_image_get_info(q->images[i], &info);
        if (!info.encoded)
            return mlm_error_set(err, MLM_ERR_INVALID_ARG, "request: image %d is not encoded", i);
        *tiles += info.n_tiles;
    }
    if (*tiles > pool)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "request: its images take %d tiles, the image pool holds %d "
                             "(image_tiles)",
                             *tiles, pool);
    return MLM_OK;
}

mlm_status mlm_sched_submit(mlm_sched *s, const mlm_request_params *q, uint64_t *id,
                            mlm_error *err) {
    *id = 0;
    int32_t L = s->p.max_seq_len;
    if (!q->prompt || q->n_prompt < 1)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "request: the prompt is empty");
    if (q->n_prompt >= L)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "request: the prompt has %d tokens, but the maximum context length is "
                             "%d tokens (prompt and at least one new token)",
                             q->n_prompt, L);
    if (q->max_new_tokens < 1)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "request: max_new_tokens %d must be >= 1",
                             q->max_new_tokens);
    if ((int64_t)q->n_prompt + q->max_new_tokens > L)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "request: the maximum context length is %d tokens, but %lld were "
                             "requested (%d in the prompt, %d to generate)",
                             L, (long long)q->n_prompt + q->max_new_tokens, q->n_prompt,
                             q->max_new_tokens);
    int32_t image = mlm_model_image_token(s->model), n_image_tokens = 0;
    for (int32_t i = 0; i < q->n_prompt; i++) {
        n_image_tokens += image >= 0 && q->prompt[i] == image;
        if ((q->prompt[i] < 0 || q->prompt[i] >= s->n_vocab) && q->prompt[i] != image)
            return mlm_error_set(
                err, MLM_ERR_INVALID_ARG,
                "request: prompt token %d (at %d) is outside the vocabulary [0, %d)", q->prompt[i],
                i, s->n_vocab);
    }
    int32_t tiles = 0; /* s->p.image_tiles: the pool's size, fixed at creation */
    mlm_status st = check_images(s, q, image, n_image_tokens, s->p.image_tiles, &tiles, err);
    if (st) return st;
    if (q->logprobs > s->p.max_logprobs)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "request: %d top logprobs asked, at most %d",
                             q->logprobs, s->p.max_logprobs);
    if (!isfinite(q->presence_penalty) || !isfinite(q->frequency_penalty))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "request: penalties must be finite");
    if ((st = mlm_dry_check(&q->dry, err))) return st;
    if (q->draft.max < 0 || (q->draft.max > 0 && (q->draft.ngram_min < 1 ||
                                                  q->draft.ngram_max < q->draft.ngram_min)))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "request: draft max %d must be >= 0, ngram_min %d >= 1 and "
                             "ngram_max %d >= ngram_min",
                             q->draft.max, q->draft.ngram_min, q->draft.ngram_max);
    if (q->n_stop_ids < 0 || (q->n_stop_ids && !q->stop_ids))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "request: bad stop ids");
    if (q->matcher && mlm_matcher_n_vocab(q->matcher) > s->n_vocab)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "request: the matcher's vocabulary (%d) is larger than the model's (%d)",
                             mlm_matcher_n_vocab(q->matcher), s->n_vocab);
    req *r = calloc(1, sizeof *r);
    if (!r) return mlm_error_set(err, MLM_ERR_NOMEM, "request: out of memory");
    st = mlm_sampler_init(&r->sampler, &q->sampling, s->n_vocab, err);
    if (st) {
        free(r);
        return st;
    }
    r->tokens = malloc(((size_t)q->n_prompt + (size_t)q->max_new_tokens) * sizeof *r->tokens);
    r->stop_ids = malloc(((size_t)q->n_stop_ids + 1) * sizeof *r->stop_ids);
    if (!r->tokens || !r->stop_ids) {
        req_free(r);
        return mlm_error_set(err, MLM_ERR_NOMEM, "request: out of memory");
    }
    memcpy(r->tokens, q->prompt, (size_t)q->n_prompt * sizeof *r->tokens);
    if (q->n_images) {
        r->images = malloc((size_t)q->n_images * sizeof *r->images);
        r->image_pos = malloc((size_t)q->n_images * sizeof *r->image_pos);
        if (!r->images || !r->image_pos) {
            req_free(r);
            return mlm_error_set(err, MLM_ERR_NOMEM, "request: out of memory");
        }
        for (int32_t i = 0, k = 0; i < q->n_prompt; i++)
            if (q->prompt[i] == image) r->image_pos[k] = i, r->images[k] = q->images[k], k++;
        r->n_images = q->n_images;
        r->image_tiles = tiles;
    }
    if (q->n_stop_ids) memcpy(r->stop_ids, q->stop_ids, (size_t)q->n_stop_ids * sizeof *r->stop_ids);
    r->n_stop_ids = q->n_stop_ids;
    r->n_prompt = r->n_tokens = q->n_prompt;
    r->max_new = q->max_new_tokens;
    r->logprobs = q->logprobs < 0 ? -1 : q->logprobs;
    r->presence = q->presence_penalty;
    r->frequency = q->frequency_penalty;
    r->dry = q->dry;
    r->draft = q->draft;
    if (r->draft.max > s->p.max_draft) r->draft.max = s->p.max_draft;
    /* prompt lookup's drafts start at 2 and grow by doubling as they pay; a draft model's start
     * at the most (a draft worth loading is mostly right) and shrink as they miss */
    r->draft_cap = s->drafter || r->draft.max < 2 ? r->draft.max : 2;
    if (r->draft.max > 0 && !(r->drafted = malloc((size_t)r->draft.max * sizeof *r->drafted))) {
        req_free(r);
        return mlm_error_set(err, MLM_ERR_NOMEM, "request: out of memory");
    }
    r->cb = q->on_event;
    r->user = q->user;
    r->matcher = q->matcher;
    r->salt = q->cache_salt;
    r->slot = -1;
    pthread_mutex_lock(&s->mu);
    if (s->n_waiting >= s->p.max_queue) {
        int32_t n = s->n_waiting;
        pthread_mutex_unlock(&s->mu);
        req_free(r);
        return mlm_error_set(err, MLM_ERR_CAPACITY,
                             "scheduler: %d requests are waiting (the queue holds %d); retry later",
                             n, s->p.max_queue);
    }
    r->id = s->next_id++;
    r->live_next = s->live;
    if (s->live) s->live->live_prev = r;
    s->live = r;
    if (s->wait_tail) s->wait_tail->next = r;
    else s->wait_head = r;
    s->wait_tail = r;
    s->n_waiting++;
    s->stats.waiting = s->n_waiting;
    *id = r->id; /* under the lock: once it is released, the engine may finish and free R */
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return MLM_OK;
}

void mlm_sched_cancel(mlm_sched *s, uint64_t id) {
    pthread_mutex_lock(&s->mu);
    for (req *r = s->live; r; r = r->live_next)
        if (r->id == id && !r->cancelled) r->cancelled = 1, s->n_cancels++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void mlm_sched_wait(mlm_sched *s, int timeout_ms) {
    pthread_mutex_lock(&s->mu);
    if (!s->wait_head && !s->n_running && !s->n_cancels && !s->woken) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    s->woken = 0;
    pthread_mutex_unlock(&s->mu);
}

void mlm_sched_wake(mlm_sched *s) {
    pthread_mutex_lock(&s->mu);
    s->woken = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void mlm_sched_get_stats(mlm_sched *s, mlm_sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
}

// ---- KV blocks of a sequence ----

/* Keys the sequence's newly full blocks and hands them to the prefix cache. */
static void cache_full_blocks(mlm_sched *s, req *r) {
    if (!s->p.prefix_cache || r->n_images) return;
    int32_t bs = s->p.block_size, full = r->n_computed / bs;
    const mlm_kv_seq *q = &s->kv->seqs[r->slot];
    for (; r->n_blocks_keyed < full; r->n_blocks_keyed++) {
        const int32_t *t = r->tokens + (size_t)r->n_blocks_keyed * bs;
        uint64_t k = mlm_prefix_key(&s->prefix, r->key, t);
        mlm_prefix_insert(&s->prefix, q->blocks[r->n_blocks_keyed], k, r->key, t);
        r->key = k;
    }
}

/* Returns the sequence's blocks: full ones stay in the prefix cache, and a last, partly
 * filled one as a tail; the rest are freed. */
static void release_slot(mlm_sched *s, req *r) {
    if (r->slot < 0) return;
    cache_full_blocks(s, r);
    mlm_kv_seq *q = &s->kv->seqs[r->slot];
    int32_t n = q->n_blocks, bs = s->p.block_size, full = r->n_computed / bs;
    if (s->p.prefix_cache && !r->n_images && full < n && r->n_blocks_keyed == full)
        mlm_prefix_insert_tail(&s->prefix, q->blocks[full], r->key, r->tokens + (size_t)full * bs,
                               r->n_computed - full * bs);
    memcpy(s->share, q->blocks, (size_t)n * sizeof *s->share);
    mlm_exec_seq_reset(s->exec, r->slot, 0, NULL); /* its KV blocks and its images */
    mlm_drafter_keep(s->drafter, r->slot, 0);
    for (int32_t i = 0; i < n; i++) mlm_prefix_release(&s->prefix, s->share[i]);
    s->slots[r->slot] = NULL;
    r->slot = -1;
    s->n_running--;
}

/* R has had its final event: its blocks go back, it is counted and forgotten. */
static void end(mlm_sched *s, req *r, mlm_finish f) {
    release_slot(s, r);
    count_finish(s, f);
    retire(s, r);
}

/* Ends R with a final event that carries no token. */
static void finish(mlm_sched *s, req *r, mlm_finish f, const char *error) {
    emit(r, -1, 0, f, NULL, s, error);
    end(s, r, f);
}

/* The longest cached prefix of R's tokens, in whole blocks, leaving at least one token to
 * compute (its logits give the next token). Fills s->share; returns the block count. */
static int32_t prefix_hits(mlm_sched *s, const req *r, uint64_t *key) {
    *key = r->salt;
    if (!s->p.prefix_cache || r->n_images) return 0;
    int32_t bs = s->p.block_size, max = (r->n_tokens - 1) / bs, n = 0;
    while (n < max) {
        const int32_t *t = r->tokens + (size_t)n * bs;
        uint64_t k = mlm_prefix_key(&s->prefix, *key, t);
        int32_t b = mlm_prefix_find(&s->prefix, k, *key, t);
        if (b < 0) break;
        s->share[n++] = b;
        *key = k;
    }
    return n;
}

static int32_t blocks_for(const mlm_sched *s, int32_t tokens) {
    return (tokens + s->p.block_size - 1) / s->p.block_size;
}

// ---- admission and preemption ----

/* Admits waiting requests, oldest first, while a slot is free and the pool can hold the
 * head's whole remaining prompt (plus one block for each running sequence to grow). */
static void admit(mlm_sched *s) {
    for (;;) {
        int32_t slot = -1;
        for (int32_t i = 0; i < s->p.max_batch && slot < 0; i++)
            if (!s->slots[i]) slot = i;
        if (slot < 0) return;
        pthread_mutex_lock(&s->mu);
        req *r = s->wait_head;
        pthread_mutex_unlock(&s->mu);
        if (!r) return;
        uint64_t key;
        int32_t hits = prefix_hits(s, r, &key), hits_evictable = 0;
        for (int32_t i = 0; i < hits; i++) hits_evictable += s->kv->refs[s->share[i]] == 1;
        int32_t need = blocks_for(s, r->n_tokens + 1) - hits + s->n_running;
        int32_t avail = s->kv->n_free + s->prefix.n_evictable - hits_evictable;
        if (need > avail && s->n_running) return; /* wait for blocks */
        if (r->image_tiles > mlm_exec_image_tiles(s->exec, NULL) && s->n_running)
            return; /* wait for image tiles */
        pthread_mutex_lock(&s->mu);
        s->wait_head = r->next;
        if (!s->wait_head) s->wait_tail = NULL;
        s->n_waiting--;
        r->next = NULL;
        pthread_mutex_unlock(&s->mu);
        for (int32_t i = 0; i < hits; i++) mlm_prefix_take(&s->prefix, s->share[i]);
        mlm_exec_seq_reset(s->exec, slot, 0, NULL);
        mlm_drafter_keep(s->drafter, slot, 0);
        mlm_kv_share(s->kv, slot, s->share, hits);
        r->slot = slot;
        r->n_computed = hits * s->p.block_size;
        /* the tail a finished sequence left after those blocks, when this one goes on from it
         * (leaving at least one token to compute) */
        int32_t tail_n = 0,
                tail = !s->p.prefix_cache || r->n_images
                           ? -1
                           : mlm_prefix_take_tail(&s->prefix, key, r->tokens + r->n_computed,
                                                  r->n_tokens - 1 - r->n_computed, &tail_n);
        if (tail >= 0) {
            mlm_kv_adopt(s->kv, slot, tail, tail_n);
            r->n_computed += tail_n;
        }
        r->n_blocks_keyed = hits;
        r->key = key;
        r->admit_seq = ++s->admit_counter;
        s->slots[slot] = r;
        s->n_running++;
        pthread_mutex_lock(&s->mu);
        if (!r->admitted_once) {
            r->n_cached = r->n_computed;
            s->stats.prompt_tokens += r->n_prompt;
        }
        s->stats.prefix_hit_tokens += r->n_computed;
        pthread_mutex_unlock(&s->mu);
        r->admitted_once = 1;
        mlm_error err;
        if (r->n_images &&
            mlm_exec_seq_set_images(s->exec, slot, r->images, r->image_pos, r->n_images, &err))
            finish(s, r, MLM_FINISH_ERROR, err.msg);
    }
}

/* Puts running request R back at the front of the queue, to be recomputed from its tokens. */
static void preempt(mlm_sched *s, req *r) {
    release_slot(s, r);
    r->n_computed = 0;
    r->n_blocks_keyed = 0;
    r->key = 0;
    pthread_mutex_lock(&s->mu);
    r->next = s->wait_head;
    s->wait_head = r;
    if (!s->wait_tail) s->wait_tail = r;
    s->n_waiting++;
    s->stats.preemptions++;
    pthread_mutex_unlock(&s->mu);
}

// ---- the step ----

/* Prompt lookup: up to MAX tokens that followed the latest earlier occurrence of R's last N
 * tokens (N from ngram_max down to ngram_min) into r->drafted; returns how many. */
static int32_t propose(req *r, int32_t max) {
    const int32_t *t = r->tokens;
    int32_t n = r->n_tokens;
    for (int32_t g = r->draft.ngram_max; g >= r->draft.ngram_min; g--) {
        if (g >= n) continue;
        const int32_t *suffix = t + n - g;
        for (int32_t j = n - g - 1; j >= 0; j--) {
            if (memcmp(t + j, suffix, (size_t)g * sizeof *t)) continue;
            int32_t from = j + g, k = n - from < max ? n - from : max;
            memcpy(r->drafted, t + from, (size_t)k * sizeof *t);
            return k;
        }
    }
    return 0;
}

/* After a verification that kept ACCEPTED of R's N drafted tokens: the next draft may be
 * twice as long after a full acceptance, as long as now after a partial one, and half as long
 * after none, when R also decodes plainly for as many steps as it has missed in a row (up to
 * 8): a verified token that is not kept costs compute (on a CPU a 9-token step is not free),
 * so a request that copies nothing soon drafts nothing, and a draft model that guesses badly
 * soon costs little (with none of its drafts kept, 8 drafted tokens a step made an 8B
 * Q4_K_M 0.23x as fast as plain, bench/speculate_cost). */
static void adapt_draft(req *r, int32_t n, int32_t accepted) {
    if (accepted == 0) {
        r->draft_cap = r->draft_cap > 1 ? r->draft_cap / 2 : 1;
        r->draft_misses++;
        r->draft_skip = r->draft_misses < 8 ? r->draft_misses : 8;
        return;
    }
    r->draft_misses = 0;
    if (accepted == n) r->draft_cap = 2 * r->draft_cap < r->draft.max ? 2 * r->draft_cap : r->draft.max;
}

/* Whether R's loop guard is on. */
static int dry_on(const req *r) { return r->dry.multiplier != 0 && r->dry.last_n != 0; }

/* Whether R drafts with the draft model: greedy, or sampling plainly (the rejection scheme
 * verifies the sampler's own distribution, so no penalties, loop guard or mask), text only. */
static int model_drafts(const mlm_sched *s, const req *r) {
    if (!s->drafter || r->draft.max <= 0 || r->n_images) return 0;
    if (r->sampler.params.temperature == 0) return 1;
    return r->presence == 0 && r->frequency == 0 && !dry_on(r) && !r->matcher;
}

/* Whether this step's drafts of R were sampled from the draft model (verified by rejection). */
static int sampled_draft(const req *r) {
    return r->draft_model && r->sampler.params.temperature != 0;
}

/* Speculative tokens R may verify this step: decoding, and within its token budget (it emits
 * up to one more than it drafts) and the context. Prompt lookup's are proposed here (greedy
 * requests only); a draft model's count is the most it may draft, filled by run_drafter once
 * the step's room is made. */
static int32_t draft_for(const mlm_sched *s, req *r) {
    int model = model_drafts(s, r);
    int lookup = !s->drafter && r->draft.max > 0 && r->sampler.params.temperature == 0 && !r->n_images;
    if (!model && !lookup) return 0;
    if (r->draft_skip > 0) {
        r->draft_skip--;
        return 0;
    }
    int32_t max = r->draft_cap, left = r->max_new - (r->n_tokens - r->n_prompt) - 1,
            room = s->p.max_seq_len - 1 - r->n_tokens;
    if (left < max) max = left;
    if (room < max) max = room;
    if (max <= 0) return 0;
    if (!model) return propose(r, max);
    r->draft_model = 1;
    return max;
}

/* The draft model drafts for every sequence planned to (draft_for), in one batched call; each
 * then feeds its decode token and the drafts it got. A failing draft step only costs this
 * step its drafts. */
static void run_drafter(mlm_sched *s) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->p.max_batch; i++) {
        req *r = s->slots[i];
        if (!r || !r->draft_model) continue;
        int sampled = sampled_draft(r);
        if (sampled && !r->q && !(r->q = malloc((size_t)r->draft.max * s->n_vocab * sizeof *r->q))) {
            r->draft_model = 0, r->n_drafted = 0, s->fed[i] = 1;
            continue;
        }
        s->asks[n++] = (mlm_draft_ask){.slot = i,
                                       .tokens = r->tokens,
                                       .n_tokens = r->n_tokens,
                                       .max = r->n_drafted,
                                       .sampler = sampled ? &r->sampler : NULL,
                                       .q = r->q,
                                       .out = r->drafted};
    }
    if (!n) return;
    mlm_error e;
    mlm_drafter_propose(s->drafter, s->asks, n, &e); /* on failure every ask holds none */
    for (int32_t k = 0; k < n; k++) {
        req *r = s->slots[s->asks[k].slot];
        r->n_drafted = s->asks[k].n_out;
        s->fed[r->slot] = 1 + r->n_drafted;
    }
}

/* Tokens each running sequence feeds this step: its one decode token (and the tokens it
 * drafts), or a prompt chunk from the shared budget (oldest admissions first). */
static void plan_step(mlm_sched *s) {
    int32_t budget = s->p.prefill_chunk;
    for (int32_t i = 0; i < s->p.max_batch; i++) {
        req *r = s->slots[i];
        s->fed[i] = 0;
        if (r) r->n_drafted = 0, r->draft_model = 0; /* a prompt chunk drafts nothing */
        if (r && r->n_tokens - r->n_computed == 1) {
            r->n_drafted = draft_for(s, r);
            s->fed[i] = 1 + r->n_drafted;
        }
    }
    for (;;) { /* prompt chunks by admission order */
        req *best = NULL;
        for (int32_t i = 0; i < s->p.max_batch; i++) {
            req *r = s->slots[i];
            if (r && !s->fed[i] && r->n_tokens - r->n_computed > 1 &&
                (!best || r->admit_seq < best->admit_seq))
                best = r;
        }
        if (!best || budget == 0) break;
        int32_t left = best->n_tokens - best->n_computed;
        s->fed[best->slot] = left < budget ? left : budget;
        budget -= s->fed[best->slot];
    }
}

static int32_t step_blocks_needed(mlm_sched *s) {
    int32_t need = 0;
    for (int32_t i = 0; i < s->p.max_batch; i++)
        if (s->slots[i] && s->fed[i]) need += mlm_kv_pages_needed(s->kv, i, s->kv->seqs[i].len + s->fed[i]);
    return need;
}

/* Frees blocks for the planned step: evicts cached blocks, then preempts the latest admitted
 * sequences (replanning each time). */
static void make_room(mlm_sched *s) {
    for (;;) {
        int32_t need = step_blocks_needed(s);
        while (need > s->kv->n_free && mlm_prefix_evict(&s->prefix)) {
        }
        if (need <= s->kv->n_free) return;
        req *latest = NULL;
        for (int32_t i = 0; i < s->p.max_batch; i++)
            if (s->slots[i] && (!latest || s->slots[i]->admit_seq > latest->admit_seq))
                latest = s->slots[i];
        if (!latest || s->n_running == 1) return; /* a lone sequence always fits (create) */
        preempt(s, latest);
        plan_step(s);
    }
}

/* Handles cancel flags: drops cancelled waiting requests and stops cancelled running ones. */
static void take_cancels(mlm_sched *s) {
    req *done = NULL;
    pthread_mutex_lock(&s->mu);
    if (!s->n_cancels) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    s->n_cancels = 0;
    req **link = &s->wait_head;
    s->wait_tail = NULL;
    while (*link) {
        req *r = *link;
        if (r->cancelled) {
            *link = r->next;
            r->next = done;
            done = r;
            s->n_waiting--;
        } else {
            s->wait_tail = r;
            link = &r->next;
        }
    }
    pthread_mutex_unlock(&s->mu);
    while (done) {
        req *r = done;
        done = r->next;
        finish(s, r, MLM_FINISH_CANCELLED, NULL);
    }
    for (int32_t i = 0; i < s->p.max_batch; i++) {
        req *r = s->slots[i];
        if (!r) continue;
        pthread_mutex_lock(&s->mu);
        int c = r->cancelled;
        pthread_mutex_unlock(&s->mu);
        if (c) finish(s, r, MLM_FINISH_CANCELLED, NULL);
    }
}

static int is_stop_id(const req *r, int32_t id);

/* Structured output: the logits in s->penalized of every token R's matcher does not allow
 * set to -inf (its stop ids allowed where the document may end). 0 when nothing is allowed. */
static int apply_mask(mlm_sched *s, req *r) {
    uint32_t *mask = s->mask;
    memset(mask, 0, ((size_t)s->n_vocab + 31) / 32 * sizeof *mask);
    int32_t n = mlm_matcher_fill_mask(r->matcher, mask);
    if (mlm_matcher_can_end(r->matcher))
        for (int32_t i = 0; i < r->n_stop_ids; i++) {
            int32_t id = r->stop_ids[i];
            if (id >= 0 && id < s->n_vocab && !(mask[id >> 5] >> (id & 31) & 1)) {
                mask[id >> 5] |= 1u << (id & 31);
                n++;
            }
        }
    if (n == 0) return 0;
    for (int32_t w = 0; w < (s->n_vocab + 31) / 32; w++) {
        uint32_t bits = mask[w];
        if (bits == 0xffffffffu) continue;
        int32_t end = w * 32 + 32 < s->n_vocab ? w * 32 + 32 : s->n_vocab;
        for (int32_t id = w * 32; id < end; id++)
            if (!(bits >> (id & 31) & 1)) s->penalized[id] = -INFINITY;
    }
    return 1;
}

/* Samples R's next token from LOGITS: OpenAI's penalties over the generated tokens first,
 * then the loop guard (DRY) over the whole sequence, then the structured output's mask. -1
 * when the mask allows nothing (the document is whole and there is no stop id to end it
 * with); -2 when the guard's scratch cannot be had. */
static int32_t sample(mlm_sched *s, req *r, const float *logits) {
    int dry = dry_on(r);
    if (r->presence == 0 && r->frequency == 0 && !dry && !r->matcher)
        return mlm_sampler_sample(&r->sampler, logits);
    memcpy(s->penalized, logits, (size_t)s->n_vocab * sizeof *logits);
    for (int32_t i = r->n_prompt; i < r->n_tokens; i++) s->counts[r->tokens[i]]++;
    for (int32_t i = r->n_prompt; i < r->n_tokens; i++) {
        int32_t t = r->tokens[i];
        if (!s->counts[t]) continue;
        s->penalized[t] -= r->frequency * (float)s->counts[t] + r->presence;
        s->counts[t] = 0;
    }
    if (dry && mlm_dry_apply(&r->dry, r->tokens, r->n_tokens, s->penalized, s->n_vocab, NULL))
        return -2;
    if (r->matcher && !apply_mask(s, r)) return -1;
    int32_t id = mlm_sampler_sample(&r->sampler, s->penalized);
    if (r->matcher && !is_stop_id(r, id)) mlm_matcher_accept_token(r->matcher, id);
    return id;
}

static int is_stop_id(const req *r, int32_t id) {
    for (int32_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == id) return 1;
    return 0;
}

static void update_gauges(mlm_sched *s, int64_t generated, int64_t computed) {
    pthread_mutex_lock(&s->mu);
    s->stats.waiting = s->n_waiting;
    s->stats.running = s->n_running;
    s->stats.kv_blocks_cached = s->prefix.n_evictable;
    s->stats.kv_blocks_used = s->kv->max_num_blocks - s->kv->n_free - s->prefix.n_evictable;
    s->stats.generated_tokens += generated;
    s->stats.computed_tokens += computed;
    pthread_mutex_unlock(&s->mu);
}

mlm_status mlm_sched_step(mlm_sched *s, int *did_work, mlm_error *err) {
    (void)err;
    *did_work = 0;
    take_cancels(s);
    admit(s);
    if (!s->n_running) {
        update_gauges(s, 0, 0);
        return MLM_OK;
    }
    *did_work = 1;
    plan_step(s);
    make_room(s);
    if (s->drafter) run_drafter(s);
    /* the flat batch: slot order; each slot's tokens in position order */
    int32_t n = 0, n_rows = 0;
    int64_t computed = 0;
    for (int32_t i = 0; i < s->p.max_batch; i++) {
        req *r = s->slots[i];
        if (!r || !s->fed[i]) continue;
        for (int32_t j = 0; j < s->fed[i]; j++) {
            /* the decode token, then the drafted ones, each wanting its logits */
            int32_t d = j - (s->fed[i] - 1 - r->n_drafted);
            s->b_tok[n] = d > 0 ? r->drafted[d - 1] : r->tokens[r->n_computed + j];
            s->b_seq[n] = i;
            s->b_pos[n] = r->n_computed + j;
            s->b_want[n] = d >= 0 && r->n_computed + s->fed[i] - r->n_drafted == r->n_tokens;
            if (s->b_want[n]) s->row_req[n_rows] = r, s->row_k[n_rows++] = d;
            n++;
        }
        /* all but a generating sequence's decode token are prompt (or recomputed) tokens */
        int decode = r->n_tokens - r->n_computed == 1 && r->n_tokens > r->n_prompt;
        if (!decode) computed += s->fed[i];
    }
    if (!n) { /* nothing fits even alone: cannot happen while a lone sequence fits the pool */
        update_gauges(s, 0, 0);
        return MLM_OK;
    }
    mlm_batch b = {.n = n, .tokens = s->b_tok, .seq = s->b_seq, .pos = s->b_pos, .logits = s->b_want};
    mlm_error e = {0};
    mlm_status st = mlm_exec_step(s->exec, &b, s->logits, &e);
    pthread_mutex_lock(&s->mu);
    s->stats.steps++;
    pthread_mutex_unlock(&s->mu);
    if (st) { /* the step's requests end with the executor's message */
        for (int32_t i = 0; i < s->p.max_batch; i++)
            if (s->slots[i] && s->fed[i]) finish(s, s->slots[i], MLM_FINISH_ERROR, e.msg);
        update_gauges(s, 0, 0);
        return MLM_OK;
    }
    /* a speculating sequence counts its positions row by row below, as they are accepted */
    for (int32_t i = 0; i < s->p.max_batch; i++)
        if (s->slots[i] && !s->slots[i]->n_drafted) {
            s->slots[i]->n_computed += s->fed[i];
            cache_full_blocks(s, s->slots[i]);
        }
    int64_t generated = 0, drafted = 0, accepted = 0;
    for (int32_t k = 0; k < n_rows; k++) {
        req *r = s->row_req[k];
        /* a speculating sequence's rows: row J has the decode token and J drafted ones in its
         * context; REST rows follow it */
        int32_t j = s->row_k[k], nd = r->n_drafted, rest = nd - j;
        if (nd) {
            r->n_computed++;
            cache_full_blocks(s, r);
            if (j == 0) drafted += nd;
        }
        const float *lg = s->logits + (size_t)k * s->n_vocab;
        int32_t id = rest && sampled_draft(r)
                         ? mlm_spec_verify(&r->sampler, lg, r->q + (size_t)j * s->n_vocab,
                                           r->drafted[j], s->target_p)
                         : sample(s, r, lg);
        if (id == -2) {
            finish(s, r, MLM_FINISH_ERROR, "sampling: out of memory (the loop guard's scratch)");
            k += rest;
            continue;
        }
        if (id < 0) { /* a whole document and no stop id to write */
            finish(s, r, MLM_FINISH_STOP, NULL);
            k += rest;
            continue;
        }
        r->tokens[r->n_tokens++] = id;
        generated++;
        int stop = is_stop_id(r, id);
        mlm_finish f = stop ? MLM_FINISH_STOP
                       : r->n_tokens - r->n_prompt >= r->max_new || r->n_tokens >= s->p.max_seq_len
                           ? MLM_FINISH_LENGTH
                           : MLM_FINISH_NONE;
        int ask_stop = emit(r, id, stop, f, lg, s, NULL);
        if (f != MLM_FINISH_NONE) { /* the token's event was the final one */
            end(s, r, f);
            k += rest;
        } else if (ask_stop) {
            finish(s, r, MLM_FINISH_STOP, NULL);
            k += rest;
        } else if (rest && id == r->drafted[j]) { /* accepted: the next row goes on from it */
            accepted++;
        } else if (nd) { /* the draft ends here: the positions of a wrong rest are forgotten */
            if (rest) mlm_exec_seq_truncate(s->exec, r->slot, r->n_computed, NULL);
            adapt_draft(r, nd, j);
            r->n_drafted = 0;
            k += rest;
        }
    }
    if (s->drafter) /* the draft model's KV keeps what verification kept */
        for (int32_t i = 0; i < s->p.max_batch; i++)
            if (s->slots[i]) mlm_drafter_keep(s->drafter, i, s->slots[i]->n_tokens - 1);
    pthread_mutex_lock(&s->mu);
    s->stats.draft_tokens += drafted;
    s->stats.draft_accepted += accepted;
    pthread_mutex_unlock(&s->mu);
    update_gauges(s, generated, computed);
    return MLM_OK;
}

// ---- freeing ----

void mlm_sched_free(mlm_sched *s) {
    if (!s) return;
    if (s->slots)
        for (int32_t i = 0; i < s->p.max_batch; i++)
            if (s->slots[i]) finish(s, s->slots[i], MLM_FINISH_CANCELLED, NULL);
    while (s->wait_head) {
        req *r = s->wait_head;
        s->wait_head = r->next;
        finish(s, r, MLM_FINISH_CANCELLED, NULL);
    }
    mlm_prefix_deinit(&s->prefix);
    mlm_drafter_free(s->drafter);
    mlm_exec_free(s->exec);
    free(s->slots), free(s->b_tok), free(s->b_seq), free(s->b_pos), free(s->b_want);
    free(s->row_req), free(s->row_k), free(s->fed), free(s->logits), free(s->penalized), free(s->counts);
    free(s->mask);
    free(s->top_ids), free(s->top_lp), free(s->share), free(s->asks), free(s->target_p);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

mlm_status mlm_sched_follow(mlm_sched *s, mlm_error *err) { return mlm_exec_follow(s->exec, err); }
