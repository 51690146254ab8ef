/* tokenizer/tools.h: OpenAI tool calls in the chat formats (meshlm.h's "tool calls" says
 * what each format writes and reads): the pieces behind the public calls, for tools_prompt.c,
 * tools_reply.c and the tests. The prompt side rewrites a dialog with tools into the (role,
 * content) messages that mlm_tokenizer_encode_chat_opts frames into exactly what the
 * template renders; the reply side finds the calls and the schema of one call. */
#ifndef MESHLM_TOKENIZER_TOOLS_H
#define MESHLM_TOKENIZER_TOOLS_H

#include <jansson.h>

#include "meshlm.h"

/* A dialog rewritten in a format's tool form. */
typedef struct mlm_tools_prompt {
    mlm_chat_message *msgs; /* owned: N_MSGS messages; each ROLE a static string, each
                               CONTENT a malloc'd string owned here */
    const char **reasoning; /* owned array of N_MSGS borrowed strings: an assistant message's
                               reasoning, else NULL (mlm_chat_opts's) */
    int n_msgs;
} mlm_tools_prompt;

/* MSGS[0, N) with TOOLS (a JSON array) in format KIND's tool form (meshlm.h's
 * mlm_tokenizer_encode_dialog), DEFAULT_SYSTEM the template's default system message (may
 * be NULL), into OUT (zeroed first). INVALID_ARG (the message starting with the request
 * field at fault), UNSUPPORTED for MLM_CHAT_NONE, NOMEM; on failure OUT holds nothing. */
mlm_status mlm_tools_render(mlm_chat_kind kind, const mlm_chat_turn *msgs, int n,
                            const json_t *tools, const char *default_system,
                            mlm_tools_prompt *out, mlm_error *err);
void mlm_tools_prompt_deinit(mlm_tools_prompt *p);

/* TEXT (NULL: none) parsed as a tools array into *OUT (NULL for none). INVALID_ARG
 * ("tools: ...") when it is no JSON array. */
mlm_status mlm_tools_load(const char *text, json_t **out, mlm_error *err);

/* Whether TOOLS (a tools array, may be NULL) declares a function named NAME. */
int mlm_tools_declared(const json_t *tools, const char *name);

/* The key a call's arguments go under in KIND: "parameters" for llama3, "arguments" for the
 * ChatML forms, NULL for MLM_CHAT_NONE. */
const char *mlm_tools_args_key(mlm_chat_kind kind);

/* The schema of one call (meshlm.h's mlm_tool_call_schema) as JSON: a new reference, NULL
 * when out of memory, for MLM_CHAT_NONE or when no function is allowed. */
json_t *mlm_tools_call_schema(mlm_chat_kind kind, const json_t *tools, const char *only);

#endif
