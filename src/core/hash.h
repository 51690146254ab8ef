/* core/hash.h: a fast 64-bit non-cryptographic hash for integrity checks of large buffers
 * (weight caches): four independent multiply-rotate lanes over 32-byte stripes, in the style
 * of xxHash64, streaming in pieces of any size. Detects corruption; not for security. */
#ifndef MESHLM_CORE_HASH_H
#define MESHLM_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct mlm_hash {
    uint64_t lane[4];
    uint64_t len;
    unsigned char buf[32];
    size_t n_buf;
} mlm_hash;

void mlm_hash_init(mlm_hash *h, uint64_t seed);
void mlm_hash_update(mlm_hash *h, const void *data, size_t n);
uint64_t mlm_hash_final(const mlm_hash *h);
/* One-shot. */
uint64_t mlm_hash64(const void *data, size_t n, uint64_t seed);

#endif
