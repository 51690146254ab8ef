/* exec/prefix.h: the prefix cache. Full KV blocks are keyed by a chain hash of the whole token
 * prefix they end (hash of the block's tokens seeded with the previous block's key) and
 * checked against the block's own tokens and its parent's key on every lookup, so a hash
 * collision cannot hand out a wrong block. A finished sequence's last, partly filled block
 * is kept too, as a tail: keyed by its parent alone, it goes whole to the first sequence that
 * continues the same tokens (a conversation's next turn), which writes on in it. The cache holds
 * one reference on each block it knows; a block nobody else holds is evictable, least recently
 * released first. It never writes KV data: sequences fill blocks, the cache only remembers them. */
#ifndef MESHLM_EXEC_PREFIX_H
#define MESHLM_EXEC_PREFIX_H

#include <stdint.h>

#include "kv/kv.h"
#include "meshlm.h"

typedef struct mlm_prefix {
    mlm_kv *kv;          /* borrowed */
    int32_t block_size, n_blocks;
    uint8_t *cached;     /* owned (n_blocks): the block is in the cache */
    uint64_t *key;       /* owned (n_blocks): chain hash through the block */
    uint64_t *parent;    /* owned (n_blocks): the previous block's key (0 for the first) */
    int32_t *tokens;     /* owned (n_blocks, block_size): the block's tokens */
    int32_t *n_valid;    /* owned (n_blocks): its filled entries (block_size; fewer: a tail) */
    int32_t *bucket;     /* owned (n_buckets): first block of each hash chain, -1 = none */
    int32_t *chain;      /* owned (n_blocks): next block in the same bucket */
    int32_t n_buckets;   /* a power of two */
    int32_t *lru_prev, *lru_next; /* owned (n_blocks): the evictable list, oldest first */
    int32_t lru_head, lru_tail, n_evictable, n_cached;
} mlm_prefix;

mlm_status mlm_prefix_init(mlm_prefix *p, mlm_kv *kv, mlm_error *err);
void mlm_prefix_deinit(mlm_prefix *p);

/* The key of the block holding TOKENS[0..block_size) after the prefix keyed PARENT. */
uint64_t mlm_prefix_key(const mlm_prefix *p, uint64_t parent, const int32_t *tokens);
/* The cached block for KEY whose parent is PARENT and tokens TOKENS, or -1. */
int32_t mlm_prefix_find(const mlm_prefix *p, uint64_t key, uint64_t parent, const int32_t *tokens);
/* Adds full block B (held by a sequence) under KEY; the cache takes a reference. No-op when a
 * block with that key is already cached (the caller keeps its private copy). */
void mlm_prefix_insert(mlm_prefix *p, int32_t b, uint64_t key, uint64_t parent,
                       const int32_t *tokens);
/* Keeps block B, the first N (0 < N < block_size) entries of a sequence that is releasing it,
 * filled with TOKENS after the prefix keyed PARENT, as a tail; the cache takes a reference. */
void mlm_prefix_insert_tail(mlm_prefix *p, int32_t b, uint64_t parent, const int32_t *tokens,
                            int32_t n);
/* Takes the tail after the prefix keyed PARENT whose tokens start TOKENS (MAX of them),
 * holding at most MAX: it leaves the cache with its reference, which goes to the caller
 * (mlm_kv_adopt). Returns the block and its entries in *N, or -1. */
int32_t mlm_prefix_take_tail(mlm_prefix *p, uint64_t parent, const int32_t *tokens, int32_t max,
                             int32_t *n);
/* Block B is being taken by a sequence (take) or was just released by one (release): keeps
 * the evictable list true. Call take before mlm_kv_share, release after mlm_kv_reset. */
void mlm_prefix_take(mlm_prefix *p, int32_t b);
void mlm_prefix_release(mlm_prefix *p, int32_t b);
/* Evicts the least recently released unheld block (its reference dropped, so it returns to
 * the free list); 0 when none is evictable. */
int mlm_prefix_evict(mlm_prefix *p);

#endif
