/* tensor/weight.h: a weight matrix as the kernels see it: a view (type, shape, data) into a
 * mapping or a buffer someone else owns, and the K-chunk layout of row-parallel products. */
#ifndef MESHLM_TENSOR_WEIGHT_H
#define MESHLM_TENSOR_WEIGHT_H

#include <stdint.h>

#include "tensor/wtype.h"

/* A weight matrix in compute layout: row-major (rows = out features, cols = in features);
 * BFP types hold rows in tensor/bfp.h's kernel layout. A row-parallel product (wo, w2) is
 * stored in K chunks: its columns cut in N_CHUNKS equal parts (one per KV head of the whole
 * model, so every legal TP holds whole chunks). Its product is the sum, in chunk order, of
 * each chunk's product computed from zero: one process and every mesh add the same partials
 * in the same order (forward.c). Such a weight is stored in blocks of MLM_CHUNK_ROWS rows
 * (the forward pass's row tasks), each block holding its N_CHUNKS chunk matrices (block rows,
 * cols / n_chunks) in TYPE's layout one after another: a task reads one contiguous stretch.
 * With one chunk this is the plain layout. */
#define MLM_CHUNK_ROWS 64

typedef struct mlm_weight {
    mlm_wtype type;
    int64_t rows, cols;
    int32_t n_chunks; /* 0 or 1: one matrix */
    const void *data; /* borrowed from the checkpoint or cache mapping, or model->owned */
} mlm_weight;

/* W's chunk count (1 for a plain matrix). */
static inline int32_t mlm_weight_chunks(const mlm_weight *w) {
    return w->n_chunks > 1 ? w->n_chunks : 1;
}

/* Blocks of MLM_CHUNK_ROWS rows of a matrix of ROWS rows (the last one may be shorter). */
static inline int64_t mlm_chunk_blocks(int64_t rows) {
    return (rows + MLM_CHUNK_ROWS - 1) / MLM_CHUNK_ROWS;
}

/* Byte offset of block B, chunk C of a (ROWS, COLS) matrix of type T in CHUNKS K chunks. */
static inline int64_t mlm_chunked_offset(mlm_wtype t, int64_t rows, int64_t cols, int32_t chunks,
                                         int64_t b, int32_t c) {
    int64_t kc = cols / chunks, r0 = b * MLM_CHUNK_ROWS;
    int64_t br = rows - r0 < MLM_CHUNK_ROWS ? rows - r0 : MLM_CHUNK_ROWS;
    return b * chunks * mlm_wtype_bytes(t, MLM_CHUNK_ROWS, kc) + c * mlm_wtype_bytes(t, br, kc);
}

/* Bytes of a (ROWS, COLS) matrix of type T stored in CHUNKS K chunks. */
static inline int64_t mlm_chunked_bytes(mlm_wtype t, int64_t rows, int64_t cols, int32_t chunks) {
    if (chunks <= 1) return mlm_wtype_bytes(t, rows, cols);
    int64_t nb = mlm_chunk_blocks(rows);
    return nb ? mlm_chunked_offset(t, rows, cols, chunks, nb - 1, chunks) : 0;
}

/* Bytes of W's data. */
static inline int64_t mlm_weight_bytes(const mlm_weight *w) {
    return mlm_chunked_bytes(w->type, w->rows, w->cols, w->n_chunks);
}

/* Block B, chunk C of W as a plain (block rows, cols / n_chunks) matrix: a view into W's
 * data. Of a one-chunk W: its rows [64 B, 64 B + 64). */
static inline mlm_weight mlm_weight_part(const mlm_weight *w, int64_t b, int32_t c) {
    int32_t n = mlm_weight_chunks(w);
    int64_t r0 = b * MLM_CHUNK_ROWS;
    return (mlm_weight){
        .type = w->type,
        .rows = w->rows - r0 < MLM_CHUNK_ROWS ? w->rows - r0 : MLM_CHUNK_ROWS,
        .cols = w->cols / n,
        .n_chunks = 1,
        .data = (const char *)w->data + mlm_chunked_offset(w->type, w->rows, w->cols, n, b, c)};
}

#endif
