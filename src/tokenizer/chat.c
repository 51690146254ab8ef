/* tokenizer/chat.c: chat formats (mlm_tokenizer_encode_chat), chosen from the special
 * tokens a tokenizer has: Llama 3 when it has <|begin_of_text|>, <|start_header_id|>,
 * <|end_header_id|> and <|eot_id|>; ChatML (Phi-4) when it has <|im_start|>, <|im_sep|> and
 * <|im_end|>. In both, special-token text inside a message stays plain text (only the
 * format inserts special ids) and every text piece is a separate encode call.
 *
 * Llama 3 uses Meta's ChatFormat.encode_dialog_prompt (llama-models, spec 4.6), not the
 * Hugging Face chat_template: no default system message, no "Cutting Knowledge Date"
 * block, no trimming of content. After one <|begin_of_text|>, per message:
 *   <|start_header_id|> encode(role) <|end_header_id|> encode("\n\n") encode(content) <|eot_id|>
 * Role "tool" is written "ipython".
 *
 * ChatML is Phi-4's chat_template (tokenizer_config.json), no BOS, no newlines:
 *   <|im_start|> role <|im_sep|> content <|im_end|>   per message (system, user, assistant)
 *   <|im_start|> assistant <|im_sep|>                 as the generation prompt
 * Hugging Face renders that string and tokenizes it whole, so the lstrip / rstrip flags of
 * the special tokens absorb whitespace next to them; a text piece here loses the leading
 * White_Space its left neighbour's rstrip would absorb and the trailing White_Space its
 * right neighbour's lstrip would. The result is transformers' apply_chat_template exactly
 * when no content holds added-token text (there, HF would emit the special id). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/added.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

static const char *const LLAMA3_NEEDS[] = {"<|begin_of_text|>", "<|start_header_id|>",
                                           "<|end_header_id|>", "<|eot_id|>"};
static const char *const CHATML_NEEDS[] = {"<|im_start|>", "<|im_sep|>", "<|im_end|>"};
static const char *const LLAMA3_STOP[] = {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"};
static const char *const CHATML_STOP[] = {"<|im_end|>", "<|im_start|>", "<|endoftext|>"};

static int has_all(const mlm_tokenizer *tok, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (mlm_tokenizer_special_id(tok, names[i]) < 0) return 0;
    return 1;
}

void mlm_chat_detect(mlm_tokenizer *tok) {
    tok->chat = MLM_CHAT_NONE;
    if (has_all(tok, LLAMA3_NEEDS, sizeof LLAMA3_NEEDS / sizeof LLAMA3_NEEDS[0]))
        tok->chat = MLM_CHAT_LLAMA3;
    else if (has_all(tok, CHATML_NEEDS, sizeof CHATML_NEEDS / sizeof CHATML_NEEDS[0]))
        tok->chat = MLM_CHAT_CHATML;
}

const char *mlm_tokenizer_chat_format(const mlm_tokenizer *tok) {
    if (!tok) return NULL;
    if (tok->chat == MLM_CHAT_LLAMA3) return "llama3";
    if (tok->chat == MLM_CHAT_CHATML) return "chatml";
    return NULL;
}

int32_t mlm_tokenizer_chat_stop_ids(const mlm_tokenizer *tok, int32_t *ids, int32_t max) {
    if (!tok || tok->chat == MLM_CHAT_NONE) return 0;
    const char *const *names = tok->chat == MLM_CHAT_LLAMA3 ? LLAMA3_STOP : CHATML_STOP;
    int32_t n = 0;
    for (size_t i = 0; i < 3; i++) {
        int32_t id = mlm_tokenizer_special_id(tok, names[i]);
        if (id < 0) continue;
        if (ids && n < max) ids[n] = id;
        n++;
    }
    return n;
}

// ---- pieces ----

static mlm_status push_special(const mlm_tokenizer *tok, const char *name, mlm_tokens *out,
                               mlm_error *err) {
    int32_t id = mlm_tokenizer_special_id(tok, name);
    if (id < 0) return mlm_err_set(err, MLM_ERR_INTERNAL, "chat: special token %s missing", name);
    if (mlm_tokens_push(out, id) != MLM_OK)
        return mlm_err_set(err, MLM_ERR_NOMEM, "chat: out of memory for token ids");
    return MLM_OK;
}

static mlm_status push_text(const mlm_tokenizer *tok, const char *text, mlm_tokens *out,
                            mlm_error *err) {
    mlm_encode_params p = mlm_encode_default_params();
    return mlm_tokenizer_encode(tok, text, strlen(text), &p, out, err);
}

/* TEXT as it comes out between special tokens PREV and NEXT (see the header comment). */
static mlm_status push_between(const mlm_tokenizer *tok, const char *prev, const char *text,
                               const char *next, mlm_tokens *out, mlm_error *err) {
    const mlm_special *l = mlm_specials_by_text(&tok->specials, prev, strlen(prev));
    const mlm_special *r = mlm_specials_by_text(&tok->specials, next, strlen(next));
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

static mlm_status llama3_chat(const mlm_tokenizer *tok, const mlm_chat_message *msgs, int n_msgs,
                              int add_generation_prompt, mlm_tokens *out, mlm_error *err) {
    mlm_status st = push_special(tok, "<|begin_of_text|>", out, err);
    for (int i = 0; i < n_msgs && st == MLM_OK; i++) {
        st = llama3_header(tok, llama3_role(msgs[i].role), out, err);
        if (st == MLM_OK) st = push_text(tok, msgs[i].content, out, err);
        if (st == MLM_OK) st = push_special(tok, "<|eot_id|>", out, err);
    }
    if (st == MLM_OK && add_generation_prompt) st = llama3_header(tok, "assistant", out, err);
    return st;
}

// ---- ChatML ----

static const char *chatml_role(const char *role) {
    static const char *const ROLES[] = {"system", "user", "assistant"};
    for (size_t i = 0; i < sizeof ROLES / sizeof ROLES[0]; i++)
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
        st = chatml_header(tok, chatml_role(msgs[i].role), out, err);
        if (st == MLM_OK)
            st = push_between(tok, "<|im_sep|>", msgs[i].content, "<|im_end|>", out, err);
        if (st == MLM_OK) st = push_special(tok, "<|im_end|>", out, err);
    }
    if (st == MLM_OK && add_generation_prompt) st = chatml_header(tok, "assistant", out, err);
    return st;
}

