/* bench/attention.c: the flash attention kernels alone on the Llama 3.2 Vision encoder's
 * case: non-causal, f32 KV in one block holding the whole sequence (L = 6432 entries, head_dim
 * 80, 16 heads over 16 KV heads), jobs of MLM_ATT_QT queries and one head, every query reading
 * n_ctx = L entries (and a prefix cut inside a tile). One thread: the figures are one core's.
 * Two layouts of the same K and V: token-major (an entry is a token's 16 heads, 5120 bytes,
 * as the projections write them) and head-major (one pool per head, entries of 320 bytes).
 * GFLOP/s count 4 * L * n_ctx * head_dim flops a head (QK^T and PV). For scale, the same
 * level's f32 matmul kernel on the encoder's (tokens x 1280) x (1280 x 1280) projection, in
 * row chunks of 64 as the forward pass hands them out, at 96 tokens (its tiles' activations in
 * cache) and at L. Then decode's case: one query a job, Llama 3.2 1B's attention (32 heads over
 * 8 KV heads, head_dim 64, 16 layers) over a bf16 KV cache in pages of 64 entries, the caches
 * evicted before each layer (as the weights streaming between two layers do): ms per token.
 * Prints figures; never fails on speed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "common/clock.h"

enum { L = 6432, HD = 80, N_HEAD = 16, EMBD = N_HEAD * HD };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1 << 23))) - 1.0f;
}

/* Seconds (best of REPS) for the jobs of queries [0, N_QUERIES) of heads [0, HEADS); KV[h] is
 * head h's pool and KV_HEAD[h] its KV head in it. */
static double time_attention(mlm_attention_fn fn, const mlm_paged_kv *const *kv,
                             const int *kv_head, const int32_t *blocks, const float *q,
                             float *out, float *scratch, int heads, int32_t n_queries,
                             int32_t n_ctx, int reps) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        double t = bench_now();
        for (int h = 0; h < heads; h++)
            for (int32_t i0 = 0; i0 < n_queries; i0 += MLM_ATT_QT) {
                int32_t n_q = n_queries - i0 < MLM_ATT_QT ? n_queries - i0 : MLM_ATT_QT;
                /* the kernel reads query head kv_head[h] (group 1) of rows that start at
                 * q: shifted so that it is head h of the token rows */
                int64_t shift = (int64_t)i0 * EMBD + (int64_t)(h - kv_head[h]) * HD;
                mlm_attn_job job = {.out = out + shift, .out_stride = EMBD, .q = q + shift,
                                    .q_stride = EMBD, .kv = kv[h], .blocks = blocks,
                                    .n_q = n_q, .n_ctx = n_ctx, .kv_head = kv_head[h],
                                    .group = 1, .hh0 = 0, .n_hh = 1, .head_dim = HD};
                fn(&job, scratch);
            }
        t = bench_now() - t;
        if (t < best) best = t;
    }
    return best;
}

/* Seconds (best of REPS) for OUT = W X over every row chunk of 64. */
static double time_matmul(mlm_matmul_fn fn, const float *w, const mlm_acts *x, float *out,
                          int reps) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        double t = bench_now();
        for (int64_t r = 0; r < EMBD; r += 64) fn(out, EMBD, w, x, r, r + 64);
        t = bench_now() - t;
        if (t < best) best = t;
    }
    return best;
}

/* Decode's case, Llama 3.2 1B's attention: layers, KV heads, query heads per KV head,
 * head_dim; an entry (a KV row) holds every KV head. */
enum { DEC_LAYERS = 16, DEC_KVH = 8, DEC_GROUP = 4, DEC_HD = 64, DEC_ROW = DEC_KVH * DEC_HD };

/* Decode: ms per token of the layers' jobs (one per KV head, one query of its heads) over
 * N_CTX entries, best of REPS; the caches are evicted before each layer. */
