/* tokenizer/hf_json.c: reading a Hugging Face tokenizer.json (tokenizers' serialization).
 * Accepted: model BPE over GPT-2 byte-level spellings (merges as "a b" strings or [a, b]
 * pairs; ignore_merges; dropout null; no subword prefix / word suffix; unk_token and
 * fuse_unk for the single bytes a vocabulary may lack, byte_fallback only when none is
 * missing); normalizer null or NFC (Qwen2's, alone or as a one-step Sequence; applied with
 * utf8proc); the pre-tokenizer ByteLevel (use_regex: GPT-2's pattern;
 * add_prefix_space honoured), or a Sequence of Split (Regex | String, any behavior,
 * invert) and Digits (individual_digits) steps ending with one ByteLevel (add_prefix_space
 * only when it is the only step), regexes compiled with PCRE2; decoder ByteLevel or null;
 * post_processor null, ByteLevel, TemplateProcessing with at most one special token before
 * $A (that token becomes the BOS add_bos prepends), or a Sequence of those; added_tokens
 * with their flags. Anything else is refused: UNSUPPORTED naming the component and its
 * type. truncation and padding are ignored: meshlm never truncates or pads. Loaded from a
 * path, the tokenizer_config.json beside it gives the chat template. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mapfile.h"
#include "format/json.h"
#include "tokenizer/bytelevel.h"
#include "tokenizer/hf.h"
#include "tokenizer/pretok.h"
#include "tokenizer/tokenizer.h"

/* The "type" of a component object, or NULL. */
static const char *type_of(const json_t *v) {
    return json_is_object(v) ? json_string_value(json_object_get(v, "type")) : NULL;
}

static int is_type(const json_t *v, const char *t) {
    const char *x = type_of(v);
    return x && strcmp(x, t) == 0;
}

/* UNSUPPORTED "FILE: WHERE: type 'T' is not supported (WHY)". */
static mlm_status unsupported_type(const char *file, const char *where, const json_t *v,
                                   const char *why, mlm_error *err) {
    const char *t = type_of(v);
    if (!json_is_object(v))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s must be an object or null, got %s", file,
                             where, mlm_json_type_name(v));
    if (!t) return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s: missing field 'type'", file, where);
    return mlm_error_set(err, MLM_ERR_UNSUPPORTED, "%s: %s: type '%.60s' is not supported (%s)",
                         file, where, t, why);
}

/* Reads an optional boolean field KEY of OBJ into *OUT (DEF when absent or null). */
static mlm_status opt_bool(const char *file, const char *where, const json_t *obj, const char *key,
                           int def, int *out, mlm_error *err) {
    char what[600];
    snprintf(what, sizeof what, "%s: %s", file, where);
    *out = def;
    return mlm_json_get_bool(what, obj, key, 0, out, NULL, err);
}

// ---- components ----

/* *NFC = 1 for Unicode NFC (Qwen2's normalizer); no normalizer at all leaves it 0. */
static mlm_status check_normalizer(const char *file, const json_t *v, int *nfc, mlm_error *err) {
    *nfc = 0;
    if (!v || json_is_null(v)) return MLM_OK;
    /* An empty Sequence normalizes nothing; a Sequence of one NFC is NFC. */
    if (is_type(v, "Sequence")) {
        const json_t *list = json_object_get(v, "normalizers");
        if (json_is_array(list) && json_array_size(list) == 0) return MLM_OK;
        if (json_is_array(list) && json_array_size(list) == 1) v = json_array_get(list, 0);
    }
    if (is_type(v, "NFC")) {
        *nfc = 1;
        return MLM_OK;
    }
    return unsupported_type(file, "normalizer", v, "meshlm reads tokenizers without a normalizer "
                            "or with NFC", err);
}

static mlm_status check_decoder(const char *file, const json_t *v, mlm_error *err) {
    if (!v || json_is_null(v) || is_type(v, "ByteLevel")) return MLM_OK;
    return unsupported_type(file, "decoder", v, "only ByteLevel or null", err);
}

/* ByteLevel pre-tokenizer fields: add_prefix_space (required, as in tokenizers), use_regex
 * (default true). */
