/* tokenizer/chat.c: chat formats (mlm_tokenizer_encode_chat). The format comes from the
 * chat template when the tokenizer has one (GGUF's tokenizer.chat_template, or
 * tokenizer_config.json's beside a tokenizer.json): Llama 3 when it writes
 * <|start_header_id|>, ChatML when it writes <|im_start|> (Phi-4's form when it also writes
 * <|im_sep|>, else the form with newlines). Without a template, or with one of another
 * kind, it comes from the special tokens: Llama 3 when the tokenizer has <|begin_of_text|>,
 * <|start_header_id|>, <|end_header_id|> and <|eot_id|>; Phi-4's ChatML with <|im_start|>,
 * <|im_sep|> and <|im_end|>; ChatML with newlines with <|im_start|> and <|im_end|>. The
 * template is not run: meshlm writes the format itself. In every format special-token text
 * inside a message stays plain text (only the format inserts special ids).
 *
 * Llama 3 uses Meta's ChatFormat.encode_dialog_prompt (llama-models, spec 4.6), not the
 * Hugging Face chat_template: no default system message, no "Cutting Knowledge Date"
 * block, no trimming of content. After one <|begin_of_text|>, per message:
 *   <|start_header_id|> encode(role) <|end_header_id|> encode("\n\n") encode(content) <|eot_id|>
 * Role "tool" is written "ipython".
 *
 * ChatML (Phi-4's chat_template, tokenizer_config.json), no BOS, no newlines:
 *   <|im_start|> role <|im_sep|> content <|im_end|>   per message (system, user, assistant)
 *   <|im_start|> assistant <|im_sep|>                 as the generation prompt
 * ChatML with newlines (SmolLM2, Qwen), no BOS:
 *   <|im_start|> role "\n" content <|im_end|> "\n"    per message (system, user, assistant, tool)
 *   <|im_start|> "assistant\n"                        as the generation prompt
 * where a template that holds a fixed system message in one string literal,
 * '<|im_start|>system\n...<|im_end|>', adds it first when the first message is not a
 * system one (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by Hugging
 * Face"). Hugging Face renders the template and tokenizes the text whole (llama.cpp the
 * same, special tokens parsed), so each text between two special tokens is encoded as one
 * piece here, and the lstrip / rstrip flags of the special tokens absorb whitespace next to
 * them: a text piece loses the leading White_Space its left neighbour's rstrip would absorb
 * and the trailing White_Space its right neighbour's lstrip would. The result is the
 * rendered template tokenized exactly when no content holds added-token text (there, the
 * template's tokenization would emit the special id). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/added.h"
#include "tokenizer/think.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

#define IM_START "<|im_start|>"
#define IM_END "<|im_end|>"

static const char *const LLAMA3_NEEDS[] = {"<|begin_of_text|>", "<|start_header_id|>",
                                           "<|end_header_id|>", "<|eot_id|>"};
static const char *const CHATML_NEEDS[] = {IM_START, "<|im_sep|>", IM_END};
static const char *const THINK_NEEDS[] = {"<think>", "</think>"};
static const char *const LLAMA3_STOP[] = {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"};
static const char *const CHATML_STOP[] = {IM_END, IM_START, "<|endoftext|>"};

static int has_all(const mlm_tokenizer *tok, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (mlm_tokenizer_special_id(tok, names[i]) < 0) return 0;
    return 1;
}

static int contains(const char *t, size_t n, const char *needle) {
    return memmem(t, n, needle, strlen(needle)) != NULL;
}

/* The fixed system message of a ChatML template (see the header comment): the text
 * between "<|im_start|>system\n" and "<|im_end|>" inside one Jinja string literal, its
 * escapes (\n, \t, \\, \', \") undone. *OUT is malloc'd, or NULL when there is none. */
