/* tests/kernels/test_matmul.c: every matmul kernel of every ISA level this CPU runs against
 * its scalar _ref twin, on random data and edge shapes (K not a multiple of the block, one
 * row, rows not a multiple of a panel, 4096 rows, tokens 1..64 with odd tile remainders):
 *   - BFP8/BFP4 x int8: equal bit for bit (one canonical order on every level), and the
 *     reference itself against the formats' decoders in double precision;
 *   - bf16 x bf16 (AVX512-BF16): equal bit for bit to its twin, and near the double sum;
 *   - f32 and bf16 x f32: within f32 rounding of the reference;
 * and the invariance the executor relies on: a token's outputs do not depend on the other
 * tokens or on the row range a call was given, and a row's output does not depend on the
 * matrix it sits in (a TP rank's shard of rows gives the whole matrix's bits). Levels this CPU lacks print SKIP with the
 * missing feature. */
#include <stdint.h>

#include "backend/backend.h"
#include "harness.h"
#include "tensor/bfp.h"
#include "tensor/dtype.h"
#include "format/gguf.h"
#include "format/gguf_quants.h"
#include "tensor/q8.h"
#include "tensor/qpanel.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1 << 23))) - 1.0f;
}

/* Activations for N tokens of COLS: every form, owned by the caller (free_acts). */
static mlm_acts make_acts(const float *x, int64_t n, int64_t cols) {
    int64_t pc = mlm_q8_cols(cols), hc = mlm_bf16_cols(cols);
    int8_t *q = malloc((size_t)(n * pc));
    uint8_t *u = malloc((size_t)(n * pc));
    float *d = malloc((size_t)(n * pc / 32) * 4);
    uint16_t *h = calloc((size_t)(n * hc), 2);
    float *s = malloc((size_t)(n * mlm_q8_sums_len(cols)) * 4);
    mlm_q8_quantize(x, n, cols, q, u, d);
    mlm_q8_sums(q, n, cols, s);
    for (int64_t t = 0; t < n; t++)
        for (int64_t k = 0; k < cols; k++) h[t * hc + k] = mlm_f32_to_bf16(x[t * cols + k]);
    return (mlm_acts){.n = n, .cols = cols, .x = x, .h = h, .q = q, .u = u, .d = d, .s = s};
}

static void free_acts(mlm_acts *a) {
    free((void *)a->h), free((void *)a->q), free((void *)a->u), free((void *)a->d);
    free((void *)a->s);
}

/* Token T alone (pointers moved to its row). */
static mlm_acts one_token(const mlm_acts *a, int64_t t) {
    int64_t pc = mlm_q8_cols(a->cols), hc = mlm_bf16_cols(a->cols);
    return (mlm_acts){.n = 1, .cols = a->cols, .x = a->x + t * a->cols, .h = a->h + t * hc,
                      .q = a->q + t * pc, .u = a->u + t * pc, .d = a->d + t * pc / 32,
                      .s = a->s + t * mlm_q8_sums_len(a->cols)};
}

/* Runs FN on all tokens at once (into A) and one token at a time with rows split at an odd
 * panel boundary (into B); checks that both give the same bits. */
static void run_both(mlm_matmul_fn fn, const void *w, const mlm_acts *x, int64_t rows, float *a,
                     float *b, const char *what) {
    fn(a, rows, w, x, 0, rows);
    int64_t split = rows > 16 ? 16 * ((rows / 16 + 1) / 2) : 0; /* a panel boundary */
    if (split >= rows) split = 16;
    for (int64_t t = 0; t < x->n; t++) {
        mlm_acts one = one_token(x, t);
        if (split) fn(b + t * rows, rows, w, &one, 0, split);
        fn(b + t * rows, rows, w, &one, split, rows);
    }
    CHECKF(!memcmp(a, b, (size_t)(x->n * rows) * 4), "%s: batched != one by one", what);
    /* all tokens at once, rows in two calls (the second starting inside the matrix) */
    if (split) {
        fn(b, rows, w, x, 0, split);
        fn(b, rows, w, x, split, rows);
        CHECKF(!memcmp(a, b, (size_t)(x->n * rows) * 4), "%s: rows split at %lld differ", what,
               (long long)split);
    }
}

// ---- BFP ----

