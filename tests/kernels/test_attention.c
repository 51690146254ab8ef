/* tests/kernels/test_attention.c: flash attention over paged KV (f32, bf16 and BFP8 entries,
 * shuffled page tables, block sizes 1..64):
 *   - the scalar flash reference against the naive softmax oracle (expf, one pass) within f32
 *     rounding, at contexts 1..20000 and GQA 1:1..8:1, head_dim 16..256;
 *   - every SIMD level this CPU runs against the flash reference, bit for bit, for jobs of
 *     1..16 query tokens (prefill tiles with the causal cut inside a KV tile) and head chunks;
 *   - BFP8 entries against the same attention over their decoded values stored as f32;
 *   - batching: a query's output is the same alone as inside a tile of 16;
 *   - non-causal jobs (n_ctx > 0: every query reads entries 0..n_ctx-1): the reference against
 *     the naive oracle and a double-precision one, and every level against the reference bit
 *     for bit, for head_dim 16, 64, 80 (the vision encoder) and 128, GQA 1:1, 4:1 and 8:1, jobs
 *     of 1..16 queries and head chunks, contexts 1..300 and thousands, block sizes 1..64, 100
 *     and one block holding everything. */
#include <stdint.h>

#include "backend/backend.h"
#include "harness.h"
#include "tensor/bfp.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1 << 23))) - 1.0f;
}

typedef struct kvset {
    mlm_paged_kv kv, dec; /* the pool, and its values decoded to f32 (BFP8 only) */
    int32_t *blocks;
    int32_t n_ctx;
} kvset;

static kvset make_kv(mlm_wtype type, int n_kv, int hd, int32_t n_ctx, int32_t bs) {
    kvset s = {0};
    int32_t n_blocks = (n_ctx + bs - 1) / bs + 3;
    int64_t row = (int64_t)n_kv * hd, rb = mlm_wtype_row_bytes(type, row);
    size_t pool = (size_t)(n_blocks * bs * rb), fpool = (size_t)(n_blocks * bs * row) * 4;
    s.kv = (mlm_paged_kv){malloc(pool), malloc(pool), type, bs, row, rb};
    s.dec = (mlm_paged_kv){malloc(fpool), malloc(fpool), MLM_W_F32, bs, row, row * 4};
    s.blocks = malloc((size_t)n_blocks * sizeof *s.blocks);
    s.n_ctx = n_ctx;
    for (int i = 0; i < n_blocks; i++) s.blocks[i] = (int32_t)((i * 5 + 2) % n_blocks); /* shuffled */
    float *k = malloc((size_t)row * 4), *v = malloc((size_t)row * 4);
    float *kd = malloc((size_t)row * 4), *vd = malloc((size_t)row * 4);
    for (int32_t j = 0; j < n_ctx; j++) {
        /* a few entries stand out, so the softmax is not flat */
        float boost = j % 97 == 3 ? 4.0f : 1.0f;
        for (int64_t i = 0; i < row; i++) k[i] = frand() * 2 * boost, v[i] = frand();
        mlm_kv_store(&s.kv, s.blocks, j, k, v);
        if (type == MLM_W_BFP8) {
            size_t off = mlm_kv_entry_offset(&s.kv, s.blocks, j);
            mlm_bfp_decode_row((const uint8_t *)s.kv.k + off, row, 8, kd);
            mlm_bfp_decode_row((const uint8_t *)s.kv.v + off, row, 8, vd);
            mlm_kv_store(&s.dec, s.blocks, j, kd, vd);
        }
    }
    free(k), free(v), free(kd), free(vd);
    return s;
}

static void free_kv(kvset *s) {
    free(s->kv.k), free(s->kv.v), free(s->dec.k), free(s->dec.v), free(s->blocks);
}

/* Runs FN for N_Q queries ending at the last entry (rows of N_HEAD * HD), every KV head, the
 * group's heads in chunks of HH. */
