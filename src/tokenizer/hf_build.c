/* tokenizer/hf_build.c: assembling a Hugging Face (or GGUF) byte-level BPE tokenizer from
 * the pieces its loaders read (see hf.h). Vocabulary keys and merges are GPT-2 byte-level
 * spellings, decoded here to raw bytes once; merges become (left id, right id) -> (rank, merged
 * id); added tokens get the ids tokenizers would give them, checked against the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/added.h"
#include "tokenizer/bytelevel.h"
#include "tokenizer/hf.h"
#include "tokenizer/tokenizer.h"

mlm_status mlm_hfb_init(mlm_hf_builder *b, const char *file, mlm_error *err) {
    memset(b, 0, sizeof *b);
    b->file = file;
    b->max_added_id = -1;
    b->eos_id = -1;
    b->unk_id = -1;
    b->tok = calloc(1, sizeof *b->tok);
    if (b->tok) b->tok->name = strdup(file);
    if (!b->tok || !b->tok->name) {
        mlm_hfb_deinit(b);
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", file);
    }
    b->tok->flavour = MLM_TOK_HF;
    b->tok->specials.max_id = -1;
    b->tok->bos_id = -1;
    b->tok->eos_id = -1;
    return MLM_OK;
}

void mlm_hfb_deinit(mlm_hf_builder *b) {
    if (!b) return;
    mlm_tokenizer_free(b->tok);
    free(b->bytes);
    free(b->at);
    free(b->buf);
    free(b->added);
    memset(b, 0, sizeof *b);
}

// ---- vocabulary ----

mlm_status mlm_hfb_vocab_begin(mlm_hf_builder *b, int64_t n, const char *where, mlm_error *err) {
    if (n < 1 || n > INT32_MAX / 2)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s has %lld entries (expected 1..%d)",
                             b->file, where, (long long)n, INT32_MAX / 2);
    b->n_vocab = (int32_t)n;
    b->at = calloc((size_t)n, sizeof *b->at);
    b->cap_bytes = (size_t)n * 8;
    b->bytes = malloc(b->cap_bytes);
    if (!b->at || !b->bytes)
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory for %lld tokens", b->file,
                             (long long)n);
    return MLM_OK;
}

/* Grows *BUF to at least NEED bytes. */
static int grow(unsigned char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    unsigned char *p = realloc(*buf, c);
    if (!p) return -1;
    *buf = p;
    *cap = c;
    return 0;
}

/* Decodes the byte-level spelling S[0..N) into OUT; -1 with a FORMAT message on failure. */
static long decode(const mlm_hf_builder *b, const char *s, size_t n, unsigned char *out,
                   const char *where, mlm_error *err) {
    size_t bad;
    uint32_t cp;
    long m = mlm_bytelevel_decode(s, n, out, &bad, &cp);
    if (m >= 0) return m;
    if (cp)
        mlm_error_set(err, MLM_ERR_FORMAT,
                      "%s: %s: '%.60s': U+%04X at byte %zu is not a byte-level character (GPT-2 "
                      "bytes_to_unicode)",
                      b->file, where, s, (unsigned)cp, bad);
    else
        mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s: invalid UTF-8 at byte %zu", b->file, where,
                      bad);
    return -1;
}

/* Checks that ID can take a LEN-byte token and makes room for its bytes. */
static mlm_status vocab_slot(mlm_hf_builder *b, const char *key, size_t len, int64_t id,
                             const char *where, mlm_error *err) {
    if (id < 0 || id >= b->n_vocab)
        return mlm_error_set(
            err, MLM_ERR_FORMAT,
            "%s: %s: '%.60s' has id %lld, outside 0..%d (ids must be dense from 0)", b->file, where,
            key, (long long)id, (int)b->n_vocab - 1);
    if (b->at[id].len)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: %s: id %lld is given to two entries ('%.60s')", b->file, where,
                             (long long)id, key);
    if (len == 0)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s: empty token (id %lld)", b->file, where,
                             (long long)id);
    if (b->n_bytes + len >= UINT32_MAX)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s: token bytes exceed 4 GiB", b->file,
                             where);
    if (grow(&b->bytes, &b->cap_bytes, b->n_bytes + len) != 0)
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", b->file);
    return MLM_OK;
}

