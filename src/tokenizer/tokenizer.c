/* tokenizer/tokenizer.c: the public tokenizer API: loading, encoding, decoding, token lists.
 * Encoding is: repair invalid UTF-8 (U+FFFD, Python's rules), optionally split at
 * special-token text, pre-tokenize each ordinary stretch with the regex, then BPE each
 * piece (whole-piece lookup first). Meta's pre-chunking of huge inputs (400k-char pieces,
 * 25k-char runs of whitespace / non-whitespace) is deliberately not replicated: the
 * regex engine here handles arbitrarily long runs, and the result equals tiktoken's
 * encode_ordinary on the whole text. The streaming detokenizer is in detok.c and chat
 * formats in chat.c. */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mapfile.h"
#include "tokenizer/bpe.h"
#include "tokenizer/locate.h"
#include "tokenizer/utf8.h"

// ---- token lists ----

void mlm_tokens_init(mlm_tokens *t) {
    t->ids = NULL;
    t->n = 0;
    t->cap = 0;
}

void mlm_tokens_deinit(mlm_tokens *t) {
    if (!t) return;
    free(t->ids);
    mlm_tokens_init(t);
}

/* Grows T to hold at least N ids. */
static mlm_status tokens_reserve(mlm_tokens *t, int64_t n) {
    if (n <= t->cap) return MLM_OK;
    int64_t cap = t->cap ? t->cap : 64;
    while (cap < n)
        cap *= 2;
    int32_t *ids = realloc(t->ids, (size_t)cap * sizeof *ids);
    if (!ids) return MLM_ERR_NOMEM;
    t->ids = ids;
    t->cap = cap;
    return MLM_OK;
}

mlm_status mlm_tokens_push(mlm_tokens *t, int32_t id) {
    if (t->n == t->cap && tokens_reserve(t, t->n + 1) != MLM_OK) return MLM_ERR_NOMEM;
    t->ids[t->n++] = id;
    return MLM_OK;
}

// ---- loading ----

void mlm_tokenizer_free(mlm_tokenizer *tok) {
    if (!tok) return;
    mlm_pretok_deinit(&tok->pretok);
    mlm_specials_deinit(&tok->specials);
    mlm_vocab_deinit(&tok->vocab);
    free(tok->name);
    free(tok);
}

mlm_status mlm_tokenizer_load_memory(const void *data, size_t len, const char *name,
                                     mlm_tokenizer **out, mlm_error *err) {
    *out = NULL;
    mlm_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return mlm_err_set(err, MLM_ERR_NOMEM, "%s: out of memory", name);
    tok->specials.max_id = -1;
    tok->name = strdup(name);
    if (!tok->name) {
        mlm_tokenizer_free(tok);
        return mlm_err_set(err, MLM_ERR_NOMEM, "%s: out of memory", name);
    }
    mlm_status st = mlm_vocab_parse(&tok->vocab, data, len, name, err);
    if (st == MLM_OK) {
        tok->flavour = mlm_specials_flavour_for(tok->vocab.n);
        st = mlm_specials_init(&tok->specials, tok->flavour, err);
    }
    /* Llama 3 and cl100k share the pre-tokenizer pattern. */
    if (st == MLM_OK) st = mlm_pretok_init(&tok->pretok, MLM_PRETOK_LLAMA3, err);
    if (st != MLM_OK) {
        mlm_tokenizer_free(tok);
        return st;
    }
    tok->n_vocab = tok->vocab.n;
    if (tok->specials.max_id >= tok->n_vocab) tok->n_vocab = tok->specials.max_id + 1;
    tok->bos_id = -1;
    if (tok->flavour == MLM_TOK_LLAMA3)
        tok->bos_id = mlm_tokenizer_special_id(tok, "<|begin_of_text|>");
    *out = tok;
    return MLM_OK;
}

