/* tokenizer/chat.c: chat formats (mlm_tokenizer_encode_chat).
 * Llama 3 uses Meta's ChatFormat.encode_dialog_prompt (llama-models, spec 4.6), not the
 * Hugging Face chat_template: no default system message, no "Cutting Knowledge Date"
 * block, no trimming of content. Per message:
 *   <|start_header_id|> encode(role) <|end_header_id|> encode("\n\n") encode(content) <|eot_id|>
 * after one <|begin_of_text|>; every encode is a separate call (BPE never merges across
 * the pieces) and special-token text inside content stays plain text. Role "tool" is
 * written "ipython". Other flavours have no chat format yet (UNSUPPORTED). */
#include <string.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

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

mlm_status mlm_tokenizer_encode_chat(const mlm_tokenizer *tok, const mlm_chat_message *msgs,
                                     int n_msgs, int add_generation_prompt, mlm_tokens *out,
                                     mlm_error *err) {
    if (!tok || !out || n_msgs < 0 || (n_msgs > 0 && !msgs))
        return mlm_err_set(err, MLM_ERR_INVALID_ARG, "chat: bad argument");
    if (tok->flavour != MLM_TOK_LLAMA3)
        return mlm_err_set(err, MLM_ERR_UNSUPPORTED, "%s: chat: no chat format for this vocabulary",
                           tok->name);
    for (int i = 0; i < n_msgs; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return mlm_err_set(err, MLM_ERR_INVALID_ARG, "chat: message %d: NULL role or content",
                               i);
        if (!llama3_role(msgs[i].role))
            return mlm_err_set(err, MLM_ERR_INVALID_ARG,
                               "chat: message %d: unknown role '%s' (system, user, assistant, "
                               "ipython or tool)",
                               i, msgs[i].role);
    }
    int64_t n0 = out->n;
    mlm_status st = llama3_chat(tok, msgs, n_msgs, add_generation_prompt, out, err);
    if (st != MLM_OK) out->n = n0; /* leave OUT as it was */
    return st;
}
