/* tokenizer/gguf_vocab.c: the vocabulary of a GGUF file as a tokenizer (flavour
 * MLM_TOK_GGUF), read from the tokenizer.ggml.* keys the way llama.cpp's llama_vocab::load
 * reads them (src/llama-vocab.cpp). Only tokenizer.ggml.model "gpt2" (byte-level BPE) is
 * read; other models are refused by name.
 *
 * Tokens: NORMAL ones are GPT-2 byte-level spellings and decode to their bytes; CONTROL,
 * UNKNOWN and USER_DEFINED ones (and UNUSED, BYTE, UNDEFINED, which llama.cpp decodes to
 * nothing) are their text as it is.
 * CONTROL and UNKNOWN tokens are special added tokens (matched in input only with
 * parse_special), USER_DEFINED ones added tokens matched always, both with llama.cpp's
 * partition (added.c); llama.cpp's texts of end-of-generation and fill-in-the-middle
 * tokens are made CONTROL as it does. Merges are "a b" strings, a repeated pair keeping
 * its first rank. The pre-tokenizer is llama.cpp's list of regexes for tokenizer.ggml.pre,
 * each applied to the pieces of the one before (Isolated), with llama.cpp's ignore_merges
 * and add_bos defaults for that name; a byte that has no token stays a part that never
 * merges and is dropped, as llama.cpp drops it. The chat format follows
 * tokenizer.chat_template (chat.c). Not applied: tokenizer.ggml.add_eos_token (meshlm's
 * encoder appends nothing) and llama.cpp's per-model lstrip/rstrip attributes (Phi-3 and
 * Jina names only, neither a "gpt2" pre meshlm knows). Nothing refers back to the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "format/gguf.h"
#include "tokenizer/hf.h"
#include "tokenizer/tokenizer.h"

/* llama.cpp's GPT-2 regex (its unicode_regex_split_custom_gpt2; no trailing \s+, which
 * Isolated splitting makes equivalent) and its Llama 3 regex ('s and friends spelled out
 * case by case instead of (?i:...)). */
#define LLAMACPP_GPT2                                                                              \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define LLAMACPP_LLAMA3                                                                            \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"     \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define LLAMACPP_QWEN2                                                                             \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"     \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define LLAMACPP_PUNCT "[\\p{P}\\$\\+<=>\\^~\\|]+"

