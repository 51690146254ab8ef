/* tools/server/request_tools.c: the parts of a request for agents: tools, tool_choice,
 * parallel_tool_calls, an assistant message's tool_calls and a tool message's tool_call_id
 * (chat), response_format and n (chat and completions). As in request.c: null means absent, a
 * wrong type or value is a 400 naming the field. A schema is kept as JSON here; whether
 * meshlm can follow it is the grammar compiler's to say (handlers.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request_json.h"

static int missing(srv_error *e, const char *param) {
    return srv_fail(e, 400, SRV_INVALID, param, "missing_required_parameter",
                    "Missing required parameter: '%s'.", param);
}

/* OpenAI's function names: 1 to 64 of a-z A-Z 0-9 _ -. */
static int good_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static int parse_tool(const json_t *t, size_t k, srv_error *e) {
    char param[96];
    snprintf(param, sizeof param, "tools[%zu]", k);
    if (!json_is_object(t)) return srv_type_error(e, param, "an object", t);
    json_t *type = srv_json_field(t, "type");
    snprintf(param, sizeof param, "tools[%zu].type", k);
    if (!type) return missing(e, param);
    if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
        return srv_fail(e, 400, SRV_INVALID, param, "invalid_value",
                        "Invalid '%s': only 'function' tools are supported.", param);
    json_t *f = srv_json_field(t, "function");
    snprintf(param, sizeof param, "tools[%zu].function", k);
    if (!f) return missing(e, param);
    if (!json_is_object(f)) return srv_type_error(e, param, "an object", f);
    json_t *name = srv_json_field(f, "name");
    snprintf(param, sizeof param, "tools[%zu].function.name", k);
    if (!name) return missing(e, param);
    if (!json_is_string(name)) return srv_type_error(e, param, "a string", name);
    if (!good_name(json_string_value(name)))
        return srv_fail(e, 400, SRV_INVALID, param, "invalid_value",
                        "Invalid '%s': a function name is 1 to 64 of a-z, A-Z, 0-9, '_' and "
                        "'-'.",
                        param);
    json_t *d = srv_json_field(f, "description");
    snprintf(param, sizeof param, "tools[%zu].function.description", k);
    if (d && !json_is_string(d)) return srv_type_error(e, param, "a string", d);
    json_t *p = srv_json_field(f, "parameters");
    snprintf(param, sizeof param, "tools[%zu].function.parameters", k);
    if (p && !json_is_object(p)) return srv_type_error(e, param, "an object", p);
    return 1;
}

/* Whether R's tools declare function NAME. */
static int declared(const srv_request *r, const char *name) {
    size_t k;
    json_t *t;
    json_array_foreach(r->tools, k, t) {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (n && strcmp(n, name) == 0) return 1;
    }
    return 0;
}

static int parse_tool_choice(const json_t *root, srv_request *r, srv_error *e) {
    json_t *tc = srv_json_field(root, "tool_choice");
    r->tool_choice = SRV_TOOLS_AUTO;
    if (!tc) return 1;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (strcmp(s, "none") == 0) r->tool_choice = SRV_TOOLS_NONE;
        else if (strcmp(s, "auto") == 0) r->tool_choice = SRV_TOOLS_AUTO;
        else if (strcmp(s, "required") == 0) r->tool_choice = SRV_TOOLS_REQUIRED;
        else
            return srv_fail(e, 400, SRV_INVALID, "tool_choice", "invalid_value",
                            "Invalid value '%.40s' for 'tool_choice': expected 'none', 'auto', "
                            "'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}.",
                            s);
    } else if (json_is_object(tc)) {
        json_t *f = srv_json_field(tc, "function");
        json_t *name = f ? srv_json_field(f, "name") : NULL;
        if (!name) return missing(e, "tool_choice.function.name");
        if (!json_is_string(name)) return srv_type_error(e, "tool_choice.function.name", "a string", name);
        r->tool_choice = SRV_TOOLS_NAMED;
        r->tool_choice_name = srv_dup(json_string_value(name), json_string_length(name), e,
                                      "tool_choice.function.name");
        if (!r->tool_choice_name) return 0;
    } else {
        return srv_type_error(e, "tool_choice", "a string or an object", tc);
    }
    if (r->tool_choice == SRV_TOOLS_NONE) return 1;
    if (!r->tools && tc && r->tool_choice != SRV_TOOLS_AUTO)
        return srv_fail(e, 400, SRV_INVALID, "tool_choice", "invalid_value",
                        "Invalid 'tool_choice': it names a tool, but the request has no 'tools'.");
    if (r->tool_choice == SRV_TOOLS_NAMED && !declared(r, r->tool_choice_name))
        return srv_fail(e, 400, SRV_INVALID, "tool_choice", "invalid_value",
                        "Invalid 'tool_choice': the function '%.64s' is not in 'tools'.",
                        r->tool_choice_name);
    return 1;
}