static mlm_status byte_level(const char *file, const char *where, const json_t *v, int *prefix,
                             int *regex, mlm_error *err) {
    char what[600];
    snprintf(what, sizeof what, "%s: %s", file, where);
    mlm_status st = mlm_json_get_bool(what, v, "add_prefix_space", 1, prefix, NULL, err);
    if (st == MLM_OK) st = opt_bool(file, where, v, "use_regex", 1, regex, err);
    return st;
}

static const char PRETOK_FORMS[] =
    "meshlm reads ByteLevel, or a Sequence of Split and Digits steps ending with ByteLevel";

/* The step of a Split's behavior NAME. UNSUPPORTED for a name tokenizers does not have. */
static mlm_status split_behavior(const char *file, const char *where, const char *name,
                                 mlm_split_behavior *out, mlm_error *err) {
    static const struct {
        const char *name;
        mlm_split_behavior b;
    } B[] = {{"Isolated", MLM_SPLIT_ISOLATED},
             {"Removed", MLM_SPLIT_REMOVED},
             {"MergedWithPrevious", MLM_SPLIT_MERGED_PREV},
             {"MergedWithNext", MLM_SPLIT_MERGED_NEXT},
             {"Contiguous", MLM_SPLIT_CONTIGUOUS}};
    for (size_t i = 0; i < sizeof B / sizeof B[0]; i++)
        if (strcmp(name, B[i].name) == 0) {
            *out = B[i].b;
            return MLM_OK;
        }
    return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                         "%s: %s: Split behavior '%.40s' is not supported (Isolated, Removed, "
                         "MergedWithPrevious, MergedWithNext or Contiguous)",
                         file, where, name);
}

/* Split(pattern, behavior, invert) into step S. */
static mlm_status split(const char *file, const char *where, const json_t *v, mlm_pretok_spec *s,
                        mlm_error *err) {
    char what[600];
    snprintf(what, sizeof what, "%s: %s", file, where);
    const json_t *pat = json_object_get(v, "pattern");
    if (!json_is_object(pat))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s: field 'pattern' must be an object", file,
                             where);
    const char *re = NULL, *lit = NULL, *behavior = NULL;
    snprintf(what, sizeof what, "%s: %s.pattern", file, where);
    mlm_status st = mlm_json_get_str(what, pat, "Regex", 0, &re, NULL, err);
    if (st == MLM_OK) st = mlm_json_get_str(what, pat, "String", 0, &lit, NULL, err);
    if (st != MLM_OK) return st;
    if (!re == !lit)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: %s.pattern: needs exactly one of 'Regex' or 'String'", file,
                             where);
    snprintf(what, sizeof what, "%s: %s", file, where);
    st = mlm_json_get_str(what, v, "behavior", 1, &behavior, NULL, err);
    int invert = 0;
    if (st == MLM_OK) st = mlm_json_get_bool(what, v, "invert", 1, &invert, NULL, err);
    if (st == MLM_OK) st = split_behavior(file, where, behavior, &s->behavior, err);
    if (st != MLM_OK) return st;
    /* tokenizers compiles the regex with Oniguruma, meshlm with PCRE2; the two read \h and
     * \H differently (hex digit there, horizontal space here): refuse rather than guess. */
    for (const char *c = re; c && *c; c++) {
        if (*c != '\\') continue;
        if (c[1] == 'h' || c[1] == 'H')
            return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                                 "%s: %s.pattern: \\%c means a hex digit to Oniguruma (tokenizers) "
                                 "but horizontal space to PCRE2; not supported",
                                 file, where, c[1]);
        if (c[1]) c++;
    }
    s->pattern = re ? re : lit;
    s->literal = lit != NULL;
    s->invert = invert;
    return MLM_OK;
}

/* One component of the pre-tokenizer, appended to PRE (ByteLevel only as the last one:
 * steps after it would see byte-level characters, parse_pretok checks). */