static void run_jobs(mlm_attention_fn fn, const mlm_paged_kv *kv, const int32_t *blocks,
                     int32_t n_ctx, int noncausal, int n_q, int n_head, int n_kv, int hd,
                     int hh_chunk, const float *q, float *out, float *scratch) {
    int group = n_head / n_kv;
    int64_t stride = (int64_t)n_head * hd;
    for (int kvh = 0; kvh < n_kv; kvh++)
        for (int hh = 0; hh < group; hh += hh_chunk) {
            mlm_attn_job job = {.out = out, .out_stride = stride, .q = q, .q_stride = stride,
                                .kv = kv, .blocks = blocks, .q0 = n_ctx - n_q, .n_q = n_q,
                                .kv_head = kvh, .group = group, .hh0 = hh,
                                .n_hh = group - hh < hh_chunk ? group - hh : hh_chunk, .head_dim = hd};
            if (noncausal) job.n_ctx = n_ctx, job.q0 = -12345; /* q0 is unused */
            fn(&job, scratch);
        }
}

static void run_flash(mlm_attention_fn fn, const mlm_paged_kv *kv, const int32_t *blocks,
                      int32_t n_ctx, int n_q, int n_head, int n_kv, int hd, int hh_chunk,
                      const float *q, float *out, float *scratch) {
    run_jobs(fn, kv, blocks, n_ctx, 0, n_q, n_head, n_kv, hd, hh_chunk, q, out, scratch);
}

/* N_Q queries that all read entries 0..N_CTX-1, in non-causal jobs. */
static void run_noncausal(mlm_attention_fn fn, const mlm_paged_kv *kv, const int32_t *blocks,
                          int32_t n_ctx, int n_q, int n_head, int n_kv, int hd, int hh_chunk,
                          const float *q, float *out, float *scratch) {
    run_jobs(fn, kv, blocks, n_ctx, 1, n_q, n_head, n_kv, hd, hh_chunk, q, out, scratch);
}

static double max_diff(const float *a, const float *b, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)a[i] - b[i]) > worst) worst = fabs((double)a[i] - b[i]);
    return worst;
}

static float *scratch_buf(void) { return malloc((size_t)MLM_ATT_SCRATCH * 4); }

/* Attention of one query in double precision (exp, one pass): the yardstick for both the
 * naive f32 oracle and the flash reference. */
