/* tests/kernels/test_matmul.c: every SIMD matmul kernel against its scalar _ref twin, on
 * random data and edge shapes (K not a multiple of 8/16/32, one row, many rows, batches of
 * 1..32 tokens), and the batching/row-split invariance the executor relies on: a kernel's
 * output for a token does not depend on the other tokens or on the row range it was given. */
#include <stdint.h>

#include "backend/backend.h"
#include "tensor/bfp.h"
#include "tensor/q8.h"
#include "harness.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1 << 23))) - 1.0f;
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static void check_table(const mlm_kernels *kt) {
    static const int64_t cols_list[] = {1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 100, 257, 2048};
    static const int64_t rows_list[] = {1, 3, 4, 5, 64, 4096};
    static const int64_t n_list[] = {1, 2, 5, 32};
    for (int wt = MLM_W_F32; wt <= MLM_W_BF16; wt++) {
        mlm_matmul_fn ref = wt == MLM_W_F32 ? mlm_matmul_f32_ref : mlm_matmul_bf16_ref;
        for (size_t ci = 0; ci < sizeof cols_list / sizeof *cols_list; ci++)
            for (size_t ri = 0; ri < sizeof rows_list / sizeof *rows_list; ri++)
                for (size_t ni = 0; ni < sizeof n_list / sizeof *n_list; ni++) {
                    int64_t cols = cols_list[ci], rows = rows_list[ri], n = n_list[ni];
                    if (rows * cols > (1 << 22) || (rows == 4096 && n > 2)) continue;
                    void *w = malloc((size_t)(rows * cols) * 4);
                    float *x = malloc((size_t)(n * cols) * 4);
                    float *a = malloc((size_t)(n * rows) * 4), *b = malloc((size_t)(n * rows) * 4);
                    float *c = malloc((size_t)(n * rows) * 4);
                    for (int64_t i = 0; i < rows * cols; i++) {
                        float v = frand();
                        if (wt == MLM_W_F32) ((float *)w)[i] = v;
                        else ((uint16_t *)w)[i] = to_bf16(v);
                    }
                    for (int64_t i = 0; i < n * cols; i++) x[i] = frand();
                    ref(a, rows, w, x, n, cols, 0, rows);
                    kt->matmul[wt](b, rows, w, x, n, cols, 0, rows);
                    /* |error| of an f32 dot of length K: a few ulps times K times |terms| */
                    double tol = 4e-7 * (double)cols + 1e-6, worst = 0;
                    for (int64_t i = 0; i < n * rows; i++) {
                        double d = fabs((double)a[i] - b[i]);
                        if (d > worst) worst = d;
                    }
                    CHECKF(worst <= tol, "%s w%d rows %lld cols %lld n %lld: max diff %g > %g",
                           kt->name, wt, (long long)rows, (long long)cols, (long long)n, worst, tol);
                    /* one token at a time, and rows split at an odd point, give the same bits */
                    int64_t split = rows / 2 + (rows > 2);
                    for (int64_t t = 0; t < n; t++) {
                        kt->matmul[wt](c + t * rows, rows, w, x + t * cols, 1, cols, 0, split);
                        kt->matmul[wt](c + t * rows, rows, w, x + t * cols, 1, cols, split, rows);
                    }
                    CHECKF(!memcmp(b, c, (size_t)(n * rows) * 4),
                           "%s w%d rows %lld cols %lld n %lld: batched != one by one", kt->name, wt,
                           (long long)rows, (long long)cols, (long long)n);
                    free(w), free(x), free(a), free(b), free(c);
                }
    }
}

TEST(avx2_equals_ref) {
    const mlm_kernels *kt = mlm_kernels_get("avx2");
    if (!kt) SKIP("this CPU has no AVX2+FMA");
    check_table(kt);
}

TEST(avx512_equals_ref) {
    const mlm_kernels *kt = mlm_kernels_get("avx512");
    if (!kt) SKIP("this CPU has no AVX-512 F/BW/VL");
    check_table(kt);
}

TEST(ref_is_invariant_too) { check_table(mlm_kernels_get("ref")); }


/* BFP8/BFP4 x int8 kernels: the reference against the formats' own decoders in double
 * precision (sum of decoded weight x q x d), every SIMD table against the reference, and the
 * same batching / row-split invariance. */