static mlm_status pretok_step(const char *file, const char *where, const json_t *v,
                              mlm_hf_pretok *pre, mlm_error *err) {
    int i = pre->n_steps;
    mlm_pretok_spec *s = &pre->step[i];
    memset(s, 0, sizeof *s);
    snprintf(pre->where[i], sizeof pre->where[i], "%s: %s", file, where);
    s->where = pre->where[i];
    mlm_status st = MLM_OK;
    if (is_type(v, "ByteLevel")) {
        int prefix = 0, regex = 1;
        st = byte_level(file, where, v, &prefix, &regex, err);
        /* tokenizers prepends the space to every piece the steps before made. */
        if (st == MLM_OK && prefix && i > 0)
            return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                                 "%s: %s: ByteLevel with add_prefix_space true after other "
                                 "pre-tokenizers is not supported (only alone)",
                                 file, where);
        pre->add_prefix_space = prefix;
        if (st != MLM_OK || !regex) return st;
        *s = (mlm_pretok_spec){MLM_PRETOK_GPT2, 0, MLM_SPLIT_ISOLATED, 0, pre->where[i]};
    } else if (is_type(v, "Digits")) {
        /* Rust's char::is_numeric is \p{N}: one piece per digit, or per run of digits. */
        char what[600];
        snprintf(what, sizeof what, "%s: %s", file, where);
        int each = 0;
        st = mlm_json_get_bool(what, v, "individual_digits", 1, &each, NULL, err);
        s->pattern = "\\p{N}";
        s->behavior = each ? MLM_SPLIT_ISOLATED : MLM_SPLIT_CONTIGUOUS;
    } else if (is_type(v, "Split")) {
        st = split(file, where, v, s, err);
    } else {
        return unsupported_type(file, where, v, PRETOK_FORMS, err);
    }
    if (st == MLM_OK) pre->n_steps++;
    return st;
}

static mlm_status parse_pretok(const char *file, const json_t *v, mlm_hf_pretok *pre,
                               mlm_error *err) {
    memset(pre, 0, sizeof *pre);
    if (!v || json_is_null(v))
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: pre_tokenizer: null is not supported (a byte-level BPE needs the "
                             "ByteLevel pre-tokenizer)",
                             file);
    if (is_type(v, "ByteLevel")) return pretok_step(file, "pre_tokenizer", v, pre, err);
    if (!is_type(v, "Sequence"))
        return unsupported_type(file, "pre_tokenizer", v, PRETOK_FORMS, err);
    const json_t *list = json_object_get(v, "pretokenizers");
    if (!json_is_array(list))
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: pre_tokenizer: field 'pretokenizers' must be an array", file);
    size_t n = json_array_size(list), n_bytelevel = 0;
    char where[64], types[200] = "";
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(list, i);
        snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%zu]", i);
        if (!is_type(e, "Split") && !is_type(e, "Digits") && !is_type(e, "ByteLevel"))
            return unsupported_type(file, where, e, PRETOK_FORMS, err);
        n_bytelevel += is_type(e, "ByteLevel");
        size_t used = strlen(types);
        snprintf(types + used, sizeof types - used, "%s%s", i ? ", " : "", type_of(e));
    }
    if (n_bytelevel != 1 || !is_type(json_array_get(list, n - 1), "ByteLevel") ||
        n > MLM_PRETOK_MAX_STEPS)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: pre_tokenizer: a Sequence of %zu (%s) is not supported (%s, at "
                             "most %d)",
                             file, n, types, PRETOK_FORMS, MLM_PRETOK_MAX_STEPS);
    for (size_t i = 0; i < n; i++) {
        snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%zu]", i);
        mlm_status st = pretok_step(file, where, json_array_get(list, i), pre, err);
        if (st != MLM_OK) return st;
    }
    return MLM_OK;
}