static mlm_status default_system(const char *t, size_t n, char **out, mlm_error *err) {
    static const char head[] = IM_START "system\n";
    *out = NULL;
    if (!contains(t, n, "messages[0]")) return MLM_OK; /* nothing tests the first message */
    for (size_t p = 1; p + 12 <= n; p++) {
        if (memcmp(t + p, IM_START, 12) != 0 || (t[p - 1] != '\'' && t[p - 1] != '"')) continue;
        char q = t[p - 1], *lit = malloc(n - p + 1);
        if (!lit) return mlm_error_set(err, MLM_ERR_NOMEM, "chat: out of memory");
        size_t k = 0, i = p;
        for (; i < n && t[i] != q; i++) {
            char c = t[i];
            if (c == '\\' && i + 1 < n) {
                c = t[++i];
                c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
            }
            lit[k++] = c;
        }
        lit[k] = 0;
        char *end = strstr(lit, IM_END);
        if (i < n && k > sizeof head - 1 && memcmp(lit, head, sizeof head - 1) == 0 && end) {
            *end = 0;
            memmove(lit, lit + sizeof head - 1, strlen(lit + sizeof head - 1) + 1);
            *out = lit;
            return MLM_OK;
        }
        free(lit);
    }
    return MLM_OK;
}

mlm_status mlm_chat_detect(mlm_tokenizer *tok, const char *tmpl, size_t len, mlm_error *err) {
    tok->chat = MLM_CHAT_NONE;
    tok->chat_think = 0;
    free(tok->chat_system);
    tok->chat_system = NULL;
    int llama3 = has_all(tok, LLAMA3_NEEDS, sizeof LLAMA3_NEEDS / sizeof LLAMA3_NEEDS[0]);
    int sep = has_all(tok, CHATML_NEEDS, sizeof CHATML_NEEDS / sizeof CHATML_NEEDS[0]);
    int nl = has_all(tok, CHATML_NEEDS, 1) && has_all(tok, CHATML_NEEDS + 2, 1);
    if (tmpl && len) {
        if (llama3 && contains(tmpl, len, "<|start_header_id|>")) {
            tok->chat = MLM_CHAT_LLAMA3;
            return MLM_OK;
        }
        int im_sep = contains(tmpl, len, "<|im_sep|>");
        if (contains(tmpl, len, IM_START) && im_sep && sep) {
            tok->chat = MLM_CHAT_CHATML;
            return MLM_OK;
        }
        if (contains(tmpl, len, IM_START) && !im_sep && nl) {
            tok->chat = MLM_CHAT_CHATML_NL;
            tok->chat_think = contains(tmpl, len, "enable_thinking") &&
                              contains(tmpl, len, "<think>") && has_all(tok, THINK_NEEDS, 2);
            return default_system(tmpl, len, &tok->chat_system, err);
        }
    }
    if (llama3)
        tok->chat = MLM_CHAT_LLAMA3;
    else if (sep)
        tok->chat = MLM_CHAT_CHATML;
    else if (nl)
        tok->chat = MLM_CHAT_CHATML_NL;
    return MLM_OK;
}

const char *mlm_tokenizer_chat_format(const mlm_tokenizer *tok) {
    if (!tok) return NULL;
    if (tok->chat == MLM_CHAT_LLAMA3) return "llama3";
    if (tok->chat == MLM_CHAT_CHATML) return "chatml";
    if (tok->chat == MLM_CHAT_CHATML_NL) return "chatml-newline";
    return NULL;
}

mlm_chat_kind mlm_tokenizer_chat_kind(const mlm_tokenizer *tok) {
    return tok ? tok->chat : MLM_CHAT_NONE;
}

const char *mlm_tokenizer_chat_system(const mlm_tokenizer *tok) {
    return tok && tok->chat == MLM_CHAT_CHATML_NL ? tok->chat_system : NULL;
}

int32_t mlm_tokenizer_chat_stop_ids(const mlm_tokenizer *tok, int32_t *ids, int32_t max) {
    if (!tok || tok->chat == MLM_CHAT_NONE) return 0;
    const char *const *names = tok->chat == MLM_CHAT_LLAMA3 ? LLAMA3_STOP : CHATML_STOP;
    int32_t found[4], n = 0;
    for (size_t i = 0; i < 3; i++) {
        int32_t id = mlm_tokenizer_special_id(tok, names[i]);
        if (id >= 0) found[n++] = id;
    }
    /* The end-of-sequence id the file names, when the list lacks it. */
    int known = tok->eos_id < 0;
    for (int32_t i = 0; i < n && !known; i++)
        known = found[i] == tok->eos_id;
    if (!known) found[n++] = tok->eos_id;
    for (int32_t i = 0; i < n && i < max && ids; i++)
        ids[i] = found[i];
    return n;
}

// ---- pieces ----