static const int64_t bfp_cols[] = {1, 15, 16, 17, 33, 64, 100, 257, 2048, 4100};
static const int64_t bfp_rows[] = {1, 3, 15, 16, 17, 40, 64, 4096};
static const int64_t bfp_n[] = {1, 2, 5, 12, 13, 16, 17, 31, 33, 64};

static int shape_ok(int64_t rows, int64_t cols, int64_t n) {
    if (rows * cols > (1 << 22)) return 0;
    if (rows >= 4096 && n > 2) return 0;
    return rows * cols * n <= (1ll << 24) || n <= 2;
}

/* A random BFP matrix: rows of mixed scales, some zeros and tiny values. */
static uint8_t *bfp_matrix(int64_t rows, int64_t cols, int bits) {
    uint8_t *w = calloc(1, (size_t)mlm_bfp_matrix_bytes(rows, cols, bits));
    float *wf = malloc((size_t)cols * 4);
    for (int64_t r = 0; r < rows; r++) {
        float scale = (float)ldexp(1.0, (int)(r % 7) - 3);
        for (int64_t k = 0; k < cols; k++) {
            float v = frand() * scale;
            if ((k * 7 + r) % 13 == 0) v = 0;
            if ((k * 5 + r) % 29 == 0) v *= 1e-6f;
            wf[k] = v;
        }
        mlm_bfp_encode_matrix_row(wf, cols, bits, r, w);
    }
    free(wf);
    return w;
}

static float *random_x(int64_t n, int64_t cols) {
    float *x = malloc((size_t)(n * cols) * 4);
    for (int64_t i = 0; i < n * cols; i++) x[i] = frand() * (i % 5 ? 1.0f : 8.0f);
    return x;
}

/* The level's BFP kernels equal the reference bit for bit (and are invariant). */
static void check_bfp_level(const mlm_kernels *kt) {
    for (int bits = 8; bits >= 4; bits -= 4) {
        mlm_wtype wt = bits == 8 ? MLM_W_BFP8 : MLM_W_BFP4;
        mlm_matmul_fn ref = bits == 8 ? mlm_matmul_bfp8_q8_ref : mlm_matmul_bfp4_q8_ref;
        for (size_t ci = 0; ci < sizeof bfp_cols / sizeof *bfp_cols; ci++)
            for (size_t ri = 0; ri < sizeof bfp_rows / sizeof *bfp_rows; ri++)
                for (size_t ni = 0; ni < sizeof bfp_n / sizeof *bfp_n; ni++) {
                    int64_t cols = bfp_cols[ci], rows = bfp_rows[ri], n = bfp_n[ni];
                    if (!shape_ok(rows, cols, n)) continue;
                    uint8_t *w = bfp_matrix(rows, cols, bits);
                    float *x = random_x(n, cols);
                    mlm_acts acts = make_acts(x, n, cols);
                    float *a = malloc((size_t)(n * rows) * 4), *b = malloc((size_t)(n * rows) * 4);
                    float *c = malloc((size_t)(n * rows) * 4);
                    ref(a, rows, w, &acts, 0, rows);
                    char what[96];
                    snprintf(what, sizeof what, "%s bfp%d rows %lld cols %lld n %lld", kt->name,
                             bits, (long long)rows, (long long)cols, (long long)n);
                    run_both(kt->matmul[wt], w, &acts, rows, b, c, what);
                    CHECKF(!memcmp(a, b, (size_t)(n * rows) * 4), "%s: differs from the reference", what);
                    free(w), free(x), free(a), free(b), free(c);
                    free_acts(&acts);
                }
    }
}

/* The error of GOT against the weight row WF times token T's int8 activations of X, summed
 * in double, relative to the sum of |terms|. */
static double rel_error(const float *wf, const mlm_acts *x, int64_t t, float got) {
    int64_t pc = mlm_q8_cols(x->cols);
    double sum = 0, mag = 1e-30;
    for (int64_t k = 0; k < x->cols; k++) {
        double xv = (double)x->q[t * pc + k] * x->d[t * pc / 32 + k / 32];
        sum += (double)wf[k] * xv, mag += fabs((double)wf[k] * xv);
    }
    return fabs(sum - got) / mag;
}

