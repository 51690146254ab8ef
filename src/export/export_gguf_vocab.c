/* export/export_gguf_vocab.c: the tokenizer half of the GGUF export, as llama.cpp's
 * convert_hf_to_gguf.py writes it for byte-level BPE vocabularies (_set_vocab_gpt2 and
 * gguf-py's SpecialVocab):
 *   tokenizer.ggml.model "gpt2", .pre (llama.cpp's name for the pre-tokenizer: "llama-bpe"
 *   for Llama 3, "dbrx" for Phi-4, "qwen2" for Qwen2's pattern, "gpt-2"), .tokens (byte-level spellings; added tokens as
 *   their text; "[PAD<id>]" for ids the tokenizer lacks up to vocab_size), .token_type
 *   (1 normal, 3 control, 4 user-defined, 5 unused), .merges ("a b", from tokenizer.json,
 *   merges.txt, or derived from tiktoken ranks as transformers' TikTokenConverter does),
 *   special token ids, add_bos/eos/sep flags and tokenizer.chat_template.
 * A tiktoken tokenizer.model is exported as what convert writes for the tokenizer.json that
 * transformers builds from it (Meta's Llama 3 HF layout: BOS template, base-model eos). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mapfile.h"
#include "format/json.h"
#include "export/export_gguf.h"
#include "tokenizer/bytelevel.h"
#include "tokenizer/locate.h"
#include "tokenizer/pretok.h"
#include "tokenizer/tokenizer.h"

enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5 };

typedef enum tok_source { SRC_HF_JSON, SRC_HF_LEGACY, SRC_TIKTOKEN } tok_source;

/* SpecialVocab's token types, in its order; eot/eom are appended when the template needs
 * them. Only those with a writer handler reach the file (cls has none in gguf-py). */
