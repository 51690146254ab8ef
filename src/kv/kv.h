/* kv/kv.h: the paged KV cache: per layer a pool of max_num_blocks blocks of block_size
 * entries for K and for V, a free list, and a page table per sequence. A sequence holds
 * entries for positions start .. start + len - 1; entry i lives in block blocks[i / bs].
 * Blocks are reference counted: a full block may be shared by several sequences (and held by
 * the scheduler's prefix cache); it returns to the free list when its count drops to 0. Only
 * a sequence's own last, partly written block is ever written. */
#ifndef MESHLM_KV_KV_H
#define MESHLM_KV_KV_H

#include "backend/backend.h"
#include "meshlm.h"

typedef struct mlm_kv_seq {
    int32_t start;    /* first position */
    int32_t len;      /* entries stored */
    int32_t n_blocks; /* pages held */
    int32_t *blocks;  /* page table (owned, max_blocks_per_seq) */
} mlm_kv_seq;

typedef struct mlm_kv {
    int32_t n_layer, block_size, max_num_blocks, max_seqs, max_blocks_per_seq;
    mlm_paged_kv *layers; /* owned (n_layer); their pools point into .pool */
    void *pool;           /* owned: K and V of every layer */
    size_t pool_bytes;
    int32_t *free_blocks; /* owned stack of free block ids */
    int32_t n_free;
    int32_t *refs;        /* owned (max_num_blocks): holders of each block, 0 = free */
    mlm_kv_seq *seqs;     /* owned (max_seqs) */
} mlm_kv;

/* Bytes of the K and V pools of N_LAYER layers: MAX_NUM_BLOCKS blocks of BLOCK_SIZE entries
 * of ROW values of TYPE (what mlm_kv_init allocates, and the memory plan counts). */
int64_t mlm_kv_pool_bytes(int32_t n_layer, int64_t row, mlm_wtype type, int32_t block_size,
                          int32_t max_num_blocks);

/* Allocates the pools: ROW = n_kv_head * head_dim values per entry of TYPE (MLM_W_F32,
 * MLM_W_BF16 or MLM_W_BFP8). */
mlm_status mlm_kv_init(mlm_kv *kv, int32_t n_layer, int64_t row, mlm_wtype type, int32_t block_size,
                       int32_t max_num_blocks, int32_t max_seqs, int32_t max_seq_len,
                       mlm_error *err);
void mlm_kv_deinit(mlm_kv *kv);

/* Drops SEQ's hold on its pages (those no one else holds return to the free list) and sets
 * its start position. */
void mlm_kv_reset(mlm_kv *kv, int32_t seq, int32_t start);
/* Gives an empty SEQ the pages BLOCKS[0..N) (all free, distinct). */
mlm_status mlm_kv_set_pages(mlm_kv *kv, int32_t seq, const int32_t *blocks, int32_t n,
                            mlm_error *err);
/* Appends BLOCK, partly filled (its first N_VALID entries, 0 < N_VALID < block_size), to
 * sequence SEQ (whose blocks are all full), taking over a reference the caller holds: the
 * sequence then writes on from entry N_VALID (the prefix cache's tails). */
void mlm_kv_adopt(mlm_kv *kv, int32_t seq, int32_t block, int32_t n_valid);
/* Appends the full, already written, shared pages BLOCKS[0..N) (each held by someone, e.g.
 * the prefix cache, or another sequence's image) to SEQ, whose entries fill whole pages (an
 * empty SEQ, say): each gets one more holder, and SEQ holds its pages' entries. */
void mlm_kv_share(mlm_kv *kv, int32_t seq, const int32_t *blocks, int32_t n);
/* Forgets SEQ's entries from LEN on (LEN <= its length): speculative tokens that were not
 * accepted. Pages past the new length go back (a page's other holders keep it). */
void mlm_kv_truncate(mlm_kv *kv, int32_t seq, int32_t len);
/* One more / one less holder of block B (the prefix cache's hold). Unref returns the block
 * to the free list when it was the last holder. */
void mlm_kv_ref(mlm_kv *kv, int32_t b);
void mlm_kv_unref(mlm_kv *kv, int32_t b);
/* Pages needed for SEQ to hold LEN entries beyond what it holds now. */
int32_t mlm_kv_pages_needed(const mlm_kv *kv, int32_t seq, int32_t len);
/* Takes pages from the free list so that SEQ can hold LEN entries (checked beforehand with
 * mlm_kv_pages_needed against n_free). */
void mlm_kv_grow(mlm_kv *kv, int32_t seq, int32_t len);

#endif
