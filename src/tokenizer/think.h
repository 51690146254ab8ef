/* tokenizer/think.h: the <think> blocks of chat formats that think (Qwen3's template), for
 * chat.c; the reply split is public (meshlm.h's mlm_chat_split_reasoning). */
#ifndef MESHLM_TOKENIZER_THINK_H
#define MESHLM_TOKENIZER_THINK_H

#include "meshlm.h"

/* The index of the last user query among MSGS[0..N): the last user message that is not
 * one <tool_response>...</tool_response> block (tool results framed as a user turn), or
 * N - 1 when there is none, as the template's ns.last_query_index. */
int mlm_chat_last_query(const mlm_chat_message *msgs, int n);

/* The text of assistant message M (REASONING: its reasoning, or NULL) after its
 * "<|im_start|>assistant\n", as Qwen3's
 * template writes it: a <think> block ("<think>\n" reasoning "\n</think>\n\n" content) when
 * BLOCK_ALLOWED (the message follows the last user query) and the message is the LAST one
 * or has reasoning, else its content alone (meshlm.h's mlm_tokenizer_encode_chat_opts
 * says where each comes from). *OUT is malloc'd. NOMEM. */
mlm_status mlm_chat_think_text(const mlm_chat_message *m, const char *reasoning,
                               int block_allowed, int last, char **out, mlm_error *err);

#endif