/* The tokenizer.ggml.pre names meshlm knows, with llama.cpp's regexes and flags. */
static const struct pre_kind {
    const char *name;
    int n;
    const char *pattern[4];
    int ignore_merges, add_bos;
} PRES[] = {
    {"llama-bpe", 1, {LLAMACPP_LLAMA3}, 1, 1},
    {"dbrx", 1, {LLAMACPP_LLAMA3}, 0, 0},
    {"smollm", 2, {"\\p{N}", LLAMACPP_GPT2}, 0, 0},
    {"gpt-2", 1, {LLAMACPP_GPT2}, 0, 0},
    /* Qwen2, Qwen2.5, Qwen3 (and deepseek-r1-qwen): Llama 3's regex with single digits */
    {"qwen2", 1, {LLAMACPP_QWEN2}, 0, 0},
    {"deepseek-r1-qwen", 1, {LLAMACPP_QWEN2}, 0, 0},
    /* default: punctuation runs, GPT-2, digit runs, then runs of three ASCII digits */
    {"default", 4, {LLAMACPP_PUNCT, LLAMACPP_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, 0, 0},
};

/* llama.cpp's token types (tokenizer.ggml.token_type). */
enum { TT_UNDEFINED, TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE };

/* Texts llama.cpp makes CONTROL whatever their type: end-of-generation tokens always,
 * end-of-turn and fill-in-the-middle ones when the file does not name that id itself. */
static const char *const EOG_TEXTS[] = {"<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
                                        "<|endoftext|>", "<|eom_id|>", "<EOT>",   NULL};
/* DeepSeek's spellings use U+FF5C (fullwidth vertical line) and U+2581 (lower one eighth). */
#define BAR "\xEF\xBD\x9C"
#define LOW "\xE2\x96\x81"
static const struct {
    const char *key, *key_old;
    const char *text[5];
} DETECTED[] = {
    {"tokenizer.ggml.eot_token_id", NULL, {"<" BAR "end" LOW "of" LOW "sentence" BAR ">"}},
    {"tokenizer.ggml.fim_pre_token_id",
     "tokenizer.ggml.prefix_token_id",
     {"<|fim_prefix|>", "<fim-prefix>", "<" BAR "fim" LOW "begin" BAR ">", "<PRE>"}},
    {"tokenizer.ggml.fim_suf_token_id",
     "tokenizer.ggml.suffix_token_id",
     {"<|fim_suffix|>", "<fim-suffix>", "<" BAR "fim" LOW "hole" BAR ">", "<SUF>"}},
    {"tokenizer.ggml.fim_mid_token_id",
     "tokenizer.ggml.middle_token_id",
     {"<|fim_middle|>", "<fim-middle>", "<" BAR "fim" LOW "end" BAR ">", "<MID>"}},
    {"tokenizer.ggml.fim_pad_token_id", NULL, {"<|fim_pad|>", "<fim-pad>", "<PAD>"}},
    {"tokenizer.ggml.fim_rep_token_id",
     NULL,
     {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"}},
    {"tokenizer.ggml.fim_sep_token_id", NULL, {"<|file_sep|>"}},
};
#define N_DETECTED (sizeof DETECTED / sizeof DETECTED[0])

/* Loading state. */
typedef struct gguf_load {
    const mlm_gguf *g;
    const char *file;
    mlm_hf_builder b;
    char *text;    /* owned: every token's text, NUL-terminated, in id order */
    char **tokens; /* owned: (n) pointers into TEXT */
    size_t *lens;  /* owned: (n) */
    int32_t *type; /* owned: (n) llama.cpp token types */
    int64_t n;
    int detect[N_DETECTED]; /* whether DETECTED[i]'s texts are made CONTROL */
} gguf_load;

// ---- typed keys ----

/* KEY's value into *V, or NULL when absent; FORMAT when present with another type than
 * WANT (MLM_GGUF_TYPE_COUNT: any unsigned or non-negative integer). */
static mlm_status get_key(gguf_load *l, const char *key, mlm_gguf_type want,
                          const mlm_gguf_value **v, mlm_error *err) {
    const mlm_gguf_kv *kv = mlm_gguf_find(l->g, key);
    *v = kv ? &kv->value : NULL;
    if (!kv) return MLM_OK;
    mlm_gguf_type t = kv->value.type;
    int ok = t == want;
    if (want == MLM_GGUF_TYPE_COUNT)
        ok = t == MLM_GGUF_U8 || t == MLM_GGUF_U16 || t == MLM_GGUF_U32 || t == MLM_GGUF_U64 ||
             ((t == MLM_GGUF_I8 || t == MLM_GGUF_I16 || t == MLM_GGUF_I32 || t == MLM_GGUF_I64) &&
              kv->value.i >= 0);
    if (!ok)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s must be %s, got %s", l->file, key,
                             want == MLM_GGUF_TYPE_COUNT ? "a non-negative integer (a token id)"
                             : want == MLM_GGUF_STRING   ? "a string"
                             : want == MLM_GGUF_BOOL     ? "a bool"
                                                         : "an array",
                             mlm_gguf_type_name(t));
    return MLM_OK;
}

/* Array KEY of elements of type ELEM (MLM_GGUF_TYPE_COUNT: any integer type). FORMAT when
 * absent and REQUIRED, or of another type. */
static mlm_status get_array(gguf_load *l, const char *key, mlm_gguf_type elem, int required,
                            const char *why, const mlm_gguf_value **v, mlm_error *err) {
    mlm_status st = get_key(l, key, MLM_GGUF_ARRAY, v, err);
    if (st != MLM_OK) return st;
    if (!*v)
        return required
                   ? mlm_error_set(err, MLM_ERR_FORMAT, "%s: %s is missing (%s)", l->file, key, why)
                   : MLM_OK;
    mlm_gguf_type et = (*v)->elem_type;
    int ok = elem == MLM_GGUF_TYPE_COUNT
                 ? et == MLM_GGUF_I32 || et == MLM_GGUF_U32 || et == MLM_GGUF_I8 ||
                       et == MLM_GGUF_U8 || et == MLM_GGUF_I16 || et == MLM_GGUF_U16 ||
                       et == MLM_GGUF_I64 || et == MLM_GGUF_U64
                 : et == elem;
    if (!ok)
        return mlm_error_set(
            err, MLM_ERR_FORMAT, "%s: %s must be an array of %s, got an array of %s", l->file, key,
            elem == MLM_GGUF_TYPE_COUNT ? "integers" : "strings", mlm_gguf_type_name(et));
    return MLM_OK;
}

/* Token id KEY into *ID (left as is when absent); FORMAT when it is no id below N. */
static mlm_status get_id(gguf_load *l, const char *key, int32_t *id, int *present, mlm_error *err) {
    const mlm_gguf_value *v;
    mlm_status st = get_key(l, key, MLM_GGUF_TYPE_COUNT, &v, err);
    if (present) *present = v != NULL;
    if (st != MLM_OK || !v) return st;
    uint64_t x = v->type == MLM_GGUF_U8 || v->type == MLM_GGUF_U16 || v->type == MLM_GGUF_U32 ||
                         v->type == MLM_GGUF_U64
                     ? v->u
                     : (uint64_t)v->i;
    if (x >= (uint64_t)l->n)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: %s is %llu, not a token id (tokenizer.ggml.tokens has %lld)",
                             l->file, key, (unsigned long long)x, (long long)l->n);
    *id = (int32_t)x;
    return MLM_OK;
}

// ---- tokens ----

/* Reads tokenizer.ggml.tokens and tokenizer.ggml.token_type into L. */
static mlm_status read_tokens(gguf_load *l, mlm_error *err) {
    const mlm_gguf_value *toks, *types;
    mlm_status st = get_array(l, "tokenizer.ggml.tokens", MLM_GGUF_STRING, 1,
                              "a GGUF vocabulary needs its token list", &toks, err);
    if (st == MLM_OK)
        st = get_array(l, "tokenizer.ggml.token_type", MLM_GGUF_TYPE_COUNT, 0, "", &types, err);
    if (st != MLM_OK) return st;
    if (toks->n < 1 || toks->n > INT32_MAX / 2)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: tokenizer.ggml.tokens has %llu entries "
                             "(expected 1..%d)",
                             l->file, (unsigned long long)toks->n, INT32_MAX / 2);
    if (types && types->n != toks->n)
        return mlm_error_set(
            err, MLM_ERR_FORMAT,
            "%s: tokenizer.ggml.token_type has %llu entries, tokenizer.ggml.tokens "
            "%llu (one type per token)",
            l->file, (unsigned long long)types->n, (unsigned long long)toks->n);
    l->n = (int64_t)toks->n;
    /* The strings' bytes plus a NUL each fit in the array's size in the file. */
    l->text = malloc((size_t)toks->size + 1);
    l->tokens = malloc((size_t)l->n * sizeof *l->tokens);
    l->lens = malloc((size_t)l->n * sizeof *l->lens);
    l->type = malloc((size_t)l->n * sizeof *l->type);
    if (!l->text || !l->tokens || !l->lens || !l->type)
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory for %lld tokens", l->file,
                             (long long)l->n);
    uint64_t pos = 0;
    size_t used = 0;
    mlm_gguf_value e;
    for (int64_t i = 0; i < l->n; i++) {
        if (!mlm_gguf_array_next(toks, &pos, &e))
            return mlm_error_set(err, MLM_ERR_INTERNAL,
                                 "%s: tokenizer.ggml.tokens[%lld] unreadable", l->file,
                                 (long long)i);
        l->tokens[i] = l->text + used;
        l->lens[i] = (size_t)e.len;
        memcpy(l->text + used, e.str, (size_t)e.len);
        used += (size_t)e.len;
        l->text[used++] = 0;
        int64_t t = TT_NORMAL;
        if (types) {
            if (!mlm_gguf_array_get(types, (uint64_t)i, &e))
                return mlm_error_set(err, MLM_ERR_INTERNAL,
                                     "%s: tokenizer.ggml.token_type[%lld] unreadable", l->file,
                                     (long long)i);
            t = e.type == MLM_GGUF_U8 || e.type == MLM_GGUF_U16 || e.type == MLM_GGUF_U32 ||
                        e.type == MLM_GGUF_U64
                    ? (int64_t)(e.u > 99 ? 99 : e.u)
                    : e.i;
        }
        if (t < TT_UNDEFINED || t > TT_BYTE)
            return mlm_error_set(
                err, MLM_ERR_FORMAT,
                "%s: tokenizer.ggml.token_type[%lld] is %lld (llama.cpp's types are "
                "0..6)",
                l->file, (long long)i, (long long)t);
        l->type[i] = (int32_t)t;
    }
    return MLM_OK;
}

