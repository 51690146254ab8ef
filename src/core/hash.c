/* core/hash.c: the streaming 64-bit hash (see hash.h). */
#include "core/hash.h"

#include <string.h>

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t round64(uint64_t acc, uint64_t v) { return rotl(acc + v * P2, 31) * P1; }
static inline uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void stripe(mlm_hash *h, const unsigned char *p) {
    h->lane[0] = round64(h->lane[0], load64(p));
    h->lane[1] = round64(h->lane[1], load64(p + 8));
    h->lane[2] = round64(h->lane[2], load64(p + 16));
    h->lane[3] = round64(h->lane[3], load64(p + 24));
}

void mlm_hash_init(mlm_hash *h, uint64_t seed) {
    memset(h, 0, sizeof *h);
    h->lane[0] = seed + P1 + P2, h->lane[1] = seed + P2, h->lane[2] = seed,
    h->lane[3] = seed - P1;
}

void mlm_hash_update(mlm_hash *h, const void *data, size_t n) {
    const unsigned char *p = data;
    h->len += n;
    if (h->n_buf) {
        size_t take = 32 - h->n_buf < n ? 32 - h->n_buf : n;
        memcpy(h->buf + h->n_buf, p, take);
        h->n_buf += take, p += take, n -= take;
        if (h->n_buf < 32) return;
        stripe(h, h->buf);
        h->n_buf = 0;
    }
    for (; n >= 32; p += 32, n -= 32) stripe(h, p);
    memcpy(h->buf, p, n);
    h->n_buf = n;
}

uint64_t mlm_hash_final(const mlm_hash *h) {
    uint64_t acc = rotl(h->lane[0], 1) + rotl(h->lane[1], 7) + rotl(h->lane[2], 12) +
                   rotl(h->lane[3], 18);
    for (int i = 0; i < 4; i++) acc = (acc ^ round64(0, h->lane[i])) * P1 + P3;
    acc += h->len;
    for (size_t i = 0; i < h->n_buf; i++) acc = rotl(acc ^ (h->buf[i] * P3), 11) * P1;
    acc ^= acc >> 33, acc *= P2, acc ^= acc >> 29, acc *= P3, acc ^= acc >> 32;
    return acc;
}

uint64_t mlm_hash64(const void *data, size_t n, uint64_t seed) {
    mlm_hash h;
    mlm_hash_init(&h, seed);
    mlm_hash_update(&h, data, n);
    return mlm_hash_final(&h);
}