/* TemplateProcessing: the special token before $A in the single template, if any. */
static mlm_status template_bos(const char *file, const char *where, const json_t *v, int64_t *bos,
                               mlm_error *err) {
    const json_t *single = json_object_get(v, "single");
    if (!json_is_array(single))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s: field 'single' must be an array", file,
                             where);
    size_t i, n_before = 0, n_after = 0, n_seq = 0;
    const char *name = NULL;
    const json_t *item;
    json_array_foreach(single, i, item) {
        const json_t *sp = json_object_get(item, "SpecialToken");
        const json_t *seq = json_object_get(item, "Sequence");
        if (json_is_object(seq)) {
            const char *id = json_string_value(json_object_get(seq, "id"));
            if (!id || strcmp(id, "A") != 0)
                return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                                     "%s: %s: single template uses sequence '%s' (only $A)", file,
                                     where, id ? id : "?");
            n_seq++;
        } else if (json_is_object(sp)) {
            name = json_string_value(json_object_get(sp, "id"));
            if (!name)
                return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s: single[%zu]: missing 'id'", file,
                                     where, i);
            if (n_seq)
                n_after++;
            else
                n_before++;
        } else {
            return mlm_error_set(err, MLM_ERR_FORMAT,
                                 "%s: %s: single[%zu] is neither SpecialToken nor Sequence", file,
                                 where, i);
        }
    }
    if (n_seq != 1 || n_before > 1 || n_after > 0)
        return mlm_error_set(
            err, MLM_ERR_UNSUPPORTED,
            "%s: %s: the single template adds %zu token(s) before and %zu after $A; "
            "meshlm supports at most one before (a BOS) and none after",
            file, where, n_before, n_after);
    if (!n_before) return MLM_OK;
    const json_t *ids =
        json_object_get(json_object_get(json_object_get(v, "special_tokens"), name), "ids");
    if (!json_is_array(ids) || json_array_size(ids) != 1 ||
        !json_is_integer(json_array_get(ids, 0)) || json_integer_value(json_array_get(ids, 0)) < 0)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: %s: special_tokens['%.60s'].ids must be one non-negative id",
                             file, where, name);
    *bos = json_integer_value(json_array_get(ids, 0));
    return MLM_OK;
}

static mlm_status parse_post(const char *file, const json_t *v, int64_t *bos, mlm_error *err) {
    *bos = -1;
    if (!v || json_is_null(v) || is_type(v, "ByteLevel")) return MLM_OK;
    if (is_type(v, "TemplateProcessing")) return template_bos(file, "post_processor", v, bos, err);
    const char *why = "only ByteLevel, TemplateProcessing or a Sequence of them";
    if (!is_type(v, "Sequence")) return unsupported_type(file, "post_processor", v, why, err);
    const json_t *list = json_object_get(v, "processors");
    if (!json_is_array(list))
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: post_processor: field 'processors' must be an array", file);
    size_t i;
    const json_t *e;
    char where[64];
    json_array_foreach(list, i, e) {
        snprintf(where, sizeof where, "post_processor.processors[%zu]", i);
        if (is_type(e, "ByteLevel")) continue;
        if (!is_type(e, "TemplateProcessing")) return unsupported_type(file, where, e, why, err);
        if (*bos >= 0)
            return mlm_error_set(err, MLM_ERR_UNSUPPORTED, "%s: %s: a second TemplateProcessing",
                                 file, where);
        mlm_status st = template_bos(file, where, e, bos, err);
        if (st != MLM_OK) return st;
    }
    return MLM_OK;
}

/* The model's options. */
typedef struct model_opts {
    int ignore_merges, fuse_unk, byte_fallback;
    const char *unk_token; /* borrowed from the JSON, NULL: none */
    size_t unk_len;
} model_opts;