/* The reference against the decoded formats, in double, relative to the sum of |terms|. */
TEST(bfp_ref_matches_formats) {
    for (int bits = 8; bits >= 4; bits -= 4) {
        mlm_matmul_fn ref = bits == 8 ? mlm_matmul_bfp8_q8_ref : mlm_matmul_bfp4_q8_ref;
        for (size_t ci = 0; ci < sizeof bfp_cols / sizeof *bfp_cols; ci++) {
            int64_t cols = bfp_cols[ci], rows = 40, n = 3;
            uint8_t *w = bfp_matrix(rows, cols, bits);
            float *x = random_x(n, cols), *wf = malloc((size_t)cols * 4);
            mlm_acts acts = make_acts(x, n, cols);
            float *a = malloc((size_t)(n * rows) * 4);
            ref(a, rows, w, &acts, 0, rows);
            double worst = 0;
            for (int64_t r = 0; r < rows; r++) {
                mlm_bfp_decode_matrix_row(w, cols, bits, r, wf);
                for (int64_t t = 0; t < n; t++) worst = fmax(worst, rel_error(wf, &acts, t, a[t * rows + r]));
            }
            CHECKF(worst <= 1e-6, "ref bfp%d cols %lld: relative error %g vs the decoded formats",
                   bits, (long long)cols, worst);
            free(w), free(x), free(wf), free(a);
            free_acts(&acts);
        }
    }
}

TEST(bfp_ref_is_invariant) { check_bfp_level(mlm_kernels_get("ref", NULL)); }

