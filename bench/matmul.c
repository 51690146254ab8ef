/* bench/matmul.c: the matmul kernels alone: decode (1 token, weight bytes/s) and prefill
 * (many tokens, GFLOP/s) on a 8192 x 2048 weight, for every weight type and kernel table this
 * CPU runs. Prints figures; never fails on speed. Threads: OpenMP over row blocks, as the
 * model does; MESHLM_BENCH_THREADS=1 gives one core's figures. BFP timings include nothing but
 * the product (activations are quantized once, outside the timing). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "backend/backend.h"
#include "tensor/bfp.h"
#include "tensor/q8.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct job {
    const mlm_kernels *k;
    mlm_wtype wt;
    const void *w;
    const float *x;
    const int8_t *xq;
    const float *xd;
    float *out;
    int64_t rows, cols;
} job;

static double run(const job *j, int64_t n) {
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t = now();
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < j->rows; r += 16) {
            if (j->wt <= MLM_W_BF16)
                j->k->matmul[j->wt](j->out, j->rows, j->w, j->x, n, j->cols, r, r + 16);
            else
                j->k->matmul_q8[j->wt](j->out, j->rows, j->w, j->xq, j->xd, n, j->cols, r, r + 16);
        }
        t = now() - t;
        if (t < best) best = t;
    }
    return best;
}

int main(void) {
    const int64_t rows = 8192, cols = 2048, n_pre = 96;
#ifdef _OPENMP
    if (getenv("MESHLM_BENCH_THREADS")) omp_set_num_threads(atoi(getenv("MESHLM_BENCH_THREADS")));
#endif
    float *wf = malloc((size_t)(rows * cols) * 4);
    uint16_t *wh = malloc((size_t)(rows * cols) * 2);
    uint8_t *w8 = malloc((size_t)mlm_wtype_bytes(MLM_W_BFP8, rows, cols));
    uint8_t *w4 = malloc((size_t)mlm_wtype_bytes(MLM_W_BFP4, rows, cols));
    float *x = malloc((size_t)(n_pre * cols) * 4), *out = malloc((size_t)(n_pre * rows) * 4);
    int8_t *xq = malloc((size_t)(n_pre * mlm_q8_cols(cols)));
    float *xd = malloc((size_t)(n_pre * mlm_q8_cols(cols) / 32) * 4);
    for (int64_t i = 0; i < rows * cols; i++) {
        wf[i] = (float)((i % 13) - 6) * 0.01f;
        uint32_t u;
        memcpy(&u, &wf[i], 4);
        wh[i] = (uint16_t)(u >> 16);
    }
    for (int64_t r = 0; r < rows; r++) {
        mlm_bfp_encode_matrix_row(wf + r * cols, cols, 8, r, w8);
        mlm_bfp_encode_matrix_row(wf + r * cols, cols, 4, r, w4);
    }
    for (int64_t i = 0; i < n_pre * cols; i++) x[i] = (float)((i % 7) - 3) * 0.1f;
    mlm_q8_quantize(x, n_pre, cols, xq, xd);
    const void *ws[] = {wf, wh, w8, w4};
    const char *names[] = {"ref", "avx2", "avx512"};
    printf("bench/matmul: %lld x %lld weights\n", (long long)rows, (long long)cols);
    printf("kernels  weights  decode GB/s  prefill(%lld) GFLOP/s\n", (long long)n_pre);
    for (int ki = 0; ki < 3; ki++) {
        const mlm_kernels *k = mlm_kernels_get(names[ki]);
        if (!k) continue;
        for (int wt = 0; wt < MLM_W_COUNT; wt++) {
            job j = {k, (mlm_wtype)wt, ws[wt], x, xq, xd, out, rows, cols};
            double t1 = run(&j, 1), tp = ki == 0 ? 0 : run(&j, n_pre);
            printf("%-8s %-7s  %11.2f  %10.1f\n", names[ki], mlm_wtype_name((mlm_wtype)wt),
                   (double)mlm_wtype_bytes((mlm_wtype)wt, rows, cols) / t1 / 1e9,
                   tp > 0 ? 2.0 * (double)(rows * cols * n_pre) / tp / 1e9 : 0);
        }
    }
    free(wf), free(wh), free(w8), free(w4), free(x), free(out), free(xq), free(xd);
    return 0;
}