static mlm_status check_model(const char *file, const json_t *m, model_opts *o, mlm_error *err) {
    if (!json_is_object(m))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s 'model'", file,
                             m ? "expected an object for" : "missing field");
    const char *t = type_of(m);
    if (!t && !json_object_get(m, "merges"))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: model: missing field 'type'", file);
    if (t && strcmp(t, "BPE") != 0)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: model: type '%.60s' is not supported (only byte-level 'BPE')",
                             file, t);
    const json_t *d = json_object_get(m, "dropout");
    if (d && !json_is_null(d) && !(json_is_number(d) && json_number_value(d) == 0))
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: model: dropout is not supported (random merges; only null)",
                             file);
    static const char *const AFFIX[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const json_t *a = json_object_get(m, AFFIX[i]);
        if (a && !json_is_null(a) && !(json_is_string(a) && json_string_length(a) == 0))
            return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                                 "%s: model: %s is not supported (only null or \"\")", file,
                                 AFFIX[i]);
    }
    mlm_status st = opt_bool(file, "model", m, "ignore_merges", 0, &o->ignore_merges, err);
    if (st == MLM_OK) st = opt_bool(file, "model", m, "fuse_unk", 0, &o->fuse_unk, err);
    if (st == MLM_OK) st = opt_bool(file, "model", m, "byte_fallback", 0, &o->byte_fallback, err);
    const json_t *unk = json_object_get(m, "unk_token");
    if (st == MLM_OK && unk && !json_is_null(unk) && !json_is_string(unk))
        st = mlm_error_set(err, MLM_ERR_FORMAT,
                           "%s: model: unk_token must be a string or null, got %s", file,
                           mlm_json_type_name(unk));
    o->unk_token = json_string_value(unk);
    o->unk_len = o->unk_token ? json_string_length(unk) : 0;
    return st;
}

/* What a byte missing from the vocabulary becomes: the unk_token (tokenizers' merge_word),
 * which must then be a vocabulary token that no merge involves, or nothing. Only checked
 * when a byte is missing, since tokenizers only looks the unk_token up then. */
static mlm_status resolve_unk(mlm_hf_builder *b, const model_opts *o, mlm_error *err) {
    const mlm_tokenizer *tok = b->tok;
    if (tok->vocab.n_missing_bytes == 0) return MLM_OK;
    int b0 = 0;
    while (tok->vocab.byte_rank[b0] >= 0)
        b0++;
    if (o->byte_fallback)
        return mlm_error_set(
            err, MLM_ERR_UNSUPPORTED,
            "%s: model: byte_fallback with a vocabulary that lacks %d single bytes "
            "(the first 0x%02x) is not supported",
            b->file, tok->vocab.n_missing_bytes, b0);
    if (!o->unk_token) return MLM_OK;
    unsigned char buf[4 * MLM_VOCAB_MAX_TOKEN_BYTES];
    size_t bad;
    uint32_t cp;
    long n = o->unk_len <= sizeof buf
                 ? mlm_bytelevel_decode(o->unk_token, o->unk_len, buf, &bad, &cp)
                 : -1;
    int32_t id = n > 0 ? mlm_vocab_rank(&tok->vocab, buf, (size_t)n) : -1;
    if (id < 0)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: model: unk_token '%.60s' is not in model.vocab (needed: the "
                             "vocabulary lacks the single byte 0x%02x)",
                             b->file, o->unk_token, b0);
    const mlm_merges *m = &tok->merges;
    for (uint32_t i = 0; i <= m->mask; i++) {
        uint64_t key = m->slots[i].key;
        if (key != MLM_MERGE_EMPTY && ((int32_t)(key >> 32) == id || (int32_t)(uint32_t)key == id))
            return mlm_error_set(
                err, MLM_ERR_UNSUPPORTED,
                "%s: model.merges: a merge involves the unk_token '%.60s' (id %d); "
                "not supported with a vocabulary lacking single bytes",
                b->file, o->unk_token, (int)id);
    }
    b->unk_id = id;
    b->fuse_unk = o->fuse_unk;
    return MLM_OK;
}

// ---- vocabulary, merges, added tokens ----

static mlm_status read_vocab(mlm_hf_builder *b, const json_t *vocab, mlm_error *err) {
    if (!json_is_object(vocab))
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: model: field 'vocab' must be an object, got %s", b->file,
                             vocab ? mlm_json_type_name(vocab) : "nothing");
    mlm_status st = mlm_hfb_vocab_begin(b, (int64_t)json_object_size(vocab), "model.vocab", err);
    const char *key;
    size_t klen;
    json_t *val;
    json_object_keylen_foreach((json_t *)vocab, key, klen, val) {
        if (st != MLM_OK) break;
        if (!json_is_integer(val))
            return mlm_error_set(err, MLM_ERR_FORMAT,
                                 "%s: model.vocab: '%.60s' must map to an integer id, got %s",
                                 b->file, key, mlm_json_type_name(val));
        st = mlm_hfb_vocab_set(b, key, klen, (int64_t)json_integer_value(val), "model.vocab", err);
    }
    if (st == MLM_OK) st = mlm_hfb_vocab_end(b, "model.vocab", err);
    return st;
}

