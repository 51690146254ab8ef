/* bench/matmul.c: the matmul kernels alone: decode (1 token, weight bytes/s) and prefill
 * (many tokens, GFLOP/s) on a 8192 x 2048 weight, for every kernel table this CPU runs.
 * Prints figures; never fails on speed. Threads: OpenMP over row blocks, as the model does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void run(const mlm_kernels *k, int wt, const void *w, const float *x, float *out,
                int64_t rows, int64_t cols, int64_t n, double *best) {
    *best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t = now();
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r += 64) k->matmul[wt](out, rows, w, x, n, cols, r, r + 64);
        t = now() - t;
        if (t < *best) *best = t;
    }
}

int main(void) {
    const int64_t rows = 8192, cols = 2048, n_pre = 96;
    void *w = malloc((size_t)(rows * cols) * 4);
    float *x = malloc((size_t)(n_pre * cols) * 4), *out = malloc((size_t)(n_pre * rows) * 4);
    for (int64_t i = 0; i < rows * cols; i++) ((float *)w)[i] = (float)((i % 13) - 6) * 0.01f;
    for (int64_t i = 0; i < n_pre * cols; i++) x[i] = (float)((i % 7) - 3) * 0.1f;
    const char *names[] = {"ref", "avx2", "avx512"};
    printf("bench/matmul: %lld x %lld weights\n", (long long)rows, (long long)cols);
    printf("kernels  weights  decode GB/s  prefill(%lld) GFLOP/s\n", (long long)n_pre);
    for (int ki = 0; ki < 3; ki++) {
        const mlm_kernels *k = mlm_kernels_get(names[ki]);
        if (!k) continue;
        for (int wt = 0; wt < MLM_W_COUNT; wt++) {
            double t1, tp;
            size_t es = wt == MLM_W_BF16 ? 2 : 4;
            run(k, wt, w, x, out, rows, cols, 1, &t1);
            if (ki == 0) tp = 0;
            else run(k, wt, w, x, out, rows, cols, n_pre, &tp);
            printf("%-8s %-7s  %11.2f  %10.1f\n", names[ki], wt == MLM_W_BF16 ? "bf16" : "f32",
                   (double)(rows * cols) * (double)es / t1 / 1e9,
                   tp > 0 ? 2.0 * (double)(rows * cols * n_pre) / tp / 1e9 : 0);
        }
    }
    free(w), free(x), free(out);
    return 0;
}