#define LEVEL_TEST(fn, level)                                                                   \
    TEST(fn##_##level) {                                                                        \
        const char *why = NULL;                                                                 \
        const mlm_kernels *kt = mlm_kernels_get(#level, &why);                                  \
        if (!kt) SKIP("%s", why);                                                                   \
        fn(kt);                                                                                 \
    }
LEVEL_TEST(check_bfp_level, avx2)
LEVEL_TEST(check_bfp_level, avxvnni)
LEVEL_TEST(check_bfp_level, avx512)
LEVEL_TEST(check_bfp_level, amx)

// ---- f32 and bf16 weights ----

static void check_float_level(const mlm_kernels *kt) {
    static const int64_t cols_list[] = {1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 100, 257, 2048};
    static const int64_t rows_list[] = {1, 3, 4, 5, 64, 4096};
    static const int64_t n_list[] = {1, 2, 5, 7, 32};
    for (int wt = MLM_W_F32; wt <= MLM_W_BF16; wt++)
        for (size_t ci = 0; ci < sizeof cols_list / sizeof *cols_list; ci++)
            for (size_t ri = 0; ri < sizeof rows_list / sizeof *rows_list; ri++)
                for (size_t ni = 0; ni < sizeof n_list / sizeof *n_list; ni++) {
                    int64_t cols = cols_list[ci], rows = rows_list[ri], n = n_list[ni];
                    if (rows * cols > (1 << 22) || (rows == 4096 && n > 2)) continue;
                    void *w = malloc((size_t)(rows * cols) * 4);
                    for (int64_t i = 0; i < rows * cols; i++) {
                        float v = frand();
                        if (wt == MLM_W_F32) ((float *)w)[i] = v;
                        else ((uint16_t *)w)[i] = mlm_f32_to_bf16(v);
                    }
                    float *x = random_x(n, cols);
                    mlm_acts acts = make_acts(x, n, cols);
                    float *a = malloc((size_t)(n * rows) * 4), *b = malloc((size_t)(n * rows) * 4);
                    float *c = malloc((size_t)(n * rows) * 4);
                    char what[96];
                    snprintf(what, sizeof what, "%s %s rows %lld cols %lld n %lld", kt->name,
                             kt->matmul_name[wt], (long long)rows, (long long)cols, (long long)n);
                    run_both(kt->matmul[wt], w, &acts, rows, b, c, what);
                    if (kt->act[wt] == MLM_ACT_BF16) {
                        /* the bf16 x bf16 twin, bit for bit; and it against the double sum */
                        mlm_matmul_bf16_bf16_ref(a, rows, w, &acts, 0, rows);
                        CHECKF(!memcmp(a, b, (size_t)(n * rows) * 4), "%s: differs from its twin", what);
                        double worst = 0;
                        int64_t hc = mlm_bf16_cols(cols);
                        for (int64_t r = 0; r < rows; r++)
                            for (int64_t t = 0; t < n; t++) {
                                double s = 0;
                                for (int64_t k = 0; k < cols; k++)
                                    s += (double)mlm_bf16_to_f32(((uint16_t *)w)[r * cols + k]) *
                                         mlm_bf16_to_f32(acts.h[t * hc + k]);
                                double e = fabs(s - a[t * rows + r]);
                                if (e > worst) worst = e;
                            }
                        CHECKF(worst <= 4e-7 * (double)cols + 1e-6, "%s twin: max diff %g vs double",
                               what, worst);
                    } else {
                        mlm_matmul_fn ref = wt == MLM_W_F32 ? mlm_matmul_f32_ref : mlm_matmul_bf16_ref;
                        ref(a, rows, w, &acts, 0, rows);
                        /* |error| of an f32 dot of length K: a few ulps times K times |terms| */
                        double tol = 4e-7 * (double)cols + 1e-6, worst = 0;
                        for (int64_t i = 0; i < n * rows; i++) {
                            double d = fabs((double)a[i] - b[i]);
                            if (d > worst) worst = d;
                        }
                        CHECKF(worst <= tol, "%s: max diff %g > %g", what, worst, tol);
                    }
                    free(w), free(x), free(a), free(b), free(c);
                    free_acts(&acts);
                }
}

TEST(float_ref_is_invariant) { check_float_level(mlm_kernels_get("ref", NULL)); }
LEVEL_TEST(check_float_level, avx2)
LEVEL_TEST(check_float_level, avx512)

/* vpdpbf16ps reads denormal inputs as zero and flushes denormal results: the twin says so. */
static void check_bf16_denormals(const mlm_kernels *kt) {
    if (kt->act[MLM_W_BF16] != MLM_ACT_BF16) SKIP("no bf16 x bf16 product at this level");
    int64_t rows = 16, cols = 64, n = 3;
    uint16_t *w = malloc((size_t)(rows * cols) * 2);
    float *x = malloc((size_t)(n * cols) * 4);
    for (int64_t i = 0; i < rows * cols; i++)
        w[i] = mlm_f32_to_bf16(frand() * (i % 3 ? 1e-20f : 1e-19f));
    for (int64_t i = 0; i < n * cols; i++) x[i] = frand() * (i % 4 ? 1e-19f : 3e-39f);
    mlm_acts acts = make_acts(x, n, cols);
    float *a = malloc((size_t)(n * rows) * 4), *b = malloc((size_t)(n * rows) * 4);
    mlm_matmul_bf16_bf16_ref(a, rows, w, &acts, 0, rows);
    kt->matmul[MLM_W_BF16](b, rows, w, &acts, 0, rows);
    CHECKF(!memcmp(a, b, (size_t)(n * rows) * 4), "%s: denormal bf16 products differ from the twin",
           kt->name);
    free(w), free(x), free(a), free(b);
    free_acts(&acts);
}
LEVEL_TEST(check_bf16_denormals, avx512)

// ---- column-parallel shards ----

/* The (ROWS, COLS) matrix of type WT made from the floats WF (ROWS rows of COLS), in the
 * kernels' layout. */
static void *encode(mlm_wtype wt, const float *wf, int64_t rows, int64_t cols) {
    void *w = calloc(1, (size_t)mlm_wtype_bytes(wt, rows, cols) + 1);
    for (int64_t r = 0; r < rows; r++) {
        const float *row = wf + r * cols;
        if (wt == MLM_W_F32) memcpy((float *)w + r * cols, row, (size_t)cols * 4);
        else if (wt == MLM_W_BF16)
            for (int64_t k = 0; k < cols; k++) ((uint16_t *)w)[r * cols + k] = mlm_f32_to_bf16(row[k]);
        else mlm_bfp_encode_matrix_row(row, cols, wt == MLM_W_BFP8 ? 8 : 4, r, w);
    }
    return w;
}

/* A TP rank binds its rows of a column-parallel product (wq, wk, wv, w1, w3, the LM head) as a
 * matrix of their own. Rows [A, B) made into their own matrix give, row for row, the whole
 * matrix's bits in every weight type: a row's result depends neither on how many rows its
 * matrix has nor on which tile, panel or remainder it falls in. */
static void check_shards_level(const mlm_kernels *kt) {
    static const int64_t cuts[][2] = {{0, 17}, {16, 40}, {5, 6}, {48, 131}, {3, 100},
                                      {64, 192}, {100, 192}, {0, 192}, {191, 192}};
    static const int64_t cols_list[] = {64, 100, 320}, n_list[] = {1, 3, 13};
    const int64_t rows = 192;
    for (int wt = 0; wt <= MLM_W_BFP4; wt++) /* the native types: check_native_level */
        for (size_t ci = 0; ci < sizeof cols_list / sizeof *cols_list; ci++)
            for (size_t ni = 0; ni < sizeof n_list / sizeof *n_list; ni++) {
                int64_t cols = cols_list[ci], n = n_list[ni];
                float *wf = malloc((size_t)(rows * cols) * 4);
                for (int64_t i = 0; i < rows * cols; i++)
                    wf[i] = frand() * (float)ldexp(1.0, (int)((i / cols) % 7) - 3);
                void *w = encode((mlm_wtype)wt, wf, rows, cols);
                float *x = random_x(n, cols);
                mlm_acts acts = make_acts(x, n, cols);
                float *whole = malloc((size_t)(n * rows) * 4), *part = malloc((size_t)(n * rows) * 4);
                kt->matmul[wt](whole, rows, w, &acts, 0, rows);
                for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
                    int64_t a = cuts[k][0], b = cuts[k][1], m = b - a;
                    void *sub = encode((mlm_wtype)wt, wf + a * cols, m, cols);
                    kt->matmul[wt](part, m, sub, &acts, 0, m);
                    int same = 1;
                    for (int64_t t = 0; t < n; t++)
                        same &= !memcmp(part + t * m, whole + t * rows + a, (size_t)m * 4);
                    CHECKF(same, "%s %s cols %lld n %lld: rows [%lld, %lld) as their own matrix "
                                 "differ from the whole's",
                           kt->name, kt->matmul_name[wt], (long long)cols, (long long)n,
                           (long long)a, (long long)b);
                    free(sub);
                }
                free(wf), free(w), free(x), free(whole), free(part);
                free_acts(&acts);
            }
}

