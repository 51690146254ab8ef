/* tokenizer/tokenizer.c: the public tokenizer API: loading, encoding, decoding, token lists.
 * Loading tells files apart by their content (GGUF magic, JSON, tiktoken text), never by
 * their name alone, and names what it found when it is none of those.
 * Encoding is: repair invalid UTF-8 (U+FFFD, Python's rules), split at special-token text
 * (tiktoken: only with parse_special, tiktoken's allowed_special="all"; Hugging Face: added
 * tokens in two passes with their lstrip / rstrip / single_word flags, added.c, special ones
 * only with parse_special; GGUF: llama.cpp's partition, control tokens only with
 * parse_special), pre-tokenize each ordinary stretch, then BPE each piece (whole-piece
 * lookup first, unless the file turns ignore_merges off; ranks for tiktoken, the merges
 * list for Hugging Face and GGUF). Bytes that are no token (some byte-level vocabularies
 * lack a few) are dropped as each format's own tokenizer drops them: Hugging Face before
 * merging (or as its unk_token), llama.cpp after. Meta's pre-chunking of huge inputs (400k-char
 * pieces, 25k-char runs of whitespace / non-whitespace) is deliberately not replicated: the regex
 * engine here handles arbitrarily long runs, and the result equals tiktoken's encode_ordinary on
 * the whole text. The streaming detokenizer is in detok.c and chat formats in chat.c. */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"
#include "core/mapfile.h"
#include "format/gguf.h"
#include "tokenizer/added.h"
#include "tokenizer/bpe.h"
#include "tokenizer/hf.h"
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
    mlm_pretok_deinit(&tok->word);
    mlm_merges_deinit(&tok->merges);
    mlm_specials_deinit(&tok->specials);
    mlm_vocab_deinit(&tok->vocab);
    free(tok->chat_system);
    free(tok->name);
    free(tok);
}