static int parse_response_format(const json_t *root, srv_request *r, srv_error *e) {
    json_t *rf = srv_json_field(root, "response_format");
    if (!rf) return 1;
    if (!json_is_object(rf)) return srv_type_error(e, "response_format", "an object", rf);
    json_t *type = srv_json_field(rf, "type");
    if (!type) return missing(e, "response_format.type");
    if (!json_is_string(type)) return srv_type_error(e, "response_format.type", "a string", type);
    const char *t = json_string_value(type);
    if (strcmp(t, "text") == 0) return 1;
    if (strcmp(t, "json_object") == 0) {
        r->format = SRV_FORMAT_JSON_OBJECT;
        return 1;
    }
    if (strcmp(t, "json_schema") != 0)
        return srv_fail(e, 400, SRV_INVALID, "response_format.type", "invalid_value",
                        "Invalid value '%.40s' for 'response_format.type': expected 'text', "
                        "'json_object' or 'json_schema'.",
                        t);
    json_t *js = srv_json_field(rf, "json_schema");
    if (!js) return missing(e, "response_format.json_schema");
    if (!json_is_object(js)) return srv_type_error(e, "response_format.json_schema", "an object", js);
    json_t *name = srv_json_field(js, "name");
    if (name && !json_is_string(name))
        return srv_type_error(e, "response_format.json_schema.name", "a string", name);
    json_t *strict = srv_json_field(js, "strict");
    if (strict && !json_is_boolean(strict))
        return srv_type_error(e, "response_format.json_schema.strict", "a boolean", strict);
    json_t *schema = srv_json_field(js, "schema");
    if (schema && !json_is_object(schema) && !json_is_boolean(schema))
        return srv_type_error(e, "response_format.json_schema.schema", "an object", schema);
    r->format = schema ? SRV_FORMAT_JSON_SCHEMA : SRV_FORMAT_JSON_OBJECT;
    r->schema = json_incref(schema);
    return 1;
}

int srv_parse_tools(const json_t *root, srv_request *r, srv_error *e) {
    json_t *nv = srv_json_field(root, "n");
    r->n = 1;
    if (nv) {
        if (!json_is_integer(nv)) return srv_type_error(e, "n", "an integer", nv);
        json_int_t n = json_integer_value(nv);
        if (n < 1 || n > 8)
            return srv_fail(e, 400, SRV_INVALID, "n", "invalid_value",
                            "Invalid 'n': expected an integer in [1, 8], but got %lld instead.",
                            (long long)n);
        r->n = (int)n;
    }
    if (!parse_response_format(root, r, e)) return 0;
    r->parallel_tool_calls = 1;
    if (r->kind != SRV_CHAT) return 1;
    json_t *tools = srv_json_field(root, "tools");
    if (tools) {
        if (!json_is_array(tools)) return srv_type_error(e, "tools", "an array", tools);
        size_t k;
        json_t *t;
        json_array_foreach(tools, k, t) if (!parse_tool(t, k, e)) return 0;
        if (json_array_size(tools) > 0) {
            r->tools = json_incref(tools);
            r->n_tools = (int)json_array_size(tools);
        }
    }
    json_t *ptc = srv_json_field(root, "parallel_tool_calls");
    if (ptc && !json_is_boolean(ptc)) return srv_type_error(e, "parallel_tool_calls", "a boolean", ptc);
    if (ptc) r->parallel_tool_calls = json_is_true(ptc);
    return parse_tool_choice(root, r, e);
}

