/* tokenizer/utf8.c: UTF-8 validation and U+FFFD repair with maximal-subpart rules
 * (identical to CPython's bytes.decode("utf-8", errors="replace")). See utf8.h. */
#include "tokenizer/utf8.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

mlm_utf8_step mlm_utf8_next(const unsigned char *p, size_t n, size_t *used) {
    unsigned c = p[0];
    if (c < 0x80) {
        *used = 1;
        return MLM_UTF8_CHAR;
    }
    /* Sequence length and the allowed range of the second byte (Unicode table 3-7): the
     * narrowed ranges exclude overlongs (E0, F0), surrogates (ED) and > U+10FFFF (F4). */
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *used = 1; /* 80..C1, F5..FF never start a sequence */
        return MLM_UTF8_INVALID;
    }
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= n) {
            *used = n;
            return MLM_UTF8_TRUNCATED;
        }
        unsigned b = p[i];
        if (b < lo || b > hi) {
            *used = i;
            return MLM_UTF8_INVALID;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    *used = need;
    return MLM_UTF8_CHAR;
}

size_t mlm_utf8_valid_prefix(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* ASCII runs dominate real text: skip 8 bytes at a time. */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t used;
        if (mlm_utf8_next(p + i, n - i, &used) != MLM_UTF8_CHAR) return i;
        i += used;
    }
    return n;
}

mlm_status mlm_utf8_repair(const unsigned char *p, size_t n, unsigned char **out, size_t *out_len,
                           mlm_error *err) {
    /* Worst case: every byte becomes a 3-byte U+FFFD. */
    if (n > (SIZE_MAX - 1) / 3)
        return mlm_error_set(err, MLM_ERR_NOMEM, "utf8: input of %zu bytes too large", n);
    unsigned char *buf = malloc(3 * n + 1);
    if (!buf) return mlm_error_set(err, MLM_ERR_NOMEM, "utf8: out of memory (%zu bytes)", 3 * n);
    size_t i = 0, o = 0;
    while (i < n) {
        size_t ok = mlm_utf8_valid_prefix(p + i, n - i);
        memcpy(buf + o, p + i, ok);
        o += ok;
        i += ok;
        if (i >= n) break;
        size_t used;
        mlm_utf8_next(p + i, n - i, &used); /* INVALID or TRUNCATED: both one U+FFFD */
        memcpy(buf + o, MLM_UTF8_REPLACEMENT, 3);
        o += 3;
        i += used;
    }
    buf[o] = 0;
    *out = buf;
    *out_len = o;
    return MLM_OK;
}