mlm_status mlm_tokenizer_encode_chat(const mlm_tokenizer *tok, const mlm_chat_message *msgs,
                                     int n_msgs, int add_generation_prompt, mlm_tokens *out,
                                     mlm_error *err) {
    if (!tok || !out || n_msgs < 0 || (n_msgs > 0 && !msgs))
        return mlm_err_set(err, MLM_ERR_INVALID_ARG, "chat: bad argument");
    if (tok->chat == MLM_CHAT_NONE)
        return mlm_err_set(err, MLM_ERR_UNSUPPORTED, "%s: chat: no chat format for this vocabulary",
                           tok->name);
    int llama3 = tok->chat == MLM_CHAT_LLAMA3;
    for (int i = 0; i < n_msgs; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return mlm_err_set(err, MLM_ERR_INVALID_ARG, "chat: message %d: NULL role or content",
                               i);
        if (llama3 ? !llama3_role(msgs[i].role) : !chatml_role(msgs[i].role))
            return mlm_err_set(err, MLM_ERR_INVALID_ARG, "chat: message %d: unknown role '%s' (%s)",
                               i, msgs[i].role,
                               llama3 ? "system, user, assistant, ipython or tool"
                                      : "system, user or assistant");
    }
    int64_t n0 = out->n;
    mlm_status st = llama3 ? llama3_chat(tok, msgs, n_msgs, add_generation_prompt, out, err)
                           : chatml_chat(tok, msgs, n_msgs, add_generation_prompt, out, err);
    if (st != MLM_OK) out->n = n0; /* leave OUT as it was */
    return st;
}
