/* tools/server/dialog.h: a chat request's dialog through the library's chat formats: its
 * messages, tools and thinking switch as token ids (mlm_tokenizer_encode_dialog), and the
 * tools as the JSON text the library's tool-call calls take. */
#ifndef MESHLM_SERVER_DIALOG_H
#define MESHLM_SERVER_DIALOG_H

#include "meshlm.h"
#include "request.h"

/* R's tools as JSON text (malloc'd) when the model is shown them (R has tools and
 * tool_choice is not none), else NULL; *OOM set when out of memory. */
char *srv_tools_text(const srv_request *r, int *oom);

/* A chat request's dialog as token ids appended to OUT: R's messages (role, content,
 * reasoning_content, tool calls), R's tools when srv_tools_text gives them, R's thinking
 * switch, with a generation prompt. Returns 1, or 0 with E filled: 400 for a tokenizer
 * without a chat format (naming the model ALIAS) and for what the library refuses (the
 * param the field its message names: "messages", "messages[I].tool_calls", ...); 500 when
 * out of memory. */
int srv_chat_encode(const mlm_tokenizer *tok, const char *alias, const srv_request *r,
                    mlm_tokens *out, srv_error *e);

#endif