mlm_status mlm_tokenizer_load_memory(const void *data, size_t len, const char *name,
                                     mlm_tokenizer **out, mlm_error *err) {
    *out = NULL;
    mlm_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", name);
    tok->specials.max_id = -1;
    tok->name = strdup(name);
    if (!tok->name) {
        mlm_tokenizer_free(tok);
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", name);
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
    tok->ignore_merges = 1;
    tok->n_vocab = tok->vocab.n;
    if (tok->specials.max_id >= tok->n_vocab) tok->n_vocab = tok->specials.max_id + 1;
    tok->bos_id = -1;
    tok->eos_id = -1;
    if (tok->flavour == MLM_TOK_LLAMA3)
        tok->bos_id = mlm_tokenizer_special_id(tok, "<|begin_of_text|>");
    st = mlm_chat_detect(tok, NULL, 0, err);
    if (st != MLM_OK) {
        mlm_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return MLM_OK;
}

/* The basename of PATH. */
static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* What a file that is not a tokenizer looks like, by its first bytes, or NULL when it may
 * be tiktoken text (printable, no NUL). */
static const char *not_a_tokenizer(const unsigned char *d, size_t n) {
    if (n >= 9 && d[8] == '{') { /* safetensors: u64 header size, then the JSON header */
        uint64_t h = 0;
        for (int k = 0; k < 8; k++)
            h |= (uint64_t)d[k] << (8 * k);
        if (h >= 2 && h <= n - 8) return "a safetensors checkpoint";
    }
    if (n >= 4 && memcmp(d, "PK\x03\x04", 4) == 0) return "a zip archive (a PyTorch checkpoint?)";
    if (n >= 2 && d[0] == 0x80 && d[1] >= 2 && d[1] <= 5) return "a Python pickle";
    size_t m = n < 4096 ? n : 4096;
    for (size_t i = 0; i < m; i++) {
        if (d[i] >= 0x09 && d[i] != 0x7F) continue;
        /* SentencePiece models are protobuf: field 1 (the pieces), length-delimited. */
        return d[0] == 0x0A ? "binary, like a SentencePiece model (Llama 2 style tokenizer.model)"
                            : "binary, of a kind meshlm does not know";
    }
    return NULL;
}

/* Whether the first line of D[0..N) that is not blank reads "<base64> <rank>". */
static int tiktoken_first_line(const unsigned char *d, size_t n) {
    size_t i = 0;
    while (i < n && (d[i] == ' ' || d[i] == '\t' || d[i] == '\r' || d[i] == '\n'))
        i++;
    size_t a = i;
    while (i < n && ((d[i] >= 'A' && d[i] <= 'Z') || (d[i] >= 'a' && d[i] <= 'z') ||
                     (d[i] >= '0' && d[i] <= '9') || d[i] == '+' || d[i] == '/' || d[i] == '='))
        i++;
    if (i == a || i == n || (d[i] != ' ' && d[i] != '\t')) return 0;
    while (i < n && (d[i] == ' ' || d[i] == '\t'))
        i++;
    a = i;
    while (i < n && d[i] >= '0' && d[i] <= '9')
        i++;
    while (i < n && (d[i] == ' ' || d[i] == '\t' || d[i] == '\r'))
        i++;
    return i > a && (i == n || d[i] == '\n');
}

/* Loads FILE by its content: GGUF magic -> the GGUF vocabulary, then vocab.json -> the
 * legacy layout of its directory, other JSON -> tokenizer.json, text -> tiktoken; anything
 * else is FORMAT naming what it looks like. */
static mlm_status load_file(const char *file, mlm_tokenizer **out, mlm_error *err) {
    mlm_mapfile mf;
    mlm_status st = mlm_mapfile_open(&mf, file, err);
    if (st != MLM_OK) return st;
    const unsigned char *d = mf.data;
    size_t i = 0;
    while (i < mf.size && (d[i] == ' ' || d[i] == '\t' || d[i] == '\r' || d[i] == '\n'))
        i++;
    const char *other = NULL;
    size_t n = strlen(file);
    if (mf.size >= 4 && memcmp(d, "GGUF", 4) == 0) {
        st = mlm_tokenizer_load_gguf_memory(d, mf.size, file, out, err);
    } else if (strcmp(base_name(file), "vocab.json") == 0) { /* its JSON errors named there */
        char *dir = strdup(file);
        char *slash = dir ? strrchr(dir, '/') : NULL;
        if (slash) *slash = 0;
        st = dir ? mlm_hf_load_legacy(slash ? (dir[0] ? dir : "/") : ".", out, err)
                 : mlm_error_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory");
        free(dir);
    } else if (i < mf.size && d[i] == '{') {
        st = mlm_hf_load_json(file, out, err);
    } else if (!tiktoken_first_line(d, mf.size) && (other = not_a_tokenizer(d, mf.size))) {
        st =
            mlm_error_set(err, MLM_ERR_FORMAT,
                          "%s: not a tokenizer meshlm reads: the file is %s (expected a GGUF file, "
                          "a tokenizer.json, vocab.json, or a tiktoken tokenizer.model of "
                          "'<base64> <rank>' lines)",
                          file, other);
    } else if ((i < mf.size && d[i] == '[') || (n >= 5 && strcmp(file + n - 5, ".json") == 0)) {
        st = mlm_hf_load_json(file, out, err); /* names the JSON error */
    } else {
        st = mlm_tokenizer_load_memory(d, mf.size, file, out, err);
    }
    mlm_mapfile_close(&mf);
    return st;
}

mlm_status mlm_tokenizer_load(const char *path, mlm_tokenizer **out, mlm_error *err) {
    if (!path || !out) return mlm_error_set(err, MLM_ERR_INVALID_ARG, "tokenizer: NULL argument");
    *out = NULL;
    char *file = NULL;
    if (mlm_is_dir(path)) {
        file = mlm_tokenizer_locate(path); /* the one search order, shared with the CLI */
        if (!file) file = mlm_gguf_find_in_dir(path);
        if (!file)
            return mlm_error_set(err, MLM_ERR_IO,
                                 "tokenizer: %s has no tokenizer.model, original/tokenizer.model, "
                                 "tokenizer.json, vocab.json with merges.txt, or .gguf file",
                                 path);
    } else {
        file = strdup(path);
        if (!file) return mlm_error_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory");
    }
    mlm_status st = load_file(file, out, err);
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
    const mlm_special *s = mlm_specials_by_id(&tok->specials, id);
    return s && (s->flags & MLM_ADDED_SPECIAL);
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
    const mlm_merges *merges; /* Hugging Face: the merges list; tiktoken: NULL (ranks) */
    mlm_pretok_iter it;
    mlm_bpe_scratch bpe;
    mlm_tokens *out;
    mlm_added_splits pass1, pass2; /* added-token splits (GGUF: partition + scratch) */
    unsigned char *pre;            /* add_prefix_space: " " + the stretch */
    size_t pre_cap;
    unsigned char *kept; /* drop_missing_first: a piece without the bytes that are no token */
    size_t kept_cap;
    unsigned char *norm; /* nfc: the stretch being encoded, normalized (utf8proc's malloc) */
} encode_ctx;

/* Hugging Face without unk_token: BPE of piece P[0..N) with the bytes that are no token
 * left out first (tokenizers' merge_word skips such characters). */
static mlm_status merge_present(encode_ctx *c, const unsigned char *p, size_t n, mlm_error *err) {
    const mlm_vocab *v = &c->tok->vocab;
    size_t i = 0;
    while (i < n && v->byte_rank[p[i]] >= 0)
        i++;
    if (i == n) return mlm_bpe_merge(v, c->merges, p, n, &c->bpe, c->out, err);
    if (n > c->kept_cap) {
        unsigned char *k = realloc(c->kept, n);
        if (!k) return mlm_error_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory");
        c->kept = k;
        c->kept_cap = n;
    }
    size_t m = 0;
    for (i = 0; i < n; i++)
        if (v->byte_rank[p[i]] >= 0) c->kept[m++] = p[i];
    return m ? mlm_bpe_merge(v, c->merges, c->kept, m, &c->bpe, c->out, err) : MLM_OK;
}

/* Pre-tokenizes and BPE-encodes valid UTF-8 TEXT[0..LEN), no special handling (LEN may be
 * 0). */
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
            int32_t r = c->tok->ignore_merges ? mlm_vocab_rank_key(v, text + pa, pb - pa, pk) : -1;
            if (r >= 0) {
                if (out->n == out->cap && tokens_reserve(out, out->n + 1) != MLM_OK)
                    return mlm_error_set(err, MLM_ERR_NOMEM,
                                         "tokenizer: out of memory for token ids");
                out->ids[out->n++] = r;
            } else {
                st = c->tok->drop_missing_first && v->n_missing_bytes
                         ? merge_present(c, text + pa, pb - pa, err)
                         : mlm_bpe_merge(v, c->merges, text + pa, pb - pa, &c->bpe, out, err);
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

/* A Hugging Face text stretch: ByteLevel's add_prefix_space, then encode_ordinary. */
static mlm_status encode_stretch(encode_ctx *c, const unsigned char *text, size_t len,
                                 mlm_error *err) {
    if (!c->tok->add_prefix_space || len == 0 || text[0] == ' ')
        return encode_ordinary(c, text, len, err);
    if (len + 1 > c->pre_cap) {
        unsigned char *p = realloc(c->pre, len + 1);
        if (!p) return mlm_error_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory");
        c->pre = p;
        c->pre_cap = len + 1;
    }
    c->pre[0] = ' ';
    memcpy(c->pre + 1, text, len);
    return encode_ordinary(c, c->pre, len + 1, err);
}

static mlm_status push_id(mlm_tokens *out, int32_t id, mlm_error *err) {
    if (mlm_tokens_push(out, id) != MLM_OK)
        return mlm_error_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory for token ids");
    return MLM_OK;
}

/* TEXT[0..LEN) as the normalizer leaves it, in *OUT / *OUT_LEN: itself without one (or when
 * it is ASCII, which NFC keeps), else its NFC form in c->norm (freed by the next call and at
 * the end of the encode). */
static mlm_status normalize(encode_ctx *c, const unsigned char *text, size_t len,
                            const unsigned char **out, size_t *out_len, mlm_error *err) {
    *out = text, *out_len = len;
    if (!c->tok->nfc) return MLM_OK;
    size_t i = 0;
    while (i < len && text[i] < 0x80)
        i++;
    if (i == len) return MLM_OK;
    free(c->norm);
    c->norm = NULL;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t n = utf8proc_map(text, (utf8proc_ssize_t)len, &dst,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (n < 0)
        return mlm_error_set(err, n == UTF8PROC_ERROR_NOMEM ? MLM_ERR_NOMEM : MLM_ERR_INTERNAL,
                             "tokenizer: NFC normalization failed: %s", utf8proc_errmsg(n));
    c->norm = dst;
    *out = dst, *out_len = (size_t)n;
    return MLM_OK;
}

/* Hugging Face: added tokens that are not normalized are found in the raw text; each stretch
 * between them is normalized (NFC, or as it is), the normalized added tokens found in it, and
 * the rest pre-tokenized (tokenizers' AddedVocabulary::extract_and_normalize). */
static mlm_status encode_hf(encode_ctx *c, const unsigned char *t, size_t len, int parse_special,
                            mlm_error *err) {
    const mlm_tokenizer *tok = c->tok;
    const unsigned char *nt;
    size_t nl;
    if (tok->specials.n == 0) {
        mlm_status st = normalize(c, t, len, &nt, &nl, err);
        return st ? st : encode_stretch(c, nt, nl, err);
    }
    c->pass1.n = 0;
    mlm_status st =
        mlm_added_find(&tok->specials, &tok->word, t, len, 0, parse_special, &c->pass1, err);
    int normalized = (tok->specials.any_flags & MLM_ADDED_NORMALIZED) != 0;
    for (size_t i = 0; i < c->pass1.n && st == MLM_OK; i++) {
        mlm_added_split s1 = c->pass1.v[i];
        if (s1.id >= 0) {
            st = push_id(c->out, s1.id, err);
            continue;
        }
        if ((st = normalize(c, t + s1.a, s1.b - s1.a, &nt, &nl, err))) break;
        if (!normalized) {
            st = encode_stretch(c, nt, nl, err);
            continue;
        }
        c->pass2.n = 0;
        st = mlm_added_find(&tok->specials, &tok->word, nt, nl, MLM_ADDED_NORMALIZED,
                            parse_special, &c->pass2, err);
        for (size_t k = 0; k < c->pass2.n && st == MLM_OK; k++) {
            mlm_added_split s2 = c->pass2.v[k];
            st = s2.id >= 0 ? push_id(c->out, s2.id, err)
                            : encode_stretch(c, nt + s2.a, s2.b - s2.a, err);
        }
    }
    return st;
}

/* GGUF: llama.cpp's special-token partition, then each text stretch. */
static mlm_status encode_gguf(encode_ctx *c, const unsigned char *t, size_t len, int parse_special,
                              mlm_error *err) {
    const mlm_tokenizer *tok = c->tok;
    if (tok->specials.n == 0) return encode_ordinary(c, t, len, err);
    mlm_status st =
        mlm_added_partition(&tok->specials, t, len, parse_special, &c->pass1, &c->pass2, err);
    for (size_t i = 0; i < c->pass1.n && st == MLM_OK; i++) {
        mlm_added_split sp = c->pass1.v[i];
        st = sp.id >= 0 ? push_id(c->out, sp.id, err)
                        : encode_ordinary(c, t + sp.a, sp.b - sp.a, err);
    }
    return st;
}

mlm_status mlm_tokenizer_encode(const mlm_tokenizer *tok, const char *text, size_t len,
                                const mlm_encode_params *params, mlm_tokens *out, mlm_error *err) {
    if (!tok || !out || (!text && len))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "tokenizer: NULL argument to encode");
    mlm_encode_params p = params ? *params : mlm_encode_default_params();
    mlm_status st = MLM_OK;
    if (p.add_bos) {
        if (tok->bos_id < 0)
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "%s: add_bos, but this vocabulary has no BOS", tok->name);
        st = mlm_tokens_push(out, tok->bos_id);
        if (st != MLM_OK) return mlm_error_set(err, st, "tokenizer: out of memory for token ids");
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
        return mlm_error_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory for token ids");
    }
    encode_ctx c = {.tok = tok, .out = out};
    if (tok->flavour == MLM_TOK_HF || tok->flavour == MLM_TOK_GGUF) c.merges = &tok->merges;
    mlm_bpe_scratch_init(&c.bpe);
    st = mlm_pretok_iter_init(&c.it, &tok->pretok, err);
    if (st == MLM_OK && tok->flavour == MLM_TOK_HF) {
        st = encode_hf(&c, t, len, p.parse_special, err);
    } else if (st == MLM_OK && tok->flavour == MLM_TOK_GGUF) {
        st = encode_gguf(&c, t, len, p.parse_special, err);
    } else if (st == MLM_OK && !p.parse_special) {
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
                    st = mlm_error_set(err, st, "tokenizer: out of memory for token ids");
                stop += s->len;
            }
            pos = stop;
        }
    }
    mlm_pretok_iter_deinit(&c.it);
    mlm_bpe_scratch_deinit(&c.bpe);
    mlm_added_splits_deinit(&c.pass1);
    mlm_added_splits_deinit(&c.pass2);
    free(c.pre);
    free(c.kept);
    free(c.norm);
    free(fixed);
    return st;
}

// ---- decoding ----

mlm_status mlm_tokenizer_decode(const mlm_tokenizer *tok, const int32_t *ids, int64_t n, char **out,
                                size_t *len, mlm_error *err) {
    if (!tok || !out || (!ids && n > 0) || n < 0)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "tokenizer: bad argument to decode");
    *out = NULL;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t l;
        if (!mlm_tokenizer_token_bytes(tok, ids[i], &l))
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "%s: decode: id %d at position %lld is not in the vocabulary "
                                 "(n_vocab %d)",
                                 tok->name, (int)ids[i], (long long)i, (int)tok->n_vocab);
        total += l;
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return mlm_error_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory (%zu bytes)", total);
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