mlm_status mlm_tokenizer_load(const char *path, mlm_tokenizer **out, mlm_error *err) {
    if (!path || !out) return mlm_err_set(err, MLM_ERR_INVALID_ARG, "tokenizer: NULL argument");
    *out = NULL;
    char *file = NULL;
    if (mlm_is_dir(path)) {
        file = mlm_tokenizer_locate(path); /* the one search order, shared with the CLI */
        if (!file)
            return mlm_err_set(
                err, MLM_ERR_IO,
                "tokenizer: %s has neither tokenizer.model nor original/tokenizer.model", path);
    } else {
        file = strdup(path);
        if (!file) return mlm_err_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory");
    }
    mlm_mapfile mf;
    mlm_status st = mlm_mapfile_open(&mf, file, err);
    if (st == MLM_OK) {
        st = mlm_tokenizer_load_memory(mf.data, mf.size, file, out, err);
        mlm_mapfile_close(&mf);
    }
    free(file);
    return st;
}

// ---- accessors ----

int32_t mlm_tokenizer_n_vocab(const mlm_tokenizer *tok) { return tok->n_vocab; }

int32_t mlm_tokenizer_bos_id(const mlm_tokenizer *tok) { return tok->bos_id; }

int32_t mlm_tokenizer_special_id(const mlm_tokenizer *tok, const char *text) {
    if (!text) return -1;
    const mlm_special *s = mlm_specials_by_text(&tok->specials, text, strlen(text));
    return s ? s->id : -1;
}

int mlm_tokenizer_is_special(const mlm_tokenizer *tok, int32_t id) {
    return id >= tok->vocab.n && mlm_specials_by_id(&tok->specials, id) != NULL;
}

const char *mlm_tokenizer_token_bytes(const mlm_tokenizer *tok, int32_t id, size_t *len) {
    size_t n = 0;
    const char *p = NULL;
    if (id >= 0 && id < tok->vocab.n) {
        p = (const char *)mlm_vocab_bytes(&tok->vocab, id, &n);
    } else {
        const mlm_special *s = mlm_specials_by_id(&tok->specials, id);
        if (s) {
            p = s->text;
            n = s->len;
        }
    }
    if (len) *len = n;
    return p;
}

// ---- encoding ----

mlm_encode_params mlm_encode_default_params(void) {
    mlm_encode_params p = {.add_bos = 0, .parse_special = 0};
    return p;
}

/* Per-call state: match data and BPE scratch, reused across pieces. */
typedef struct encode_ctx {
    const mlm_tokenizer *tok;
    mlm_pretok_iter it;
    mlm_bpe_scratch bpe;
    mlm_tokens *out;
} encode_ctx;

/* Pre-tokenizes and BPE-encodes valid UTF-8 TEXT[0..LEN), no special handling. */
static mlm_status encode_ordinary(encode_ctx *c, const unsigned char *text, size_t len,
                                  mlm_error *err) {
    const mlm_vocab *v = &c->tok->vocab;
    mlm_tokens *out = c->out;
    mlm_pretok_iter_reset(&c->it, text, len);
    /* Software pipeline: the next piece is matched while the hash slot of the previous one
     * is being fetched (the lookup is otherwise one cache miss per piece). */
    size_t pa = 0, pb = 0;
    mlm_vocab_key pk = {0, 0};
    int have_prev = 0;
    for (;;) {
        size_t a, b;
        int found;
        mlm_status st = mlm_pretok_next(&c->it, &a, &b, &found, err);
        if (st != MLM_OK) return st;
        mlm_vocab_key k = {0, 0};
        if (found) k = mlm_vocab_key_make(v, text + a, b - a);
        if (have_prev) {
            /* Most pieces are whole tokens: skip the merge for them. */
            int32_t r = mlm_vocab_rank_key(v, text + pa, pb - pa, pk);
            if (r >= 0) {
                if (out->n == out->cap && tokens_reserve(out, out->n + 1) != MLM_OK)
                    return mlm_err_set(err, MLM_ERR_NOMEM,
                                       "tokenizer: out of memory for token ids");
                out->ids[out->n++] = r;
            } else {
                st = mlm_bpe_merge(v, text + pa, pb - pa, &c->bpe, out, err);
                if (st != MLM_OK) return st;
            }
        }
        if (!found) return MLM_OK;
        pa = a;
        pb = b;
        pk = k;
        have_prev = 1;
    }
}

