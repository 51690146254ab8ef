/* tokenizer/detok.c: streaming detokenization (mlm_detok_*).
 * Token bytes are appended to the (at most 3) bytes held from earlier tokens; every whole
 * character is emitted, every invalid maximal subpart becomes U+FFFD, and a valid but
 * incomplete tail is held for the next token. The concatenated output therefore equals
 * Python's b"".join(tokens).decode("utf-8", "replace"), and each call's output is whole
 * UTF-8 characters. The state is the caller's mlm_detok; the tokenizer is only read. */
#include <string.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

void mlm_detok_init(mlm_detok *d) {
    memset(d->pending, 0, sizeof d->pending);
    d->n_pending = 0;
}

/* Output bytes can reach 3x the input (each stray byte becomes U+FFFD); the buffer's
 * capacity is checked before anything is written or the state changes. */
mlm_status mlm_detok_push(mlm_detok *d, const mlm_tokenizer *tok, int32_t id, char *buf, size_t cap,
                          size_t *n, mlm_error *err) {
    if (n) *n = 0;
    if (!d || !tok || (!buf && cap) || d->n_pending < 0 || d->n_pending > 3)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "detok: bad argument or state");
    size_t len;
    const char *tb = mlm_tokenizer_token_bytes(tok, id, &len);
    if (!tb)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "%s: detok: id %d is not in the vocabulary",
                             tok->name, (int)id);
    /* The held bytes then the token's, in one buffer (tokens are at most
     * MLM_VOCAB_MAX_TOKEN_BYTES, special texts shorter). */
    unsigned char in[8 + MLM_VOCAB_MAX_TOKEN_BYTES];
    size_t m = (size_t)d->n_pending;
    if (len > MLM_VOCAB_MAX_TOKEN_BYTES)
        return mlm_error_set(err, MLM_ERR_INTERNAL, "detok: token %d longer than %d bytes", (int)id,
                             MLM_VOCAB_MAX_TOKEN_BYTES);
    memcpy(in, d->pending, m);
    memcpy(in + m, tb, len);
    m += len;
    size_t i = 0, o = 0, hold = 0;
    while (i < m) {
        size_t used;
        mlm_utf8_step step = mlm_utf8_next(in + i, m - i, &used);
        if (step == MLM_UTF8_TRUNCATED) {
            hold = used;
            break;
        }
        const unsigned char *src =
            step == MLM_UTF8_CHAR ? in + i : (const unsigned char *)MLM_UTF8_REPLACEMENT;
        size_t w = step == MLM_UTF8_CHAR ? used : 3;
        if (o + w > cap)
            return mlm_error_set(err, MLM_ERR_CAPACITY,
                                 "detok: token %d needs more than the %zu-byte buffer", (int)id,
                                 cap);
        memcpy(buf + o, src, w);
        o += w;
        i += used;
    }
    memcpy(d->pending, in + i, hold);
    d->n_pending = (int)hold;
    if (n) *n = o;
    return MLM_OK;
}

/* With fewer than 3 bytes of room the held bytes are dropped unwritten. */
size_t mlm_detok_flush(mlm_detok *d, char *buf, size_t cap) {
    if (!d) return 0;
    size_t o = 0;
    if (d->n_pending > 0 && buf && cap >= 3) {
        memcpy(buf, MLM_UTF8_REPLACEMENT, 3);
        o = 3;
    }
    mlm_detok_init(d);
    return o;
}