static double time_decode(mlm_attention_fn fn, mlm_paged_kv *kv, const int32_t *blocks,
                          int32_t n_ctx, const float *q, float *out, float *scratch,
                          const uint64_t *big, size_t n_big, int reps) {
    double best = 1e30;
    uint64_t sink = 0;
    for (int rep = 0; rep < reps; rep++) {
        double t = 0;
        for (int l = 0; l < DEC_LAYERS; l++) {
            for (size_t i = 0; i < n_big; i += 8) sink += big[i];
            double t0 = bench_now();
            for (int h = 0; h < DEC_KVH; h++) {
                mlm_attn_job job = {.out = out, .out_stride = DEC_GROUP * DEC_ROW, .q = q,
                                    .q_stride = DEC_GROUP * DEC_ROW, .kv = &kv[l],
                                    .blocks = blocks, .q0 = n_ctx - 1, .n_q = 1, .kv_head = h,
                                    .group = DEC_GROUP, .hh0 = 0, .n_hh = DEC_GROUP,
                                    .head_dim = DEC_HD};
                fn(&job, scratch);
            }
            t += bench_now() - t0;
        }
        if (t < best) best = t;
    }
    if (sink == 42) best += 1e-12; /* keep the reads */
    return best * 1e3;
}

static void decode_table(float *scratch) {
    enum { ROW = DEC_ROW, QROW = DEC_GROUP * DEC_ROW, BS = 64, MAX_CTX = 4096 };
    const int32_t ctxs[] = {512, 4096};
    int32_t blocks[MAX_CTX / BS];
    for (int i = 0; i < MAX_CTX / BS; i++) blocks[i] = i;
    mlm_paged_kv kv[DEC_LAYERS];
    float *k_row = malloc(ROW * 4), *v_row = malloc(ROW * 4), *q = malloc(QROW * 4);
    float *out = malloc(QROW * 4);
    const size_t n_big = (size_t)(64u << 20) / 8; /* 64 MB read between layers */
    uint64_t *big = malloc(n_big * 8);
    for (size_t i = 0; i < n_big; i++) big[i] = i;
    for (int l = 0; l < DEC_LAYERS; l++) {
        kv[l] = (mlm_paged_kv){malloc((size_t)MAX_CTX * ROW * 2), malloc((size_t)MAX_CTX * ROW * 2),
                               MLM_W_BF16, BS, ROW, ROW * 2};
        for (int32_t t = 0; t < MAX_CTX; t++) {
            for (int i = 0; i < ROW; i++) k_row[i] = frand(), v_row[i] = frand();
            mlm_kv_store(&kv[l], blocks, t, k_row, v_row);
        }
    }
    for (int i = 0; i < QROW; i++) q[i] = 2 * frand();
    printf("\nbench/attention: decode, one query a job, %d heads / %d KV heads, head_dim %d, %d "
           "layers, bf16 KV in pages of %d; caches evicted before each layer; 1 thread\n",
           DEC_GROUP * DEC_KVH, DEC_KVH, DEC_HD, DEC_LAYERS, BS);
    printf("level    kernel            n_ctx  ms/token  KV GB/s\n");
    for (int li = 0; mlm_kernel_levels[li]; li++) {
        const mlm_kernels *k = mlm_kernels_get(mlm_kernel_levels[li], NULL);
        const mlm_kernels *above = li > 0 ? mlm_kernels_get(mlm_kernel_levels[li - 1], NULL) : NULL;
        if (!k || (above && above->attention == k->attention)) continue;
        int ref = !strcmp(k->name, "ref");
        for (size_t ci = 0; ci < sizeof ctxs / sizeof *ctxs; ci++) {
            double ms = time_decode(k->attention, kv, blocks, ctxs[ci], q, out, scratch, big,
                                    n_big, ref ? 1 : 5);
            double bytes = 2.0 * DEC_LAYERS * ctxs[ci] * ROW * 2; /* K and V, bf16 */
            printf("%-8s %-16s %6d  %8.2f  %7.2f\n", k->name, k->attention_name, ctxs[ci], ms,
                   bytes / ms / 1e6);
        }
    }
    for (int l = 0; l < DEC_LAYERS; l++) free(kv[l].k), free(kv[l].v);
    free(k_row), free(v_row), free(q), free(out), free(big);
}