static void check_bfp_table(const mlm_kernels *kt) {
    static const int64_t cols_list[] = {1, 15, 16, 17, 33, 64, 100, 257, 2048, 4100};
    static const int64_t rows_list[] = {1, 3, 4, 5, 64, 4096};
    static const int64_t n_list[] = {1, 2, 5, 32};
    for (int bits = 8; bits >= 4; bits -= 4) {
        mlm_wtype wt = bits == 8 ? MLM_W_BFP8 : MLM_W_BFP4;
        mlm_matmul_q8_fn ref = bits == 8 ? mlm_matmul_bfp8_q8_ref : mlm_matmul_bfp4_q8_ref;
        for (size_t ci = 0; ci < sizeof cols_list / sizeof *cols_list; ci++)
            for (size_t ri = 0; ri < sizeof rows_list / sizeof *rows_list; ri++)
                for (size_t ni = 0; ni < sizeof n_list / sizeof *n_list; ni++) {
                    int64_t cols = cols_list[ci], rows = rows_list[ri], n = n_list[ni];
                    if (rows * cols > (1 << 22) || (rows == 4096 && n > 2)) continue;
                    int64_t pc = mlm_q8_cols(cols);
                    uint8_t *w = malloc((size_t)mlm_bfp_matrix_bytes(rows, cols, bits));
                    float *wf = malloc((size_t)cols * 4), *x = malloc((size_t)(n * cols) * 4);
                    int8_t *q = malloc((size_t)(n * pc));
                    float *d = malloc((size_t)(n * pc / 32) * 4);
                    float *a = malloc((size_t)(n * rows) * 4), *b = malloc((size_t)(n * rows) * 4);
                    float *c = malloc((size_t)(n * rows) * 4);
                    for (int64_t r = 0; r < rows; r++) {
                        /* rows of mixed scales, some zeros and tiny values */
                        float scale = (float)ldexp(1.0, (int)(r % 7) - 3);
                        for (int64_t k = 0; k < cols; k++) {
                            float v = frand() * scale;
                            if ((k * 7 + r) % 13 == 0) v = 0;
                            if ((k * 5 + r) % 29 == 0) v *= 1e-6f;
                            wf[k] = v;
                        }
                        mlm_bfp_encode_matrix_row(wf, cols, bits, r, w);
                    }
                    for (int64_t i = 0; i < n * cols; i++) x[i] = frand() * (i % 5 ? 1.0f : 8.0f);
                    mlm_q8_quantize(x, n, cols, q, d);
                    ref(a, rows, w, q, d, n, cols, 0, rows);
                    kt->matmul_q8[wt](b, rows, w, q, d, n, cols, 0, rows);
                    /* the reference against the decoded formats in double, and the kernel
                     * against the reference, relative to the sum of |terms| */
                    double worst_ref = 0, worst = 0;
                    for (int64_t r = 0; r < rows; r++) {
                        mlm_bfp_decode_matrix_row(w, cols, bits, r, wf);
                        for (int64_t t = 0; t < n; t++) {
                            double sum = 0, mag = 1e-30;
                            for (int64_t k = 0; k < cols; k++) {
                                double xv = (double)q[t * pc + k] * d[t * pc / 32 + k / 32];
                                sum += (double)wf[k] * xv, mag += fabs((double)wf[k] * xv);
                            }
                            double e = fabs(sum - a[t * rows + r]) / mag;
                            if (e > worst_ref) worst_ref = e;
                            e = fabs((double)a[t * rows + r] - b[t * rows + r]) / mag;
                            if (e > worst) worst = e;
                        }
                    }
                    CHECKF(worst_ref <= 1e-6, "ref bfp%d rows %lld cols %lld n %lld: relative "
                           "error %g vs the decoded formats", bits, (long long)rows,
                           (long long)cols, (long long)n, worst_ref);
                    CHECKF(worst <= 1e-6, "%s bfp%d rows %lld cols %lld n %lld: max rel diff %g",
                           kt->name, bits, (long long)rows, (long long)cols, (long long)n, worst);
                    int64_t split = rows / 2 + (rows > 2);
                    for (int64_t t = 0; t < n; t++) {
                        kt->matmul_q8[wt](c + t * rows, rows, w, q + t * pc, d + t * pc / 32, 1,
                                          cols, 0, split);
                        kt->matmul_q8[wt](c + t * rows, rows, w, q + t * pc, d + t * pc / 32, 1,
                                          cols, split, rows);
                    }
                    CHECKF(!memcmp(b, c, (size_t)(n * rows) * 4),
                           "%s bfp%d rows %lld cols %lld n %lld: batched != one by one", kt->name,
                           bits, (long long)rows, (long long)cols, (long long)n);
                    free(w), free(wf), free(x), free(q), free(d), free(a), free(b), free(c);
                }
    }
}

TEST(bfp_avx2_equals_ref) {
    const mlm_kernels *kt = mlm_kernels_get("avx2");
    if (!kt) SKIP("this CPU has no AVX2+FMA");
    check_bfp_table(kt);
}

TEST(bfp_ref_matches_formats) { check_bfp_table(mlm_kernels_get("ref")); }

int main(void) {
    RUN(avx2_equals_ref);
    RUN(avx512_equals_ref);
    RUN(ref_is_invariant_too);
    RUN(bfp_ref_matches_formats);
    RUN(bfp_avx2_equals_ref);
    return HARNESS_END();
}
