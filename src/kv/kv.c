/* kv/kv.c: the paged KV pool: allocation, page tables, free list. */
#include "kv/kv.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int64_t mlm_kv_pool_bytes(int32_t n_layer, int64_t row, mlm_wtype type, int32_t block_size,
                          int32_t max_num_blocks) {
    return (int64_t)max_num_blocks * block_size * mlm_wtype_row_bytes(type, row) * 2 * n_layer;
}

mlm_status mlm_kv_init(mlm_kv *kv, int32_t n_layer, int64_t row, mlm_wtype type, int32_t block_size,
                       int32_t max_num_blocks, int32_t max_seqs, int32_t max_seq_len,
                       mlm_error *err) {
    memset(kv, 0, sizeof *kv);
    kv->n_layer = n_layer;
    kv->block_size = block_size;
    kv->max_num_blocks = max_num_blocks;
    kv->max_seqs = max_seqs;
    kv->max_blocks_per_seq = (max_seq_len + block_size - 1) / block_size;
    size_t row_bytes = (size_t)mlm_wtype_row_bytes(type, row);
    size_t per_pool = (size_t)max_num_blocks * (size_t)block_size * row_bytes;
    kv->pool_bytes = (size_t)mlm_kv_pool_bytes(n_layer, row, type, block_size, max_num_blocks);
    kv->pool = calloc(1, kv->pool_bytes ? kv->pool_bytes : 1);
    kv->layers = calloc((size_t)n_layer, sizeof *kv->layers);
    kv->free_blocks = malloc((size_t)max_num_blocks * sizeof *kv->free_blocks);
    kv->refs = calloc((size_t)max_num_blocks, sizeof *kv->refs);
    kv->seqs = calloc((size_t)max_seqs, sizeof *kv->seqs);
    if (!kv->pool || !kv->layers || !kv->free_blocks || !kv->refs || !kv->seqs) {
        mlm_kv_deinit(kv);
        return mlm_error_set(err, MLM_ERR_NOMEM,
                             "kv cache: cannot allocate %zu bytes (%d blocks of %d tokens)",
                             kv->pool_bytes, max_num_blocks, block_size);
    }
    for (int32_t l = 0; l < n_layer; l++) {
        kv->layers[l].k = (char *)kv->pool + per_pool * (size_t)(2 * l);
        kv->layers[l].v = (char *)kv->pool + per_pool * (size_t)(2 * l + 1);
        kv->layers[l].type = type;
        kv->layers[l].row_bytes = (int64_t)row_bytes;
        kv->layers[l].block_size = block_size;
        kv->layers[l].row = row;
    }
    /* Free stack popped from the end: blocks are handed out 0, 1, 2, ... */
    for (int32_t i = 0; i < max_num_blocks; i++) kv->free_blocks[i] = max_num_blocks - 1 - i;
    kv->n_free = max_num_blocks;
    for (int32_t s = 0; s < max_seqs; s++) {
        kv->seqs[s].blocks = malloc((size_t)kv->max_blocks_per_seq * sizeof(int32_t));
        if (!kv->seqs[s].blocks) {
            mlm_kv_deinit(kv);
            return mlm_error_set(err, MLM_ERR_NOMEM, "kv cache: out of memory");
        }
    }
    return MLM_OK;
}

void mlm_kv_deinit(mlm_kv *kv) {
    if (kv->seqs)
        for (int32_t s = 0; s < kv->max_seqs; s++) free(kv->seqs[s].blocks);
    free(kv->seqs);
    free(kv->refs);
    free(kv->free_blocks);
    free(kv->layers);
    free(kv->pool);
    memset(kv, 0, sizeof *kv);
}

void mlm_kv_reset(mlm_kv *kv, int32_t seq, int32_t start) {
    mlm_kv_seq *s = &kv->seqs[seq];
    for (int32_t i = s->n_blocks - 1; i >= 0; i--) mlm_kv_unref(kv, s->blocks[i]);
    s->n_blocks = 0;
    s->len = 0;
    s->start = start;
}

