/* tokenizer/merges.c: the (left, right) -> (rank, merged id) table (see merges.h). */
#include "tokenizer/merges.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

mlm_status mlm_merges_init(mlm_merges *m, int64_t n_max, mlm_error *err) {
    memset(m, 0, sizeof *m);
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)(n_max > 0 ? n_max : 1))
        cap <<= 1;
    if (cap > ((uint64_t)1 << 31))
        return mlm_error_set(err, MLM_ERR_FORMAT, "merges: %lld merges exceed the limit",
                             (long long)n_max);
    m->slots = malloc((size_t)cap * sizeof *m->slots);
    if (!m->slots)
        return mlm_error_set(err, MLM_ERR_NOMEM, "merges: out of memory for %lld merges",
                             (long long)n_max);
    for (uint64_t i = 0; i < cap; i++)
        m->slots[i].key = MLM_MERGE_EMPTY;
    m->mask = (uint32_t)(cap - 1);
    m->unk_id = -1;
    return MLM_OK;
}

void mlm_merges_deinit(mlm_merges *m) {
    if (!m) return;
    free(m->slots);
    free(m->bytes2);
    memset(m, 0, sizeof *m);
}

void mlm_merges_put(mlm_merges *m, int32_t left, int32_t right, int32_t rank, int32_t id) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint32_t i = mlm_merges_slot(m, key);
    while (m->slots[i].key != MLM_MERGE_EMPTY && m->slots[i].key != key)
        i = (i + 1) & m->mask;
    if (m->slots[i].key == MLM_MERGE_EMPTY) m->n++;
    m->slots[i].key = key;
    m->slots[i].rank = rank;
    m->slots[i].id = id;
}

mlm_status mlm_merges_index_bytes(mlm_merges *m, const int32_t byte_id[256], mlm_error *err) {
    free(m->bytes2);
    m->bytes2 = malloc(256 * 256 * sizeof *m->bytes2);
    if (!m->bytes2) return mlm_error_set(err, MLM_ERR_NOMEM, "merges: out of memory");
    for (int a = 0; a < 256; a++)
        for (int b = 0; b < 256; b++) {
            mlm_merge_to *t = &m->bytes2[a << 8 | b];
            t->id = -1;
            t->rank = mlm_merges_get(m, byte_id[a], byte_id[b], &t->id);
        }
    return MLM_OK;
}
