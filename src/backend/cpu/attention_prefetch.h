/* backend/cpu/attention_prefetch.h: the flash kernels' prefetch of a tile's KV entries (one
 * KV head's values in each), shared by the AVX2 and AVX-512 kernels. */
#ifndef MESHLM_BACKEND_CPU_ATTENTION_PREFETCH_H
#define MESHLM_BACKEND_CPU_ATTENTION_PREFETCH_H

#include <immintrin.h>

#include "backend/backend.h"
#include "tensor/bfp.h"

/* Asks for entries [J0, J0 + N) of POOL, values [OFF, OFF + HD) each, to be brought into the
 * caches while the current tile is computed: one head's values are a short run in each
 * entry, far apart in the pool, which the hardware prefetchers do not follow. */
static inline __attribute__((always_inline)) void
mlm_att_prefetch_rows(const mlm_paged_kv *kv, const void *pool, const int32_t *blocks, int32_t j0,
                      int n, int64_t off, int hd) {
    int64_t b0, b1; /* the head's bytes within an entry */
    if (kv->type == MLM_W_F32) b0 = off * 4, b1 = (off + hd) * 4;
    else if (kv->type == MLM_W_BF16) b0 = off * 2, b1 = (off + hd) * 2;
    else b0 = off / MLM_BFP_GROUP * 68, b1 = (off + hd + MLM_BFP_GROUP - 1) / MLM_BFP_GROUP * 68;
    const uint32_t bs = (uint32_t)kv->block_size;
    for (int j = 0; j < n;) {
        uint32_t idx = (uint32_t)(j0 + j), slot = idx % bs;
        const char *base = (const char *)pool + ((int64_t)blocks[idx / bs] * bs + slot) * kv->row_bytes;
        int run = (int)(bs - slot) < n - j ? (int)(bs - slot) : n - j;
        for (int r = 0; r < run; r++, j++) {
            const char *e = base + r * kv->row_bytes;
            for (int64_t b = b0; b < b1; b += 64) _mm_prefetch(e + b, _MM_HINT_T0);
            _mm_prefetch(e + b1 - 1, _MM_HINT_T0);
        }
    }
}

#endif