mlm_status mlm_kv_set_pages(mlm_kv *kv, int32_t seq, const int32_t *blocks, int32_t n,
                            mlm_error *err) {
    mlm_kv_seq *s = &kv->seqs[seq];
    if (s->n_blocks)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "kv cache: sequence %d already holds pages",
                             seq);
    if (n < 0 || n > kv->max_blocks_per_seq)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "kv cache: %d pages for one sequence (at most %d)", n,
                             kv->max_blocks_per_seq);
    for (int32_t i = 0; i < n; i++) {
        if (blocks[i] < 0 || blocks[i] >= kv->max_num_blocks || kv->refs[blocks[i]])
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "kv cache: page %d is out of range [0, %d) or in use", blocks[i],
                                 kv->max_num_blocks);
        for (int32_t j = 0; j < i; j++)
            if (blocks[j] == blocks[i])
                return mlm_error_set(err, MLM_ERR_INVALID_ARG, "kv cache: page %d given twice",
                                     blocks[i]);
    }
    /* Take them out of the free stack. */
    for (int32_t i = 0; i < n; i++) kv->refs[blocks[i]] = 1;
    int32_t w = 0;
    for (int32_t r = 0; r < kv->n_free; r++)
        if (!kv->refs[kv->free_blocks[r]]) kv->free_blocks[w++] = kv->free_blocks[r];
    kv->n_free = w;
    memcpy(s->blocks, blocks, (size_t)n * sizeof *blocks);
    s->n_blocks = n;
    return MLM_OK;
}

int32_t mlm_kv_pages_needed(const mlm_kv *kv, int32_t seq, int32_t len) {
    int32_t pages = (len + kv->block_size - 1) / kv->block_size;
    int32_t held = kv->seqs[seq].n_blocks;
    return pages > held ? pages - held : 0;
}

void mlm_kv_grow(mlm_kv *kv, int32_t seq, int32_t len) {
    mlm_kv_seq *s = &kv->seqs[seq];
    int32_t pages = (len + kv->block_size - 1) / kv->block_size;
    while (s->n_blocks < pages) {
        int32_t b = kv->free_blocks[--kv->n_free];
        kv->refs[b] = 1;
        s->blocks[s->n_blocks++] = b;
    }
}

void mlm_kv_truncate(mlm_kv *kv, int32_t seq, int32_t len) {
    mlm_kv_seq *s = &kv->seqs[seq];
    MLM_ASSERT(len >= 0 && len <= s->len);
    s->len = len;
    int32_t pages = (len + kv->block_size - 1) / kv->block_size;
    while (s->n_blocks > pages) mlm_kv_unref(kv, s->blocks[--s->n_blocks]);
}

void mlm_kv_ref(mlm_kv *kv, int32_t b) { kv->refs[b]++; }

void mlm_kv_unref(mlm_kv *kv, int32_t b) {
    if (--kv->refs[b] == 0) kv->free_blocks[kv->n_free++] = b;
}

void mlm_kv_adopt(mlm_kv *kv, int32_t seq, int32_t block, int32_t n_valid) {
    mlm_kv_seq *s = &kv->seqs[seq];
    MLM_ASSERT(s->len == s->n_blocks * kv->block_size && s->n_blocks < kv->max_blocks_per_seq &&
               n_valid > 0 && n_valid < kv->block_size);
    s->blocks[s->n_blocks++] = block;
    s->len += n_valid;
}

void mlm_kv_share(mlm_kv *kv, int32_t seq, const int32_t *blocks, int32_t n) {
    mlm_kv_seq *s = &kv->seqs[seq];
    MLM_ASSERT(s->len == s->n_blocks * kv->block_size && s->n_blocks + n <= kv->max_blocks_per_seq);
    for (int32_t i = 0; i < n; i++) {
        kv->refs[blocks[i]]++;
        s->blocks[s->n_blocks++] = blocks[i];
    }
    s->len = s->n_blocks * kv->block_size;
}