TEST(shards_ref) { check_shards_level(mlm_kernels_get("ref", NULL)); }
LEVEL_TEST(check_shards_level, avx2)
LEVEL_TEST(check_shards_level, avxvnni)
LEVEL_TEST(check_shards_level, avx512)
LEVEL_TEST(check_shards_level, amx)

// ---- native GGUF types ----

/* ROWS rows of COLS values of kind K as a file holds them: random code bytes, and f16 scale
 * fields of moderate size and either sign (one in 16 zero). */
static uint8_t *file_rows(mlm_qkind k, int64_t rows, int64_t cols) {
    uint32_t be = 1, bb = 0;
    mlm_ggml_type_block(mlm_ggml_qkind_type(k), &be, &bb);
    int64_t nb = rows * cols / be;
    uint8_t *src = malloc((size_t)(nb * bb));
    for (int64_t i = 0; i < nb * bb; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        src[i] = (uint8_t)(rng >> 32);
    }
    int f16_at[2] = {k == MLM_QK_Q6_K ? 208 : 0, mlm_qhas_min(k) ? 2 : -1};
    for (int64_t b = 0; b < nb; b++)
        for (int f = 0; f < 2; f++) {
            if (f16_at[f] < 0) continue;
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            unsigned e = 3 + (unsigned)(rng >> 60) % 10, m = (unsigned)(rng >> 20) & 0x3ff;
            uint16_t h = (rng >> 40) % 16 == 0 ? 0 : (uint16_t)((rng >> 50 & 1) << 15 | e << 10 | m);
            src[b * bb + f16_at[f]] = (uint8_t)h;
            src[b * bb + f16_at[f] + 1] = (uint8_t)(h >> 8);
        }
    return src;
}

/* Bytes of a file row of COLS values of kind K. */
static int64_t file_row_bytes(mlm_qkind k, int64_t cols) {
    uint32_t be = 1, bb = 0;
    mlm_ggml_type_block(mlm_ggml_qkind_type(k), &be, &bb);
    return cols / be * bb;
}

