/* tools/server/request_json.h: the field helpers request.c's parsers share with
 * request_tools.c (jansson values in, OpenAI 400s out). Internal to the request parser. */
#ifndef MESHLM_SERVER_REQUEST_JSON_H
#define MESHLM_SERVER_REQUEST_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "request.h"

#define SRV_INVALID "invalid_request_error"

/* KEY of OBJ, NULL when missing or null (an optional field that is absent). */
json_t *srv_json_field(const json_t *obj, const char *key);
/* A 400 "Invalid type for 'PARAM': expected EXPECTED, but got <V's type> instead."; returns 0. */
int srv_type_error(srv_error *e, const char *param, const char *expected, const json_t *v);
/* A malloc'd NUL-terminated copy of the N bytes at S (S NULL: uninitialised); NULL with a 500
 * in E when out of memory. */
char *srv_dup(const char *s, size_t n, srv_error *e, const char *param);

/* Chat only: tools, tool_choice, parallel_tool_calls; chat and completions: response_format
 * and n (request_tools.c). 1, or 0 with E filled. */
int srv_parse_tools(const json_t *root, srv_request *r, srv_error *e);
/* An assistant message's tool_calls or a tool message's tool_call_id (message I is M). */
int srv_parse_message_tools(const json_t *m, int i, srv_message *msg, srv_error *e);
/* Frees what those two filled in. */
void srv_tools_deinit(srv_request *r);

#endif
