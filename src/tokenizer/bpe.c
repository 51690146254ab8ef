/* tokenizer/bpe.c: the two byte-pair merge engines (see bpe.h).
 * Reference: tiktoken's _byte_pair_merge, arrays of parts with the rank of each adjacent
 * pair, a linear scan for the minimum (strict <, so ties go left) and an O(n) removal per
 * merge. Heap: parts as a doubly linked list indexed by start byte, a binary min-heap of
 * (rank, start) with lazy deletion: an entry is live when its part still exists and still
 * has that pair rank. Ordering by (rank, start) is exactly "lowest rank, then leftmost",
 * which is also Hugging Face's order (its Merge heap compares rank, then position). With a
 * merges list a rank names one pair, so "same rank" also means "same pair" there. */
#include "tokenizer/bpe.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define NO_RANK INT32_MAX

void mlm_bpe_scratch_init(mlm_bpe_scratch *s) { memset(s, 0, sizeof *s); }

void mlm_bpe_scratch_deinit(mlm_bpe_scratch *s) {
    if (!s) return;
    free(s->start);
    free(s->rank);
    free(s->nid);
    free(s->tok);
    free(s->next);
    free(s->prev);
    free(s->heap);
    free(s->key);
    memset(s, 0, sizeof *s);
}

/* Grows every array to hold at least N + 2 entries (and 2 * N heap entries). */
static mlm_status reserve(mlm_bpe_scratch *s, size_t n, mlm_error *err) {
    if (n + 2 <= s->cap) return MLM_OK;
    /* Part offsets and heap entries hold 32-bit byte positions. */
    if (n > UINT32_MAX - 2)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "bpe: a %zu-byte piece exceeds the 4 GiB limit", n);
    size_t cap = s->cap ? s->cap : 256;
    while (cap < n + 2)
        cap *= 2;
    void *p[8] = {
        realloc(s->start, cap * sizeof *s->start), NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    if (p[0]) s->start = p[0];
    p[1] = realloc(s->rank, cap * sizeof *s->rank);
    if (p[1]) s->rank = p[1];
    p[2] = realloc(s->tok, cap * sizeof *s->tok);
    if (p[2]) s->tok = p[2];
    p[3] = realloc(s->next, cap * sizeof *s->next);
    if (p[3]) s->next = p[3];
    p[4] = realloc(s->prev, cap * sizeof *s->prev);
    if (p[4]) s->prev = p[4];
    p[5] = realloc(s->heap, 2 * cap * sizeof *s->heap);
    if (p[5]) s->heap = p[5];
    p[6] = realloc(s->key, cap * sizeof *s->key);
    if (p[6]) s->key = p[6];
    p[7] = realloc(s->nid, cap * sizeof *s->nid);
    if (p[7]) s->nid = p[7];
    for (int i = 0; i < 8; i++)
        if (!p[i])
            return mlm_error_set(err, MLM_ERR_NOMEM, "bpe: out of memory for a %zu-byte piece", n);
    s->cap = cap;
    return MLM_OK;
}

/* The priority of merging the part at P[A..) (id TA) with the part ending at P[C] (id TB),
 * and the id it merges into (*NID); NO_RANK when the pair does not merge. */
static inline int32_t pair_at(const mlm_vocab *v, const mlm_merges *m, const unsigned char *p,
                              size_t a, size_t c, int32_t ta, int32_t tb, int32_t *nid) {
    int32_t r;
    if (m) {
        r = mlm_merges_get(m, ta, tb, nid);
    } else {
        r = mlm_vocab_rank(v, p + a, c - a);
        *nid = r;
    }
    return r < 0 ? NO_RANK : r;
}

/* Appends the final parts' ids TOK[...] in order (the heap engine links them with NEXT,
 * the reference engine has them contiguous when NEXT is NULL). A part that is a byte
 * without a token (id < 0) is dropped, or becomes M's unk_id (one per run with fuse_unk). */
static mlm_status emit_parts(const mlm_merges *m, const int32_t *tok, const uint32_t *next,
                             size_t n, mlm_tokens *out, mlm_error *err) {
    int32_t unk = m ? m->unk_id : -1;
    int prev_unk = 0;
    for (size_t i = 0; i < n; i = next ? next[i] : i + 1) {
        int32_t id = tok[i];
        if (id < 0) {
            if (unk < 0 || (prev_unk && m->fuse_unk)) continue;
            id = unk;
        }
        prev_unk = tok[i] < 0;
        if (mlm_tokens_push(out, id) != MLM_OK)
            return mlm_error_set(err, MLM_ERR_NOMEM, "bpe: out of memory for token ids");
    }
    return MLM_OK;
}

// ---- reference engine ----