static float entry_value(const mlm_paged_kv *kv, const void *pool, const int32_t *blocks,
                         int32_t j, int64_t i) {
    const char *e = (const char *)pool + mlm_kv_entry_offset(kv, blocks, j);
    if (kv->type == MLM_W_F32) return ((const float *)e)[i];
    if (kv->type == MLM_W_BF16) {
        uint32_t u = (uint32_t)((const uint16_t *)e)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    const uint8_t *g = (const uint8_t *)e + i / 64 * 68;
    return mlm_bfp_decode(g[64 + (i % 64) / 16], g[i % 64], 8);
}

static void attention_double(double *out, const float *q, const mlm_paged_kv *kv,
                             const int32_t *blocks, int32_t n_ctx, int n_head, int n_kv, int hd) {
    int group = n_head / n_kv;
    double *s = malloc((size_t)n_ctx * sizeof *s);
    for (int h = 0; h < n_head; h++) {
        int64_t off = (int64_t)(h / group) * hd;
        double mx = -1e300, sum = 0;
        for (int32_t j = 0; j < n_ctx; j++) {
            double d = 0;
            for (int x = 0; x < hd; x++) d += (double)q[h * hd + x] * entry_value(kv, kv->k, blocks, j, off + x);
            s[j] = d / sqrt((double)hd);
            if (s[j] > mx) mx = s[j];
        }
        for (int32_t j = 0; j < n_ctx; j++) sum += (s[j] = exp(s[j] - mx));
        for (int x = 0; x < hd; x++) {
            double o = 0;
            for (int32_t j = 0; j < n_ctx; j++) o += s[j] / sum * entry_value(kv, kv->v, blocks, j, off + x);
            out[h * hd + x] = o;
        }
    }
    free(s);
}

TEST(flash_ref_vs_naive) {
    const int shapes[][3] = {{4, 1, 64}, {8, 8, 64}, {32, 8, 64}, {2, 2, 128}, {8, 1, 128},
                             {4, 2, 16}, {6, 3, 32}, {16, 2, 256}, {2, 1, 16}};
    const int32_t ctxs[] = {1, 7, 64, 65, 300, 4097, 20000};
    const mlm_wtype types[] = {MLM_W_F32, MLM_W_BF16, MLM_W_BFP8};
    float *scratch = scratch_buf();
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
            for (size_t ci = 0; ci < sizeof ctxs / sizeof *ctxs; ci++) {
                int n_head = shapes[si][0], n_kv = shapes[si][1], hd = shapes[si][2];
                int32_t n_ctx = ctxs[ci];
                /* long contexts with small heads keep the oracles quick (also under ASan) */
                if ((double)n_ctx * n_head * hd > 1.5e6) continue;
                if (n_ctx > 300 && ti == 1 && n_head * hd > 256) continue;
                int32_t bs = (int32_t)(1 + (ci * 7 + si * 3) % 64);
                kvset s = make_kv(types[ti], n_kv, hd, n_ctx, bs);
                float *q = malloc((size_t)n_head * hd * 4), *a = malloc((size_t)n_head * hd * 4);
                float *b = malloc((size_t)n_head * hd * 4), *ns = malloc((size_t)n_ctx * 4);
                for (int i = 0; i < n_head * hd; i++) q[i] = frand();
                mlm_attention_naive(a, q, &s.kv, s.blocks, n_ctx, n_head, n_kv, hd, ns);
                run_flash(mlm_attention_flash_ref, &s.kv, s.blocks, n_ctx, 1, n_head, n_kv, hd,
                          MLM_ATT_HH, q, b, scratch);
                double *exact = malloc((size_t)n_head * hd * sizeof *exact), en = 0, ef = 0;
                attention_double(exact, q, &s.kv, s.blocks, n_ctx, n_head, n_kv, hd);
                for (int i = 0; i < n_head * hd; i++) {
                    if (fabs(a[i] - exact[i]) > en) en = fabs(a[i] - exact[i]);
                    if (fabs(b[i] - exact[i]) > ef) ef = fabs(b[i] - exact[i]);
                }
                /* both are f32 sums of n_ctx terms: rounding grows like sqrt(n_ctx) ulps */
                double tol = 1e-6 + 4e-8 * sqrt((double)n_ctx);
                CHECKF(ef <= tol && en <= tol,
                       "%s heads %d/%d hd %d ctx %d block %d: error %g, naive oracle %g (tol %g)",
                       mlm_wtype_name(types[ti]), n_head, n_kv, hd, n_ctx, bs, ef, en, tol);
                free(exact);
                if (types[ti] == MLM_W_BFP8) {
                    float *c = malloc((size_t)n_head * hd * 4);
                    run_flash(mlm_attention_flash_ref, &s.dec, s.blocks, n_ctx, 1, n_head, n_kv,
                              hd, MLM_ATT_HH, q, c, scratch);
                    CHECKF(!memcmp(b, c, (size_t)(n_head * hd) * 4),
                           "flash ref bfp8 heads %d/%d hd %d ctx %d: differs from the decoded values",
                           n_head, n_kv, hd, n_ctx);
                    free(c);
                }
                free(q), free(a), free(b), free(ns);
                free_kv(&s);
            }
    free(scratch);
}

/* FN against the flash reference, bit for bit, on tiles of queries and alone. */
static void check_level(const char *name, mlm_attention_fn fn) {
    const int shapes[][3] = {{4, 1, 64}, {8, 8, 64}, {32, 8, 64}, {8, 1, 128}, {4, 2, 16},
                             {6, 3, 32}, {16, 2, 256}, {24, 8, 128}, {2, 1, 16}};
    const int32_t ctxs[] = {1, 2, 16, 63, 64, 65, 129, 1000, 3000, 20000};
    const int nqs[] = {1, 3, 16};
    const mlm_wtype types[] = {MLM_W_F32, MLM_W_BF16, MLM_W_BFP8};
    float *scratch = scratch_buf();
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
            for (size_t ci = 0; ci < sizeof ctxs / sizeof *ctxs; ci++) {
                int n_head = shapes[si][0], n_kv = shapes[si][1], hd = shapes[si][2];
                int32_t n_ctx = ctxs[ci], bs = (int32_t)(1 + (ci * 11 + si * 5 + ti) % 64);
                if ((double)n_ctx * n_head * hd > 1.5e6) continue; /* the reference's cost */
                kvset s = make_kv(types[ti], n_kv, hd, n_ctx, bs);
                for (size_t qi = 0; qi < sizeof nqs / sizeof *nqs; qi++) {
                    int n_q = nqs[qi] < n_ctx ? nqs[qi] : n_ctx;
                    if ((double)n_ctx * n_head * hd * n_q > 6e6) continue;
                    int64_t len = (int64_t)n_q * n_head * hd;
                    float *q = malloc((size_t)len * 4), *a = malloc((size_t)len * 4);
                    float *b = malloc((size_t)len * 4), *c = malloc((size_t)len * 4);
                    for (int64_t i = 0; i < len; i++) q[i] = frand();
                    int chunk = qi == 1 ? 3 : MLM_ATT_HH;
                    run_flash(mlm_attention_flash_ref, &s.kv, s.blocks, n_ctx, n_q, n_head, n_kv,
                              hd, chunk, q, a, scratch);
                    run_flash(fn, &s.kv, s.blocks, n_ctx, n_q, n_head, n_kv, hd, chunk, q, b, scratch);
                    CHECKF(!memcmp(a, b, (size_t)len * 4),
                           "%s %s heads %d/%d hd %d ctx %d block %d queries %d: max diff %g vs the "
                           "reference", name, mlm_wtype_name(types[ti]), n_head, n_kv, hd, n_ctx,
                           bs, n_q, max_diff(a, b, len));
                    /* the last query alone gives the bits it got inside the tile */
                    int64_t last = (int64_t)(n_q - 1) * n_head * hd;
                    run_flash(fn, &s.kv, s.blocks, n_ctx, 1, n_head, n_kv, hd, MLM_ATT_HH,
                              q + last, c, scratch);
                    CHECKF(!memcmp(b + last, c, (size_t)(n_head * hd) * 4),
                           "%s %s ctx %d: the query alone differs from inside a tile of %d", name,
                           mlm_wtype_name(types[ti]), n_ctx, n_q);
                    free(q), free(a), free(b), free(c);
                }
                free_kv(&s);
            }
    free(scratch);
}

// ---- non-causal jobs ----

TEST(noncausal_ref_vs_naive) {
    /* {n_head, n_kv, hd} */
    const int shapes[][3] = {{4, 4, 80}, {8, 2, 80}, {4, 1, 64}, {8, 8, 64}, {2, 2, 128},
                             {8, 2, 128}, {4, 1, 16}, {2, 2, 16}, {16, 2, 64}};
    const int32_t ctxs[] = {1, 2, 15, 64, 65, 130, 300, 4100};
    const mlm_wtype types[] = {MLM_W_F32, MLM_W_BF16, MLM_W_BFP8};
    float *scratch = scratch_buf();
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
            for (size_t ci = 0; ci < sizeof ctxs / sizeof *ctxs; ci++) {
                int n_head = shapes[si][0], n_kv = shapes[si][1], hd = shapes[si][2];
                int32_t n_ctx = ctxs[ci];
                if ((double)n_ctx * n_head * hd > 1.5e6) continue; /* the oracles' cost */
                /* a few of every kind of page table: one block holding everything among them */
                int32_t bs = ci % 4 == 3 ? n_ctx : (int32_t)(1 + (ci * 13 + si * 5 + ti * 3) % 64);
                kvset s = make_kv(types[ti], n_kv, hd, n_ctx, bs);
                const int n_q = 3;
                int64_t row = (int64_t)n_head * hd;
                float *q = malloc((size_t)(n_q * row) * 4), *b = malloc((size_t)(n_q * row) * 4);
                float *a = malloc((size_t)row * 4), *ns = malloc((size_t)n_ctx * 4);
                double *exact = malloc((size_t)row * sizeof *exact);
                for (int64_t i = 0; i < n_q * row; i++) q[i] = frand();
                run_noncausal(mlm_attention_flash_ref, &s.kv, s.blocks, n_ctx, n_q, n_head, n_kv,
                              hd, MLM_ATT_HH, q, b, scratch);
                for (int i = 0; i < n_q; i++) {
                    mlm_attention_naive(a, q + i * row, &s.kv, s.blocks, n_ctx, n_head, n_kv, hd, ns);
                    attention_double(exact, q + i * row, &s.kv, s.blocks, n_ctx, n_head, n_kv, hd);
                    double en = 0, ef = 0;
                    for (int64_t x = 0; x < row; x++) {
                        if (fabs(a[x] - exact[x]) > en) en = fabs(a[x] - exact[x]);
                        if (fabs(b[i * row + x] - exact[x]) > ef) ef = fabs(b[i * row + x] - exact[x]);
                    }
                    double tol = 1e-6 + 4e-8 * sqrt((double)n_ctx);
                    CHECKF(ef <= tol && en <= tol,
                           "non-causal %s heads %d/%d hd %d ctx %d block %d query %d: error %g, "
                           "naive oracle %g (tol %g)",
                           mlm_wtype_name(types[ti]), n_head, n_kv, hd, n_ctx, bs, i, ef, en, tol);
                }
                /* the first n_ctx entries of a longer cache: the entries past it are not read */
                if (n_ctx > 1) {
                    float *c = malloc((size_t)(n_q * row) * 4);
                    run_noncausal(mlm_attention_flash_ref, &s.kv, s.blocks, n_ctx - 1, n_q,
                                  n_head, n_kv, hd, MLM_ATT_HH, q, c, scratch);
                    mlm_attention_naive(a, q, &s.kv, s.blocks, n_ctx - 1, n_head, n_kv, hd, ns);
                    CHECKF(max_diff(a, c, row) <= 1e-6 + 4e-8 * sqrt((double)n_ctx),
                           "non-causal %s hd %d: the prefix of %d entries differs from the oracle "
                           "by %g", mlm_wtype_name(types[ti]), hd, n_ctx - 1, max_diff(a, c, row));
                    free(c);
                }
                free(q), free(a), free(b), free(ns), free(exact);
                free_kv(&s);
            }
    free(scratch);
}

/* Non-causal jobs of FN against the flash reference, bit for bit: jobs of 1..16 queries, head
 * chunks, and every query alone against its bits inside a job of 16. */
static void check_noncausal(const char *name, mlm_attention_fn fn) {
    /* {n_head, n_kv, hd} */
    const int shapes[][3] = {{2, 2, 80}, {8, 2, 80}, {4, 4, 64}, {8, 2, 64}, {8, 1, 64},
                             {4, 4, 128}, {8, 2, 128}, {4, 1, 16}, {2, 2, 16}, {16, 2, 32}};
    const int32_t ctxs[] = {1, 2, 16, 17, 63, 64, 65, 100, 129, 300, 1000, 4100};
    const int nqs[] = {1, 2, 5, 16};
    const mlm_wtype types[] = {MLM_W_F32, MLM_W_BF16, MLM_W_BFP8};
    float *scratch = scratch_buf();
    int combos = 0;
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
            for (size_t ci = 0; ci < sizeof ctxs / sizeof *ctxs; ci++) {
                int n_head = shapes[si][0], n_kv = shapes[si][1], hd = shapes[si][2];
                int32_t n_ctx = ctxs[ci];
                if ((double)n_ctx * n_head * hd > 4.2e6) continue; /* the reference's cost */
                /* block sizes 1..64, 64 (a tile in one page), 100 (tiles across pages) and
                 * one block holding everything */
                int32_t kinds[] = {(int32_t)(1 + (ci * 11 + si * 5 + ti) % 63), 64, 100, n_ctx};
                int32_t bs = kinds[(ci + si + ti) % 4];
                kvset s = make_kv(types[ti], n_kv, hd, n_ctx, bs);
                int64_t row = (int64_t)n_head * hd;
                float *q = malloc((size_t)(MLM_ATT_QT * row) * 4);
                float *a = malloc((size_t)(MLM_ATT_QT * row) * 4);
                float *b = malloc((size_t)(MLM_ATT_QT * row) * 4);
                float *c = malloc((size_t)row * 4);
                for (int64_t i = 0; i < MLM_ATT_QT * row; i++) q[i] = frand();
                for (size_t qi = 0; qi < sizeof nqs / sizeof *nqs; qi++) {
                    int n_q = nqs[qi];
                    if ((double)n_ctx * n_head * hd * n_q > 8e6) continue;
                    int64_t len = n_q * row;
                    /* head chunks of 3 split a group of 4 or 8 into jobs of 3, 1, 2 heads */
                    int chunk = qi % 2 ? 3 : MLM_ATT_HH;
                    run_noncausal(mlm_attention_flash_ref, &s.kv, s.blocks, n_ctx, n_q, n_head,
                                  n_kv, hd, chunk, q, a, scratch);
                    run_noncausal(fn, &s.kv, s.blocks, n_ctx, n_q, n_head, n_kv, hd, chunk, q, b,
                                  scratch);
                    combos++;
                    CHECKF(!memcmp(a, b, (size_t)len * 4),
                           "%s non-causal %s heads %d/%d hd %d ctx %d block %d queries %d chunk "
                           "%d: max diff %g vs the reference",
                           name, mlm_wtype_name(types[ti]), n_head, n_kv, hd, n_ctx, bs, n_q,
                           chunk, max_diff(a, b, len));
                    /* each query alone gives the bits it got among the others */
                    for (int i = 0; i < n_q; i += n_q > 4 ? 4 : 1) {
                        run_noncausal(fn, &s.kv, s.blocks, n_ctx, 1, n_head, n_kv, hd,
                                      MLM_ATT_HH, q + i * row, c, scratch);
                        CHECKF(!memcmp(b + i * row, c, (size_t)row * 4),
                               "%s non-causal %s hd %d ctx %d: query %d alone differs from "
                               "inside a job of %d", name, mlm_wtype_name(types[ti]), hd, n_ctx,
                               i, n_q);
                    }
                }
                free(q), free(a), free(b), free(c);
                free_kv(&s);
            }
    CHECK(combos > 300);
    free(scratch);
}

/* The vision encoder's case: f32 entries in one block of the whole sequence, head_dim 80,
 * group 1, jobs of 16 queries over the whole sequence and over a prefix cut inside a tile. */
static void check_vision(const char *name, mlm_attention_fn fn) {
    const int n_head = 2, hd = 80;
    const int32_t L = 6432, ctxs[] = {6432, 6404};
    float *scratch = scratch_buf();
    kvset s = make_kv(MLM_W_F32, n_head, hd, L, L);
    int64_t row = (int64_t)n_head * hd, len = MLM_ATT_QT * row;
    float *q = malloc((size_t)len * 4), *a = malloc((size_t)len * 4), *b = malloc((size_t)len * 4);
    for (int64_t i = 0; i < len; i++) q[i] = 2 * frand();
    for (size_t ci = 0; ci < 2; ci++) {
        run_noncausal(mlm_attention_flash_ref, &s.kv, s.blocks, ctxs[ci], MLM_ATT_QT, n_head,
                      n_head, hd, 1, q, a, scratch);
        run_noncausal(fn, &s.kv, s.blocks, ctxs[ci], MLM_ATT_QT, n_head, n_head, hd, 1, q, b,
                      scratch);
        CHECKF(!memcmp(a, b, (size_t)len * 4), "%s vision case ctx %d: max diff %g", name,
               ctxs[ci], max_diff(a, b, len));
    }
    free(q), free(a), free(b);
    free_kv(&s);
    free(scratch);
}

TEST(noncausal_avx2_equals_ref) {
    const char *why = NULL;
    if (!mlm_kernels_get("avx2", &why)) SKIP("%s", why);
    check_noncausal("avx2", mlm_attention_flash_avx2);
    check_vision("avx2", mlm_attention_flash_avx2);
}

TEST(noncausal_avx512_equals_ref) {
    const char *why = NULL;
    if (!mlm_kernels_get("avx512", &why)) SKIP("%s", why);
    check_noncausal("avx512", mlm_attention_flash_avx512);
    check_vision("avx512", mlm_attention_flash_avx512);
}

/* Every level's table entry: causal jobs (n_ctx 0, as callers that predate it build them)
 * and non-causal ones agree with the reference on the same inputs. */
TEST(noncausal_through_the_tables) {
    float *scratch = scratch_buf();
    kvset s = make_kv(MLM_W_BFP8, 2, 64, 200, 16);
    int64_t row = 8 * 64, len = 4 * row;
    float *q = malloc((size_t)len * 4), *a = malloc((size_t)len * 4), *b = malloc((size_t)len * 4);
    for (int64_t i = 0; i < len; i++) q[i] = frand();
    for (int mode = 0; mode < 2; mode++) {
        run_jobs(mlm_attention_flash_ref, &s.kv, s.blocks, 200, mode, 4, 8, 2, 64, MLM_ATT_HH, q,
                 a, scratch);
        for (int li = 0; mlm_kernel_levels[li]; li++) {
            const mlm_kernels *k = mlm_kernels_get(mlm_kernel_levels[li], NULL);
            if (!k) continue;
            run_jobs(k->attention, &s.kv, s.blocks, 200, mode, 4, 8, 2, 64, MLM_ATT_HH, q, b,
                     scratch);
            CHECKF(!memcmp(a, b, (size_t)len * 4), "level %s (%s), %s: max diff %g", k->name,
                   k->attention_name, mode ? "non-causal" : "causal", max_diff(a, b, len));
        }
    }
    /* causal and non-causal differ where they should: the first query reads 197 entries */
    run_jobs(mlm_attention_flash_ref, &s.kv, s.blocks, 200, 0, 4, 8, 2, 64, MLM_ATT_HH, q, b,
             scratch);
    CHECK(memcmp(a, b, (size_t)row * 4) != 0);
    CHECK(!memcmp(a + 3 * row, b + 3 * row, (size_t)row * 4)); /* the last one reads all 200 */
    free(q), free(a), free(b);
    free_kv(&s);
    free(scratch);
}

TEST(avx2_equals_ref) {
    const char *why = NULL;
    if (!mlm_kernels_get("avx2", &why)) SKIP("%s", why);
    check_level("avx2", mlm_attention_flash_avx2);
}

TEST(avx512_equals_ref) {
    const char *why = NULL;
    if (!mlm_kernels_get("avx512", &why)) SKIP("%s", why);
    check_level("avx512", mlm_attention_flash_avx512);
}

int main(void) {
    RUN(flash_ref_vs_naive);
    RUN(avx2_equals_ref);
    RUN(avx512_equals_ref);
    RUN(noncausal_ref_vs_naive);
    RUN(noncausal_avx2_equals_ref);
    RUN(noncausal_avx512_equals_ref);
    RUN(noncausal_through_the_tables);
    return HARNESS_END();
}
