/* tokenizer/hf_legacy.c: the older Hugging Face layout, vocab.json + merges.txt (+
 * tokenizer_config.json), read the way transformers' GPT2Tokenizer builds its backend:
 * BPE without ignore_merges, the ByteLevel pre-tokenizer with GPT-2's pattern and the
 * config's add_prefix_space, the config's added_tokens_decoder in id order, then the named
 * special tokens (bos, eos, unk, sep, pad, cls, mask; GPT2Tokenizer defaults unk, bos and
 * eos to "<|endoftext|>") that are not added yet, as special tokens; add_bos_token
 * prepends bos_token; chat_template picks the chat format. Other tokenizer classes are refused:
 * their pre-tokenizers differ (Qwen2Tokenizer, for one) and only tokenizer.json says what they are.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mapfile.h"
#include "format/json.h"
#include "tokenizer/hf.h"
#include "tokenizer/pretok.h"

#define CONFIG_MAX ((size_t)64 << 20)
#define VOCAB_MAX ((size_t)512 << 20)

/* A special-token field: a string, an object with "content", or null/absent (NULL). */
static const char *token_text(const json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

static mlm_status read_vocab(mlm_hf_builder *b, const char *path, mlm_error *err) {
    json_t *root = NULL;
    mlm_status st = mlm_json_load_file(path, VOCAB_MAX, &root, err);
    if (st != MLM_OK) return st;
    if (!json_is_object(root)) {
        json_decref(root);
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: the top level must be an object", path);
    }
    st = mlm_hfb_vocab_begin(b, (int64_t)json_object_size(root), "vocab", err);
    const char *key;
    size_t klen;
    json_t *val;
    json_object_keylen_foreach(root, key, klen, val) {
        if (st != MLM_OK) break;
        if (!json_is_integer(val)) {
            st = mlm_error_set(err, MLM_ERR_FORMAT, "%s: '%.60s' must map to an integer id, got %s",
                               path, key, mlm_json_type_name(val));
            break;
        }
        st = mlm_hfb_vocab_set(b, key, klen, (int64_t)json_integer_value(val), "vocab", err);
    }
    if (st == MLM_OK) st = mlm_hfb_vocab_end(b, "vocab", err);
    json_decref(root);
    return st;
}

/* merges.txt as tokenizers reads it: lines ("\n" or "\r\n"), "#version" lines skipped,
 * every other line exactly two tokens separated by one space. */
static mlm_status read_merges(mlm_hf_builder *b, const char *path, mlm_error *err) {
    mlm_mapfile mf;
    mlm_status st = mlm_mapfile_open(&mf, path, err);
    if (st != MLM_OK) return st;
    const char *vocab_file = b->file;
    b->file = path; /* messages name merges.txt */
    const char *d = (const char *)mf.data;
    size_t n = mf.size, n_lines = 0;
    for (size_t i = 0; i < n; i++)
        n_lines += d[i] == '\n';
    st = mlm_hfb_merges_begin(b, (int64_t)n_lines + 1, err);
    size_t pos = 0, line = 0;
    int32_t rank = 0;
    char where[48];
    while (st == MLM_OK && pos < n) {
        line++;
        const char *s = d + pos, *nl = memchr(s, '\n', n - pos);
        size_t len = nl ? (size_t)(nl - s) : n - pos;
        pos += len + 1;
        if (len && s[len - 1] == '\r') len--;
        if (len >= 8 && memcmp(s, "#version", 8) == 0) continue;
        const char *sp = memchr(s, ' ', len);
        if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - s))) {
            st = mlm_error_set(err, MLM_ERR_FORMAT,
                               "%s: line %zu: '%.*s' is not two tokens separated by one space",
                               path, line, (int)(len < 60 ? len : 60), s);
            break;
        }
        snprintf(where, sizeof where, "line %zu", line);
        st = mlm_hfb_merge(b, rank++, s, (size_t)(sp - s), sp + 1, len - (size_t)(sp - s) - 1,
                           where, err);
    }
    mlm_mapfile_close(&mf);
    b->file = vocab_file;
    return st;
}

static int by_key_id(const void *a, const void *b) {
    long x = strtol(json_string_value(*(json_t *const *)a), NULL, 10);
    long y = strtol(json_string_value(*(json_t *const *)b), NULL, 10);
    return (x > y) - (x < y);
}

/* added_tokens_decoder: {"<id>": {content, lstrip, rstrip, single_word, normalized,
 * special}}, added in id order. */