static mlm_status push_special(const mlm_tokenizer *tok, const char *name, mlm_tokens *out,
                               mlm_error *err) {
    int32_t id = mlm_tokenizer_special_id(tok, name);
    if (id < 0) return mlm_error_set(err, MLM_ERR_INTERNAL, "chat: special token %s missing", name);
    if (mlm_tokens_push(out, id) != MLM_OK)
        return mlm_error_set(err, MLM_ERR_NOMEM, "chat: out of memory for token ids");
    return MLM_OK;
}

static mlm_status push_text(const mlm_tokenizer *tok, const char *text, mlm_tokens *out,
                            mlm_error *err) {
    mlm_encode_params p = mlm_encode_default_params();
    return mlm_tokenizer_encode(tok, text, strlen(text), &p, out, err);
}

/* TEXT as it comes out between special tokens PREV and NEXT (see the header comment;
 * NEXT is NULL at the end of the prompt). */
static mlm_status push_between(const mlm_tokenizer *tok, const char *prev, const char *text,
                               const char *next, mlm_tokens *out, mlm_error *err) {
    const mlm_special *l = mlm_specials_by_text(&tok->specials, prev, strlen(prev));
    const mlm_special *r = next ? mlm_specials_by_text(&tok->specials, next, strlen(next)) : NULL;
    const unsigned char *t = (const unsigned char *)text;
    size_t len = strlen(text);
    unsigned char *fixed = NULL;
    /* HF sees a Python string: repair first, so that stripping sees what it would. */
    if (mlm_utf8_valid_prefix(t, len) != len) {
        mlm_status st = mlm_utf8_repair(t, len, &fixed, &len, err);
        if (st != MLM_OK) return st;
        t = fixed;
    }
    size_t a = 0, b = len;
    if (l && (l->flags & MLM_ADDED_RSTRIP)) a = mlm_ws_prefix(t, len);
    if (r && (r->flags & MLM_ADDED_LSTRIP)) b = a + mlm_ws_suffix(t + a, len - a);
    mlm_encode_params p = mlm_encode_default_params();
    mlm_status st = mlm_tokenizer_encode(tok, (const char *)t + a, b - a, &p, out, err);
    free(fixed);
    return st;
}

// ---- Llama 3 ----

/* <|start_header_id|> ROLE <|end_header_id|> "\n\n" */
static mlm_status llama3_header(const mlm_tokenizer *tok, const char *role, mlm_tokens *out,
                                mlm_error *err) {
    mlm_status st = push_special(tok, "<|start_header_id|>", out, err);
    if (st == MLM_OK) st = push_text(tok, role, out, err);
    if (st == MLM_OK) st = push_special(tok, "<|end_header_id|>", out, err);
    if (st == MLM_OK) st = push_text(tok, "\n\n", out, err);
    return st;
}

static const char *llama3_role(const char *role) {
    static const char *const ROLES[] = {"system", "user", "assistant", "ipython"};
    if (strcmp(role, "tool") == 0) return "ipython";
    for (size_t i = 0; i < sizeof ROLES / sizeof ROLES[0]; i++)
        if (strcmp(role, ROLES[i]) == 0) return ROLES[i];
    return NULL;
}

/* One message: header, each part (text encoded on its own, or a token id), <|eot_id|>. */
static mlm_status llama3_message(const mlm_tokenizer *tok, const char *role,
                                 const mlm_chat_part *parts, int32_t n, mlm_tokens *out,
                                 mlm_error *err) {
    mlm_status st = llama3_header(tok, llama3_role(role), out, err);
    for (int32_t k = 0; k < n && st == MLM_OK; k++) {
        if (parts[k].text)
            st = push_text(tok, parts[k].text, out, err);
        else if (mlm_tokens_push(out, parts[k].token) != MLM_OK)
            st = mlm_error_set(err, MLM_ERR_NOMEM, "chat: out of memory for token ids");
    }
    if (st == MLM_OK) st = push_special(tok, "<|eot_id|>", out, err);
    return st;
}

static mlm_status llama3_chat(const mlm_tokenizer *tok, const mlm_chat_message *msgs, int n_msgs,
                              int add_generation_prompt, mlm_tokens *out, mlm_error *err) {
    mlm_status st = push_special(tok, "<|begin_of_text|>", out, err);
    for (int i = 0; i < n_msgs && st == MLM_OK; i++) {
        mlm_chat_part text = {msgs[i].content, 0};
        st = llama3_message(tok, msgs[i].role, &text, 1, out, err);
    }
    if (st == MLM_OK && add_generation_prompt) st = llama3_header(tok, "assistant", out, err);
    return st;
}

