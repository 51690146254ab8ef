/* tokenizer/merges.h: a byte-level BPE merges list as a hash table from the pair of token
 * ids (left, right) to (merge rank, merged id), Hugging Face's MergeMap. The rank is the
 * position in the merges list (lower merges first). Open addressing, linear probing, at
 * most half full; owned by the tokenizer and read-only after loading. The merges of two
 * single-byte tokens, which every piece starts with, are also kept in a direct 256 x 256
 * table (512 KiB, cache-resident where the hash table is not). */
#ifndef MESHLM_TOKENIZER_MERGES_H
#define MESHLM_TOKENIZER_MERGES_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

typedef struct mlm_merge_slot {
    uint64_t key; /* left << 32 | right; MLM_MERGE_EMPTY when free */
    int32_t rank;
    int32_t id;
} mlm_merge_slot;

#define MLM_MERGE_EMPTY UINT64_MAX

/* A merge result: rank -1 when the pair does not merge. */
typedef struct mlm_merge_to {
    int32_t rank;
    int32_t id;
} mlm_merge_to;

typedef struct mlm_merges {
    mlm_merge_slot *slots; /* owned: (mask + 1) */
    uint32_t mask;
    int32_t n; /* distinct pairs */
    /* A byte that is no token (see mlm_vocab.byte_rank) never merges; it is dropped from
     * the output, or with UNK_ID >= 0 (Hugging Face's unk_token) emitted as that id, a run
     * of them as one when FUSE_UNK (tokenizers' fuse_unk). No merge involves UNK_ID. */
    int32_t unk_id;
    int fuse_unk;
    mlm_merge_to *bytes2; /* owned: (256 * 256) merges of byte pairs, by (left << 8 | right)
                             bytes; NULL until mlm_merges_index_bytes */
} mlm_merges;

/* Sizes the table for up to N_MAX pairs (UNK_ID -1, FUSE_UNK 0). NOMEM. */
mlm_status mlm_merges_init(mlm_merges *m, int64_t n_max, mlm_error *err);
void mlm_merges_deinit(mlm_merges *m);

/* Sets pair (LEFT, RIGHT) -> (RANK, ID); a pair already present is overwritten (Hugging
 * Face builds its map the same way, so a repeated merge keeps its last rank). Ids must be
 * non-negative; at most the N_MAX given to init distinct pairs. */
void mlm_merges_put(mlm_merges *m, int32_t left, int32_t right, int32_t rank, int32_t id);

/* Fills the byte-pair table once all merges are in; BYTE_ID[b] is the id of byte b. NOMEM. */
mlm_status mlm_merges_index_bytes(mlm_merges *m, const int32_t byte_id[256], mlm_error *err);

static inline uint32_t mlm_merges_slot(const mlm_merges *m, uint64_t key) {
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;
}

/* The rank of merging LEFT and RIGHT (and the merged id in *ID), or -1 when no merge
 * (always for a negative id: a byte that is no token). */
static inline int32_t mlm_merges_get(const mlm_merges *m, int32_t left, int32_t right,
                                     int32_t *id) {
    if ((left | right) < 0) return -1;
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint32_t i = mlm_merges_slot(m, key);; i = (i + 1) & m->mask) {
        const mlm_merge_slot *s = &m->slots[i];
        if (s->key == key) {
            *id = s->id;
            return s->rank;
        }
        if (s->key == MLM_MERGE_EMPTY) return -1;
    }
}

#endif