mlm_status mlm_tokenizer_encode(const mlm_tokenizer *tok, const char *text, size_t len,
                                const mlm_encode_params *params, mlm_tokens *out, mlm_error *err) {
    if (!tok || !out || (!text && len))
        return mlm_err_set(err, MLM_ERR_INVALID_ARG, "tokenizer: NULL argument to encode");
    mlm_encode_params p = params ? *params : mlm_encode_default_params();
    mlm_status st = MLM_OK;
    if (p.add_bos) {
        if (tok->bos_id < 0)
            return mlm_err_set(err, MLM_ERR_INVALID_ARG,
                               "%s: add_bos, but this vocabulary has no BOS", tok->name);
        st = mlm_tokens_push(out, tok->bos_id);
        if (st != MLM_OK) return mlm_err_set(err, st, "tokenizer: out of memory for token ids");
    }
    if (len == 0) return MLM_OK;
    const unsigned char *t = (const unsigned char *)text;
    unsigned char *fixed = NULL;
    if (mlm_utf8_valid_prefix(t, len) != len) {
        st = mlm_utf8_repair(t, len, &fixed, &len, err);
        if (st != MLM_OK) return st;
        t = fixed;
    }
    /* Roughly 4 bytes per token in English text: reserve to avoid most regrowth (capped;
     * past that the list grows geometrically). */
    size_t guess = len / 4 < ((size_t)1 << 24) ? len / 4 : ((size_t)1 << 24);
    if (tokens_reserve(out, out->n + (int64_t)guess + 16) != MLM_OK) {
        free(fixed);
        return mlm_err_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory for token ids");
    }
    encode_ctx c = {.tok = tok, .out = out};
    mlm_bpe_scratch_init(&c.bpe);
    st = mlm_pretok_iter_init(&c.it, &tok->pretok, err);
    if (st == MLM_OK && !p.parse_special) {
        st = encode_ordinary(&c, t, len, err);
    } else if (st == MLM_OK) {
        size_t pos = 0;
        while (st == MLM_OK && pos < len) {
            size_t at = 0;
            const mlm_special *s = mlm_specials_find(&tok->specials, t + pos, len - pos, &at);
            size_t stop = s ? pos + at : len;
            if (stop > pos) st = encode_ordinary(&c, t + pos, stop - pos, err);
            if (st == MLM_OK && s) {
                st = mlm_tokens_push(out, s->id);
                if (st != MLM_OK)
                    st = mlm_err_set(err, st, "tokenizer: out of memory for token ids");
                stop += s->len;
            }
            pos = stop;
        }
    }
    mlm_pretok_iter_deinit(&c.it);
    mlm_bpe_scratch_deinit(&c.bpe);
    free(fixed);
    return st;
}

// ---- decoding ----

mlm_status mlm_tokenizer_decode(const mlm_tokenizer *tok, const int32_t *ids, int64_t n, char **out,
                                size_t *len, mlm_error *err) {
    if (!tok || !out || (!ids && n > 0) || n < 0)
        return mlm_err_set(err, MLM_ERR_INVALID_ARG, "tokenizer: bad argument to decode");
    *out = NULL;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t l;
        if (!mlm_tokenizer_token_bytes(tok, ids[i], &l))
            return mlm_err_set(err, MLM_ERR_INVALID_ARG,
                               "%s: decode: id %d at position %lld is not in the vocabulary "
                               "(n_vocab %d)",
                               tok->name, (int)ids[i], (long long)i, (int)tok->n_vocab);
        total += l;
    }
    char *buf = malloc(total + 1);
    if (!buf) return mlm_err_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory (%zu bytes)", total);
    size_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t l;
        const char *p = mlm_tokenizer_token_bytes(tok, ids[i], &l);
        memcpy(buf + o, p, l);
        o += l;
    }
    buf[o] = 0;
    *out = buf;
    if (len) *len = o;
    return MLM_OK;
}