static int in_list(const char *text, size_t len, const char *const *list, size_t n) {
    for (size_t i = 0; i < n && list[i]; i++)
        if (strlen(list[i]) == len && memcmp(list[i], text, len) == 0) return 1;
    return 0;
}

/* Token I's type after llama.cpp's overrides by text. */
static int32_t effective_type(const gguf_load *l, int64_t i) {
    const char *t = l->tokens[i];
    size_t n = l->lens[i];
    if (in_list(t, n, EOG_TEXTS, sizeof EOG_TEXTS / sizeof EOG_TEXTS[0])) return TT_CONTROL;
    for (size_t k = 0; k < N_DETECTED; k++)
        if (l->detect[k] && in_list(t, n, DETECTED[k].text, 5)) return TT_CONTROL;
    return l->type[i];
}

/* The vocabulary, then the added tokens (CONTROL, UNKNOWN: special; USER_DEFINED: not). */
static mlm_status build_vocab(gguf_load *l, mlm_error *err) {
    mlm_hf_builder *b = &l->b;
    mlm_status st = mlm_hfb_vocab_begin(b, l->n, "tokenizer.ggml.tokens", err);
    char where[64];
    for (int64_t i = 0; i < l->n && st == MLM_OK; i++) {
        snprintf(where, sizeof where, "tokenizer.ggml.tokens[%lld]", (long long)i);
        if (effective_type(l, i) == TT_NORMAL)
            st = mlm_hfb_vocab_set(b, l->tokens[i], l->lens[i], i, where, err);
        else
            st = mlm_hfb_vocab_set_raw(b, l->tokens[i], l->lens[i], i, where, err);
    }
    if (st == MLM_OK) st = mlm_hfb_vocab_end(b, "tokenizer.ggml.tokens", err);
    for (int64_t i = 0; i < l->n && st == MLM_OK; i++) {
        int32_t t = effective_type(l, i);
        if (t != TT_CONTROL && t != TT_UNKNOWN && t != TT_USER_DEFINED) continue;
        snprintf(where, sizeof where, "tokenizer.ggml.tokens[%lld]", (long long)i);
        st = mlm_hfb_added(b, i, l->tokens[i], l->lens[i],
                           t == TT_USER_DEFINED ? 0 : MLM_ADDED_SPECIAL, where, err);
    }
    return st;
}