// ---- ChatML ----

/* ROLE when the ChatML form writes it (with newlines, also "tool"), else NULL. */
static const char *chatml_role(const char *role, int newline) {
    static const char *const ROLES[] = {"system", "user", "assistant", "tool"};
    for (size_t i = 0; i < sizeof ROLES / sizeof ROLES[0] - !newline; i++)
        if (strcmp(role, ROLES[i]) == 0) return ROLES[i];
    return NULL;
}

/* <|im_start|> ROLE <|im_sep|> */
static mlm_status chatml_header(const mlm_tokenizer *tok, const char *role, mlm_tokens *out,
                                mlm_error *err) {
    mlm_status st = push_special(tok, "<|im_start|>", out, err);
    if (st == MLM_OK) st = push_between(tok, "<|im_start|>", role, "<|im_sep|>", out, err);
    if (st == MLM_OK) st = push_special(tok, "<|im_sep|>", out, err);
    return st;
}

static mlm_status chatml_chat(const mlm_tokenizer *tok, const mlm_chat_message *msgs, int n_msgs,
                              int add_generation_prompt, mlm_tokens *out, mlm_error *err) {
    mlm_status st = MLM_OK;
    for (int i = 0; i < n_msgs && st == MLM_OK; i++) {
        st = chatml_header(tok, chatml_role(msgs[i].role, 0), out, err);
        if (st == MLM_OK)
            st = push_between(tok, "<|im_sep|>", msgs[i].content, "<|im_end|>", out, err);
        if (st == MLM_OK) st = push_special(tok, "<|im_end|>", out, err);
    }
    if (st == MLM_OK && add_generation_prompt) st = chatml_header(tok, "assistant", out, err);
    return st;
}

// ---- ChatML with newlines ----

/* <|im_start|> ROLE "\n" CONTENT <|im_end|> "\n", the last newline before NEXT (the next
 * special token, NULL at the end). */
static mlm_status chatml_nl_message(const mlm_tokenizer *tok, const char *role, const char *content,
                                    const char *next, mlm_tokens *out, mlm_error *err) {
    size_t lr = strlen(role), lc = strlen(content);
    char *text = malloc(lr + lc + 2);
    if (!text) return mlm_error_set(err, MLM_ERR_NOMEM, "chat: out of memory");
    memcpy(text, role, lr);
    text[lr] = '\n';
    memcpy(text + lr + 1, content, lc + 1);
    mlm_status st = push_special(tok, IM_START, out, err);
    if (st == MLM_OK) st = push_between(tok, IM_START, text, IM_END, out, err);
    if (st == MLM_OK) st = push_special(tok, IM_END, out, err);
    if (st == MLM_OK) st = push_between(tok, IM_END, "\n", next, out, err);
    free(text);
    return st;
}

/* With a template that thinks (Qwen3), assistant messages go through mlm_chat_think_text
 * and thinking off closes an empty <think> block in the generation prompt; "<think>" and
 * "</think>" are added tokens that encoding matches inside a piece, as tokenizers does. */
static mlm_status chatml_nl_chat(const mlm_tokenizer *tok, const mlm_chat_message *msgs, int n_msgs,
                                 const mlm_chat_opts *o, mlm_tokens *out, mlm_error *err) {
    mlm_status st = MLM_OK;
    const int think = tok->chat_think, gen = o->add_generation_prompt;
    const int last_query = think ? mlm_chat_last_query(msgs, n_msgs) : n_msgs;
    if (n_msgs > 0 && tok->chat_system && strcmp(msgs[0].role, "system") != 0)
        st = chatml_nl_message(tok, "system", tok->chat_system, IM_START, out, err);
    for (int i = 0; i < n_msgs && st == MLM_OK; i++) {
        const char *next = i + 1 < n_msgs || gen ? IM_START : NULL;
        if (!think || strcmp(msgs[i].role, "assistant") != 0) {
            st = chatml_nl_message(tok, msgs[i].role, msgs[i].content, next, out, err);
            continue;
        }
        char *text;
        st = mlm_chat_think_text(&msgs[i], o->reasoning ? o->reasoning[i] : NULL, i > last_query,
                                 i == n_msgs - 1, &text, err);
        if (st == MLM_OK) st = chatml_nl_message(tok, msgs[i].role, text, next, out, err);
        free(text);
    }
    if (st == MLM_OK && gen) {
        st = push_special(tok, IM_START, out, err);
        const char *head = think && o->thinking == MLM_THINK_OFF
                               ? "assistant\n<think>\n\n</think>\n\n"
                               : "assistant\n";
        if (st == MLM_OK) st = push_between(tok, IM_START, head, NULL, out, err);
    }
    return st;
}