#define MAX_TYPES 9
static const char *const TYPE_KEYS[][2] = {
    {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
    {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
    {"pad", "tokenizer.ggml.padding_token_id"}, {"cls", NULL},
    {"mask", "tokenizer.ggml.mask_token_id"},   {"eot", "tokenizer.ggml.eot_token_id"},
    {"eom", "tokenizer.ggml.eom_token_id"},
};

typedef struct vocab_ctx {
    const mlm_export_files *f;
    const mlm_config *cfg;
    tok_source src;
    char *tok_path;     /* owned: the tokenizer file loaded */
    mlm_tokenizer *tok; /* owned */
    json_t *tok_json;   /* owned: tokenizer.json (HF json) */
    json_t *tc;         /* owned: tokenizer_config.json, or the one implied for tiktoken */
    json_t *post;       /* owned reference: the post-processor, or NULL */
    json_t *added;      /* owned reference: [{content, id}] as tokenizer.json's added_tokens */
    char *buf;          /* owned scratch for byte-level strings */
    size_t cap;
    /* SpecialVocab's results, in insertion order */
    int n_types;
    int types[MAX_TYPES]; /* indices into TYPE_KEYS */
    int n_ids;
    int id_type[MAX_TYPES];
    int64_t id_val[MAX_TYPES];
    int n_add;
    int add_type[MAX_TYPES];
    int add_val[MAX_TYPES];
} vocab_ctx;

// ---- small helpers ----

static int type_index(const char *name) {
    for (int i = 0; i < MAX_TYPES; i++)
        if (!strcmp(TYPE_KEYS[i][0], name)) return i;
    return -1;
}

/* Python truthiness of a JSON value (NULL for a missing key). */
static int truthy(const json_t *v) {
    if (!v || json_is_null(v) || json_is_false(v)) return 0;
    if (json_is_string(v)) return json_string_length(v) > 0;
    if (json_is_object(v)) return json_object_size(v) > 0;
    if (json_is_array(v)) return json_array_size(v) > 0;
    if (json_is_integer(v)) return json_integer_value(v) != 0;
    if (json_is_real(v)) return json_real_value(v) != 0;
    return 1;
}

static const char *str_of(const json_t *v) {
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Python's `a == b` for a string A (or NULL = None) and a JSON value B. */
static int eq(const char *a, const json_t *b) {
    const char *s = str_of(b);
    if (!a) return !b || json_is_null(b);
    return s && !strcmp(a, s);
}

/* d.get(k1, {}).get(k2) for a template entry, as a string or NULL. */
static const char *entry_id(const json_t *e, const char *kind) {
    return str_of(json_object_get(json_object_get(e, kind), "id"));
}

static char *read_text(const char *dir, const char *name, mlm_error *err, mlm_status *st) {
    char *path = mlm_path_join(dir, name), *text = NULL;
    size_t len;
    *st = MLM_OK;
    if (!path) {
        *st = mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
        return NULL;
    }
    if (mlm_is_file(path)) *st = mlm_read_file(path, 64u << 20, &text, &len, err);
    free(path);
    return text;
}

static mlm_status load_json_opt(const char *dir, const char *name, json_t **out, mlm_error *err) {
    *out = NULL;
    char *path = mlm_path_join(dir, name);
    if (!path) return mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
    mlm_status st = mlm_is_file(path) ? mlm_json_load_file(path, 256u << 20, out, err) : MLM_OK;
    free(path);
    return st;
}

/* Makes room for N more bytes after the first AT of ctx->buf. */
static mlm_status reserve(vocab_ctx *c, size_t at, size_t n, mlm_error *err) {
    if (at + n <= c->cap) return MLM_OK;
    size_t cap = 2 * (at + n) + 64;
    char *b = realloc(c->buf, cap);
    if (!b) return mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
    c->buf = b;
    c->cap = cap;
    return MLM_OK;
}

/* Appends the byte-level spelling of P[0..N) (GPT-2's bytes_to_unicode, as UTF-8) to
 * ctx->buf at *AT, advancing it. */
static mlm_status bytelevel(vocab_ctx *c, const unsigned char *p, size_t n, size_t *at,
                            mlm_error *err) {
    mlm_status st = reserve(c, *at, 2 * n, err);
    if (st) return st;
    size_t k = *at;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = mlm_bytelevel_char(p[i]); /* < 0x800: one or two UTF-8 bytes */
        if (cp < 0x80) {
            c->buf[k++] = (char)cp;
        } else {
            c->buf[k++] = (char)(0xC0 | cp >> 6);
            c->buf[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    *at = k;
    return MLM_OK;
}

/* convert's does_token_look_special. */
static int looks_special(const char *t, size_t n) {
    static const char *const exact[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (n == strlen(exact[i]) && !memcmp(t, exact[i], n)) return 1;
#define PREFIX(s) (n >= sizeof(s) - 1 && !memcmp(t, s, sizeof(s) - 1))
#define SUFFIX(s) (n >= sizeof(s) - 1 && !memcmp(t + n - (sizeof(s) - 1), s, sizeof(s) - 1))
    return (PREFIX("<|") && SUFFIX("|>")) || (PREFIX("<\xEF\xBD\x9C") && SUFFIX("\xEF\xBD\x9C>")) ||
           (PREFIX("<unused") && SUFFIX(">"));
#undef PREFIX
#undef SUFFIX
}

// ---- which tokenizer, and the pre-tokenizer's name ----

static mlm_status open_tokenizer(vocab_ctx *c, mlm_error *err) {
    const char *dir = c->f->dir;
    char *json_path = mlm_path_join(dir, "tokenizer.json");
    char *vocab_path = mlm_path_join(dir, "vocab.json");
    char *merges_path = mlm_path_join(dir, "merges.txt");
    mlm_status st = MLM_OK;
    if (!json_path || !vocab_path || !merges_path) {
        st = mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
    } else if (mlm_is_file(json_path)) {
        c->src = SRC_HF_JSON;
        c->tok_path = json_path;
        json_path = NULL;
    } else if (mlm_is_file(vocab_path) && mlm_is_file(merges_path)) {
        c->src = SRC_HF_LEGACY;
        c->tok_path = strdup(dir);
    } else {
        c->src = SRC_TIKTOKEN;
        c->tok_path = mlm_tokenizer_locate(dir);
        if (!c->tok_path)
            st = mlm_error_set(err, MLM_ERR_IO,
                               "export: %s has no tokenizer (tokenizer.json, vocab.json + "
                               "merges.txt, tokenizer.model or original/tokenizer.model); a GGUF "
                               "file carries its vocabulary",
                               dir);
    }
    free(json_path);
    free(vocab_path);
    free(merges_path);
    if (!st && !c->tok_path) st = mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
    if (!st) st = mlm_tokenizer_load(c->tok_path, &c->tok, err);
    if (!st && c->src == SRC_HF_JSON)
        st = mlm_json_load_file(c->tok_path, 1u << 30, &c->tok_json, err);
    return st;
}

/* The pre-tokenizer pattern of tokenizer.json: Sequence[Split(Regex), ByteLevel(no regex)] or
 * ByteLevel with GPT-2's regex. NULL when it is anything else. */
static const char *json_pattern(const json_t *pt) {
    const char *type = str_of(json_object_get(pt, "type"));
    if (!type) return NULL;
    if (!strcmp(type, "ByteLevel")) {
        const json_t *ur = json_object_get(pt, "use_regex");
        return !ur || json_is_true(ur) ? MLM_PRETOK_GPT2 : NULL;
    }
    const json_t *seq = json_object_get(pt, "pretokenizers");
    if (strcmp(type, "Sequence") || json_array_size(seq) != 2) return NULL;
    const json_t *split = json_array_get(seq, 0), *bl = json_array_get(seq, 1);
    if (!eq("Split", json_object_get(split, "type")) ||
        !eq("Isolated", json_object_get(split, "behavior")) ||
        json_is_true(json_object_get(split, "invert")) ||
        !eq("ByteLevel", json_object_get(bl, "type")) ||
        json_is_true(json_object_get(bl, "use_regex")))
        return NULL;
    return str_of(json_object_get(json_object_get(split, "pattern"), "Regex"));
}

/* llama.cpp's tokenizer.ggml.pre for the pattern. Llama 3's regex is also cl100k_base's:
 * llama.cpp names it "llama-bpe" for Llama 3 and "dbrx" for cl100k vocabularies (Phi-4's
 * GGUFs carry "dbrx"); the two differ only in llama.cpp's ignore_merges. */
static mlm_status pre_name(vocab_ctx *c, const char **out, mlm_error *err) {
    const char *pat = MLM_PRETOK_GPT2;
    if (c->src == SRC_TIKTOKEN) pat = MLM_PRETOK_LLAMA3;
    if (c->src == SRC_HF_JSON) pat = json_pattern(json_object_get(c->tok_json, "pre_tokenizer"));
    if (pat && !strcmp(pat, MLM_PRETOK_LLAMA3)) {
        *out = c->cfg->family == MLM_FAMILY_PHI3 ? "dbrx" : "llama-bpe";
        return MLM_OK;
    }
    if (pat && !strcmp(pat, MLM_PRETOK_GPT2)) {
        *out = "gpt-2";
        return MLM_OK;
    }
    if (pat && !strcmp(pat, MLM_PRETOK_QWEN2)) {
        *out = "qwen2";
        return MLM_OK;
    }
    return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                         "export: %s: pre-tokenizer %s%s%s has no llama.cpp name meshlm knows "
                         "(llama-bpe, dbrx, gpt-2, qwen2)",
                         c->tok_path, pat ? "regex '" : "", pat ? pat : "of this kind",
                         pat ? "'" : "");
}

// ---- tokens and types ----

static mlm_status write_tokens(vocab_ctx *c, mlm_gguf_writer *w, mlm_error *err) {
    const mlm_tokenizer *t = c->tok;
    int32_t n = c->cfg->n_vocab;
    if (t->n_vocab > n)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "export: %s has token id %d, beyond the model's vocab_size %d",
                             c->tok_path, t->n_vocab - 1, n);
    int32_t *types = malloc((size_t)n * sizeof *types);
    if (!types) return mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
    mlm_status st =
        mlm_gguf_writer_arr_begin(w, "tokenizer.ggml.tokens", MLM_GGUF_STRING, (uint64_t)n, err);
    for (int32_t i = 0; i < n && !st; i++) {
        const mlm_special *sp = mlm_specials_by_id(&t->specials, i);
        const char *s;
        size_t len = 0;
        char pad[32];
        types[i] = TT_NORMAL;
        if (i < t->vocab.n) {
            size_t nb;
            const unsigned char *b = mlm_vocab_bytes(&t->vocab, i, &nb);
            if ((st = bytelevel(c, b, nb, &len, err))) break;
            s = c->buf;
            if (!(sp && sp->len == len && !memcmp(sp->text, s, len))) sp = NULL;
        } else if (sp) {
            s = sp->text;
            len = sp->len;
        } else {
            len = (size_t)snprintf(pad, sizeof pad, "[PAD%d]", i);
            s = pad;
            types[i] = TT_UNUSED;
        }
        if (sp && ((sp->flags & MLM_ADDED_SPECIAL) || looks_special(s, len))) {
            types[i] = TT_CONTROL;
        } else if (sp) {
            /* user-defined tokens are written pre-normalized: U+2581 becomes a space */
            types[i] = TT_USER_DEFINED;
            size_t k = 0;
            if ((st = reserve(c, 0, len, err))) break;
            char *d = c->buf;
            for (size_t j = 0; j < len;) {
                if (j + 3 <= len && !memcmp(sp->text + j, "\xE2\x96\x81", 3)) {
                    d[k++] = ' ';
                    j += 3;
                } else {
                    d[k++] = sp->text[j++];
                }
            }
            s = d;
            len = k;
        }
        st = mlm_gguf_writer_arr_str(w, s, len, err);
    }
    if (!st) st = mlm_gguf_writer_arr_end(w, err);
    if (!st)
        st = mlm_gguf_writer_arr_begin(w, "tokenizer.ggml.token_type", MLM_GGUF_I32, (uint64_t)n,
                                       err);
    for (int32_t i = 0; i < n && !st; i++)
        st = mlm_gguf_writer_arr_scalar(w, (uint32_t)types[i], err);
    if (!st) st = mlm_gguf_writer_arr_end(w, err);
    free(types);
    return st;
}

// ---- merges ----

typedef struct split {
    int32_t left, right;
} split;

/* Merges from tiktoken ranks, as transformers' TikTokenConverter derives them: for every
 * token in rank order, every split into two tokens, ordered by the left part's rank. */
static mlm_status write_rank_merges(vocab_ctx *c, mlm_gguf_writer *w, mlm_error *err) {
    const mlm_vocab *v = &c->tok->vocab;
    split *sp = malloc(MLM_VOCAB_MAX_TOKEN_BYTES * sizeof *sp);
    if (!sp) return mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
    /* Two passes: count, then write (the array header needs the count). */
    uint64_t total = 0;
    mlm_status st = MLM_OK;
    for (int pass = 0; pass < 2 && !st; pass++) {
        if (pass == 1)
            st = mlm_gguf_writer_arr_begin(w, "tokenizer.ggml.merges", MLM_GGUF_STRING, total, err);
        for (int32_t r = 0; r < v->n && !st; r++) {
            size_t n;
            const unsigned char *b = mlm_vocab_bytes(v, r, &n);
            int k = 0;
            for (size_t i = 1; i < n; i++) {
                int32_t a = mlm_vocab_rank(v, b, i), z = mlm_vocab_rank(v, b + i, n - i);
                if (a >= 0 && z >= 0) sp[k++] = (split){a, z};
            }
            if (pass == 0) {
                total += (uint64_t)k;
                continue;
            }
            /* insertion sort by (left rank, right rank): k is at most the token length */
            for (int i = 1; i < k; i++)
                for (int j = i;
                     j > 0 && (sp[j].left < sp[j - 1].left ||
                               (sp[j].left == sp[j - 1].left && sp[j].right < sp[j - 1].right));
                     j--) {
                    split t = sp[j];
                    sp[j] = sp[j - 1];
                    sp[j - 1] = t;
                }
            for (int i = 0; i < k && !st; i++) {
                size_t na, nz, at = 0;
                const unsigned char *pa = mlm_vocab_bytes(v, sp[i].left, &na);
                const unsigned char *pz = mlm_vocab_bytes(v, sp[i].right, &nz);
                if ((st = bytelevel(c, pa, na, &at, err)) || (st = reserve(c, at, 1, err))) break;
                c->buf[at++] = ' ';
                if ((st = bytelevel(c, pz, nz, &at, err))) break;
                st = mlm_gguf_writer_arr_str(w, c->buf, at, err);
            }
        }
    }
    free(sp);
    return st ? st : mlm_gguf_writer_arr_end(w, err);
}

/* tokenizer.json's model.merges: "a b" strings, or [a, b] pairs (spaces inside a part are
 * written as U+0120, as SpecialVocab does). */
static mlm_status write_json_merges(vocab_ctx *c, mlm_gguf_writer *w, mlm_error *err) {
    const json_t *m = json_object_get(json_object_get(c->tok_json, "model"), "merges");
    size_t n = json_array_size(m);
    if (!json_is_array(m) || n == 0) return MLM_OK; /* convert warns and writes none */
    int pairs = json_is_array(json_array_get(m, 0));
    mlm_status st = mlm_gguf_writer_arr_begin(w, "tokenizer.ggml.merges", MLM_GGUF_STRING, n, err);
    char *line = NULL;
    for (size_t i = 0; i < n && !st; i++) {
        const json_t *e = json_array_get(m, i);
        if (!pairs) {
            if (!json_is_string(e)) {
                st =
                    mlm_error_set(err, MLM_ERR_FORMAT,
                                  "export: %s: model.merges[%zu] must be a string", c->tok_path, i);
                break;
            }
            st = mlm_gguf_writer_arr_str(w, json_string_value(e), json_string_length(e), err);
            continue;
        }
        const json_t *a = json_array_get(e, 0), *b = json_array_get(e, 1);
        if (json_array_size(e) != 2 || !json_is_string(a) || !json_is_string(b)) {
            st = mlm_error_set(err, MLM_ERR_FORMAT,
                               "export: %s: model.merges[%zu] must be a pair of "
                               "strings",
                               c->tok_path, i);
            break;
        }
        size_t la = json_string_length(a), lb = json_string_length(b), k = 0;
        free(line);
        if (!(line = malloc(2 * (la + lb) + 1))) {
            st = mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
            break;
        }
        for (int part = 0; part < 2; part++) {
            const char *s = json_string_value(part ? b : a);
            size_t ls = part ? lb : la;
            if (part) line[k++] = ' ';
            for (size_t j = 0; j < ls; j++) {
                if (s[j] == ' ') { /* U+0120 */
                    line[k++] = (char)0xC4;
                    line[k++] = (char)0xA0;
                } else {
                    line[k++] = s[j];
                }
            }
        }
        st = mlm_gguf_writer_arr_str(w, line, k, err);
    }
    free(line);
    return st ? st : mlm_gguf_writer_arr_end(w, err);
}

/* merges.txt as SpecialVocab reads it: a first line starting with '#' is skipped, lines are
 * stripped, empty ones skipped, and a line that is not exactly two words is ignored. */
static mlm_status write_txt_merges(vocab_ctx *c, mlm_gguf_writer *w, mlm_error *err) {
    mlm_status st;
    char *text = read_text(c->f->dir, "merges.txt", err, &st);
    if (st || !text) return st;
    for (int pass = 0; pass < 2 && !st; pass++) {
        uint64_t count = 0;
        char *p = text;
        int first = 1;
        while (*p && !st) {
            char *end = strchr(p, '\n');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            char *s = p, *e = p + len;
            p = end ? end + 1 : p + len;
            while (s < e && strchr(" \t\r\f\v", *s))
                s++;
            while (e > s && strchr(" \t\r\f\v", e[-1]))
                e--;
            if (first && s < e && *s == '#') {
                first = 0;
                continue;
            }
            first = 0;
            char *sp = s;
            while (sp < e && !strchr(" \t", *sp))
                sp++;
            char *b = sp;
            while (b < e && strchr(" \t", *b))
                b++;
            char *be = b;
            while (be < e && !strchr(" \t", *be))
                be++;
            if (s == e || sp == s || b == e || be != e) continue;
            count++;
            if (pass == 1) {
                char *line = malloc((size_t)(sp - s) + 1 + (size_t)(e - b));
                if (!line) {
                    st = mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
                    break;
                }
                memcpy(line, s, (size_t)(sp - s));
                line[sp - s] = ' ';
                memcpy(line + (sp - s) + 1, b, (size_t)(e - b));
                st = mlm_gguf_writer_arr_str(w, line, (size_t)(sp - s) + 1 + (size_t)(e - b), err);
                free(line);
            }
        }
        if (pass == 0 && !st && count)
            st = mlm_gguf_writer_arr_begin(w, "tokenizer.ggml.merges", MLM_GGUF_STRING, count, err);
        if (pass == 0 && !count) break;
        if (pass == 1 && !st) st = mlm_gguf_writer_arr_end(w, err);
    }
    free(text);
    return st;
}

// ---- special tokens (gguf-py's SpecialVocab) ----

static void add_flag(vocab_ctx *c, int type, int val) {
    for (int i = 0; i < c->n_add; i++)
        if (c->add_type[i] == type) {
            c->add_val[i] = val;
            return;
        }
    c->add_type[c->n_add] = type;
    c->add_val[c->n_add++] = val;
}

static mlm_status set_special(vocab_ctx *c, int type, int64_t id, mlm_error *err) {
    if (id < 0)
        return mlm_error_set(err, MLM_ERR_FORMAT, "export: %s: invalid %s token id %lld", c->f->dir,
                             TYPE_KEYS[type][0], (long long)id);
    for (int i = 0; i < c->n_ids; i++)
        if (c->id_type[i] == type) return MLM_OK; /* the first source wins */
    c->id_type[c->n_ids] = type;
    c->id_val[c->n_ids++] = id;
    return MLM_OK;
}

static int has_type(const vocab_ctx *c, int type) {
    for (int i = 0; i < c->n_types; i++)
        if (c->types[i] == type) return 1;
    return 0;
}

/* tc[KEY] = V (a new reference is taken); tc must exist. */
static void tc_set(vocab_ctx *c, const char *key, json_t *v) {
    json_object_set(c->tc, key, v ? v : json_null());
}

/* The TemplateProcessing / RobertaProcessing reading of SpecialVocab._try_load_from_tokenizer_json.
 * BOS, CLS, EOS, SEP are borrowed values of tokenizer_config (or strings set here). */
static void read_post(vocab_ctx *c) {
    json_t *bos = json_object_get(c->tc, "bos_token"), *cls = json_object_get(c->tc, "cls_token");
    json_t *eos = json_object_get(c->tc, "eos_token"), *sep = json_object_get(c->tc, "sep_token");
    /* Python tests `tokenizer_config` for truth: an empty one counts as absent. */
#define TC truthy(c->tc)
    /* Values set from strings are kept alive by the tokenizer_config or by this list. */
    json_t *keep = json_array();
#define STRVAL(s)                                                                                  \
    (json_array_append_new(keep, json_string(s)), json_array_get(keep, json_array_size(keep) - 1))
    if (!truthy(bos) && truthy(cls) && TC) tc_set(c, "bos_token", bos = cls);
    if (!truthy(eos) && truthy(sep) && TC) tc_set(c, "eos_token", eos = sep);
    if (!truthy(c->post)) {
        json_decref(keep);
        return;
    }
    json_t *procs = json_object_get(c->post, "processors");
    json_t *single_list = NULL;
    if (!procs) {
        single_list = json_pack("[O]", c->post);
        procs = single_list;
    }
    size_t i;
    json_t *p;
    json_array_foreach(procs, i, p) {
        const char *type = str_of(json_object_get(p, "type"));
        if (type && !strcmp(type, "RobertaProcessing")) {
            add_flag(c, type_index("bos"), 1);
            add_flag(c, type_index("eos"), 1);
            add_flag(c, type_index("sep"), 1);
            if (!truthy(cls) && TC) {
                json_t *pc = json_object_get(p, "cls");
                cls = pc ? json_array_get(pc, 0) : bos;
                tc_set(c, "cls_token", cls);
            }
            if (!truthy(sep) && TC) {
                json_t *ps = json_object_get(p, "sep");
                sep = ps ? json_array_get(ps, 0) : eos;
                tc_set(c, "sep_token", sep);
            }
            continue;
        }
        if (!type || strcmp(type, "TemplateProcessing")) continue;
        json_t *single = json_object_get(p, "single"), *pair = json_object_get(p, "pair");
        size_t ns = json_array_size(single);
        const char *first = NULL, *last = NULL;
        if (ns > 1) {
            first = entry_id(json_array_get(single, 0), "SpecialToken");
            if (first && *first) {
                if (!TC) {
                    bos = STRVAL(first);
                } else if (!eq(first, bos) && !eq(first, cls)) {
                    if (!truthy(bos)) tc_set(c, "bos_token", bos = STRVAL(first));
                    if (!truthy(cls)) tc_set(c, "cls_token", cls = STRVAL(first));
                }
                add_flag(c, type_index("bos"), eq(first, bos) || eq(first, cls));
            } else {
                first = NULL;
            }
            last = entry_id(json_array_get(single, ns - 1), "SpecialToken");
            if (last && *last) {
                if (!TC) {
                    eos = STRVAL(last);
                } else if (!eq(last, eos)) {
                    if (!has_type(c, type_index("eot"))) {
                        c->types[c->n_types++] = type_index("eot");
                        tc_set(c, "eot_token", eos);
                    } else if (!has_type(c, type_index("eom"))) {
                        c->types[c->n_types++] = type_index("eom");
                        tc_set(c, "eom_token", eos);
                    }
                    tc_set(c, "eos_token", eos = STRVAL(last));
                }
                add_flag(c, type_index("eos"), eq(last, eos));
            } else {
                last = NULL;
            }
        }
        size_t np = json_array_size(pair);
        if (np == 0) continue;
        size_t start =
            first && eq(first, json_object_get(
                                   json_object_get(json_array_get(pair, 0), "SpecialToken"), "id"))
                ? 1
                : 0;
        size_t stop = last && eq(last, json_object_get(json_object_get(json_array_get(pair, np - 1),
                                                                       "SpecialToken"),
                                                       "id"))
                          ? np - 1
                          : np;
        if (stop <= start) continue;
        const char *ta = entry_id(json_array_get(pair, start), "Sequence");
        const char *tb = entry_id(json_array_get(pair, stop - 1), "Sequence");
        /* the middle of A [sep] [eos] B */
        if (!ta || !tb || strcmp(ta, "A") || strcmp(tb, "B") || stop - start < 3) continue;
        size_t n_mid = stop - start - 2;
        int add_sep = 0;
        const char *e0 = entry_id(json_array_get(pair, start + 1), "SpecialToken");
        if (e0 && *e0 && (eq(e0, sep) || eq(e0, eos)) && !last) add_sep = 1;
        if (n_mid == 2) {
            const char *e1 = entry_id(json_array_get(pair, start + 2), "SpecialToken");
            if (e1 && *e1 && (eq(e1, sep) || eq(e1, eos))) add_sep = 1;
        }
        add_flag(c, type_index("sep"), add_sep);
        if (add_sep && !truthy(sep) && TC) tc_set(c, "sep_token", eos);
    }
#undef STRVAL
#undef TC
    json_decref(single_list);
    json_decref(keep);
}

/* The id of the first added token whose content is CONTENT, or -1. */
static int64_t added_id(const vocab_ctx *c, const char *content) {
    size_t i;
    json_t *a;
    json_array_foreach(c->added, i, a) {
        if (eq(content, json_object_get(a, "content"))) {
            json_t *id = json_object_get(a, "id");
            return json_is_integer(id) ? json_integer_value(id) : -1;
        }
    }
    return -1;
}

static mlm_status read_specials(vocab_ctx *c, mlm_error *err) {
    for (int i = 0; i < 7; i++)
        c->types[c->n_types++] = i;
    mlm_status st = MLM_OK;
    if (c->tok_json || c->src == SRC_TIKTOKEN) read_post(c);
    if (truthy(c->tc)) {
        for (int k = 0; k < c->n_types && !st; k++) {
            int t = c->types[k];
            char key[32];
            snprintf(key, sizeof key, "add_%s_token", TYPE_KEYS[t][0]);
            const json_t *add = json_object_get(c->tc, key);
            if (json_is_boolean(add)) add_flag(c, t, json_is_true(add));
            snprintf(key, sizeof key, "%s_token", TYPE_KEYS[t][0]);
            const json_t *e = json_object_get(c->tc, key);
            const char *content =
                json_is_object(e) ? str_of(json_object_get(e, "content")) : str_of(e);
            if (!content) continue;
            int64_t id = added_id(c, content);
            if (id >= 0) st = set_special(c, t, id, err);
        }
    }
    const json_t *cfg = c->f->config;
    for (int k = 0; k < c->n_types && !st; k++) {
        int t = c->types[k];
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", TYPE_KEYS[t][0]);
        const json_t *v = json_object_get(cfg, key);
        if ((!v || json_is_null(v)) && json_object_get(cfg, "text_config"))
            v = json_object_get(json_object_get(cfg, "text_config"), key);
        if (json_is_integer(v)) st = set_special(c, t, json_integer_value(v), err);
    }
    return st;
}

/* The chat template SpecialVocab writes: tokenizer_config's, else chat_template.jinja, else
 * chat_template.json's; only with a tokenizer_config. *OUT is malloc'd or NULL. */
static mlm_status chat_template(vocab_ctx *c, char **out, mlm_error *err) {
    *out = NULL;
    if (!truthy(c->tc)) return MLM_OK;
    const json_t *t = json_object_get(c->tc, "chat_template");
    if (t) {
        if (json_is_string(t) && !(*out = strdup(json_string_value(t))))
            return mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
        return MLM_OK; /* null, or a list of named templates: none written */
    }
    mlm_status st;
    *out = read_text(c->f->dir, "chat_template.jinja", err, &st);
    if (st || *out) return st;
    json_t *j;
    if ((st = load_json_opt(c->f->dir, "chat_template.json", &j, err)) || !j) return st;
    const char *s = str_of(json_object_get(j, "chat_template"));
    if (s && !(*out = strdup(s))) st = mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
    json_decref(j);
    return st;
}

// ---- what a tiktoken file implies ----

/* Meta's Llama 3 Hugging Face files: added_tokens = the 256 specials, a TemplateProcessing
 * that puts <|begin_of_text|> first, and (without a tokenizer_config.json beside the file)
 * bos <|begin_of_text|>, eos the first stop id that is a special token. */
static mlm_status imply_tiktoken(vocab_ctx *c, mlm_error *err) {
    const mlm_tokenizer *t = c->tok;
    c->added = json_array();
    for (int32_t i = 0; c->added && i < t->specials.n; i++)
        json_array_append_new(c->added, json_pack("{s:s,s:i}", "content", t->specials.tok[i].text,
                                                  "id", (json_int_t)t->specials.tok[i].id));
    if (!c->added) return mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
    if (t->flavour != MLM_TOK_LLAMA3) return MLM_OK;
    const char *bos = "<|begin_of_text|>";
    c->post =
        json_pack("{s:s,s:[{s:{s:s,s:i}},{s:{s:s,s:i}}],s:[{s:{s:s,s:i}},{s:{s:s,s:i}},"
                  "{s:{s:s,s:i}},{s:{s:s,s:i}}]}",
                  "type", "TemplateProcessing", "single", "SpecialToken", "id", bos, "type_id", 0,
                  "Sequence", "id", "A", "type_id", 0, "pair", "SpecialToken", "id", bos, "type_id",
                  0, "Sequence", "id", "A", "type_id", 0, "SpecialToken", "id", bos, "type_id", 1,
                  "Sequence", "id", "B", "type_id", 1);
    if (!c->post) return mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
    if (c->tc) return MLM_OK;
    const char *eos = "<|end_of_text|>";
    for (int i = 0; i < c->cfg->n_stop_ids; i++) {
        const mlm_special *s = mlm_specials_by_id(&t->specials, c->cfg->stop_ids[i]);
        if (s) {
            eos = s->text;
            break;
        }
    }
    c->tc = json_pack("{s:s,s:s}", "bos_token", bos, "eos_token", eos);
    return c->tc ? MLM_OK : mlm_error_set(err, MLM_ERR_NOMEM, "export: out of memory");
}

// ---- the whole ----

static mlm_status write_all(vocab_ctx *c, mlm_gguf_writer *w, mlm_error *err) {
    const char *pre = NULL;
    mlm_status st = pre_name(c, &pre, err);
    if (st) return st;
    if ((st = load_json_opt(c->f->dir, "tokenizer_config.json", &c->tc, err))) return st;
    if (c->tc && !json_is_object(c->tc))
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "export: %s/tokenizer_config.json must be an object", c->f->dir);
    if (c->src == SRC_HF_JSON) {
        json_t *pp = json_object_get(c->tok_json, "post_processor");
        json_t *ad = json_object_get(c->tok_json, "added_tokens");
        c->post = json_incref(pp);
        c->added = json_is_array(ad) ? json_incref(ad) : json_array();
    } else if (c->src == SRC_HF_LEGACY) {
        c->added = json_array();
    } else if ((st = imply_tiktoken(c, err))) {
        return st;
    }
    /* LlamaModel.set_vocab writes add_prefix_space first; Phi3MiniModel does not. */
    const json_t *aps = json_object_get(c->tc, "add_prefix_space");
    if (c->cfg->family == MLM_FAMILY_LLAMA3 && json_is_boolean(aps) &&
        (st = mlm_gguf_writer_bool(w, "tokenizer.ggml.add_space_prefix", json_is_true(aps), err)))
        return st;
    if ((st = mlm_gguf_writer_str(w, "tokenizer.ggml.model", "gpt2", 4, err)) ||
        (st = mlm_gguf_writer_str(w, "tokenizer.ggml.pre", pre, strlen(pre), err)) ||
        (st = write_tokens(c, w, err)))
        return st;
    if (c->src == SRC_HF_JSON)
        st = write_json_merges(c, w, err);
    else if (c->src == SRC_HF_LEGACY)
        st = write_txt_merges(c, w, err);
    else
        st = write_rank_merges(c, w, err);
    if (st || (st = read_specials(c, err))) return st;
    for (int i = 0; i < c->n_ids && !st; i++)
        if (TYPE_KEYS[c->id_type[i]][1])
            st = mlm_gguf_writer_u32(w, TYPE_KEYS[c->id_type[i]][1], (uint32_t)c->id_val[i], err);
    for (int i = 0; i < c->n_add && !st; i++) {
        const char *name = TYPE_KEYS[c->add_type[i]][0];
        if (strcmp(name, "bos") && strcmp(name, "eos") && strcmp(name, "sep")) continue;
        char key[48];
        snprintf(key, sizeof key, "tokenizer.ggml.add_%s_token", name);
        st = mlm_gguf_writer_bool(w, key, c->add_val[i], err);
    }
    char *tmpl = NULL;
    if (!st) st = chat_template(c, &tmpl, err);
    if (!st && tmpl)
        st = mlm_gguf_writer_str(w, "tokenizer.chat_template", tmpl, strlen(tmpl), err);
    free(tmpl);
    return st;
}

mlm_status mlm_export_vocab(mlm_gguf_writer *w, const mlm_export_files *f, const mlm_config *cfg,
                            mlm_error *err) {
    vocab_ctx c;
    memset(&c, 0, sizeof c);
    c.f = f;
    c.cfg = cfg;
    mlm_status st = open_tokenizer(&c, err);
    if (!st) st = write_all(&c, w, err);
    mlm_tokenizer_free(c.tok);
    json_decref(c.tok_json);
    json_decref(c.tc);
    json_decref(c.post);
    json_decref(c.added);
    free(c.tok_path);
    free(c.buf);
    return st;
}