/* tokenizer.ggml.merges: "a b" split at the first space after the first byte, as llama.cpp
 * splits them; both halves and their concatenation must be tokens. */
static mlm_status read_merges(gguf_load *l, mlm_error *err) {
    const mlm_gguf_value *m;
    mlm_status st = get_array(l, "tokenizer.ggml.merges", MLM_GGUF_STRING, 1,
                              "a \"gpt2\" vocabulary needs its merges", &m, err);
    if (st != MLM_OK) return st;
    if (m->n > INT32_MAX / 2)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: tokenizer.ggml.merges: %llu entries exceed "
                             "the limit",
                             l->file, (unsigned long long)m->n);
    st = mlm_hfb_merges_begin(&l->b, (int64_t)m->n, err);
    char *buf = NULL, where[64];
    size_t cap = 0;
    uint64_t pos = 0;
    mlm_gguf_value e;
    for (uint64_t i = 0; i < m->n && st == MLM_OK; i++) {
        if (!mlm_gguf_array_next(m, &pos, &e)) {
            st = mlm_error_set(err, MLM_ERR_INTERNAL, "%s: tokenizer.ggml.merges[%llu] unreadable",
                               l->file, (unsigned long long)i);
            break;
        }
        if (e.len + 1 > cap) {
            char *p = realloc(buf, (size_t)e.len + 1);
            if (!p) {
                st = mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", l->file);
                break;
            }
            buf = p;
            cap = (size_t)e.len + 1;
        }
        memcpy(buf, e.str, (size_t)e.len);
        buf[e.len] = 0;
        snprintf(where, sizeof where, "tokenizer.ggml.merges[%llu]", (unsigned long long)i);
        char *sp = e.len > 1 ? memchr(buf + 1, ' ', (size_t)e.len - 1) : NULL;
        if (!sp) {
            st = mlm_error_set(err, MLM_ERR_FORMAT,
                               "%s: %s: '%.60s' is not two tokens separated by "
                               "a space",
                               l->file, where, buf);
            break;
        }
        *sp = 0;
        st = mlm_hfb_merge(&l->b, (int32_t)i, buf, (size_t)(sp - buf), sp + 1,
                           (size_t)e.len - (size_t)(sp - buf) - 1, where, err);
    }
    free(buf);
    return st;
}