mlm_status mlm_tokenizer_encode_chat(const mlm_tokenizer *tok, const mlm_chat_message *msgs,
                                     int n_msgs, int add_generation_prompt, mlm_tokens *out,
                                     mlm_error *err) {
    mlm_chat_opts o = {add_generation_prompt, MLM_THINK_DEFAULT, NULL};
    return mlm_tokenizer_encode_chat_opts(tok, msgs, n_msgs, &o, out, err);
}

mlm_status mlm_tokenizer_encode_chat_opts(const mlm_tokenizer *tok, const mlm_chat_message *msgs,
                                          int n_msgs, const mlm_chat_opts *opts,
                                          mlm_tokens *out, mlm_error *err) {
    const mlm_chat_opts o = opts ? *opts : (mlm_chat_opts){1, MLM_THINK_DEFAULT, NULL};
    const int add_generation_prompt = o.add_generation_prompt;
    if (!tok || !out || n_msgs < 0 || (n_msgs > 0 && !msgs))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "chat: bad argument");
    if (tok->chat == MLM_CHAT_NONE)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: chat: no chat format for this vocabulary", tok->name);
    mlm_chat_kind kind = tok->chat;
    for (int i = 0; i < n_msgs; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return mlm_error_set(err, MLM_ERR_INVALID_ARG, "chat: message %d: NULL role or content",
                                 i);
        int known = kind == MLM_CHAT_LLAMA3
                        ? llama3_role(msgs[i].role) != NULL
                        : chatml_role(msgs[i].role, kind != MLM_CHAT_CHATML) != NULL;
        if (!known)
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "chat: message %d: unknown role '%s' (%s)", i, msgs[i].role,
                                 kind == MLM_CHAT_LLAMA3
                                     ? "system, user, assistant, ipython or tool"
                                 : kind == MLM_CHAT_CHATML ? "system, user or assistant"
                                                           : "system, user, assistant or tool");
    }
    int64_t n0 = out->n;
    mlm_status st;
    if (kind == MLM_CHAT_LLAMA3)
        st = llama3_chat(tok, msgs, n_msgs, add_generation_prompt, out, err);
    else if (kind == MLM_CHAT_CHATML)
        st = chatml_chat(tok, msgs, n_msgs, add_generation_prompt, out, err);
    else
        st = chatml_nl_chat(tok, msgs, n_msgs, &o, out, err);
    if (st != MLM_OK) out->n = n0; /* leave OUT as it was */
    return st;
}

mlm_status mlm_tokenizer_encode_chat_parts(const mlm_tokenizer *tok, const mlm_chat_parts *msgs,
                                           int n_msgs, int add_generation_prompt, mlm_tokens *out,
                                           mlm_error *err) {
    if (!tok || !out || n_msgs < 0 || (n_msgs > 0 && !msgs))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "chat: bad argument");
    if (tok->chat != MLM_CHAT_LLAMA3)
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "%s: chat: content parts are read in the Llama 3 chat format only",
                             tok->name);
    for (int i = 0; i < n_msgs; i++) {
        if (!msgs[i].role || msgs[i].n_parts < 0 || (msgs[i].n_parts && !msgs[i].parts))
            return mlm_error_set(err, MLM_ERR_INVALID_ARG, "chat: message %d: NULL role or parts",
                                 i);
        if (!llama3_role(msgs[i].role))
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "chat: message %d: unknown role '%s' (system, user, assistant, "
                                 "ipython or tool)",
                                 i, msgs[i].role);
    }
    int64_t n0 = out->n;
    mlm_status st = push_special(tok, "<|begin_of_text|>", out, err);
    for (int i = 0; i < n_msgs && st == MLM_OK; i++)
        st = llama3_message(tok, msgs[i].role, msgs[i].parts, msgs[i].n_parts, out, err);
    if (st == MLM_OK && add_generation_prompt) st = llama3_header(tok, "assistant", out, err);
    if (st != MLM_OK) out->n = n0;
    return st;
}
