/* tests/kernels/test_attention.c: every SIMD attention kernel against the scalar reference
 * over paged KV (f32, bf16 and BFP8 entries, random page tables), edge shapes: one context
 * entry, contexts not a multiple of the block size or of the kernels' tiles, GQA groups 1..8,
 * head_dim 8 (reference fallback), 16, 32, 64 and 128. BFP8 entries are also checked against
 * the same attention over their decoded values stored as f32. */
#include <stdint.h>

#include "backend/backend.h"
#include "harness.h"
#include "tensor/bfp.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1 << 23))) - 1.0f;
}

static void check(const char *name, mlm_attention_fn fn) {
    const int shapes[][3] = {{4, 1, 64}, {8, 8, 64}, {32, 8, 64}, {2, 2, 128}, {8, 1, 128},
                             {4, 2, 16}, {6, 3, 32}, {4, 1, 8}};
    const int32_t ctxs[] = {1, 7, 16, 33, 65, 300};
    const mlm_wtype types[] = {MLM_W_F32, MLM_W_BF16, MLM_W_BFP8};
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
            for (size_t ci = 0; ci < sizeof ctxs / sizeof *ctxs; ci++) {
                mlm_wtype type = types[ti];
                int n_head = shapes[si][0], n_kv = shapes[si][1], hd = shapes[si][2];
                int32_t n_ctx = ctxs[ci], bs = 16, n_blocks = (n_ctx + bs - 1) / bs + 3;
                int64_t row = (int64_t)n_kv * hd, rb = mlm_wtype_row_bytes(type, row);
                size_t pool = (size_t)(n_blocks * bs * rb), fpool = (size_t)(n_blocks * bs * row) * 4;
                mlm_paged_kv kv = {malloc(pool), malloc(pool), type, bs, row, rb};
                mlm_paged_kv dec = {malloc(fpool), malloc(fpool), MLM_W_F32, bs, row, row * 4};
                int32_t *blocks = malloc((size_t)n_blocks * sizeof *blocks);
                for (int i = 0; i < n_blocks; i++) blocks[i] = (i * 5 + 2) % n_blocks; /* shuffled */
                float *k = malloc((size_t)row * 4), *v = malloc((size_t)row * 4);
                float *kd = malloc((size_t)row * 4), *vd = malloc((size_t)row * 4);
                for (int32_t j = 0; j < n_ctx; j++) {
                    for (int64_t i = 0; i < row; i++) k[i] = frand() * 2, v[i] = frand();
                    mlm_kv_store(&kv, blocks, j, k, v);
                    if (type == MLM_W_BFP8) {
                        size_t off = mlm_kv_entry_offset(&kv, blocks, j);
                        mlm_bfp_decode_row((const uint8_t *)kv.k + off, row, 8, kd);
                        mlm_bfp_decode_row((const uint8_t *)kv.v + off, row, 8, vd);
                        mlm_kv_store(&dec, blocks, j, kd, vd);
                    }
                }
                int group = n_head / n_kv;
                float *q = malloc((size_t)n_head * hd * 4), *a = malloc((size_t)n_head * hd * 4);
                float *b = malloc((size_t)n_head * hd * 4);
                float *scratch = malloc((size_t)(n_ctx * group) * 4);
                for (int i = 0; i < n_head * hd; i++) q[i] = frand();
                mlm_attention_ref(a, q, &kv, blocks, n_ctx, n_head, n_kv, hd, scratch);
                if (type == MLM_W_BFP8) {
                    mlm_attention_ref(b, q, &dec, blocks, n_ctx, n_head, n_kv, hd, scratch);
                    CHECKF(!memcmp(a, b, (size_t)(n_head * hd) * 4),
                           "ref bfp8 heads %d/%d hd %d ctx %d: differs from the decoded values",
                           n_head, n_kv, hd, n_ctx);
                }
                fn(b, q, &kv, blocks, n_ctx, n_head, n_kv, hd, scratch);
                double worst = 0;
                for (int i = 0; i < n_head * hd; i++)
                    if (fabs(a[i] - b[i]) > worst) worst = fabs(a[i] - b[i]);
                CHECKF(worst <= 2e-6, "%s %s heads %d/%d hd %d ctx %d: max diff %g", name,
                       mlm_wtype_name(type), n_head, n_kv, hd, n_ctx, worst);
                free(kv.k), free(kv.v), free(dec.k), free(dec.v), free(blocks), free(k), free(v);
                free(kd), free(vd), free(q), free(a), free(b), free(scratch);
            }
}

TEST(avx2_equals_ref) {
    if (!mlm_kernels_get("avx2")) SKIP("this CPU has no AVX2+FMA");
    check("avx2", mlm_attention_avx2);
}

int main(void) {
    RUN(avx2_equals_ref);
    return HARNESS_END();
}