mlm_status mlm_hfb_vocab_set(mlm_hf_builder *b, const char *key, size_t len, int64_t id,
                             const char *where, mlm_error *err) {
    mlm_status st = vocab_slot(b, key, len, id, where, err);
    if (st != MLM_OK) return st;
    long m = decode(b, key, len, b->bytes + b->n_bytes, where, err);
    if (m < 0) return MLM_ERR_FORMAT;
    if (m > MLM_VOCAB_MAX_TOKEN_BYTES)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: %s: '%.60s' has %ld bytes, over the limit %d", b->file, where,
                             key, m, MLM_VOCAB_MAX_TOKEN_BYTES);
    b->at[id].off = (uint32_t)b->n_bytes;
    b->at[id].len = (uint32_t)m;
    b->n_bytes += (size_t)m;
    return MLM_OK;
}

mlm_status mlm_hfb_vocab_set_raw(mlm_hf_builder *b, const char *bytes, size_t len, int64_t id,
                                 const char *where, mlm_error *err) {
    mlm_status st = vocab_slot(b, bytes, len, id, where, err);
    if (st != MLM_OK) return st;
    if (len > MLM_VOCAB_MAX_TOKEN_BYTES)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: %s: '%.60s' has %zu bytes, over the limit %d", b->file, where,
                             bytes, len, MLM_VOCAB_MAX_TOKEN_BYTES);
    memcpy(b->bytes + b->n_bytes, bytes, len);
    b->at[id].off = (uint32_t)b->n_bytes;
    b->at[id].len = (uint32_t)len;
    b->n_bytes += len;
    return MLM_OK;
}

mlm_status mlm_hfb_vocab_end(mlm_hf_builder *b, const char *where, mlm_error *err) {
    for (int32_t i = 0; i < b->n_vocab; i++)
        if (b->at[i].len == 0)
            return mlm_error_set(err, MLM_ERR_FORMAT,
                                 "%s: %s: no entry has id %d (ids must be 0..%d, each once)",
                                 b->file, where, (int)i, (int)b->n_vocab - 1);
    char what[600];
    snprintf(what, sizeof what, "%s: %s", b->file, where);
    mlm_status st = mlm_vocab_build(&b->tok->vocab, b->bytes, b->at, b->n_vocab, what, err);
    b->bytes = NULL; /* owned by the vocabulary now, or freed */
    b->at = NULL;
    return st;
}

// ---- merges ----

mlm_status mlm_hfb_merges_begin(mlm_hf_builder *b, int64_t n, mlm_error *err) {
    mlm_status st = mlm_merges_init(&b->tok->merges, n, err);
    if (st != MLM_OK) mlm_error_prefix(err, "%s", b->file);
    return st;
}