static mlm_status read_merges(mlm_hf_builder *b, const json_t *merges, mlm_error *err) {
    if (!json_is_array(merges))
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: model: field 'merges' must be an array, got %s", b->file,
                             merges ? mlm_json_type_name(merges) : "nothing");
    size_t n = json_array_size(merges);
    if (n > INT32_MAX / 2)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: model.merges: %zu entries exceed the limit",
                             b->file, n);
    mlm_status st = mlm_hfb_merges_begin(b, (int64_t)n, err);
    char where[48];
    for (size_t i = 0; i < n && st == MLM_OK; i++) {
        const json_t *e = json_array_get(merges, i);
        const char *a = NULL, *c = NULL;
        size_t la = 0, lc = 0;
        snprintf(where, sizeof where, "model.merges[%zu]", i);
        if (json_is_string(e)) {
            a = json_string_value(e);
            size_t len = json_string_length(e);
            const char *sp = memchr(a, ' ', len);
            if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - a)))
                return mlm_error_set(err, MLM_ERR_FORMAT,
                                     "%s: %s: '%.60s' is not two tokens separated by one space",
                                     b->file, where, a);
            la = (size_t)(sp - a);
            c = sp + 1;
            lc = len - la - 1;
        } else if (json_is_array(e) && json_array_size(e) == 2 &&
                   json_is_string(json_array_get(e, 0)) && json_is_string(json_array_get(e, 1))) {
            a = json_string_value(json_array_get(e, 0));
            la = json_string_length(json_array_get(e, 0));
            c = json_string_value(json_array_get(e, 1));
            lc = json_string_length(json_array_get(e, 1));
        } else {
            return mlm_error_set(err, MLM_ERR_FORMAT,
                                 "%s: %s must be a string \"a b\" or a pair [\"a\", \"b\"], got %s",
                                 b->file, where, mlm_json_type_name(e));
        }
        st = mlm_hfb_merge(b, (int32_t)i, a, la, c, lc, where, err);
    }
    return st;
}

static mlm_status read_added(mlm_hf_builder *b, const json_t *list, mlm_error *err) {
    if (!list || json_is_null(list)) return MLM_OK;
    if (!json_is_array(list))
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: field 'added_tokens' must be an array, got %s", b->file,
                             mlm_json_type_name(list));
    size_t i;
    const json_t *e;
    char where[48], what[600];
    json_array_foreach(list, i, e) {
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        snprintf(what, sizeof what, "%s: %s", b->file, where);
        if (!json_is_object(e))
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s must be an object, got %s", what,
                                 mlm_json_type_name(e));
        int64_t id = 0;
        const char *content = NULL;
        unsigned flags = 0;
        mlm_status st = mlm_json_get_int(what, e, "id", 1, 0, INT32_MAX - 1, &id, NULL, err);
        if (st == MLM_OK) st = mlm_json_get_str(what, e, "content", 1, &content, NULL, err);
        if (st == MLM_OK) st = mlm_hfb_added_flags(b->file, where, e, &flags, err);
        if (st == MLM_OK)
            st = mlm_hfb_added(b, id, content, json_string_length(json_object_get(e, "content")),
                               flags, where, err);
        if (st != MLM_OK) return st;
    }
    return MLM_OK;
}

// ---- the document ----