/* Rows [R0, R1) of the file rows SRC (COLS values each) repacked as a matrix of their own. */
static uint8_t *native_matrix(mlm_qkind k, const uint8_t *src, int64_t cols, int64_t r0, int64_t r1) {
    uint8_t *w = calloc(1, (size_t)mlm_qpanel_bytes(k, r1 - r0, cols));
    for (int64_t r = r0; r < r1; r++)
        mlm_ggml_qpanel_row(mlm_ggml_qkind_type(k), src + r * file_row_bytes(k, cols), 0, cols,
                            r - r0, w);
    return w;
}

static const int64_t q_cols[] = {32, 64, 96, 256, 288, 512, 768, 2304};
static const int64_t q_rows[] = {1, 3, 16, 17, 40, 64, 100};
static const int64_t q_n[] = {1, 2, 3, 4, 5, 6, 7, 9, 13, 33};

/* The reference against the file's values (gguf-py's dequantization, format/gguf_quants.c)
 * times the int8 activations, in double, relative to the sum of |terms|. */
TEST(native_ref_matches_file_values) {
    for (int k = 0; k < MLM_QK_COUNT; k++)
        for (size_t ci = 0; ci < sizeof q_cols / sizeof *q_cols; ci++) {
            int64_t cols = q_cols[ci], rows = 20, n = 3;
            if (cols % mlm_qsuper((mlm_qkind)k)) continue;
            uint8_t *src = file_rows((mlm_qkind)k, rows, cols), *w = native_matrix((mlm_qkind)k, src, cols, 0, rows);
            float *x = random_x(n, cols), *wf = malloc((size_t)cols * 4), *a = malloc((size_t)(n * rows) * 4);
            mlm_acts acts = make_acts(x, n, cols);
            mlm_kernels_get("ref", NULL)->matmul[MLM_W_Q8_0 + k](a, rows, w, &acts, 0, rows);
            double worst = 0;
            for (int64_t r = 0; r < rows; r++) {
                mlm_ggml_dequantize(mlm_ggml_qkind_type((mlm_qkind)k),
                                    src + r * file_row_bytes((mlm_qkind)k, cols), cols, wf);
                for (int64_t t = 0; t < n; t++) worst = fmax(worst, rel_error(wf, &acts, t, a[t * rows + r]));
            }
            CHECKF(worst <= 1e-6, "ref %s cols %lld: relative error %g vs the file's values",
                   mlm_wtype_name(MLM_W_Q8_0 + k), (long long)cols, worst);
            free(src), free(w), free(x), free(wf), free(a);
            free_acts(&acts);
        }
}

/* The level's native kernels equal the reference bit for bit, are invariant to batching and
 * row ranges, and rows [a, b) repacked as their own matrix give the whole matrix's bits. */
static void check_native_level(const mlm_kernels *kt) {
    const mlm_kernels *ref = mlm_kernels_get("ref", NULL);
    for (int k = 0; k < MLM_QK_COUNT; k++)
        for (size_t ci = 0; ci < sizeof q_cols / sizeof *q_cols; ci++)
            for (size_t ri = 0; ri < sizeof q_rows / sizeof *q_rows; ri++)
                for (size_t ni = 0; ni < sizeof q_n / sizeof *q_n; ni++) {
                    int64_t cols = q_cols[ci], rows = q_rows[ri], n = q_n[ni];
                    if (cols % mlm_qsuper((mlm_qkind)k) || rows * cols * n > 3000000) continue;
                    uint8_t *src = file_rows((mlm_qkind)k, rows, cols);
                    uint8_t *w = native_matrix((mlm_qkind)k, src, cols, 0, rows);
                    float *x = random_x(n, cols);
                    mlm_acts acts = make_acts(x, n, cols);
                    float *a = malloc((size_t)(n * rows) * 4), *b = malloc((size_t)(n * rows) * 4);
                    float *c = malloc((size_t)(n * rows) * 4);
                    int wt = MLM_W_Q8_0 + k;
                    ref->matmul[wt](a, rows, w, &acts, 0, rows);
                    char what[96];
                    snprintf(what, sizeof what, "%s rows %lld cols %lld n %lld", kt->matmul_name[wt],
                             (long long)rows, (long long)cols, (long long)n);
                    run_both(kt->matmul[wt], w, &acts, rows, b, c, what);
                    CHECKF(!memcmp(a, b, (size_t)(n * rows) * 4), "%s: differs from the reference", what);
                    if (rows > 17) { /* rows [5, 17 + 5) as their own matrix */
                        uint8_t *sub = native_matrix((mlm_qkind)k, src, cols, 5, 22);
                        kt->matmul[wt](c, 17, sub, &acts, 0, 17);
                        int same = 1;
                        for (int64_t t = 0; t < n; t++) same &= !memcmp(c + t * 17, a + t * rows + 5, 17 * 4);
                        CHECKF(same, "%s: rows [5, 22) as their own matrix differ", what);
                        free(sub);
                    }
                    free(src), free(w), free(x), free(a), free(b), free(c);
                    free_acts(&acts);
                }
}

