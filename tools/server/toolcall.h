/* tools/server/toolcall.h: OpenAI tool calls in the chat formats meshlm writes. The prompt
 * side turns a request's messages and tools into the (role, content) messages that
 * mlm_tokenizer_encode_chat frames into exactly what the model's chat template renders with
 * those tools; the reply side finds the calls in a finished reply, says how much of a reply
 * still being generated is surely plain content, and gives the JSON Schema one call must
 * satisfy (for constrained decoding). Formats (mlm_tokenizer_chat_format's names):
 *   "llama3"          Llama 3.1/3.2 Instruct's chat_template: the tools (JSON, indent 4) in
 *                     the first user message, a call written {"name": N, "parameters": ARGS},
 *                     tool results as role ipython holding the result as a JSON string
 *   "chatml-newline"  Hermes style (Qwen2.5's template; vLLM's hermes parser): the tools in
 *   "chatml"          the system message, calls as <tool_call>\n{"name": N, "arguments":
 *                     ARGS}\n</tool_call>, results as <tool_response> blocks in a user turn
 * Knows nothing about HTTP or the engine; uses only jansson and meshlm.h's chat types. */
#ifndef MESHLM_SERVER_TOOLCALL_H
#define MESHLM_SERVER_TOOLCALL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"
#include "request.h"

// ---- the prompt ----

/* A dialog ready for mlm_tokenizer_encode_chat(tok, p.msgs, p.n_msgs, 1, ...). */
typedef struct srv_tool_prompt {
    mlm_chat_message *msgs; /* owned: N_MSGS messages; each ROLE is a static string, each
                               CONTENT a malloc'd string owned here */
    const char **reasoning; /* owned array of N_MSGS borrowed strings: an assistant message's
                               reasoning from the request, else NULL (mlm_chat_opts's) */
    int n_msgs;
} srv_tool_prompt;

/* Renders R's messages with R's tools (R->tools != NULL; the caller renders without tools
 * when there are none or tool_choice is SRV_TOOLS_NONE) for FORMAT into OUT (zeroed first),
 * as the format's chat template does:
 *   llama3: a system message "Environment: ipython\nCutting Knowledge Date: December 2023\n
 *     Today Date: 26 Jul 2024\n\n" + the first message's content trimmed when it is a system
 *     one (always this date: the template's own when strftime_now is absent); then a user
 *     message with the tool instructions, each tool as Python's json.dumps(indent=4) + "\n\n"
 *     and the next message's content trimmed (whatever its role, as the template does); then
 *     per message: a call (one per message) as {"name": "N", "parameters": ARGS}, a tool
 *     result as role "ipython" holding json.dumps(content), any other message trimmed.
 *   chatml-newline, chatml: a system message: the first message's content when it is a
 *     system one, else DEFAULT_SYSTEM (mlm_tokenizer_chat_system; may be NULL), + "\n\n" when
 *     there is one, + the tool instructions with each tool as json.dumps(tool); then per
 *     message: an assistant message's calls as <tool_call> blocks after its content,
 *     consecutive tool results joined into one user message of <tool_response> blocks, any
 *     other message as it is (not trimmed).
 * Trimming is Python's str.strip() (Unicode White_Space), JSON text is byte-identical to
 * json.dumps(ensure_ascii=False) (srv_json_dumps), and a call's arguments are its parsed
 * ARGS (or ARGUMENTS parsed here) dumped again, as the template gets a dict.
 * Returns 1, or 0 with E filled: 400 (param "messages") for a llama3 dialog with no message
 * after the system one, 400 ("messages[i].tool_calls") for a llama3 assistant message with
 * more than one call (the template refuses both), 400 for an unknown format, 500 when out of
 * memory. On failure OUT holds nothing to free. */
int srv_tools_render(const srv_request *r, const char *format, const char *default_system,
                     srv_tool_prompt *out, srv_error *e);
void srv_tool_prompt_deinit(srv_tool_prompt *p);

/* A chat request's dialog as token ids appended to OUT: R's messages with R's tools in the
 * template's tool form (srv_tools_render) when it has tools and tool_choice is not none,
 * else as they are; each assistant message's reasoning_content and R's thinking switch go
 * to mlm_tokenizer_encode_chat_opts, with a generation prompt. Returns 1, or 0 with E
 * filled: 400 for a tokenizer without a chat format (naming the model ALIAS), an unknown
 * role or a render error; 500 when out of memory. */
int srv_chat_encode(const mlm_tokenizer *tok, const char *alias, const srv_request *r,
                    mlm_tokens *out, srv_error *e);

// ---- the reply ----

