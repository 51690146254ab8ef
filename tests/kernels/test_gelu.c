/* tests/kernels/test_gelu.c: GELU in its exact (erf) form (backend.h's mlm_gelu_*):
 *   - the scalar reference against 0.5 * x * (1 + erf(x / sqrt(2))) in double precision,
 *     within 2e-7 * max(1, |x|), over a dense grid of [-16, 16] and random values;
 *   - its limits: x for large x, zero for very negative x, NaN for NaN, the signs of zeros;
 *   - every SIMD level this CPU runs against the reference, bit for bit, on lengths 0..100
 *     (tails) and a long one, writing nothing past the end; NaN inputs give NaN (the payload
 *     of a NaN is not part of the contract);
 *   - the kernel tables: each level names its GELU and gives the reference's bits. */
#include <float.h>
#include <stdint.h>

#include "backend/backend.h"
#include "harness.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rand32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)(rand32() >> 8) / (1 << 24);
}

static float bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double gelu_double(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }

/* A value of the kinds the kernels must handle: mostly activations, some of any magnitude,
 * some special. */
static float any_value(void) {
    static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f,
                                    1e-40f, -1e-40f, FLT_MIN, -FLT_MIN, 1e30f, -1e30f, FLT_MAX,
                                    -FLT_MAX, 8.0f, -14.0f, 7.9999995f, -13.999999f};
    uint32_t r = rand32() % 16;
    if (r == 0) return special[rand32() % (sizeof special / sizeof *special)];
    if (r == 1) return bits(rand32()); /* any bit pattern: NaNs, subnormals, huge values */
    if (r < 4) return uniform(-16, 16);
    return uniform(-4, 4);
}

static int same(float a, float b) { return (isnan(a) && isnan(b)) || !memcmp(&a, &b, 4); }

/* Largest error of the reference over N values at X, as a fraction of the tolerance. */
static double worst_error(const float *x, int64_t n, double *at) {
    float *y = malloc((size_t)n * sizeof *y);
    memcpy(y, x, (size_t)n * sizeof *y);
    mlm_gelu_ref(y, n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = fabs(y[i] - gelu_double(x[i])) / (2e-7 * fmax(1.0, fabs(x[i])));
        if (!(r <= worst)) worst = r, *at = x[i];
    }
    free(y);
    return worst;
}

TEST(ref_vs_double_grid) {
    const int64_t n = 3200001; /* [-16, 16] in steps of 1e-5 */
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(-16.0 + (double)i * 1e-5);
    double at = 0, w = worst_error(x, n, &at);
    CHECKF(w <= 1.0, "grid: error %.3g x tolerance at x = %.9g", w, at);
    /* every float in [1, 1 + 2^-10) and in [0.5, 0.5 + 2^-11): where Phi's error weighs most */
    for (int64_t i = 0; i < (1 << 13); i++) x[i] = bits(0x3f800000u + (uint32_t)i);
    for (int64_t i = 0; i < (1 << 13); i++) x[(1 << 13) + i] = bits(0x3f000000u + (uint32_t)i);
    w = worst_error(x, 1 << 14, &at);
    CHECKF(w <= 1.0, "near 1 and 0.5: error %.3g x tolerance at x = %.9g", w, at);
    free(x);
}

TEST(ref_vs_double_random) {
    const int64_t n = 1000000;
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = i % 2 ? uniform(-10, 10) : uniform(-1, 1) * uniform(0, 3);
    double at = 0, w = worst_error(x, n, &at);
    CHECKF(w <= 1.0, "random: error %.3g x tolerance at x = %.9g", w, at);
    /* tiny values: gelu(x) = x / 2 to within the tolerance, with x's sign */
    for (int64_t i = 0; i < n; i++) x[i] = bits(rand32() % 0x38000000u | (rand32() & 0x80000000u));
    w = worst_error(x, n, &at);
    CHECKF(w <= 1.0, "tiny values: error %.3g x tolerance at x = %.9g", w, at);
    free(x);
}

