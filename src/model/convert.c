/* model/convert.c: conversion of bound f32/bf16 weights to the profile's types (BFP rows in
 * the kernels' layout), used by the weight cache and by the in-memory path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"
#include "tensor/bfp.h"
#include "tensor/dtype.h"

typedef struct convert_job {
    const mlm_weight *src;
    mlm_wtype to;
    int64_t r0, r1;
    void *dst;
    float *rows; /* one row of scratch per thread */
} convert_job;

/* Task I: rows r0 + 16i .. + 16 (a BFP panel). */
static void convert_task(void *ctx, int64_t i, int thread) {
    const convert_job *j = ctx;
    int64_t cols = j->src->cols, out_bytes = mlm_wtype_row_bytes(j->to, cols);
    float *row = j->rows + (int64_t)thread * cols;
    int64_t a = j->r0 + 16 * i, b = a + 16 < j->r1 ? a + 16 : j->r1;
    for (int64_t r = a; r < b; r++) {
        if (j->src->type == MLM_W_F32) {
            memcpy(row, (const float *)j->src->data + r * cols, (size_t)cols * 4);
        } else {
            const uint16_t *h = (const uint16_t *)j->src->data + r * cols;
            for (int64_t k = 0; k < cols; k++) row[k] = mlm_bf16_to_f32(h[k]);
        }
        void *o = (char *)j->dst + (r - j->r0) * out_bytes;
        switch (j->to) {
        case MLM_W_F32: memcpy(o, row, (size_t)cols * 4); break;
        case MLM_W_BF16:
            for (int64_t k = 0; k < cols; k++) ((uint16_t *)o)[k] = mlm_f32_to_bf16(row[k]);
            break;
        case MLM_W_BFP8: mlm_bfp_encode_matrix_row(row, cols, 8, r - j->r0, j->dst); break;
        default: mlm_bfp_encode_matrix_row(row, cols, 4, r - j->r0, j->dst);
        }
    }
}

mlm_status mlm_weight_convert_rows(const mlm_weight *src, mlm_wtype to, int64_t r0, int64_t r1,
                                   void *dst, mlm_pool *pool, mlm_error *err) {
    int64_t cols = src->cols;
    int bfp = to == MLM_W_BFP8 || to == MLM_W_BFP4;
    if (bfp && (r1 - r0) % MLM_BFP_ROWS) /* the padding rows of the last panel are zeros */
        memset(dst, 0, (size_t)mlm_wtype_bytes(to, r1 - r0, cols));
    convert_job j = {src, to, r0, r1, dst, malloc((size_t)(mlm_pool_threads(pool) * cols) * sizeof(float))};
    if (!j.rows)
        return mlm_error_set(err, MLM_ERR_NOMEM, "model: out of memory converting weights");
    mlm_pool_run(pool, (r1 - r0 + 15) / 16, convert_task, &j);
    free(j.rows);
    return MLM_OK;
}

const void *mlm_weight_row(const mlm_weight *w, int64_t r, void *tmp) {
    size_t es = w->type == MLM_W_BF16 ? 2 : 4;
    int32_t n = mlm_weight_chunks(w);
    if (n == 1) return (const char *)w->data + (size_t)(r * w->cols) * es;
    int64_t b = r / MLM_CHUNK_ROWS, i = r % MLM_CHUNK_ROWS;
    for (int32_t c = 0; c < n; c++) {
        mlm_weight k = mlm_weight_part(w, b, c);
        memcpy((char *)tmp + (size_t)(c * k.cols) * es, (const char *)k.data + (size_t)(i * k.cols) * es,
               (size_t)k.cols * es);
    }
    return tmp;
}

mlm_status mlm_weight_convert(const mlm_weight *src, mlm_wtype to, void *dst, mlm_pool *pool,
                              mlm_error *err) {
    int32_t n = mlm_weight_chunks(src);
    if (n == 1) return mlm_weight_convert_rows(src, to, 0, src->rows, dst, pool, err);
    mlm_status st = MLM_OK;
    for (int64_t b = 0; b < mlm_chunk_blocks(src->rows) && !st; b++)
        for (int32_t c = 0; c < n && !st; c++) {
            mlm_weight part = mlm_weight_part(src, b, c);
            int64_t at = mlm_chunked_offset(to, src->rows, src->cols, n, b, c);
            st = mlm_weight_convert_rows(&part, to, 0, part.rows, (char *)dst + at, pool, err);
        }
    return st;
}

mlm_status mlm_model_convert(mlm_model *m, const mlm_model_params *p, mlm_error *err) {
    (void)p;
    mlm_weight_ref *refs = malloc((size_t)mlm_model_n_weights(m) * sizeof *refs);
    if (!refs) return mlm_error_set(err, MLM_ERR_NOMEM, "model: out of memory");
    int n = mlm_model_weights(m, refs);
    mlm_status st = MLM_OK;
    for (int i = 0; i < n && !st; i++) {
        mlm_weight *w = refs[i].w;
        if (w->type == refs[i].want) continue;
        int64_t bytes = mlm_chunked_bytes(refs[i].want, w->rows, w->cols, w->n_chunks);
        void *buf = malloc(bytes ? (size_t)bytes : 1);
        if (!buf) {
            st = mlm_error_set(err, MLM_ERR_NOMEM, "model: out of memory converting '%s'",
                               refs[i].name);
            break;
        }
        if ((st = mlm_weight_convert(w, refs[i].want, buf, m->load_pool, err))) {
            free(buf);
            break;
        }
        if ((st = mlm_model_own(m, buf, (size_t)bytes, err))) break; /* it freed buf */
        w->data = buf;
        w->type = refs[i].want;
    }
    free(refs);
    return st;
}