/* CFG: tokenizer_config.json (read from CONFIG) or NULL. */
static mlm_status from_json(const json_t *root, const char *file, const json_t *cfg,
                            const char *config, mlm_tokenizer **out, mlm_error *err) {
    if (!json_is_object(root))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: the top level must be an object, got %s",
                             file, mlm_json_type_name(root));
    const json_t *ver = json_object_get(root, "version");
    if (ver && !json_is_null(ver) &&
        !(json_is_string(ver) && strcmp(json_string_value(ver), "1.0") == 0))
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: version %s%.20s%s is not supported (only \"1.0\")", file,
                             json_is_string(ver) ? "'" : "",
                             json_is_string(ver) ? json_string_value(ver) : mlm_json_type_name(ver),
                             json_is_string(ver) ? "'" : "");
    const json_t *model = json_object_get(root, "model");
    mlm_hf_pretok pre;
    model_opts mo = {0};
    int64_t bos = -1;
    mlm_status st = check_model(file, model, &mo, err);
    int nfc = 0;
    if (st == MLM_OK) st = check_normalizer(file, json_object_get(root, "normalizer"), &nfc, err);
    if (st == MLM_OK) st = parse_pretok(file, json_object_get(root, "pre_tokenizer"), &pre, err);
    if (st == MLM_OK) st = check_decoder(file, json_object_get(root, "decoder"), err);
    if (st == MLM_OK) st = parse_post(file, json_object_get(root, "post_processor"), &bos, err);
    if (st != MLM_OK) return st;
    mlm_hf_builder b;
    st = mlm_hfb_init(&b, file, err);
    if (st == MLM_OK) st = read_vocab(&b, json_object_get(model, "vocab"), err);
    if (st == MLM_OK) st = read_merges(&b, json_object_get(model, "merges"), err);
    if (st == MLM_OK) st = resolve_unk(&b, &mo, err);
    if (st == MLM_OK) st = read_added(&b, json_object_get(root, "added_tokens"), err);
    if (st == MLM_OK && cfg) st = mlm_hfb_config_template(&b, config, cfg, err);
    if (st == MLM_OK && bos >= 0) {
        int known = bos < b.tok->vocab.n;
        for (int32_t i = 0; i < b.n_added && !known; i++)
            known = b.added[i].id == bos;
        if (!known)
            st =
                mlm_error_set(err, MLM_ERR_FORMAT,
                              "%s: post_processor: BOS id %lld is neither in the vocabulary nor an "
                              "added token",
                              file, (long long)bos);
    }
    if (st == MLM_OK) {
        b.tok->nfc = nfc;
        st = mlm_hfb_finish(&b, &pre, mo.ignore_merges, (int32_t)bos, out, err);
    }
    mlm_hfb_deinit(&b);
    return st;
}

mlm_status mlm_hf_load_json_memory(const void *data, size_t len, const char *name,
                                   mlm_tokenizer **out, mlm_error *err) {
    *out = NULL;
    json_t *root = NULL;
    mlm_status st = mlm_json_parse(name, data, len, &root, err);
    if (st != MLM_OK) return st;
    st = from_json(root, name, NULL, NULL, out, err);
    json_decref(root);
    return st;
}

#define CONFIG_MAX ((size_t)64 << 20)

mlm_status mlm_hf_load_json(const char *path, mlm_tokenizer **out, mlm_error *err) {
    *out = NULL;
    /* tokenizer_config.json beside the file, as transformers reads it: the chat template. */
    char *dir = strdup(path), *slash = dir ? strrchr(dir, '/') : NULL;
    const char *d = ".";
    if (slash) {
        *slash = 0;
        d = dir[0] ? dir : "/";
    }
    char *config = dir ? mlm_path_join(d, "tokenizer_config.json") : NULL;
    free(dir);
    if (!config) return mlm_error_set(err, MLM_ERR_NOMEM, "tokenizer: out of memory");
    json_t *cfg = NULL, *root = NULL;
    mlm_status st = MLM_OK;
    if (mlm_is_file(config)) st = mlm_json_load_file(config, CONFIG_MAX, &cfg, err);
    if (st == MLM_OK && cfg && !json_is_object(cfg))
        st = mlm_error_set(err, MLM_ERR_FORMAT, "%s: the top level must be an object, got %s",
                           config, mlm_json_type_name(cfg));
    mlm_mapfile mf;
    if (st == MLM_OK) st = mlm_mapfile_open(&mf, path, err);
    if (st == MLM_OK) {
        st = mlm_json_parse(path, (const char *)mf.data, mf.size, &root, err);
        mlm_mapfile_close(&mf);
    }
    if (st == MLM_OK) st = from_json(root, path, cfg, config, out, err);
    json_decref(root);
    json_decref(cfg);
    free(config);
    return st;
}
