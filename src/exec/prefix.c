/* exec/prefix.c: the prefix cache (see prefix.h): a chained hash table of full KV blocks by
 * prefix key and of tails by their parent's, with an intrusive LRU list of the blocks only
 * the cache holds. */
#include "exec/prefix.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/hash.h"

mlm_status mlm_prefix_init(mlm_prefix *p, mlm_kv *kv, mlm_error *err) {
    memset(p, 0, sizeof *p);
    p->kv = kv;
    p->block_size = kv->block_size;
    p->n_blocks = kv->max_num_blocks;
    p->n_buckets = 16;
    while (p->n_buckets < 2 * p->n_blocks) p->n_buckets *= 2;
    size_t nb = (size_t)p->n_blocks;
    p->cached = calloc(nb, 1);
    p->key = calloc(nb, sizeof *p->key);
    p->parent = calloc(nb, sizeof *p->parent);
    p->tokens = malloc(nb * (size_t)p->block_size * sizeof *p->tokens);
    p->n_valid = calloc(nb, sizeof *p->n_valid);
    p->bucket = malloc((size_t)p->n_buckets * sizeof *p->bucket);
    p->chain = malloc(nb * sizeof *p->chain);
    p->lru_prev = malloc(nb * sizeof *p->lru_prev);
    p->lru_next = malloc(nb * sizeof *p->lru_next);
    if (!p->cached || !p->key || !p->parent || !p->tokens || !p->n_valid || !p->bucket ||
        !p->chain || !p->lru_prev || !p->lru_next) {
        mlm_prefix_deinit(p);
        return mlm_error_set(err, MLM_ERR_NOMEM, "prefix cache: out of memory (%d blocks)",
                             kv->max_num_blocks);
    }
    for (int32_t i = 0; i < p->n_buckets; i++) p->bucket[i] = -1;
    p->lru_head = p->lru_tail = -1;
    return MLM_OK;
}

void mlm_prefix_deinit(mlm_prefix *p) {
    free(p->cached), free(p->key), free(p->parent), free(p->tokens), free(p->n_valid);
    free(p->bucket);
    free(p->chain), free(p->lru_prev), free(p->lru_next);
    memset(p, 0, sizeof *p);
}

uint64_t mlm_prefix_key(const mlm_prefix *p, uint64_t parent, const int32_t *tokens) {
    uint64_t k = mlm_hash64(tokens, (size_t)p->block_size * sizeof *tokens, parent);
    return k ? k : 1; /* 0 is the empty prefix's key */
}

static int32_t bucket_of(const mlm_prefix *p, uint64_t key) {
    return (int32_t)(key & (uint64_t)(p->n_buckets - 1));
}

int32_t mlm_prefix_find(const mlm_prefix *p, uint64_t key, uint64_t parent, const int32_t *tokens) {
    for (int32_t b = p->bucket[bucket_of(p, key)]; b >= 0; b = p->chain[b])
        if (p->key[b] == key && p->parent[b] == parent && p->n_valid[b] == p->block_size &&
            !memcmp(p->tokens + (size_t)b * p->block_size, tokens,
                    (size_t)p->block_size * sizeof *tokens))
            return b;
    return -1;
}

static void lru_unlink(mlm_prefix *p, int32_t b) {
    if (p->lru_prev[b] >= 0) p->lru_next[p->lru_prev[b]] = p->lru_next[b];
    else p->lru_head = p->lru_next[b];
    if (p->lru_next[b] >= 0) p->lru_prev[p->lru_next[b]] = p->lru_prev[b];
    else p->lru_tail = p->lru_prev[b];
    p->n_evictable--;
}

static void lru_append(mlm_prefix *p, int32_t b) {
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->n_evictable++;
}

/* Enters block B, holding N tokens, under KEY; the cache takes a reference. */
static void enter(mlm_prefix *p, int32_t b, uint64_t key, uint64_t parent, const int32_t *tokens,
                  int32_t n) {
    p->cached[b] = 1;
    p->key[b] = key;
    p->parent[b] = parent;
    p->n_valid[b] = n;
    memcpy(p->tokens + (size_t)b * p->block_size, tokens, (size_t)n * sizeof *tokens);
    int32_t h = bucket_of(p, key);
    p->chain[b] = p->bucket[h];
    p->bucket[h] = b;
    p->n_cached++;
    mlm_kv_ref(p->kv, b);
}

/* Takes block B out of the hash chains (its reference stays with the caller). */
static void leave(mlm_prefix *p, int32_t b) {
    int32_t *link = &p->bucket[bucket_of(p, p->key[b])];
    while (*link != b)
        link = &p->chain[*link];
    *link = p->chain[b];
    p->cached[b] = 0;
    p->n_cached--;
}

void mlm_prefix_insert(mlm_prefix *p, int32_t b, uint64_t key, uint64_t parent,
                       const int32_t *tokens) {
    if (p->cached[b] || mlm_prefix_find(p, key, parent, tokens) >= 0) return;
    enter(p, b, key, parent, tokens, p->block_size);
}

/* A tail's key: its parent's, marked apart from every full block's. */
static uint64_t tail_key(uint64_t parent) {
    uint64_t k = mlm_hash64(&parent, sizeof parent, 0x7461696cu);
    return k ? k : 1;
}

void mlm_prefix_insert_tail(mlm_prefix *p, int32_t b, uint64_t parent, const int32_t *tokens,
                            int32_t n) {
    if (p->cached[b] || n <= 0 || n >= p->block_size) return;
    enter(p, b, tail_key(parent), parent, tokens, n);
}

int32_t mlm_prefix_take_tail(mlm_prefix *p, uint64_t parent, const int32_t *tokens, int32_t max,
                             int32_t *n) {
    uint64_t key = tail_key(parent);
    for (int32_t b = p->bucket[bucket_of(p, key)]; b >= 0; b = p->chain[b]) {
        int32_t nv = p->n_valid[b];
        if (p->key[b] != key || p->parent[b] != parent || nv >= p->block_size || nv > max ||
            p->kv->refs[b] != 1 ||
            memcmp(p->tokens + (size_t)b * p->block_size, tokens, (size_t)nv * sizeof *tokens))
            continue;
        lru_unlink(p, b); /* held by the cache alone: it was evictable */
        leave(p, b);
        *n = nv;
        return b;
    }
    return -1;
}

/* Evictable: cached and held by the cache alone. */
void mlm_prefix_take(mlm_prefix *p, int32_t b) {
    if (p->cached[b] && p->kv->refs[b] == 1) lru_unlink(p, b);
}

void mlm_prefix_release(mlm_prefix *p, int32_t b) {
    if (p->cached[b] && p->kv->refs[b] == 1) lru_append(p, b);
}

int mlm_prefix_evict(mlm_prefix *p) {
    int32_t b = p->lru_head;
    if (b < 0) return 0;
    lru_unlink(p, b);
    leave(p, b);
    mlm_kv_unref(p->kv, b);
    return 1;
}