// ---- the file ----

static const struct pre_kind *find_pre(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof PRES / sizeof PRES[0]; i++)
        if (strlen(PRES[i].name) == len && memcmp(PRES[i].name, name, len) == 0) return &PRES[i];
    return NULL;
}

static mlm_status load(gguf_load *l, mlm_tokenizer **out, mlm_error *err) {
    const mlm_gguf_value *v;
    mlm_status st = get_key(l, "tokenizer.ggml.model", MLM_GGUF_STRING, &v, err);
    if (st != MLM_OK) return st;
    if (!v)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: tokenizer.ggml.model is missing: the file carries no vocabulary",
                             l->file);
    if (v->len != 4 || memcmp(v->str, "gpt2", 4) != 0)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: tokenizer.ggml.model '%.*s' is not supported (meshlm reads "
                             "\"gpt2\", llama.cpp's byte-level BPE)",
                             l->file, (int)(v->len < 40 ? v->len : 40), v->str);
    /* llama.cpp takes a missing pre-tokenizer name as "default" (with a warning). */
    if ((st = get_key(l, "tokenizer.ggml.pre", MLM_GGUF_STRING, &v, err)) != MLM_OK) return st;
    const struct pre_kind *pre = v ? find_pre(v->str, (size_t)v->len) : find_pre("default", 7);
    if (v) {
        if (!pre)
            return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                                 "%s: tokenizer.ggml.pre '%.*s' is not supported (meshlm knows "
                                 "llama-bpe, dbrx, smollm, gpt-2, qwen2, deepseek-r1-qwen and "
                                 "default)",
                                 l->file, (int)(v->len < 40 ? v->len : 40), v->str);
    }
    for (size_t k = 0; k < N_DETECTED; k++) {
        l->detect[k] = !mlm_gguf_find(l->g, DETECTED[k].key) &&
                       !(DETECTED[k].key_old && mlm_gguf_find(l->g, DETECTED[k].key_old));
    }
    if ((st = read_tokens(l, err)) != MLM_OK) return st;
    /* llama.cpp's defaults for "gpt2" are 11 for both; the keys override them. */
    int32_t bos = 11, eos = 11, unk = -1, pad = -1;
    st = get_id(l, "tokenizer.ggml.bos_token_id", &bos, NULL, err);
    int has_eos = 0;
    if (st == MLM_OK) st = get_id(l, "tokenizer.ggml.eos_token_id", &eos, &has_eos, err);
    if (st == MLM_OK) st = get_id(l, "tokenizer.ggml.unknown_token_id", &unk, NULL, err);
    if (st == MLM_OK) st = get_id(l, "tokenizer.ggml.padding_token_id", &pad, NULL, err);
    int add_bos = pre->add_bos;
    if (st == MLM_OK) st = get_key(l, "tokenizer.ggml.add_bos_token", MLM_GGUF_BOOL, &v, err);
    if (st == MLM_OK && v) add_bos = v->u != 0;
    const mlm_gguf_value *tmpl = NULL;
    if (st == MLM_OK) st = get_key(l, "tokenizer.chat_template", MLM_GGUF_STRING, &tmpl, err);
    if (st != MLM_OK) return st;
    if (add_bos && bos >= l->n)
        return mlm_error_set(
            err, MLM_ERR_FORMAT,
            "%s: tokenizer.ggml.add_bos_token is true but there is no "
            "tokenizer.ggml.bos_token_id (llama.cpp's default 11 is no token of %lld)",
            l->file, (long long)l->n);
    if ((st = build_vocab(l, err)) != MLM_OK || (st = read_merges(l, err)) != MLM_OK) return st;
    mlm_hf_pretok p = {.n_steps = pre->n};
    for (int i = 0; i < pre->n; i++) {
        snprintf(p.where[i], sizeof p.where[i], "%s: tokenizer.ggml.pre '%s'", l->file, pre->name);
        p.step[i] = (mlm_pretok_spec){pre->pattern[i], 0, MLM_SPLIT_ISOLATED, 0, p.where[i]};
    }
    /* A stop id only when the file names it (llama.cpp would also stop on its default 11). */
    l->b.eos_id = has_eos ? eos : -1;
    if (tmpl) {
        l->b.chat_template = tmpl->str;
        l->b.chat_template_len = (size_t)tmpl->len;
    }
    (void)unk; /* checked; llama.cpp's BPE drops unknown bytes rather than using it */
    (void)pad;
    return mlm_hfb_finish(&l->b, &p, pre->ignore_merges, add_bos ? bos : -1, out, err);
}

mlm_status mlm_tokenizer_load_gguf_memory(const void *data, size_t len, const char *name,
                                          mlm_tokenizer **out, mlm_error *err) {
    if (!out || !name || (!data && len))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "tokenizer: NULL argument");
    *out = NULL;
    mlm_gguf *g = NULL;
    mlm_status st = mlm_gguf_open_memory(data, len, name, &g, err);
    if (st != MLM_OK) return st;
    gguf_load l;
    memset(&l, 0, sizeof l);
    l.g = g;
    l.file = name;
    st = mlm_hfb_init(&l.b, name, err);
    if (st == MLM_OK) {
        l.b.tok->flavour = MLM_TOK_GGUF;
        l.b.keep_ids = 1;
        l.b.merge_keep_first = 1;
        st = load(&l, out, err);
    }
    mlm_hfb_deinit(&l.b);
    free(l.text);
    free(l.tokens);
    free(l.lens);
    free(l.type);
    mlm_gguf_free(g);
    return st;
}