TEST(native_ref_is_invariant) { check_native_level(mlm_kernels_get("ref", NULL)); }
LEVEL_TEST(check_native_level, avx2)
LEVEL_TEST(check_native_level, avxvnni)
LEVEL_TEST(check_native_level, avx512)

// ---- activation quantization ----

/* The level's quantizer gives mlm_q8_quantize's bits: random rows with zeros, tiny values,
 * infinities and NaNs, every tail length. */
static void check_quantize_level(const mlm_kernels *kt) {
    for (int64_t cols = 1; cols <= 300; cols += cols < 70 ? 1 : 37) {
        int64_t pc = mlm_q8_cols(cols);
        float *x = malloc((size_t)cols * 4);
        int8_t *qa = malloc((size_t)pc), *qb = malloc((size_t)pc);
        uint8_t *ua = malloc((size_t)pc), *ub = malloc((size_t)pc);
        float *da = malloc((size_t)pc / 32 * 4), *db = malloc((size_t)pc / 32 * 4);
        for (int rep = 0; rep < 8; rep++) {
            for (int64_t k = 0; k < cols; k++) {
                float v = frand() * (float)ldexp(1.0, (int)(k % 9) - 4);
                if (rep == 1 && k % 7 == 0) v = 0;
                if (rep == 2 && k % 11 == 3) v = 1e-42f;
                if (rep == 3 && k == cols / 2) v = INFINITY;
                if (rep == 4 && k == cols / 3) v = NAN;
                if (rep == 5) v = 0;
                if (rep == 6) v = (float)(k % 5) - 2.0f; /* ties at .5 after scaling */
                x[k] = v;
            }
            mlm_q8_quantize(x, 1, cols, qa, ua, da);
            kt->quantize(x, cols, qb, ub, db);
            CHECKF(!memcmp(qa, qb, (size_t)pc) && !memcmp(ua, ub, (size_t)pc) &&
                       !memcmp(da, db, (size_t)pc / 32 * 4),
                   "%s quantize cols %lld rep %d differs from mlm_q8_quantize", kt->name,
                   (long long)cols, rep);
        }
        free(x), free(qa), free(qb), free(ua), free(ub), free(da), free(db);
    }
}
LEVEL_TEST(check_quantize_level, avx2)
LEVEL_TEST(check_quantize_level, avx512)

int main(void) {
    RUN(check_quantize_level_avx2);
    RUN(check_quantize_level_avx512);
    RUN(bfp_ref_matches_formats);
    RUN(bfp_ref_is_invariant);
    RUN(check_bfp_level_avx2);
    RUN(check_bfp_level_avxvnni);
    RUN(check_bfp_level_avx512);
    RUN(check_bfp_level_amx);
    RUN(float_ref_is_invariant);
    RUN(check_float_level_avx2);
    RUN(check_float_level_avx512);
    RUN(check_bf16_denormals_avx512);
    RUN(native_ref_matches_file_values);
    RUN(native_ref_is_invariant);
    RUN(check_native_level_avx2);
    RUN(check_native_level_avxvnni);
    RUN(check_native_level_avx512);
    RUN(shards_ref);
    RUN(check_shards_level_avx2);
    RUN(check_shards_level_avxvnni);
    RUN(check_shards_level_avx512);
    RUN(check_shards_level_amx);
    return HARNESS_END();
}
