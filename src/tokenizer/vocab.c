/* tokenizer/vocab.c: parsing tiktoken BPE files into a byte-string -> rank hash table
 * (and building the same table from decoded Hugging Face / GGUF tokens).
 * The file is only read during parsing; the vocabulary keeps its own decoded copy of every
 * token. Lookups hash the bytes (wyhash-style multiply-mix), probe linearly, and compare
 * each slot's inline head (first 8 bytes) and length before any further bytes. See vocab.h
 * for the accepted syntax. */
#include "tokenizer/vocab.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

// ---- hashing ----

static inline uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t load32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t mix(uint64_t a, uint64_t b) {
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

#define K0 0xa0761d6478bd642full
#define K1 0xe7037ed1a0b428dbull
#define K2 0x8ebc6af09c88c6e3ull

/* The first min(N, 8) bytes of P as a little-endian word, zero-padded, without reading
 * past P + N. */
static inline uint64_t head8(const unsigned char *p, size_t n) {
    if (n >= 8) return load64(p);
    if (n >= 4) return load32(p) | load32(p + n - 4) << (8 * (n - 4));
    if (n == 0) return 0;
    return (uint64_t)p[0] | (uint64_t)p[n >> 1] << (8 * (n >> 1)) |
           (uint64_t)p[n - 1] << (8 * (n - 1));
}

/* Hash of a key whose head8 is HEAD (computed once per lookup and reused). */
static inline uint64_t hash_with_head(const unsigned char *p, size_t n, uint64_t head) {
    uint64_t seed = K0 ^ (uint64_t)n, a = head, b = 0;
    if (n > 8) {
        size_t i = 8;
        while (n - i > 16) {
            seed = mix(load64(p + i) ^ K1, load64(p + i + 8) ^ seed);
            i += 16;
        }
        /* The last (up to) 16 bytes, as two overlapping words within the key. */
        b = n - i > 8 ? load64(p + n - 8) ^ (load64(p + i) * K2) : load64(p + n - 8);
    }
    return mix(K1 ^ (uint64_t)n, mix(a ^ K1, b ^ seed));
}

mlm_vocab_key mlm_vocab_key_make(const mlm_vocab *v, const unsigned char *p, size_t n) {
    mlm_vocab_key k;
    k.head = head8(p, n);
    k.slot = (uint32_t)(hash_with_head(p, n, k.head) >> 32) & v->mask;
    __builtin_prefetch(&v->slots[k.slot]);
    return k;
}

int32_t mlm_vocab_rank_key(const mlm_vocab *v, const unsigned char *p, size_t n, mlm_vocab_key k) {
    for (uint32_t i = k.slot;; i = (i + 1) & v->mask) {
        const mlm_vocab_slot *s = &v->slots[i];
        if (s->rank < 0) return -1;
        if (s->head != k.head || s->len != n) continue;
        if (n <= 8 || memcmp(v->bytes + v->tok[s->rank].off + 8, p + 8, n - 8) == 0) return s->rank;
    }
}

int32_t mlm_vocab_rank(const mlm_vocab *v, const unsigned char *p, size_t n) {
    return mlm_vocab_rank_key(v, p, n, mlm_vocab_key_make(v, p, n));
}

/* Inserts rank R (bytes already stored); returns the rank already holding the same
 * bytes, or -1 when inserted. */
static int32_t insert(mlm_vocab *v, int32_t r) {
    size_t n = v->tok[r].len;
    int32_t old = mlm_vocab_rank(v, v->bytes + v->tok[r].off, n);
    if (old >= 0) return old;
    const unsigned char *p = v->bytes + v->tok[r].off;
    uint64_t head = head8(p, n);
    uint32_t i = (uint32_t)(hash_with_head(p, n, head) >> 32) & v->mask;
    while (v->slots[i].rank >= 0)
        i = (i + 1) & v->mask;
    v->slots[i].head = head;
    v->slots[i].rank = r;
    v->slots[i].len = (uint32_t)n;
    return -1;
}

// ---- parsing ----

/* Standard base64 alphabet; other bytes are 0 here and told apart from 'A' by b64_val ('='
 * is handled by the decoder). */
static const signed char B64[256] = {
    ['A'] = 0,  ['B'] = 1,  ['C'] = 2,  ['D'] = 3,  ['E'] = 4,  ['F'] = 5,  ['G'] = 6,  ['H'] = 7,
    ['I'] = 8,  ['J'] = 9,  ['K'] = 10, ['L'] = 11, ['M'] = 12, ['N'] = 13, ['O'] = 14, ['P'] = 15,
    ['Q'] = 16, ['R'] = 17, ['S'] = 18, ['T'] = 19, ['U'] = 20, ['V'] = 21, ['W'] = 22, ['X'] = 23,
    ['Y'] = 24, ['Z'] = 25, ['a'] = 26, ['b'] = 27, ['c'] = 28, ['d'] = 29, ['e'] = 30, ['f'] = 31,
    ['g'] = 32, ['h'] = 33, ['i'] = 34, ['j'] = 35, ['k'] = 36, ['l'] = 37, ['m'] = 38, ['n'] = 39,
    ['o'] = 40, ['p'] = 41, ['q'] = 42, ['r'] = 43, ['s'] = 44, ['t'] = 45, ['u'] = 46, ['v'] = 47,
    ['w'] = 48, ['x'] = 49, ['y'] = 50, ['z'] = 51, ['0'] = 52, ['1'] = 53, ['2'] = 54, ['3'] = 55,
    ['4'] = 56, ['5'] = 57, ['6'] = 58, ['7'] = 59, ['8'] = 60, ['9'] = 61, ['+'] = 62, ['/'] = 63,
};

static int b64_val(unsigned char c) {
    /* The table's zero entries are either 'A' or "not base64". */
    if (c == 'A') return 0;
    return B64[c] ? B64[c] : -1;
}

static int is_blank(unsigned char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* Decodes the base64 text S[0..N) into OUT; returns the byte count, or -1 and the offending
 * column (0-based) in *BAD, with *WHY describing the problem. */
static long b64_decode(const unsigned char *s, size_t n, unsigned char *out, size_t *bad,
                       const char **why) {
    if (n == 0 || n % 4 != 0) {
        *bad = n;
        *why = n ? "base64 length is not a multiple of 4" : "empty token";
        return -1;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = s[i + k];
            if (c == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
                continue;
            }
            v[k] = b64_val(c);
            if (v[k] < 0 || pad) {
                *bad = i + k;
                *why = pad ? "data after base64 padding" : "not a base64 character";
                return -1;
            }
        }
        uint32_t w = ((uint32_t)v[0] << 18) | ((uint32_t)v[1] << 12) | ((uint32_t)v[2] << 6) |
                     (uint32_t)v[3];
        out[o++] = (unsigned char)(w >> 16);
        if (pad < 2) out[o++] = (unsigned char)(w >> 8);
        if (pad < 1) out[o++] = (unsigned char)w;
        /* Non-canonical encodings (stray bits under the padding) are rejected so that each
         * token has exactly one spelling. */
        if ((pad == 1 && (w & 0xFF)) || (pad == 2 && (w & 0xFFFF))) {
            *bad = i + 3 - (size_t)pad;
            *why = "non-zero bits before base64 padding";
            return -1;
        }
    }
    return (long)o;
}

/* Number of lines holding anything other than blanks. */
static int64_t count_entries(const unsigned char *d, size_t len) {
    int64_t n = 0;
    int nonblank = 0;
    for (size_t i = 0; i < len; i++) {
        if (d[i] == '\n') {
            n += nonblank;
            nonblank = 0;
        } else if (!is_blank(d[i])) {
            nonblank = 1;
        }
    }
    return n + nonblank;
}

/* Frees V and fills ERR with "NAME: line LINE: <message>". */
static mlm_status fail(mlm_vocab *v, mlm_error *err, const char *name, int64_t line,
                       const char *fmt, ...) MLM_PRINTF(5, 6);
static mlm_status fail(mlm_vocab *v, mlm_error *err, const char *name, int64_t line,
                       const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mlm_vocab_deinit(v);
    return mlm_error_set(err, MLM_ERR_FORMAT, "%s: line %lld: %s", name, (long long)line, msg);
}

void mlm_vocab_deinit(mlm_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->tok);
    free(v->slots);
    memset(v, 0, sizeof *v);
}

