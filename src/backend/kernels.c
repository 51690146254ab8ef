/* backend/kernels.c: picks the kernel table from CPU features, once. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/cpu.h"
#include "tensor/bfp.h"

static const mlm_kernels table_ref = {
    "ref", {[MLM_W_F32] = mlm_matmul_f32_ref, [MLM_W_BF16] = mlm_matmul_bf16_ref},
    {[MLM_W_BFP8] = mlm_matmul_bfp8_q8_ref, [MLM_W_BFP4] = mlm_matmul_bfp4_q8_ref},
    mlm_attention_ref};
static const mlm_kernels table_avx2 = {
    "avx2", {[MLM_W_F32] = mlm_matmul_f32_avx2, [MLM_W_BF16] = mlm_matmul_bf16_avx2},
    {[MLM_W_BFP8] = mlm_matmul_bfp8_q8_avx2, [MLM_W_BFP4] = mlm_matmul_bfp4_q8_avx2},
    mlm_attention_avx2};
static const mlm_kernels table_avx512 = {
    "avx512", {[MLM_W_F32] = mlm_matmul_f32_avx512, [MLM_W_BF16] = mlm_matmul_bf16_avx512},
    {[MLM_W_BFP8] = mlm_matmul_bfp8_q8_avx2, [MLM_W_BFP4] = mlm_matmul_bfp4_q8_avx2},
    mlm_attention_avx2};

const mlm_kernels *mlm_kernels_get(const char *name) {
    mlm_cpu_flags f = mlm_cpu_detect();
    if (!strcmp(name, "ref")) return &table_ref;
    if (!strcmp(name, "avx2")) return f.avx2 && f.fma ? &table_avx2 : NULL;
    if (!strcmp(name, "avx512")) return f.avx512f && f.avx512bw && f.avx512vl ? &table_avx512 : NULL;
    return NULL;
}

static const mlm_kernels *best;
static pthread_once_t best_once = PTHREAD_ONCE_INIT;

static void pick_best(void) {
    const char *forced = getenv("MESHLM_KERNELS");
    if (forced && mlm_kernels_get(forced)) {
        best = mlm_kernels_get(forced);
        return;
    }
    /* The AVX-512 kernels have not yet run on a machine with AVX-512 (the development and CI
     * machines expose AVX2 only), so they are opt-in (MESHLM_KERNELS=avx512) until their
     * tests have passed on such a CPU. */
    best = mlm_kernels_get("avx2");
    if (!best) best = &table_ref;
}

const mlm_kernels *mlm_kernels_best(void) {
    pthread_once(&best_once, pick_best);
    return best;
}

const char *mlm_wtype_name(mlm_wtype t) {
    static const char *names[] = {"f32", "bf16", "bfp8", "bfp4"};
    return t >= 0 && t < MLM_W_COUNT ? names[t] : "?";
}

int64_t mlm_wtype_bytes(mlm_wtype t, int64_t rows, int64_t cols) {
    switch (t) {
    case MLM_W_F32: return rows * cols * 4;
    case MLM_W_BF16: return rows * cols * 2;
    case MLM_W_BFP8: return mlm_bfp_matrix_bytes(rows, cols, 8);
    default: return mlm_bfp_matrix_bytes(rows, cols, 4);
    }
}

int64_t mlm_wtype_row_bytes(mlm_wtype t, int64_t cols) {
    switch (t) {
    case MLM_W_F32: return cols * 4;
    case MLM_W_BF16: return cols * 2;
    case MLM_W_BFP8: return mlm_bfp_row_bytes(cols, 8);
    default: return mlm_bfp_row_bytes(cols, 4);
    }
}