/* The limits and the special values, for FN. */
static void check_edges(const char *name, mlm_gelu_fn fn) {
    static const float in[] = {0.0f,   -0.0f,  INFINITY, -INFINITY, NAN,   -NAN,   1e-45f,
                                -1e-45f, 1e-40f, -1e-40f, FLT_MIN,  -FLT_MIN, 1e30f, -1e30f,
                                FLT_MAX, -FLT_MAX, 6.0f,  9.0f,     100.0f, -20.0f, -100.0f};
    enum { N = sizeof in / sizeof *in };
    float y[N];
    memcpy(y, in, sizeof y);
    fn(y, N);
    CHECKF(y[0] == 0 && !signbit(y[0]), "%s: gelu(+0) = %g", name, y[0]);
    CHECKF(y[1] == 0 && signbit(y[1]), "%s: gelu(-0) = %g, want -0", name, y[1]);
    CHECKF(y[2] == INFINITY, "%s: gelu(+inf) = %g", name, y[2]);
    CHECKF(y[3] == 0, "%s: gelu(-inf) = %g", name, y[3]);
    CHECKF(isnan(y[4]) && isnan(y[5]), "%s: gelu(NaN) = %g, %g", name, y[4], y[5]);
    /* subnormals: x / 2, rounded, with x's sign */
    for (int i = 6; i < 12; i++)
        CHECKF(fabs(y[i] - in[i] / 2.0) <= 1e-45 && (y[i] == 0 || signbit(y[i]) == signbit(in[i])),
               "%s: gelu(%g) = %g", name, in[i], y[i]);
    CHECKF(y[12] == 1e30f && y[14] == FLT_MAX && y[17] == 9.0f && y[18] == 100.0f,
           "%s: large x: %g %g %g %g", name, y[12], y[14], y[17], y[18]);
    CHECKF(y[16] == 6.0f, "%s: gelu(6) = %.9g, want 6 (the exact value rounds to it)", name,
           y[16]);
    CHECKF(y[13] == 0 && y[15] == 0 && y[19] == 0 && y[20] == 0,
           "%s: very negative x: %g %g %g %g", name, y[13], y[15], y[19], y[20]);
}

TEST(ref_edges) { check_edges("ref", mlm_gelu_ref); }

/* FN against the reference, bit for bit (NaN for NaN), on every length 0..100 and a long one,
 * at an offset that is not vector-aligned; the floats past the end stay as they were. */
static void check_level(const char *name, mlm_gelu_fn fn) {
    const int64_t long_n = 100003, cap = long_n + 8;
    float *x = malloc((size_t)cap * sizeof *x), *a = malloc((size_t)cap * sizeof *a);
    float *b = malloc((size_t)cap * sizeof *b);
    int bad = 0;
    for (int64_t n = 0; n <= 101 && bad < 5; n++) {
        int64_t len = n == 101 ? long_n : n;
        for (int64_t i = 0; i < cap; i++) x[i] = any_value();
        memcpy(a, x, (size_t)cap * sizeof *a);
        memcpy(b, x, (size_t)cap * sizeof *b);
        mlm_gelu_ref(a + 1, len);
        fn(b + 1, len);
        for (int64_t i = 0; i < cap; i++) {
            if (same(a[i], b[i])) continue;
            CHECKF(0, "%s length %lld: element %lld: gelu(%a) = %a, the reference %a", name,
                   (long long)len, (long long)i - 1, x[i], b[i], a[i]);
            if (++bad >= 5) break;
        }
        CHECKF(same(b[0], x[0]) && same(b[len + 1], x[len + 1]),
               "%s length %lld: wrote outside the array", name, (long long)len);
    }
    check_edges(name, fn);
    free(x), free(a), free(b);
}

TEST(avx2_equals_ref) {
    const char *why = NULL;
    if (!mlm_kernels_get("avx2", &why)) SKIP("%s", why);
    check_level("avx2", mlm_gelu_avx2);
}

TEST(avx512_equals_ref) {
    const char *why = NULL;
    if (!mlm_kernels_get("avx512", &why)) SKIP("%s", why);
    check_level("avx512", mlm_gelu_avx512);
}

TEST(kernel_tables) {
    const char *want[][2] = {{"amx", "gelu_avx512"},  {"avx512", "gelu_avx512"},
                             {"avxvnni", "gelu_avx2"}, {"avx2", "gelu_avx2"},
                             {"ref", "gelu_ref"}};
    float x[333], a[333], b[333];
    for (int i = 0; i < 333; i++) x[i] = any_value();
    memcpy(a, x, sizeof a);
    mlm_gelu_ref(a, 333);
    int ran = 0;
    for (size_t li = 0; li < sizeof want / sizeof *want; li++) {
        const mlm_kernels *k = mlm_kernels_get(want[li][0], NULL);
        if (!k) continue;
        ran++;
        CHECKF(k->gelu && k->gelu_name && !strcmp(k->gelu_name, want[li][1]),
               "level %s: gelu '%s', want %s", want[li][0], k->gelu_name ? k->gelu_name : "(none)",
               want[li][1]);
        if (!k->gelu) continue;
        memcpy(b, x, sizeof b);
        k->gelu(b, 333);
        int ok = 1;
        for (int i = 0; i < 333; i++) ok &= same(a[i], b[i]);
        CHECKF(ok, "level %s: %s differs from the reference", want[li][0], k->gelu_name);
    }
    CHECK(ran >= 1); /* ref always */
}

int main(void) {
    RUN(ref_vs_double_grid);
    RUN(ref_vs_double_random);
    RUN(ref_edges);
    RUN(avx2_equals_ref);
    RUN(avx512_equals_ref);
    RUN(kernel_tables);
    return HARNESS_END();
}
