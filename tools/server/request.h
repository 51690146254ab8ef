/* tools/server/request.h: OpenAI request bodies in, OpenAI error objects out. Parses the JSON
 * body of POST /v1/chat/completions and POST /v1/completions into an srv_request, checking
 * every known field's type and range (unknown fields are ignored, as OpenAI does), and decodes
 * the base64 of image_url parts' data: URLs into bytes (the image decoder is the library's).
 * Knows nothing about HTTP connections, the model or the engine; uses only jansson and
 * meshlm.h's chat types. */
#ifndef MESHLM_SERVER_REQUEST_H
#define MESHLM_SERVER_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

typedef enum srv_kind { SRV_CHAT = 0, SRV_COMPLETION = 1 } srv_kind;

/* An OpenAI error: the HTTP status and the fields of {"error": {message, type, param, code}}.
 * TYPE is "invalid_request_error" (400, 404, 413), "authentication_error" (401),
 * "server_error" (500, 503) ...; PARAM and CODE are "" when they do not apply (null in JSON). */
typedef struct srv_error {
    int http;
    char message[512];
    char type[40];
    char param[96];
    char code[40];
} srv_error;

/* Fills E and returns 0 (so a parser can `return srv_fail(...)` meaning "failed"). */
int srv_fail(srv_error *e, int http, const char *type, const char *param, const char *code,
             const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The error as a malloc'd JSON text {"error":{"message":...,"type":...,"param":...|null,
 * "code":...|null}}. NULL only when out of memory. */
char *srv_error_json(const srv_error *e);

/* One part of a content list, in the order the request gives them: text, or an image. */
typedef struct srv_part {
    char *text;           /* owned, NUL-terminated; NULL for an image */
    unsigned char *image; /* owned: the bytes of an image_url part's data: URL, base64-decoded
                             (N_IMAGE >= 1; what they hold is the image decoder's to judge);
                             NULL for text. A handler done with them may free them early and
                             set IMAGE to NULL: srv_request_deinit frees what is left. */
    size_t n_image;
} srv_part;

/* A call an assistant message made (OpenAI's tool_calls[k]). */
typedef struct srv_tool_call {
    char *id;        /* owned; "" when absent */
    char *name;      /* owned: function.name */
    char *arguments; /* owned: function.arguments, the JSON text of an object as the client
                        sent it */
} srv_tool_call;

typedef struct srv_message {
    char *role;      /* "system", "user", "assistant" (also "developer" -> "system", "tool") */
    char *content;   /* a string, or the text parts of a content list joined ("" for null) */
    srv_part *parts; /* owned: a content list's parts, every one, in order (part K is
                        content[K]); NULL when the content is a string or null */
    int n_parts;
    int n_images; /* image parts among them (only user messages may have any) */
    srv_tool_call *tool_calls; /* owned: an assistant message's calls (content may be null) */
    int n_tool_calls;
    char *tool_call_id; /* owned: a tool message's tool_call_id; NULL when absent */
    char *reasoning;    /* owned: an assistant message's reasoning_content (vLLM's newer name
                           "reasoning" read too); NULL when absent or null */
} srv_message;

/* tool_choice */
typedef enum srv_tool_choice {
    SRV_TOOLS_AUTO = 0, /* the model decides (the default with tools) */
    SRV_TOOLS_NONE,     /* no call: the tools are not shown to the model */
    SRV_TOOLS_REQUIRED, /* at least one call, constrained to a declared function */
    SRV_TOOLS_NAMED     /* one call of TOOL_CHOICE_NAME, constrained */
} srv_tool_choice;

/* response_format */
typedef enum srv_format {
    SRV_FORMAT_TEXT = 0,
    SRV_FORMAT_JSON_OBJECT, /* any JSON object */
    SRV_FORMAT_JSON_SCHEMA  /* a document valid against SCHEMA */
} srv_format;

/* One completions prompt: text, or token ids. */
typedef struct srv_prompt {
    char *text;   /* owned, NUL-terminated; NULL when IDS */
    int32_t *ids; /* owned; NULL when TEXT */
    int32_t n_ids;
} srv_prompt;

