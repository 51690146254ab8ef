/* tools/server/handlers.h: POST /v1/chat/completions and POST /v1/completions: from a request
 * body to scheduler requests (handlers.c) and back to OpenAI responses, whole (handlers.c) or
 * streamed as server-sent events (stream.c). The JSON pieces both share are declared here. */
#ifndef MESHLM_SERVER_HANDLERS_H
#define MESHLM_SERVER_HANDLERS_H

#include <jansson.h>
#include <microhttpd.h>

#include "job.h"
#include "request.h"
#include "server.h"

/* How responses are written: compact, logprobs with float precision. */
#define SRV_JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9))

/* Handles a complete generation request: BODY (LEN bytes, NUL-terminated, borrowed for the
 * call) of KIND on CONN to PATH. Queues the response (an error, a JSON body, or an event
 * stream); MHD_NO closes the connection (the client went away). */
enum MHD_Result srv_handle_generate(srv_server *srv, struct MHD_Connection *conn,
                                    const char *path, srv_kind kind, const char *body,
                                    size_t len);

/* POST /tokenize (or with DETOKENIZE /detokenize) with BODY (LEN bytes): tokenize.c. */
enum MHD_Result srv_handle_tokenize(srv_server *srv, struct MHD_Connection *conn, const char *path,
                                    const char *body, size_t len, int detokenize);

/* Starts the event stream of JOB (its choices submitted) on CONN: the response takes over the
 * HTTP side's reference of JOB. */
enum MHD_Result srv_stream_start(srv_server *srv, struct MHD_Connection *conn, const char *path,
                                 srv_job *job);

/* Text as a JSON string, invalid UTF-8 replaced by U+FFFD (NULL: out of memory). */
json_t *srv_json_text(const char *s, size_t n);
/* The logprobs of C's tokens [FROM, TO) in JOB's kind's format (the job's mutex held). */
json_t *srv_json_logprobs(const srv_job *job, const srv_choice *c, int64_t from, int64_t to);
/* The usage object over every choice of JOB (the job's mutex held). */
json_t *srv_json_usage(const srv_job *job);
/* The tokens of C that belong to its text: all, or those before a stop string's cut. */
int64_t srv_choice_n_toks(const srv_choice *c);
/* Where choice C's reply holds its reasoning and content (all content when J does not split
 * reasoning), a reply still growing holding back what may become a tag. */
mlm_reasoning_split srv_choice_split(const srv_job *j, const srv_choice *c);
/* "stop" / "length" for a finished choice (the others are reported as errors). */
const char *srv_finish_reason(mlm_finish f);
/* A reply's tool calls as OpenAI's tool_calls array ({id, type, function: {name, arguments}}). */
json_t *srv_json_tool_calls(const mlm_tool_reply *t);

#endif