int main(void) {
    const int64_t n = (int64_t)L * EMBD;
    float *kbuf = malloc((size_t)n * 4), *vbuf = malloc((size_t)n * 4);
    float *khm = malloc((size_t)n * 4), *vhm = malloc((size_t)n * 4);
    float *q = malloc((size_t)n * 4), *out = malloc((size_t)n * 4);
    float *w = malloc((size_t)EMBD * EMBD * 4);
    float *scratch = malloc((size_t)MLM_ATT_SCRATCH * 4);
    for (int64_t i = 0; i < n; i++) kbuf[i] = frand(), vbuf[i] = frand(), q[i] = 2 * frand();
    for (int64_t i = 0; i < (int64_t)EMBD * EMBD; i++) w[i] = frand() * 0.03f;
    /* the same entries head-major: head h's pool at + h * L * HD */
    for (int64_t t = 0; t < L; t++)
        for (int h = 0; h < N_HEAD; h++)
            for (int d = 0; d < HD; d++) {
                khm[((int64_t)h * L + t) * HD + d] = kbuf[t * EMBD + h * HD + d];
                vhm[((int64_t)h * L + t) * HD + d] = vbuf[t * EMBD + h * HD + d];
            }
    mlm_paged_kv tm = {kbuf, vbuf, MLM_W_F32, L, EMBD, EMBD * 4}, hm[N_HEAD];
    const mlm_paged_kv *tm_kv[N_HEAD], *hm_kv[N_HEAD];
    int tm_head[N_HEAD], hm_head[N_HEAD];
    for (int h = 0; h < N_HEAD; h++) {
        hm[h] = (mlm_paged_kv){khm + (int64_t)h * L * HD, vhm + (int64_t)h * L * HD, MLM_W_F32, L,
                               HD, HD * 4};
        tm_kv[h] = &tm, tm_head[h] = h, hm_kv[h] = &hm[h], hm_head[h] = 0;
    }
    const int32_t blocks[1] = {0};
    mlm_acts x = {.n = L, .cols = EMBD, .x = q};
    const int32_t ctxs[] = {L, 6404};
    printf("bench/attention: vision encoder, L %d, head_dim %d, %d heads / %d KV heads, f32 KV "
           "in one block, jobs of %d queries, non-causal; 1 thread\n",
           L, HD, N_HEAD, N_HEAD, MLM_ATT_QT);
    printf("level    kernel         layout       n_ctx  GFLOP/s  ms/layer  | f32 matmul GFLOP/s "
           "(96, %d tokens)  attention/best\n", L);
    for (int li = 0; mlm_kernel_levels[li]; li++) {
        const mlm_kernels *k = mlm_kernels_get(mlm_kernel_levels[li], NULL);
        const mlm_kernels *above = li > 0 ? mlm_kernels_get(mlm_kernel_levels[li - 1], NULL) : NULL;
        if (!k || (above && above->attention == k->attention))
            continue; /* a level sharing the one above's kernel adds nothing */
        int ref = !strcmp(k->name, "ref");
        /* the reference only runs a few jobs: it is two orders slower */
        int heads = ref ? 1 : 2;
        int32_t nq = ref ? 4 * MLM_ATT_QT : L;
        double mm[2] = {0, 0};
        for (int i = 0; i < 2 && !(ref && i); i++) {
            x.n = i ? L : 96;
            double t = time_matmul(k->matmul[MLM_W_F32], w, &x, out, ref ? 1 : 3);
            mm[i] = 2.0 * (double)EMBD * EMBD * (double)x.n / t / 1e9;
        }
        double best = mm[0] > mm[1] ? mm[0] : mm[1];
        for (int lay = 0; lay < 2; lay++)
            for (size_t ci = 0; ci < sizeof ctxs / sizeof *ctxs; ci++) {
                double t = time_attention(k->attention, lay ? hm_kv : tm_kv,
                                          lay ? hm_head : tm_head, blocks, q, out, scratch,
                                          heads, nq, ctxs[ci], ref ? 1 : 3);
                double flops = 4.0 * (double)nq * ctxs[ci] * HD * heads;
                double layer = t * ((double)L / nq) * ((double)N_HEAD / heads) * 1e3;
                char at_l[16] = "       -"; /* the reference skips the long product */
                if (mm[1] > 0) snprintf(at_l, sizeof at_l, "%8.1f", mm[1]);
                printf("%-8s %-13s %-11s %6d  %7.1f  %8.1f  | %8.1f  %s %20.0f%%\n", k->name,
                       k->attention_name, lay ? "head-major" : "token-major", ctxs[ci],
                       flops / t / 1e9, layer, mm[0], at_l, 100.0 * flops / t / 1e9 / best);
            }
    }
    decode_table(scratch);
    free(kbuf), free(vbuf), free(khm), free(vhm), free(q), free(out), free(w), free(scratch);
    return 0;
}