mlm_status mlm_hfb_merge(mlm_hf_builder *b, int32_t rank, const char *a, size_t la, const char *bb,
                         size_t lb, const char *where, mlm_error *err) {
    const mlm_vocab *v = &b->tok->vocab;
    if (!v->n || !b->tok->merges.slots)
        return mlm_error_set(err, MLM_ERR_INTERNAL, "%s: merges before the vocabulary", b->file);
    if (grow(&b->buf, &b->cap_buf, la + lb + 1) != 0)
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", b->file);
    long na = decode(b, a, la, b->buf, where, err);
    if (na < 0) return MLM_ERR_FORMAT;
    long nb = decode(b, bb, lb, b->buf + na, where, err);
    if (nb < 0) return MLM_ERR_FORMAT;
    int32_t ra = na ? mlm_vocab_rank(v, b->buf, (size_t)na) : -1;
    int32_t rb = nb ? mlm_vocab_rank(v, b->buf + na, (size_t)nb) : -1;
    int32_t rn = mlm_vocab_rank(v, b->buf, (size_t)(na + nb));
    if (ra < 0 || rb < 0)
        return mlm_error_set(
            err, MLM_ERR_FORMAT, "%s: %s ('%.*s' '%.*s'): '%.*s' is not in the vocabulary", b->file,
            where, (int)(la < 60 ? la : 60), a, (int)(lb < 60 ? lb : 60), bb,
            ra < 0 ? (int)(la < 60 ? la : 60) : (int)(lb < 60 ? lb : 60), ra < 0 ? a : bb);
    if (rn < 0)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: %s ('%.*s' '%.*s'): the merged token is not in the vocabulary",
                             b->file, where, (int)(la < 60 ? la : 60), a, (int)(lb < 60 ? lb : 60),
                             bb);
    int32_t old_id;
    if (b->merge_keep_first && mlm_merges_get(&b->tok->merges, ra, rb, &old_id) >= 0) return MLM_OK;
    mlm_merges_put(&b->tok->merges, ra, rb, rank, rn);
    return MLM_OK;
}

// ---- added tokens ----

int32_t mlm_hfb_id_of(const mlm_hf_builder *b, const char *content, size_t len) {
    for (int32_t i = 0; i < b->n_added; i++)
        if (b->added[i].len == len && memcmp(b->added[i].text, content, len) == 0)
            return b->added[i].id;
    const mlm_vocab *v = &b->tok->vocab;
    if (!v->n || len == 0 || len > 4 * MLM_VOCAB_MAX_TOKEN_BYTES) return -1;
    unsigned char tmp[4 * MLM_VOCAB_MAX_TOKEN_BYTES];
    size_t bad;
    uint32_t cp;
    long m = mlm_bytelevel_decode(content, len, tmp, &bad, &cp);
    return m > 0 ? mlm_vocab_rank(v, tmp, (size_t)m) : -1;
}

mlm_status mlm_hfb_added(mlm_hf_builder *b, int64_t id, const char *content, size_t len,
                         unsigned flags, const char *where, mlm_error *err) {
    if (len == 0) return MLM_OK; /* tokenizers ignores empty added tokens */
    if (len > MLM_VOCAB_MAX_TOKEN_BYTES)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: %s: '%.40s...' has %zu bytes, over the limit %d", b->file, where,
                             content, len, MLM_VOCAB_MAX_TOKEN_BYTES);
    /* With the file's ids (GGUF) every added token is a vocabulary token, whose bytes the
     * vocabulary already checked for repeats. */
    for (int32_t i = 0; i < b->n_added && !b->keep_ids; i++)
        if (b->added[i].len == len && memcmp(b->added[i].text, content, len) == 0)
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s: '%.60s' is listed twice", b->file,
                                 where, content);
    int64_t hf_id = b->keep_ids ? id : mlm_hfb_id_of(b, content, len);
    if (hf_id < 0) {
        int64_t nv = b->tok->vocab.n;
        hf_id = b->max_added_id >= nv ? b->max_added_id + 1 : nv;
    }
    if (hf_id > INT32_MAX - 1)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s: too many added tokens", b->file, where);
    if (id >= 0 && id != hf_id)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: %s: '%.60s' has id %lld, but tokenizers gives it %lld (a token "
                             "that is not in the vocabulary takes the next id after the vocabulary "
                             "and the added tokens before it)",
                             b->file, where, content, (long long)id, (long long)hf_id);
    if (hf_id > b->max_added_id) b->max_added_id = hf_id;
    if (b->n_added == b->cap_added) {
        int32_t cap = b->cap_added ? 2 * b->cap_added : 64;
        mlm_special_def *p = realloc(b->added, (size_t)cap * sizeof *p);
        if (!p) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", b->file);
        b->added = p;
        b->cap_added = cap;
    }
    b->added[b->n_added++] = (mlm_special_def){(int32_t)hf_id, content, len, flags};
    return MLM_OK;
}