static mlm_status read_added(mlm_hf_builder *b, const char *file, const json_t *dec,
                             mlm_error *err) {
    if (!dec || json_is_null(dec)) return MLM_OK;
    if (!json_is_object(dec))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: added_tokens_decoder must be an object",
                             file);
    size_t n = json_object_size(dec), k = 0;
    json_t **keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", file);
    const char *key;
    json_t *val;
    mlm_status st = MLM_OK;
    json_object_foreach((json_t *)dec, key, val) {
        char *end;
        long id = strtol(key, &end, 10);
        if (*end || end == key || id < 0 || id > INT32_MAX - 1) {
            st =
                mlm_error_set(err, MLM_ERR_FORMAT,
                              "%s: added_tokens_decoder: key '%.40s' is not a token id", file, key);
            break;
        }
        keys[k++] = json_string(key);
    }
    if (st == MLM_OK) qsort(keys, k, sizeof *keys, by_key_id);
    char what[600], where[64];
    for (size_t i = 0; i < k && st == MLM_OK; i++) {
        const char *ks = json_string_value(keys[i]);
        const json_t *e = json_object_get(dec, ks);
        snprintf(where, sizeof where, "added_tokens_decoder['%.20s']", ks);
        snprintf(what, sizeof what, "%s: %s", file, where);
        const char *content = NULL;
        unsigned flags = 0;
        st = mlm_json_get_str(what, e, "content", 1, &content, NULL, err);
        if (st == MLM_OK) st = mlm_hfb_added_flags(file, where, e, &flags, err);
        if (st == MLM_OK)
            st =
                mlm_hfb_added(b, strtol(ks, NULL, 10), content,
                              json_string_length(json_object_get(e, "content")), flags, where, err);
    }
    for (size_t i = 0; i < k; i++)
        json_decref(keys[i]);
    free(keys);
    return st;
}

mlm_status mlm_hf_load_legacy(const char *dir, mlm_tokenizer **out, mlm_error *err) {
    *out = NULL;
    char *vocab = mlm_path_join(dir, "vocab.json"), *merges = mlm_path_join(dir, "merges.txt");
    char *config = mlm_path_join(dir, "tokenizer_config.json");
    json_t *cfg = NULL;
    mlm_hf_builder b;
    memset(&b, 0, sizeof b);
    mlm_status st =
        vocab && merges && config ? MLM_OK : mlm_error_set(err, MLM_ERR_NOMEM, "out of memory");
    if (st == MLM_OK && mlm_is_file(config)) st = mlm_json_load_file(config, CONFIG_MAX, &cfg, err);
    if (st == MLM_OK && cfg && !json_is_object(cfg))
        st = mlm_error_set(err, MLM_ERR_FORMAT, "%s: the top level must be an object", config);
    int prefix = 0, add_bos = 0;
    const char *cls = NULL;
    if (st == MLM_OK && cfg) {
        st = mlm_json_get_str(config, cfg, "tokenizer_class", 0, &cls, NULL, err);
        if (st == MLM_OK)
            st = mlm_json_get_bool(config, cfg, "add_prefix_space", 0, &prefix, NULL, err);
        if (st == MLM_OK)
            st = mlm_json_get_bool(config, cfg, "add_bos_token", 0, &add_bos, NULL, err);
    }
    if (st == MLM_OK && cls && strcmp(cls, "GPT2Tokenizer") != 0 &&
        strcmp(cls, "GPT2TokenizerFast") != 0)
        st = mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                           "%s: tokenizer_class '%.60s' with vocab.json + merges.txt is not "
                           "supported (only GPT2Tokenizer: other classes bring their own "
                           "pre-tokenizer; use their tokenizer.json)",
                           config, cls);
    if (st == MLM_OK) st = mlm_hfb_init(&b, vocab, err);
    if (st == MLM_OK) st = read_vocab(&b, vocab, err);
    if (st == MLM_OK) st = read_merges(&b, merges, err);
    b.file = config; /* the rest is named after the config */
    if (st == MLM_OK && cfg)
        st = read_added(&b, config, json_object_get(cfg, "added_tokens_decoder"), err);
    /* The named special tokens, in transformers' SPECIAL_TOKENS_ATTRIBUTES order. */
    static const char *const NAMED[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                        "pad_token", "cls_token", "mask_token"};
    const char *bos_text = NULL;
    for (size_t i = 0; i < sizeof NAMED / sizeof NAMED[0] && st == MLM_OK; i++) {
        const json_t *v = cfg ? json_object_get(cfg, NAMED[i]) : NULL;
        const char *text = token_text(v);
        if (!v && i <= 2) text = "<|endoftext|>"; /* GPT2Tokenizer's defaults */
        if (i == 0) bos_text = text;
        if (!text || !text[0]) continue;
        size_t len = strlen(text);
        int known = 0;
        for (int32_t k = 0; k < b.n_added && !known; k++)
            known = b.added[k].len == len && memcmp(b.added[k].text, text, len) == 0;
        if (!known) st = mlm_hfb_added(&b, -1, text, len, MLM_ADDED_SPECIAL, NAMED[i], err);
    }
    int32_t bos_id = -1;
    if (st == MLM_OK && add_bos) {
        bos_id = bos_text ? mlm_hfb_id_of(&b, bos_text, strlen(bos_text)) : -1;
        if (bos_id < 0)
            st = mlm_error_set(err, MLM_ERR_FORMAT, "%s: add_bos_token is true but bos_token is %s",
                               config, bos_text ? "not a token" : "null");
    }
    mlm_hf_pretok pre = {.n_steps = 1, .add_prefix_space = prefix};
    pre.step[0] = (mlm_pretok_spec){MLM_PRETOK_GPT2, 0, MLM_SPLIT_ISOLATED, 0, "ByteLevel"};
    if (st == MLM_OK && cfg) st = mlm_hfb_config_template(&b, config, cfg, err);
    if (st == MLM_OK) st = mlm_hfb_finish(&b, &pre, 0, bos_id, out, err);
    mlm_hfb_deinit(&b);
    json_decref(cfg);
    free(vocab);
    free(merges);
    free(config);
    return st;
}