mlm_status mlm_bpe_merge_ref(const mlm_vocab *v, const mlm_merges *m, const unsigned char *p,
                             size_t n, mlm_bpe_scratch *s, mlm_tokens *out, mlm_error *err) {
    mlm_status st = reserve(s, n, err);
    if (st != MLM_OK) return st;
    uint32_t *start = s->start;
    int32_t *rank = s->rank, *tok = s->tok, *nid = s->nid;
    /* Parts 0..np-1 plus the end sentinel start[np] = n; rank[i] merges parts i and i+1. */
    size_t np = n;
    for (size_t i = 0; i <= n; i++)
        start[i] = (uint32_t)i;
    for (size_t i = 0; i < n; i++)
        tok[i] = v->byte_rank[p[i]];
    /* Hash every initial pair first (prefetching its slot), then resolve them: the
     * lookups' cache misses overlap instead of following one another. */
    if (m && m->bytes2) {
        for (size_t i = 0; i + 1 < n; i++) {
            mlm_merge_to t = m->bytes2[p[i] << 8 | p[i + 1]];
            rank[i] = t.rank < 0 ? NO_RANK : t.rank;
            nid[i] = t.id;
        }
    } else if (m) {
        for (size_t i = 0; i + 1 < n; i++)
            rank[i] = pair_at(v, m, p, i, i + 2, tok[i], tok[i + 1], &nid[i]);
    } else {
        mlm_vocab_key *key = s->key;
        for (size_t i = 0; i + 1 < n; i++)
            key[i] = mlm_vocab_key_make(v, p + i, 2);
        for (size_t i = 0; i + 1 < n; i++) {
            int32_t r = mlm_vocab_rank_key(v, p + i, 2, key[i]);
            rank[i] = r < 0 ? NO_RANK : r;
            nid[i] = r;
        }
    }
    rank[n - 1] = NO_RANK;
    for (;;) {
        int32_t best = NO_RANK;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < np; i++) {
            if (rank[i] < best) {
                best = rank[i];
                bi = i;
            }
        }
        if (best == NO_RANK) break;
        tok[bi] = nid[bi];
        /* Remove part bi+1, then refresh the pairs that now start at bi-1 and bi. */
        memmove(start + bi + 1, start + bi + 2, (np - bi - 1) * sizeof *start);
        memmove(rank + bi + 1, rank + bi + 2, (np - bi - 2) * sizeof *rank);
        memmove(nid + bi + 1, nid + bi + 2, (np - bi - 2) * sizeof *nid);
        memmove(tok + bi + 1, tok + bi + 2, (np - bi - 2) * sizeof *tok);
        np--;
        rank[bi] = bi + 1 < np
                       ? pair_at(v, m, p, start[bi], start[bi + 2], tok[bi], tok[bi + 1], &nid[bi])
                       : NO_RANK;
        if (bi > 0)
            rank[bi - 1] =
                pair_at(v, m, p, start[bi - 1], start[bi + 1], tok[bi - 1], tok[bi], &nid[bi - 1]);
    }
    return emit_parts(m, tok, NULL, np, out, err);
}

// ---- heap engine ----

static void heap_push(uint64_t *h, size_t *n, uint64_t x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (h[up] <= x) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = x;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], x = h[--*n];
    size_t i = 0, len = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= len) break;
        if (c + 1 < len && h[c + 1] < h[c]) c++;
        if (x <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (len) h[i] = x;
    return top;
}

mlm_status mlm_bpe_merge_heap(const mlm_vocab *v, const mlm_merges *m, const unsigned char *p,
                              size_t n, mlm_bpe_scratch *s, mlm_tokens *out, mlm_error *err) {
    mlm_status st = reserve(s, n, err);
    if (st != MLM_OK) return st;
    uint32_t *next = s->next, *prev = s->prev;
    int32_t *rank = s->rank, *tok = s->tok, *nid = s->nid;
    uint64_t *heap = s->heap;
    size_t nh = 0;
    /* Parts are indexed by their start byte; next[] of the last part is n. */
    for (size_t i = 0; i < n; i++) {
        next[i] = (uint32_t)(i + 1);
        prev[i] = (uint32_t)(i - 1); /* wraps for i = 0, never read there */
        tok[i] = v->byte_rank[p[i]];
    }
    for (size_t i = 0; i < n; i++) {
        rank[i] = i + 1 < n ? pair_at(v, m, p, i, i + 2, tok[i], tok[i + 1], &nid[i]) : NO_RANK;
        if (rank[i] != NO_RANK) heap_push(heap, &nh, (uint64_t)rank[i] << 32 | i);
    }
    /* Each merge pushes at most two entries and removes one part: at most n + 2n live. */
    while (nh > 0) {
        uint64_t e = heap_pop(heap, &nh);
        uint32_t i = (uint32_t)e;
        int32_t r = (int32_t)(e >> 32);
        /* Stale (a byte without a token never has an entry: its pairs never merge). */
        if (tok[i] < 0 || rank[i] != r) continue;
        uint32_t j = next[i]; /* merged into i */
        tok[i] = nid[i];
        tok[j] = -1;
        next[i] = next[j];
        if (next[i] < n) prev[next[i]] = i;
        rank[i] = next[i] < n ? pair_at(v, m, p, i, next[next[i]], tok[i], tok[next[i]], &nid[i])
                              : NO_RANK;
        if (rank[i] != NO_RANK) heap_push(heap, &nh, (uint64_t)rank[i] << 32 | i);
        if (i > 0) {
            uint32_t a = prev[i];
            rank[a] = pair_at(v, m, p, a, next[i], tok[a], tok[i], &nid[a]);
            if (rank[a] != NO_RANK) heap_push(heap, &nh, (uint64_t)rank[a] << 32 | a);
        }
    }
    return emit_parts(m, tok, next, n, out, err);
}

mlm_status mlm_bpe_merge(const mlm_vocab *v, const mlm_merges *m, const unsigned char *p, size_t n,
                         mlm_bpe_scratch *s, mlm_tokens *out, mlm_error *err) {
    if (n < MLM_BPE_HEAP_MIN) return mlm_bpe_merge_ref(v, m, p, n, s, out, err);
    return mlm_bpe_merge_heap(v, m, p, n, s, out, err);
}