// ---- finishing ----

mlm_status mlm_hfb_finish(mlm_hf_builder *b, const mlm_hf_pretok *pre, int ignore_merges,
                          int32_t bos_id, mlm_tokenizer **out, mlm_error *err) {
    mlm_tokenizer *tok = b->tok;
    *out = NULL;
    if (!tok->vocab.n || !tok->merges.slots)
        return mlm_error_set(err, MLM_ERR_INTERNAL, "%s: incomplete tokenizer", b->file);
    mlm_status st = mlm_specials_build(&tok->specials, b->added, b->n_added, err);
    if (st == MLM_OK) st = mlm_pretok_init_steps(&tok->pretok, pre->step, pre->n_steps, err);
    if (st == MLM_OK) st = mlm_merges_index_bytes(&tok->merges, tok->vocab.byte_rank, err);
    if (st == MLM_OK && (tok->specials.any_flags & MLM_ADDED_SINGLE_WORD))
        st = mlm_pretok_init_hf(&tok->word, MLM_ADDED_WORD_CLASS, 0, "single_word class", err);
    if (st != MLM_OK) return st;
    tok->ignore_merges = ignore_merges;
    tok->add_prefix_space = pre->add_prefix_space;
    tok->bos_id = bos_id;
    tok->eos_id = b->eos_id;
    /* tokenizers drops a character that is no token before merging, unless unk_token
     * stands for it; llama.cpp keeps it as a symbol that never merges and drops it after. */
    tok->merges.unk_id = tok->flavour == MLM_TOK_HF ? b->unk_id : -1;
    tok->merges.fuse_unk = b->fuse_unk;
    tok->drop_missing_first = tok->flavour == MLM_TOK_HF && b->unk_id < 0;
    tok->n_vocab = tok->vocab.n;
    if (tok->specials.max_id >= tok->n_vocab) tok->n_vocab = tok->specials.max_id + 1;
    st = mlm_chat_detect(tok, b->chat_template, b->chat_template_len, err);
    if (st != MLM_OK) return st;
    *out = tok;
    b->tok = NULL;
    return MLM_OK;
}

mlm_status mlm_hfb_added_flags(const char *file, const char *where, const json_t *e,
                               unsigned *flags, mlm_error *err) {
    static const struct {
        const char *key;
        unsigned flag;
        int def;
    } F[] = {{"special", MLM_ADDED_SPECIAL, 0},
             {"lstrip", MLM_ADDED_LSTRIP, 0},
             {"rstrip", MLM_ADDED_RSTRIP, 0},
             {"single_word", MLM_ADDED_SINGLE_WORD, 0},
             {"normalized", MLM_ADDED_NORMALIZED, 1}};
    char what[600];
    snprintf(what, sizeof what, "%s: %s", file, where);
    *flags = 0;
    for (size_t k = 0; k < sizeof F / sizeof F[0]; k++) {
        int on = F[k].def;
        mlm_status st = mlm_json_get_bool(what, e, F[k].key, 0, &on, NULL, err);
        if (st != MLM_OK) return st;
        if (on) *flags |= F[k].flag;
    }
    return MLM_OK;
}

mlm_status mlm_hfb_config_template(mlm_hf_builder *b, const char *config, const json_t *cfg,
                                   mlm_error *err) {
    const json_t *t = json_object_get(cfg, "chat_template");
    if (!t || json_is_null(t)) return MLM_OK;
    if (json_is_array(t)) {
        size_t i;
        const json_t *e;
        json_array_foreach(t, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (name && strcmp(name, "default") == 0) t = json_object_get(e, "template");
        }
    }
    if (!json_is_string(t))
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: chat_template must be a string (or a list of {name, template} "
                             "with a \"default\" one), got %s",
                             config, mlm_json_type_name(t));
    b->chat_template = json_string_value(t);
    b->chat_template_len = json_string_length(t);
    return MLM_OK;
}
