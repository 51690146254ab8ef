/* tools/server/structured.h: a request's constraint on its replies: a JSON Schema from
 * response_format, or a tool call when tool_choice requires one, compiled into the job's
 * grammar with a matcher for each choice (the scheduler masks tokens with it); and the job's
 * tools when replies are parsed for calls (as JSON text, dialog.h). */
#ifndef MESHLM_SERVER_STRUCTURED_H
#define MESHLM_SERVER_STRUCTURED_H

#include "job.h"
#include "request.h"
#include "server.h"

/* Sets up J (its N_CHOICES choices) for R. Returns 1, or 0 with E filled: a 400 naming the
 * schema's field ("response_format.json_schema.schema", or "tools" for a function's
 * parameters) when the grammar compiler refuses it (its message names the keyword), 500
 * when out of memory. */
int srv_structured_setup(srv_server *srv, const srv_request *r, srv_job *j, srv_error *e);

#endif