mlm_status mlm_vocab_parse(mlm_vocab *v, const unsigned char *data, size_t len, const char *name,
                           mlm_error *err) {
    memset(v, 0, sizeof *v);
    if (len >= UINT32_MAX)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %zu bytes exceed the 4 GiB limit", name,
                             len);
    int64_t n = count_entries(data, len);
    if (n == 0)
        return mlm_error_set(
            err, MLM_ERR_FORMAT,
            "%s: line 1: no entries (empty file), expected '<base64> <rank>' lines", name);
    if (n > INT32_MAX / 2)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %lld entries exceed the limit %d", name,
                             (long long)n, INT32_MAX / 2);
    uint32_t cap = 16;
    while (cap < 2 * (uint64_t)n)
        cap <<= 1;
    v->n = (int32_t)n;
    v->bytes = malloc(len / 4 * 3 + 4);
    v->tok = calloc((size_t)n, sizeof *v->tok);
    v->slots = malloc((size_t)cap * sizeof *v->slots);
    if (!v->bytes || !v->tok || !v->slots) {
        mlm_vocab_deinit(v);
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory for %lld tokens", name,
                             (long long)n);
    }
    memset(v->slots, 0xFF, (size_t)cap * sizeof *v->slots);
    v->mask = cap - 1;
    /* A rank is taken when its token length is non-zero (tokens are never empty). */
    uint32_t used = 0;
    int64_t line = 0;
    size_t pos = 0;
    while (pos < len) {
        line++;
        const unsigned char *nl = memchr(data + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - data) : len;
        const unsigned char *s = data + pos;
        size_t ln = end - pos;
        pos = end + 1;
        size_t i = 0;
        while (i < ln && is_blank(s[i]))
            i++;
        if (i == ln) continue;
        size_t t0 = i;
        while (i < ln && !is_blank(s[i]))
            i++;
        size_t tn = i - t0, bad = 0;
        const char *why = "";
        long nb = b64_decode(s + t0, tn, v->bytes + used, &bad, &why);
        if (nb < 0) {
            if (bad < tn)
                return fail(v, err, name, line, "%s (byte 0x%02x at column %zu)", why, s[t0 + bad],
                            t0 + bad + 1);
            return fail(v, err, name, line, "%s (%zu characters)", why, tn);
        }
        if (nb > MLM_VOCAB_MAX_TOKEN_BYTES)
            return fail(v, err, name, line, "token of %ld bytes exceeds the limit %d", nb,
                        MLM_VOCAB_MAX_TOKEN_BYTES);
        while (i < ln && is_blank(s[i]))
            i++;
        if (i == ln) return fail(v, err, name, line, "missing rank after the token");
        int64_t rank = 0;
        size_t r0 = i;
        for (; i < ln && s[i] >= '0' && s[i] <= '9'; i++)
            if (rank < INT64_C(1000000000000)) rank = rank * 10 + (s[i] - '0');
        if (i == r0 || (i < ln && !is_blank(s[i])))
            return fail(v, err, name, line,
                        "rank is not a decimal number (byte 0x%02x at column %zu)", s[i], i + 1);
        while (i < ln && is_blank(s[i]))
            i++;
        if (i != ln)
            return fail(v, err, name, line, "unexpected text after the rank (column %zu)", i + 1);
        if (rank >= n)
            return fail(v, err, name, line,
                        "rank %lld out of range (the file has %lld entries: ranks 0..n-1)",
                        (long long)rank, (long long)n);
        if (v->tok[rank].len != 0)
            return fail(v, err, name, line, "duplicate rank %lld", (long long)rank);
        v->tok[rank].off = used;
        v->tok[rank].len = (uint32_t)nb;
        int32_t dup = insert(v, (int32_t)rank);
        if (dup >= 0)
            return fail(v, err, name, line,
                        "duplicate token: rank %lld has the same bytes as rank %d", (long long)rank,
                        (int)dup);
        used += (uint32_t)nb;
        if ((size_t)nb > v->max_token_len) v->max_token_len = (size_t)nb;
    }
    /* Byte-level BPE needs every single byte as a starting part. */
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        v->byte_rank[b] = mlm_vocab_rank(v, &c, 1);
        if (v->byte_rank[b] < 0)
            return fail(
                v, err, name, line,
                "(end of file) byte 0x%02x has no rank; a byte-level BPE file needs all 256 "
                "single bytes",
                b);
    }
    return MLM_OK;
}