typedef struct srv_request {
    srv_kind kind;
    char *model;               /* NULL when absent */
    srv_message *messages;     /* chat: N_MESSAGES >= 1 */
    int n_messages;
    int n_images;              /* chat: image parts over all messages */
    srv_prompt *prompts;       /* completions: N_PROMPTS >= 1 (a string, a list of strings,
                                  a list of ids, or a list of id lists) */
    int n_prompts;
    int64_t max_tokens;        /* max_tokens or max_completion_tokens (>= 1); -1 when absent */
    int has_temperature;       /* 0 when absent or null: the model's default */
    double temperature;        /* [0, 2] */
    int has_top_p;
    double top_p;              /* (0, 1] */
    int has_top_k;
    int64_t top_k;             /* extension (vLLM): -1 or 0 = off, else >= 1 */
    int has_seed;
    uint64_t seed;             /* a JSON integer in int64 range, as two's complement */
    char *stop[4];             /* a string or up to 4 strings (each non-empty) */
    int n_stop;
    int stream;
    int include_usage;         /* stream_options.include_usage (needs stream) */
    int logprobs;              /* chat: logprobs true; completions: logprobs is an integer */
    int top_logprobs;          /* alternatives per token: chat top_logprobs (0..20, needs
                                  logprobs), completions logprobs (0..20); 0 when absent */
    double presence_penalty;   /* [-2, 2], default 0 */
    double frequency_penalty;  /* [-2, 2], default 0 */
    int ignore_eos;            /* extension (vLLM) */
    /* extension (llama-server's names): the DRY loop guard, off unless dry_multiplier > 0;
     * the sequence breakers are llama.cpp's defaults */
    double dry_multiplier;     /* [0, 5], default 0 */
    double dry_base;           /* [1, 4], default 1.75 */
    int64_t dry_allowed_length; /* [1, 1024], default 2 */
    int64_t dry_penalty_last_n; /* -1 (the whole sequence, default) or [0, 2^30] */
    int64_t spec_n_max;        /* extension (llama-server's "speculative.n_max"): the most
                                  tokens drafted a step under serve --draft-ngram, 0 = none;
                                  -1 (absent): the server's */
    int n;                     /* choices, 1..8 (default 1) */
    json_t *tools;             /* owned reference: the tools array as sent (each
                                  {"type": "function", "function": {"name", "description",
                                  "parameters"}}, key order kept); NULL when absent or empty */
    int n_tools;
    srv_tool_choice tool_choice;
    char *tool_choice_name;    /* owned: SRV_TOOLS_NAMED's function */
    int parallel_tool_calls;   /* default 1 */
    mlm_chat_thinking thinking; /* chat_template_kwargs.enable_thinking (vLLM, llama-server):
                                  MLM_THINK_ON / _OFF, MLM_THINK_DEFAULT when absent */
    srv_format format;         /* response_format */
    json_t *schema;            /* owned reference: json_schema.schema (SRV_FORMAT_JSON_SCHEMA) */
} srv_request;

/* POST /tokenize ({"content": text, "add_special": false, "parse_special": true}) and POST
 * /detokenize ({"tokens": [ids]}), as llama-server takes them. */
typedef struct srv_tok_request {
    char *content; /* owned, NUL-terminated (LEN bytes; may hold NULs): /tokenize */
    size_t len;
    int add_special;   /* the model's BOS first */
    int parse_special; /* special-token text becomes its id */
    int32_t *ids;      /* owned: /detokenize (N_IDS, possibly 0) */
    int32_t n_ids;
} srv_tok_request;

/* Parses BODY (LEN bytes) as a /tokenize request, or with DETOKENIZE a /detokenize one, into
 * OUT; 0 with E filled (400 naming the field) when it is not valid. */
int srv_tokenize_parse(const char *body, size_t len, int detokenize, srv_tok_request *out,
                       srv_error *e);
void srv_tok_request_deinit(srv_tok_request *r);

/* Parses BODY (LEN bytes, not NUL-terminated) as a request of KIND into OUT (zeroed first).
 * Returns 1 on success; on failure 0 with E filled (http 400, type "invalid_request_error",
 * PARAM naming the field: "messages[1].content", "max_tokens", "stop", ...). Malformed JSON,
 * a missing messages/prompt, a wrong type, a value out of range, n outside 1..8, stream_options
 * without stream, an unknown role, a content part that is neither text nor image_url, an
 * image_url part outside a user message, a URL that is not a base64 data: URL of an image
 * media type (image/..., param "messages[i].content[k].image_url.url": only data: URLs are
 * taken, the server fetches nothing), bad base64 (see srv_base64_decode) are each a 400 (out
 * of memory: 500, "server_error"). On failure OUT holds nothing to free. E may be NULL. Never
 * crashes on any input. */
int srv_request_parse(const char *body, size_t len, srv_kind kind, srv_request *out,
                      srv_error *e);
void srv_request_deinit(srv_request *r);

/* Decodes the base64 text S (N bytes) into OUT (room for 3 * (N / 4) + 3 bytes), *N_OUT
 * bytes. Strict RFC 4648 base64: the standard alphabet (A-Z a-z 0-9 + /; the URL-safe - and _
 * are refused), '=' padding required (the length without whitespace a multiple of 4, at most
 * two '=', only at the end); ASCII whitespace (space, tab, CR, LF) is skipped anywhere, as in
 * the line-wrapped MIME form (RFC 2045). The unused bits of the last group are ignored.
 * Returns 1, or 0 with *BAD at the offending byte's offset in S (N: the text ended early). */
int srv_base64_decode(const char *s, size_t n, unsigned char *out, size_t *n_out, size_t *bad);

#endif