static int parse_call(const json_t *c, int i, size_t k, srv_tool_call *out, srv_error *e) {
    char param[128];
    snprintf(param, sizeof param, "messages[%d].tool_calls[%zu]", i, k);
    if (!json_is_object(c)) return srv_type_error(e, param, "an object", c);
    json_t *id = srv_json_field(c, "id");
    snprintf(param, sizeof param, "messages[%d].tool_calls[%zu].id", i, k);
    if (id && !json_is_string(id)) return srv_type_error(e, param, "a string", id);
    out->id = srv_dup(id ? json_string_value(id) : "", id ? json_string_length(id) : 0, e, param);
    if (!out->id) return 0;
    json_t *f = srv_json_field(c, "function");
    snprintf(param, sizeof param, "messages[%d].tool_calls[%zu].function", i, k);
    if (!f) return missing(e, param);
    if (!json_is_object(f)) return srv_type_error(e, param, "an object", f);
    json_t *name = srv_json_field(f, "name");
    snprintf(param, sizeof param, "messages[%d].tool_calls[%zu].function.name", i, k);
    if (!name) return missing(e, param);
    if (!json_is_string(name)) return srv_type_error(e, param, "a string", name);
    if (!(out->name = srv_dup(json_string_value(name), json_string_length(name), e, param)))
        return 0;
    json_t *args = srv_json_field(f, "arguments");
    snprintf(param, sizeof param, "messages[%d].tool_calls[%zu].function.arguments", i, k);
    if (!args) return missing(e, param);
    if (!json_is_string(args)) return srv_type_error(e, param, "a string", args);
    if (!(out->arguments = srv_dup(json_string_value(args), json_string_length(args), e, param)))
        return 0;
    json_error_t jerr;
    json_t *parsed = json_loadb(out->arguments, json_string_length(args), 0, &jerr);
    int object = json_is_object(parsed), is_json = parsed != NULL;
    json_decref(parsed);
    if (!object)
        return srv_fail(e, 400, SRV_INVALID, param, "invalid_value",
                        "Invalid '%s': expected a JSON object in a string, but %s.", param,
                        is_json ? "it holds another JSON value" : jerr.text);
    return 1;
}

int srv_parse_message_tools(const json_t *m, int i, srv_message *msg, srv_error *e) {
    char param[96];
    json_t *calls = srv_json_field(m, "tool_calls");
    if (calls && strcmp(msg->role, "assistant") == 0) {
        snprintf(param, sizeof param, "messages[%d].tool_calls", i);
        if (!json_is_array(calls)) return srv_type_error(e, param, "an array", calls);
        size_t n = json_array_size(calls), k;
        if (n && !(msg->tool_calls = calloc(n, sizeof *msg->tool_calls)))
            return srv_fail(e, 500, "server_error", param, NULL, "out of memory");
        json_t *c;
        json_array_foreach(calls, k, c) {
            msg->n_tool_calls = (int)k + 1;
            if (!parse_call(c, i, k, &msg->tool_calls[k], e)) return 0;
        }
    }
    if (strcmp(msg->role, "tool") == 0) {
        json_t *id = srv_json_field(m, "tool_call_id");
        snprintf(param, sizeof param, "messages[%d].tool_call_id", i);
        if (!id) return 1; /* OpenAI requires it; vLLM and templates do without */
        if (!json_is_string(id)) return srv_type_error(e, param, "a string", id);
        if (!(msg->tool_call_id = srv_dup(json_string_value(id), json_string_length(id), e, param)))
            return 0;
    }
    return 1;
}

void srv_tools_deinit(srv_request *r) {
    for (int i = 0; i < r->n_messages; i++) {
        srv_message *m = &r->messages[i];
        for (int k = 0; k < m->n_tool_calls; k++) {
            free(m->tool_calls[k].id);
            free(m->tool_calls[k].name);
            free(m->tool_calls[k].arguments);
        }
        free(m->tool_calls);
        free(m->tool_call_id);
    }
    json_decref(r->tools);
    free(r->tool_choice_name);
    json_decref(r->schema);
}