mlm_status mlm_vocab_build(mlm_vocab *v, unsigned char *bytes, mlm_vocab_tok *tok, int32_t n,
                           const char *what, mlm_error *err) {
    memset(v, 0, sizeof *v);
    v->bytes = bytes;
    v->tok = tok;
    v->n = n;
    if (n <= 0 || n > INT32_MAX / 2) {
        mlm_vocab_deinit(v);
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %d tokens (expected 1..%d)", what, (int)n,
                             INT32_MAX / 2);
    }
    uint32_t cap = 16;
    while (cap < 2 * (uint64_t)n)
        cap <<= 1;
    v->slots = malloc((size_t)cap * sizeof *v->slots);
    if (!v->slots) {
        mlm_vocab_deinit(v);
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory for %d tokens", what, (int)n);
    }
    memset(v->slots, 0xFF, (size_t)cap * sizeof *v->slots);
    v->mask = cap - 1;
    for (int32_t r = 0; r < n; r++) {
        size_t len = tok[r].len;
        if (len == 0 || len > MLM_VOCAB_MAX_TOKEN_BYTES) {
            mlm_vocab_deinit(v);
            return mlm_error_set(err, MLM_ERR_FORMAT,
                                 "%s: id %d: token of %zu bytes (expected 1..%d)", what, (int)r,
                                 len, MLM_VOCAB_MAX_TOKEN_BYTES);
        }
        int32_t dup = insert(v, r);
        if (dup >= 0) {
            mlm_vocab_deinit(v);
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: ids %d and %d have the same bytes", what,
                                 (int)dup, (int)r);
        }
        if (len > v->max_token_len) v->max_token_len = len;
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        v->byte_rank[b] = mlm_vocab_rank(v, &c, 1);
        v->n_missing_bytes += v->byte_rank[b] < 0;
    }
    return MLM_OK;
}
