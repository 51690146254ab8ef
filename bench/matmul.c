/* bench/matmul.c: the matmul kernels alone: decode (1 token, weight bytes/s) and prefill
 * (96 and 512 tokens, GFLOP/s) on a 8192 x 2048 weight, for every weight type (f32, bf16,
 * BFP and the native GGUF types, whose panels hold random codes and scales) and every kernel
 * level this CPU runs, on the thread pool the model uses (chunks of 64 rows, as the forward
 * pass hands them out). Decode is measured twice: from memory (the caches evicted before each
 * run, as a model's weights are read; the native and BFP weights on huge pages where a
 * model's weight cache gets them) and from the caches (the kernel's own cost per byte).
 * MESHLM_BENCH_THREADS=1 gives one core's figures; MESHLM_BENCH_ONLY=TEXT runs only the
 * kernels whose name contains TEXT (q4_k, avx512, ...); MESHLM_BENCH_VERIFY=1 adds, per
 * kernel, 2..9 tokens from memory against one (the sizes a speculative step verifies).
 * Activations are prepared once, outside the timing. Prints figures; never fails on speed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "common/bandwidth.h"
#include "common/clock.h"
#include "core/pool.h"
#include "tensor/bfp.h"
#include "tensor/dtype.h"
#include "tensor/q8.h"
#include "tensor/qpanel.h"

typedef struct job {
    const mlm_kernels *k;
    mlm_wtype wt;
    const void *w;
    mlm_acts x;
    float *out;
    int64_t rows;
} job;

static void task(void *ctx, int64_t i, int thread) {
    (void)thread;
    const job *j = ctx;
    int64_t r1 = (i + 1) * 64 < j->rows ? (i + 1) * 64 : j->rows;
    j->k->matmul[j->wt](j->out, j->rows, j->w, &j->x, i * 64, r1);
}

/* A (ROWS, COLS) matrix of native kind K in the kernels' layout, random codes, scales about
 * 0.01 and mins about 0.001 (f16), random sub-scale bytes. */
static uint8_t *native_weights(mlm_qkind k, int64_t rows, int64_t cols) {
    mlm_qgeom g = mlm_qpanel_geom(k, cols);
    uint8_t *w = bench_weights_alloc((size_t)mlm_qpanel_bytes(k, rows, cols));
    uint32_t r32 = 12345;
    for (int64_t r = 0; r < rows && w; r++)
        for (int64_t b = 0; b < cols / 32; b++) {
            mlm_qraw raw;
            for (int i = 0; i < 32; i++) {
                r32 = r32 * 1664525u + 1013904223u;
                raw.u[i] = (uint8_t)((r32 >> 24) & ((1u << mlm_qbits(k)) - 1));
            }
            raw.d = 0x2000 + (uint16_t)(r32 >> 28);  /* about 0.008 */
            raw.m = mlm_qhas_min(k) ? 0x1400 : 0;   /* about 0.001 */
            raw.sub[0] = (uint8_t)(r32 >> 8) & 0x3f, raw.sub[1] = (uint8_t)(r32 >> 16) & 0x3f;
            mlm_qpanel_put(k, &g, r, b, &raw, w);
        }
    return w;
}

/* Evicts the caches: reads 256 MB, more than any CPU's last-level cache here; returns a sum
 * so the reads stay. */
static uint64_t evict(void) {
    static uint64_t *big;
    const size_t n = (256u << 20) / 8;
    if (!big) {
        big = malloc(n * 8);
        if (!big) return 0;
        for (size_t i = 0; i < n; i++) big[i] = i;
    }
    uint64_t s = 0;
    for (size_t i = 0; i < n; i += 8) s += big[i];
    return s;
}

/* The best of REPS runs of N tokens; COLD: the weights read from memory (caches evicted before
 * each run), else from the caches (the first run warms them). */
static double run(mlm_pool *pool, job *j, int64_t n, int reps, int cold) {
    double best = 1e30;
    j->x.n = n;
    for (int rep = 0; rep < reps; rep++) {
        if (cold && evict() == 1) fputc(' ', stderr); /* never: the sum is larger */
        double t = bench_now();
        mlm_pool_run(pool, (j->rows + 63) / 64, task, j);
        t = bench_now() - t;
        if (t < best) best = t;
    }
    return best;
}