/* The calls found in a reply. */
typedef struct srv_tool_reply {
    char *content;        /* owned: the reply's text when it holds no call (as it is, ""
                             for an empty reply); with calls, the text before the first one
                             (ChatML forms, right-trimmed), NULL when there is none or only
                             whitespace (always NULL for llama3) */
    srv_tool_call *calls; /* owned: N_CALLS calls in reply order: ID "call_" + 24 random
                             [A-Za-z0-9], NAME a declared function, ARGUMENTS the arguments
                             object as compact JSON (Python's json.dumps(ensure_ascii=False,
                             separators=(",", ":")), key order kept), ARGS that object */
    int n_calls;
} srv_tool_reply;

/* Finds the tool calls in TEXT (LEN bytes), a finished reply in FORMAT, into OUT (zeroed
 * first), as vLLM's llama3_json and hermes parsers do:
 *   llama3: the reply, trimmed (an optional leading "<|python_tag|>" skipped), is one or more
 *     JSON objects {"name": N, "parameters" (or "arguments"): {...}}, separated by ';' and/or
 *     whitespace, nothing else.
 *   chatml-newline, chatml: each <tool_call>...</tool_call> block (the last may lack its
 *     </tool_call>) holds {"name": N, "arguments" (or "parameters"): {...}}; text after the
 *     last block is dropped.
 * Only functions declared in TOOLS (a request's tools array; NULL: none) count: when any
 * would-be call has an undeclared name, unparsable JSON, or arguments that are no object,
 * the reply holds no call and is all content. RNG (a caller-owned state, any seed) makes the
 * ids and is advanced. Returns 1, or 0 when out of memory (OUT then holds nothing). */
int srv_tools_parse(const json_t *tools, const char *format, const char *text, size_t len,
                    uint64_t *rng, srv_tool_reply *out);
void srv_tool_reply_deinit(srv_tool_reply *t);

/* For streaming: of TEXT (LEN bytes), the reply generated so far in FORMAT, how many leading
 * bytes are surely content, whatever comes next; the rest may be, or may become, a tool
 * call and is held back until more text or the end (then srv_tools_parse decides). llama3:
 * 0 while the reply is only whitespace, starts with '{' or with (a prefix of)
 * "<|python_tag|>" after whitespace, else LEN. ChatML forms: up to the first "<tool_call>",
 * or up to a tail that may still grow into one ("<", "<tool", ...), less the whitespace just
 * before it (the content srv_tools_parse gives is right-trimmed). It never decreases as
 * TEXT grows. Unknown FORMAT: LEN. */
size_t srv_tools_stream_safe(const char *format, const char *text, size_t len);

// ---- constrained calls ----

/* The key a call's arguments go under in FORMAT: "parameters" for llama3, "arguments" for
 * the ChatML forms (NULL for an unknown format). */
const char *srv_tools_args_key(const char *format);

/* The JSON Schema one call must satisfy in FORMAT (a new reference, NULL when out of memory,
 * for an unknown format, for SRV_TOOLS_NONE, or when no declared function is allowed): per
 * allowed function {"type": "object", "properties": {"name": {"const": N}, KEY: PARAMS},
 * "required": ["name", KEY], "additionalProperties": false}, KEY srv_tools_args_key, PARAMS
 * a copy of the function's "parameters" ({"type": "object", "properties": {}} when it has
 * none); the one object when one function is allowed, else {"anyOf": [...]}. Allowed: every
 * declared function for SRV_TOOLS_AUTO and SRV_TOOLS_REQUIRED, TOOL_CHOICE_NAME for
 * SRV_TOOLS_NAMED. For the ChatML forms the call is the JSON between "<tool_call>\n" and
 * "\n</tool_call>", which the grammar adds. */
json_t *srv_tools_call_schema(const srv_request *r, const char *format);

/* Whether TOOLS (a request's tools array, may be NULL) declares a function named NAME. */
int srv_tools_declared(const json_t *tools, const char *name);

// ---- JSON as Python writes it ----

/* V as Python's json.dumps(v, ensure_ascii=False, indent=INDENT, separators=(ITEM_SEP,
 * KEY_SEP)) writes it, a malloc'd string (NULL when out of memory): INDENT < 0 is None (all
 * on one line), else a newline and INDENT spaces per level; key order as V holds it; strings
 * with \" \\ \n \r \t \b \f escaped, other control characters as \u00xx, everything else
 * (non-ASCII included) as it is; integers as they are; reals as Python's repr (the shortest
 * text that reads back, "1.0", "1e+16", "1.5e-07"); true, false, null. transformers' tojson
 * is this with separators (", ", ": "), or (",", ": ") with an indent. */
char *srv_json_dumps(const json_t *v, int indent, const char *item_sep, const char *key_sep);

#endif