int main(void) {
    const int64_t rows = 8192, cols = 2048, n_max = 512, pc = mlm_q8_cols(cols);
    int threads = getenv("MESHLM_BENCH_THREADS") ? atoi(getenv("MESHLM_BENCH_THREADS")) : mlm_cpu_count();
    mlm_pool *pool = NULL;
    mlm_error err;
    if (mlm_pool_create(threads, &pool, &err)) {
        fprintf(stderr, "bench/matmul: %s\n", err.msg);
        return 1;
    }
    float *wf = malloc((size_t)(rows * cols) * 4);
    uint16_t *wh = malloc((size_t)(rows * cols) * 2);
    uint8_t *w8 = bench_weights_alloc((size_t)mlm_wtype_bytes(MLM_W_BFP8, rows, cols));
    uint8_t *w4 = bench_weights_alloc((size_t)mlm_wtype_bytes(MLM_W_BFP4, rows, cols));
    float *x = malloc((size_t)(n_max * cols) * 4), *out = malloc((size_t)(n_max * rows) * 4);
    int8_t *xq = malloc((size_t)(n_max * pc));
    uint8_t *xu = malloc((size_t)(n_max * pc));
    float *xd = malloc((size_t)(n_max * pc / 32) * 4);
    float *xs = malloc((size_t)(n_max * mlm_q8_sums_len(cols)) * 4);
    uint16_t *xh = calloc((size_t)(n_max * mlm_bf16_cols(cols)), 2);
    for (int64_t i = 0; i < rows * cols; i++) {
        wf[i] = (float)((i % 13) - 6) * 0.01f;
        wh[i] = mlm_f32_to_bf16(wf[i]);
    }
    for (int64_t r = 0; r < rows; r++) {
        mlm_bfp_encode_matrix_row(wf + r * cols, cols, 8, r, w8);
        mlm_bfp_encode_matrix_row(wf + r * cols, cols, 4, r, w4);
    }
    for (int64_t i = 0; i < n_max * cols; i++) x[i] = (float)((i % 7) - 3) * 0.1f;
    mlm_q8_quantize(x, n_max, cols, xq, xu, xd);
    mlm_q8_sums(xq, n_max, cols, xs);
    const void *ws_all[MLM_W_COUNT] = {0};
    for (int wt = MLM_W_Q8_0; wt < MLM_W_COUNT; wt++)
        ws_all[wt] = native_weights((mlm_qkind)mlm_wtype_qkind((mlm_wtype)wt), rows, cols);
    const char *only = getenv("MESHLM_BENCH_ONLY");
    const int verify = getenv("MESHLM_BENCH_VERIFY") && atoi(getenv("MESHLM_BENCH_VERIFY"));
    for (int64_t t = 0; t < n_max; t++)
        for (int64_t k = 0; k < cols; k++) xh[t * mlm_bf16_cols(cols) + k] = mlm_f32_to_bf16(x[t * cols + k]);
    ws_all[MLM_W_F32] = wf, ws_all[MLM_W_BF16] = wh, ws_all[MLM_W_BFP8] = w8,
    ws_all[MLM_W_BFP4] = w4;
    printf("bench/matmul: %lld x %lld weights, %d threads\n", (long long)rows, (long long)cols, threads);
    printf("level    kernel               decode GB/s: memory  cached  prefill 96 GFLOP/s  prefill 512 GFLOP/s\n");
    for (int li = 0; mlm_kernel_levels[li]; li++) {
        const mlm_kernels *k = mlm_kernels_get(mlm_kernel_levels[li], NULL);
        if (!k) continue;
        int ref = !strcmp(k->name, "ref");
        for (int wt = 0; wt < MLM_W_COUNT; wt++) {
            if (!k->matmul[wt] || !ws_all[wt]) continue;
            if (only && !strstr(k->matmul_name[wt], only)) continue;
            job j = {k, (mlm_wtype)wt, ws_all[wt],
                     {.cols = cols, .x = x, .h = xh, .q = xq, .u = xu, .d = xd, .s = xs}, out, rows};
            double tm = run(pool, &j, 1, ref ? 1 : 3, 1), t1 = run(pool, &j, 1, ref ? 1 : 5, 0);
            double t96 = ref ? 0 : run(pool, &j, 96, 3, 0), t512 = ref ? 0 : run(pool, &j, 512, 2, 0);
            const double wb = (double)mlm_wtype_bytes((mlm_wtype)wt, rows, cols);
            printf("%-8s %-20s %19.2f  %6.2f  %18.1f  %19.1f\n", k->name, k->matmul_name[wt],
                   wb / tm / 1e9, wb / t1 / 1e9,
                   t96 > 0 ? 2.0 * (double)(rows * cols * 96) / t96 / 1e9 : 0,
                   t512 > 0 ? 2.0 * (double)(rows * cols * 512) / t512 / 1e9 : 0);
            if (verify && !ref) { /* speculative verification's sizes, best of 12 each */
                double tm1 = run(pool, &j, 1, 12, 1), t1c = run(pool, &j, 1, 12, 0);
                printf("         %-20s verify n tokens from memory, x one token:", "");
                for (int n = 2; n <= 9; n++) printf(" %d: %.2f", n, run(pool, &j, n, 12, 1) / tm1);
                printf("\n         %-20s verify n tokens from the caches, x one token:", "");
                for (int n = 2; n <= 9; n++) printf(" %d: %.2f", n, run(pool, &j, n, 12, 0) / t1c);
                printf("\n");
            }
        }
    }
    mlm_pool_free(pool);
    free(wf), free(wh), free(w8), free(w4), free(x), free(out), free(xq), free(xu), free(xd), free(xh);
    free(xs);
    for (int wt = MLM_W_Q8_0; wt < MLM_W_COUNT; wt++) free((void *)ws_all[wt]);
    return 0;
}
