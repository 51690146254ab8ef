/* tools/server/request.c: OpenAI request bodies (chat completions, completions) parsed with
 * jansson into an srv_request, and OpenAI error objects out. Like OpenAI and vLLM: unknown
 * fields are ignored, null for an optional field means absent, a wrong type or a value out of
 * range is a 400 whose `param` names the field. image_url parts must carry their image in a
 * base64 data: URL (decoded here by a small strict decoder; the bytes are judged by the
 * library's image decoder later). Knows nothing about HTTP, the model or the engine; every
 * string and array in an srv_request is malloc'd and owned by it (srv_request_deinit). */
#include "request.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/tool.h"
#include "request_json.h"

#define INVALID SRV_INVALID

// ---- errors ----

int srv_fail(srv_error *e, int http, const char *type, const char *param, const char *code,
             const char *fmt, ...) {
    if (!e) return 0;
    e->http = http;
    snprintf(e->type, sizeof e->type, "%s", type ? type : "");
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return 0;
}

/* A jansson string of the NUL-terminated S (at most MAX bytes) with every byte that is not
 * valid UTF-8 replaced by '?' (a message cut by vsnprintf can end inside a character);
 * json_null() for "" when NULL_IF_EMPTY. NULL when out of memory. */
static json_t *safe_string(const char *s, size_t max, int null_if_empty) {
    size_t n = strnlen(s, max);
    if (n == 0 && null_if_empty) return json_null();
    char *buf = malloc(n + 1);
    if (!buf) return NULL;
    for (size_t i = 0; i < n;) {
        size_t l = tool_utf8_len((const unsigned char *)s + i, n - i);
        if (l == 0) {
            buf[i++] = '?';
        } else {
            memcpy(buf + i, s + i, l);
            i += l;
        }
    }
    buf[n] = 0;
    json_t *j = json_stringn(buf, n);
    free(buf);
    return j;
}

char *srv_error_json(const srv_error *e) {
    json_t *inner = json_object();
    json_t *root = json_object();
    if (!inner || !root) {
        json_decref(inner);
        json_decref(root);
        return NULL;
    }
    int bad = json_object_set_new(root, "error", inner);
    bad |= json_object_set_new(inner, "message", safe_string(e->message, sizeof e->message, 0));
    bad |= json_object_set_new(inner, "type", safe_string(e->type, sizeof e->type, 0));
    bad |= json_object_set_new(inner, "param", safe_string(e->param, sizeof e->param, 1));
    bad |= json_object_set_new(inner, "code", safe_string(e->code, sizeof e->code, 1));
    char *text = bad ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

// ---- field helpers ----

/* "a string", "an integer" ... for messages like OpenAI's "expected X, but got Y instead". */
static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

int srv_type_error(srv_error *e, const char *param, const char *expected, const json_t *v) {
    return srv_fail(e, 400, INVALID, param, "invalid_type",
                    "Invalid type for '%s': expected %s, but got %s instead.", param, expected,
                    type_name(v));
}

/* KEY of OBJ, NULL when missing or null (an optional field that is absent). */
json_t *srv_json_field(const json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* An integer, or a real that is a whole number within int64 (as pydantic accepts 5.0). */
static int as_int(const json_t *v, int64_t *out) {
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 1;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
            *out = (int64_t)d;
            return 1;
        }
    }
    return 0;
}

/* Optional boolean KEY into *OUT (untouched when absent); 1 ok, 0 failed with E filled. */
static int get_bool(const json_t *root, const char *key, int *out, srv_error *e) {
    json_t *v = srv_json_field(root, key);
    if (!v) return 1;
    if (!json_is_boolean(v)) return srv_type_error(e, key, "a boolean", v);
    *out = json_is_true(v);
    return 1;
}

/* Optional number KEY in [LO, HI] (LO excluded when LO_OPEN) into *OUT, *HAS set to 1 when
 * present. */
static int get_number(const json_t *root, const char *key, double lo, double hi, int lo_open,
                      double *out, int *has, srv_error *e) {
    json_t *v = srv_json_field(root, key);
    if (!v) return 1;
    if (!json_is_number(v)) return srv_type_error(e, key, "a number", v);
    double d = json_number_value(v);
    if (!(lo_open ? d > lo : d >= lo) || !(d <= hi))
        return srv_fail(e, 400, INVALID, key, "invalid_value",
                        "Invalid '%s': expected a number in %s%g, %g], but got %g instead.", key,
                        lo_open ? "(" : "[", lo, hi, d);
    *out = d;
    if (has) *has = 1;
    return 1;
}

/* Optional integer KEY in [LO, HI] into *OUT, *HAS set to 1 when present. */
static int get_int(const json_t *root, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   int *has, srv_error *e) {
    json_t *v = srv_json_field(root, key);
    if (!v) return 1;
    int64_t x;
    if (!as_int(v, &x)) return srv_type_error(e, key, "an integer", v);
    if (x < lo || x > hi) {
        if (hi == INT64_MAX)
            return srv_fail(e, 400, INVALID, key, "invalid_value",
                            "Invalid '%s': expected an integer >= %lld, but got %lld instead.", key,
                            (long long)lo, (long long)x);
        return srv_fail(e, 400, INVALID, key, "invalid_value",
                        "Invalid '%s': expected an integer in [%lld, %lld], but got %lld "
                        "instead.",
                        key, (long long)lo, (long long)hi, (long long)x);
    }
    *out = x;
    if (has) *has = 1;
    return 1;
}

/* A malloc'd copy of the N bytes at S, NUL-terminated (S NULL: N uninitialised bytes and the
 * NUL); NULL with E filled (500) when out of memory. */
char *srv_dup(const char *s, size_t n, srv_error *e, const char *param) {
    char *d = malloc(n + 1);
    if (!d) {
        srv_fail(e, 500, "server_error", param, NULL, "out of memory");
        return NULL;
    }
    if (s) memcpy(d, s, n);
    d[n] = 0;
    return d;
}

// ---- images: data: URLs and base64 ----

/* The value of base64 character C, -1 outside the standard alphabet. */
static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

int srv_base64_decode(const char *s, size_t n, unsigned char *out, size_t *n_out, size_t *bad) {
    uint32_t acc = 0;
    int q = 0, pad = 0; /* sextets of the open group, '=' seen */
    size_t o = 0;
    *n_out = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
        if (c == '=') {
            /* a group ends in "xx==" or "xxx=", and nothing but whitespace follows it */
            if (q < 2 || q + pad >= 4) {
                *bad = i;
                return 0;
            }
            pad++;
            continue;
        }
        int v = b64_value(c);
        if (v < 0 || pad) {
            *bad = i;
            return 0;
        }
        acc = acc << 6 | (uint32_t)v;
        if (++q == 4) {
            out[o++] = (unsigned char)(acc >> 16);
            out[o++] = (unsigned char)(acc >> 8);
            out[o++] = (unsigned char)acc;
            acc = 0, q = 0;
        }
    }
    if (q && q + pad != 4) { /* unpadded, or short of '=' */
        *bad = n;
        return 0;
    }
    if (q == 2) out[o++] = (unsigned char)(acc >> 4); /* 12 bits: one byte, 4 spare */
    if (q == 3) {                                     /* 18 bits: two bytes, 2 spare */
        out[o++] = (unsigned char)(acc >> 10);
        out[o++] = (unsigned char)(acc >> 2);
    }
    *n_out = o;
    return 1;
}

/* The base64 text of the data: URL U (N bytes): "data:image/<subtype>[;name=value]*;base64,"
 * then the data (scheme, media type and "base64" in any case). PARAM names the URL field. */
static int data_url_payload(const char *u, size_t n, const char *param, const char **b64,
                            size_t *n_b64, srv_error *e) {
    if (n < 5 || strncasecmp(u, "data:", 5) != 0)
        return srv_fail(e, 400, INVALID, param, "invalid_image_url",
                        "Invalid '%s': only data: URLs are accepted (data:image/png;base64,... "
                        "or data:image/jpeg;base64,...); the server fetches nothing, but got "
                        "'%.40s%s'.",
                        param, u, n > 40 ? "..." : "");
    const char *comma = memchr(u, ',', n);
    if (!comma)
        return srv_fail(e, 400, INVALID, param, "invalid_image_url",
                        "Invalid '%s': a data: URL needs a ',' before its data.", param);
    const char *h = u + 5, *mt_end = h;
    while (mt_end < comma && *mt_end != ';')
        mt_end++;
    size_t mt = (size_t)(mt_end - h);
    if (mt <= 6 || strncasecmp(h, "image/", 6) != 0)
        return srv_fail(e, 400, INVALID, param, "invalid_image_url",
                        "Invalid '%s': the data: URL's media type must be image/* (image/png, "
                        "image/jpeg), but got '%.*s'.",
                        param, mt ? (int)(mt < 40 ? mt : 40) : 10, mt ? h : "text/plain");
    const char *last = comma; /* the last ;parameter before the ',' */
    while (last > mt_end && last[-1] != ';')
        last--;
    if (last == mt_end || (size_t)(comma - last) != 6 || strncasecmp(last, "base64", 6) != 0)
        return srv_fail(e, 400, INVALID, param, "invalid_image_url",
                        "Invalid '%s': only base64 data: URLs are accepted "
                        "(data:image/png;base64,...).",
                        param);
    *b64 = comma + 1;
    *n_b64 = n - (size_t)(comma + 1 - u);
    return 1;
}

/* The bytes of image_url part K of message I (PART is an object) into OUT. */
static int parse_image_part(const json_t *part, int i, size_t k, srv_part *out, srv_error *e) {
    char param[96];
    snprintf(param, sizeof param, "messages[%d].content[%zu].image_url", i, k);
    json_t *iu = json_object_get(part, "image_url");
    if (!iu || json_is_null(iu))
        return srv_fail(e, 400, INVALID, param, "missing_required_parameter",
                        "Missing required parameter: '%s'.", param);
    if (!json_is_object(iu)) return srv_type_error(e, param, "an object", iu);
    json_t *detail = srv_json_field(iu, "detail"); /* "auto", "low", "high": accepted, ignored */
    snprintf(param, sizeof param, "messages[%d].content[%zu].image_url.detail", i, k);
    if (detail && !json_is_string(detail)) return srv_type_error(e, param, "a string", detail);
    json_t *url = json_object_get(iu, "url");
    snprintf(param, sizeof param, "messages[%d].content[%zu].image_url.url", i, k);
    if (!url || json_is_null(url))
        return srv_fail(e, 400, INVALID, param, "missing_required_parameter",
                        "Missing required parameter: '%s'.", param);
    if (!json_is_string(url)) return srv_type_error(e, param, "a string", url);
    const char *b64 = NULL;
    size_t n_b64 = 0;
    if (!data_url_payload(json_string_value(url), json_string_length(url), param, &b64, &n_b64, e))
        return 0;
    unsigned char *bytes = malloc(n_b64 / 4 * 3 + 3);
    if (!bytes) return srv_fail(e, 500, "server_error", param, NULL, "out of memory");
    size_t n = 0, bad = 0;
    if (!srv_base64_decode(b64, n_b64, bytes, &n, &bad)) {
        free(bytes);
        if (bad >= n_b64)
            return srv_fail(e, 400, INVALID, param, "invalid_image_url",
                            "Invalid '%s': the base64 data ends in an incomplete group (its "
                            "length without whitespace must be a multiple of 4, '=' padded).",
                            param);
        unsigned char c = (unsigned char)b64[bad];
        return srv_fail(e, 400, INVALID, param, "invalid_image_url",
                        "Invalid '%s': bad base64 at offset %zu of the data (byte 0x%02x%s%c%s): "
                        "expected the standard alphabet A-Z a-z 0-9 + / with '=' only as "
                        "padding at the end.",
                        param, bad, c, c > 0x20 && c < 0x7f ? ", '" : "",
                        c > 0x20 && c < 0x7f ? c : ' ', c > 0x20 && c < 0x7f ? "'" : "");
    }
    if (n == 0) {
        free(bytes);
        return srv_fail(e, 400, INVALID, param, "invalid_image_url",
                        "Invalid '%s': the data: URL holds no image bytes.", param);
    }
    out->image = bytes;
    out->n_image = n;
    return 1;
}

// ---- chat messages ----

/* The content of message I (V may be NULL: missing or null) into M (its role set): the
 * string, or the parts of a content list (kept in M->parts) and their text joined. */
/* An assistant message's reasoning_content (or "reasoning"): a string or null, into
 * M->reasoning; other roles' are ignored, as vLLM does. */
static int parse_reasoning(const json_t *o, int i, srv_message *m, srv_error *e) {
    if (strcmp(m->role, "assistant") != 0) return 1;
    char param[64];
    const char *key = srv_json_field(o, "reasoning_content") ? "reasoning_content" : "reasoning";
    json_t *v = srv_json_field(o, key);
    snprintf(param, sizeof param, "messages[%d].%s", i, key);
    if (!v || json_is_null(v)) return 1;
    if (!json_is_string(v)) return srv_type_error(e, param, "a string", v);
    m->reasoning = srv_dup(json_string_value(v), json_string_length(v), e, param);
    return m->reasoning != NULL;
}

static int parse_content(const json_t *v, int i, srv_message *m, srv_request *r, srv_error *e) {
    char param[96];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (!v) {
        if (strcmp(m->role, "assistant") != 0)
            return srv_fail(e, 400, INVALID, param, "missing_required_parameter",
                            "Missing required parameter: '%s' (only assistant messages may "
                            "omit it or set it to null).",
                            param);
        return (m->content = srv_dup("", 0, e, param)) != NULL;
    }
    if (json_is_string(v))
        return (m->content = srv_dup(json_string_value(v), json_string_length(v), e, param)) !=
               NULL;
    if (!json_is_array(v)) return srv_type_error(e, param, "a string or an array of content parts", v);
    size_t n = json_array_size(v), total = 0, k;
    if (n > (size_t)INT32_MAX)
        return srv_fail(e, 400, INVALID, param, "invalid_value", "too many content parts");
    if (n && !(m->parts = calloc(n, sizeof *m->parts)))
        return srv_fail(e, 500, "server_error", param, NULL, "out of memory");
    json_t *part;
    json_array_foreach(v, k, part) {
        snprintf(param, sizeof param, "messages[%d].content[%zu]", i, k);
        if (!json_is_object(part)) return srv_type_error(e, param, "an object", part);
        json_t *type = json_object_get(part, "type");
        snprintf(param, sizeof param, "messages[%d].content[%zu].type", i, k);
        if (!type)
            return srv_fail(e, 400, INVALID, param, "missing_required_parameter",
                            "Missing required parameter: '%s'.", param);
        if (!json_is_string(type)) return srv_type_error(e, param, "a string", type);
        const char *ts = json_string_value(type);
        srv_part *p = &m->parts[k];
        m->n_parts = (int)k + 1; /* counted before it owns anything, for deinit */
        if (strcmp(ts, "image_url") == 0) {
            if (strcmp(m->role, "user") != 0) {
                snprintf(param, sizeof param, "messages[%d].content[%zu]", i, k);
                return srv_fail(e, 400, INVALID, param, "invalid_value",
                                "Invalid '%s': image_url parts are accepted in user messages "
                                "only, not in messages of role '%s'.",
                                param, m->role);
            }
            if (!parse_image_part(part, i, k, p, e)) return 0;
            m->n_images++;
            r->n_images++;
            continue;
        }
        if (strcmp(ts, "text") != 0)
            return srv_fail(e, 400, INVALID, param, "invalid_value",
                            "Invalid value '%.40s' for '%s': supported content part types are "
                            "'text' and 'image_url'.",
                            ts, param);
        json_t *text = json_object_get(part, "text");
        snprintf(param, sizeof param, "messages[%d].content[%zu].text", i, k);
        if (!text)
            return srv_fail(e, 400, INVALID, param, "missing_required_parameter",
                            "Missing required parameter: '%s'.", param);
        if (!json_is_string(text)) return srv_type_error(e, param, "a string", text);
        if (!(p->text = srv_dup(json_string_value(text), json_string_length(text), e, param)))
            return 0;
        total += json_string_length(text);
    }
    snprintf(param, sizeof param, "messages[%d].content", i);
    char *s = srv_dup(NULL, total, e, param);
    if (!s) return 0;
    size_t at = 0;
    json_array_foreach(v, k, part) {
        json_t *text = json_object_get(part, "text");
        if (m->parts[k].text) {
            memcpy(s + at, json_string_value(text), json_string_length(text));
            at += json_string_length(text);
        }
    }
    s[total] = 0;
    m->content = s;
    return 1;
}

static int parse_messages(const json_t *root, srv_request *r, srv_error *e) {
    json_t *msgs = srv_json_field(root, "messages");
    if (!msgs)
        return srv_fail(e, 400, INVALID, "messages", "missing_required_parameter",
                        "Missing required parameter: 'messages'.");
    if (!json_is_array(msgs)) return srv_type_error(e, "messages", "an array", msgs);
    size_t n = json_array_size(msgs);
    if (n == 0)
        return srv_fail(e, 400, INVALID, "messages", "empty_array",
                        "Invalid 'messages': expected an array with at least 1 message, but "
                        "got an empty array instead.");
    if (n > (size_t)INT32_MAX)
        return srv_fail(e, 400, INVALID, "messages", "invalid_value", "too many messages");
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages) return srv_fail(e, 500, "server_error", "messages", NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) return srv_type_error(e, param, "an object", m);
        json_t *role = json_object_get(m, "role");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!role)
            return srv_fail(e, 400, INVALID, param, "missing_required_parameter",
                            "Missing required parameter: '%s'.", param);
        if (!json_is_string(role)) return srv_type_error(e, param, "a string", role);
        const char *rs = json_string_value(role);
        static const char *const roles[] = {"system", "user", "assistant", "tool"};
        const char *canon = strcmp(rs, "developer") == 0 ? "system" : NULL;
        for (size_t k = 0; !canon && k < sizeof roles / sizeof roles[0]; k++)
            if (strcmp(rs, roles[k]) == 0) canon = roles[k];
        if (!canon)
            return srv_fail(e, 400, INVALID, param, "invalid_value",
                            "Invalid value '%.40s' for '%s': supported values are 'system', "
                            "'developer', 'user', 'assistant' and 'tool'.",
                            rs, param);
        r->messages[i].role = srv_dup(canon, strlen(canon), e, param);
        r->n_messages = (int)i + 1; /* counted as soon as it owns something, for deinit */
        if (!r->messages[i].role) return 0;
        if (!parse_content(srv_json_field(m, "content"), (int)i, &r->messages[i], r, e)) return 0;
        if (!srv_parse_message_tools(m, (int)i, &r->messages[i], e)) return 0;
        if (!parse_reasoning(m, (int)i, &r->messages[i], e)) return 0;
    }
    return 1;
}

// ---- completion prompts ----

/* The token ids of array A (non-empty, each in [0, 2^31)) into P; PARAM names A. */
static int parse_ids(const json_t *a, const char *param, srv_prompt *p, srv_error *e) {
    size_t n = json_array_size(a);
    if (n == 0)
        return srv_fail(e, 400, INVALID, param, "empty_array",
                        "Invalid '%s': expected a non-empty list of token ids, but got an empty "
                        "array instead.",
                        param);
    if (n > (size_t)INT32_MAX)
        return srv_fail(e, 400, INVALID, param, "invalid_value", "too many token ids");
    p->ids = malloc(n * sizeof *p->ids);
    if (!p->ids) return srv_fail(e, 500, "server_error", param, NULL, "out of memory");
    for (size_t k = 0; k < n; k++) {
        json_t *v = json_array_get(a, k);
        char ip[64];
        snprintf(ip, sizeof ip, "%s[%zu]", param, k);
        if (!json_is_integer(v)) return srv_type_error(e, ip, "an integer token id", v);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id > INT32_MAX)
            return srv_fail(e, 400, INVALID, ip, "invalid_value",
                            "Invalid '%s': expected a token id in [0, 2147483647], but got %lld "
                            "instead.",
                            ip, (long long)id);
        p->ids[k] = (int32_t)id;
    }
    p->n_ids = (int32_t)n;
    return 1;
}

static int parse_prompts(const json_t *root, srv_request *r, srv_error *e) {
    json_t *pr = srv_json_field(root, "prompt");
    if (!pr)
        return srv_fail(e, 400, INVALID, "prompt", "missing_required_parameter",
                        "Missing required parameter: 'prompt'.");
    static const char *const want =
        "a string, an array of strings, an array of token ids or an array of token id arrays";
    if (json_is_string(pr)) {
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return srv_fail(e, 500, "server_error", "prompt", NULL, "out of memory");
        r->n_prompts = 1;
        r->prompts[0].text =
            srv_dup(json_string_value(pr), json_string_length(pr), e, "prompt");
        return r->prompts[0].text != NULL;
    }
    if (!json_is_array(pr)) return srv_type_error(e, "prompt", want, pr);
    size_t n = json_array_size(pr);
    if (n == 0)
        return srv_fail(e, 400, INVALID, "prompt", "empty_array",
                        "Invalid 'prompt': expected %s, but got an empty array instead.", want);
    json_t *first = json_array_get(pr, 0);
    if (json_is_integer(first)) { /* one prompt of token ids */
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return srv_fail(e, 500, "server_error", "prompt", NULL, "out of memory");
        r->n_prompts = 1;
        return parse_ids(pr, "prompt", &r->prompts[0], e);
    }
    if (!json_is_string(first) && !json_is_array(first))
        return srv_type_error(e, "prompt[0]", "a string, a token id or an array of token ids", first);
    if (n > (size_t)INT32_MAX)
        return srv_fail(e, 400, INVALID, "prompt", "invalid_value", "too many prompts");
    r->prompts = calloc(n, sizeof *r->prompts);
    if (!r->prompts) return srv_fail(e, 500, "server_error", "prompt", NULL, "out of memory");
    r->n_prompts = (int)n; /* calloc'd: deinit frees what has been filled in */
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(pr, i);
        char param[64];
        snprintf(param, sizeof param, "prompt[%zu]", i);
        if (json_is_string(first)) {
            if (!json_is_string(v)) return srv_type_error(e, param, "a string (like prompt[0])", v);
            r->prompts[i].text = srv_dup(json_string_value(v), json_string_length(v), e, param);
            if (!r->prompts[i].text) return 0;
        } else {
            if (!json_is_array(v))
                return srv_type_error(e, param, "an array of token ids (like prompt[0])", v);
            if (!parse_ids(v, param, &r->prompts[i], e)) return 0;
        }
    }
    return 1;
}

// ---- sampling and output options ----

/* llama-server's extensions: the DRY loop guard and speculative.n_max. */
static int parse_llama_server_fields(const json_t *root, srv_request *r, srv_error *e) {
    mlm_dry_params d = mlm_dry_default_params();
    r->dry_base = d.base;
    r->dry_allowed_length = d.allowed_length;
    r->dry_penalty_last_n = d.last_n;
    r->spec_n_max = -1;
    return get_number(root, "dry_multiplier", 0, 5, 0, &r->dry_multiplier, NULL, e) &&
           get_number(root, "dry_base", 1, 4, 0, &r->dry_base, NULL, e) &&
           get_int(root, "dry_allowed_length", 1, 1024, &r->dry_allowed_length, NULL, e) &&
           get_int(root, "dry_penalty_last_n", -1, 1 << 30, &r->dry_penalty_last_n, NULL, e) &&
           get_int(root, "speculative.n_max", 0, 64, &r->spec_n_max, NULL, e);
}

static int parse_stop(const json_t *root, srv_request *r, srv_error *e) {
    json_t *v = srv_json_field(root, "stop");
    if (!v) return 1;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) return 1; /* "" stops nothing */
        r->stop[0] = srv_dup(json_string_value(v), json_string_length(v), e, "stop");
        if (!r->stop[0]) return 0;
        r->n_stop = 1;
        return 1;
    }
    if (!json_is_array(v)) return srv_type_error(e, "stop", "a string or an array of strings", v);
    size_t n = json_array_size(v);
    if (n > 4)
        return srv_fail(e, 400, INVALID, "stop", "invalid_value",
                        "Invalid 'stop': expected at most 4 stop sequences, but got %zu "
                        "instead.",
                        n);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(v, i);
        char param[64];
        snprintf(param, sizeof param, "stop[%zu]", i);
        if (!json_is_string(s)) return srv_type_error(e, param, "a string", s);
        if (json_string_length(s) == 0) continue; /* vLLM accepts "" and it never matches */
        r->stop[r->n_stop] = srv_dup(json_string_value(s), json_string_length(s), e, param);
        if (!r->stop[r->n_stop]) return 0;
        r->n_stop++;
    }
    return 1;
}

static int parse_logprobs(const json_t *root, srv_request *r, srv_error *e) {
    int64_t x = 0;
    int has = 0;
    if (r->kind == SRV_COMPLETION) { /* logprobs: the number of alternatives, 0..20 */
        if (!get_int(root, "logprobs", 0, 20, &x, &has, e)) return 0;
        if (has) r->logprobs = 1, r->top_logprobs = (int)x;
        return 1;
    }
    if (!get_bool(root, "logprobs", &r->logprobs, e)) return 0;
    if (!get_int(root, "top_logprobs", 0, 20, &x, &has, e)) return 0;
    if (has && !r->logprobs)
        return srv_fail(e, 400, INVALID, "top_logprobs", "invalid_value",
                        "Invalid 'top_logprobs': it needs 'logprobs' set to true.");
    r->top_logprobs = (int)x;
    return 1;
}

/* chat_template_kwargs: enable_thinking is read (a boolean); other keys are template
 * variables meshlm's formats do not have, and are ignored. */
static int parse_template_kwargs(const json_t *root, srv_request *r, srv_error *e) {
    json_t *k = srv_json_field(root, "chat_template_kwargs");
    if (!k) return 1;
    if (!json_is_object(k)) return srv_type_error(e, "chat_template_kwargs", "an object", k);
    json_t *t = srv_json_field(k, "enable_thinking");
    if (t && !json_is_boolean(t))
        return srv_type_error(e, "chat_template_kwargs.enable_thinking", "a boolean", t);
    if (t) r->thinking = json_is_true(t) ? MLM_THINK_ON : MLM_THINK_OFF;
    return 1;
}

static int parse_options(const json_t *root, srv_request *r, srv_error *e) {
    json_t *model = srv_json_field(root, "model");
    if (model) {
        if (!json_is_string(model)) return srv_type_error(e, "model", "a string", model);
        r->model = srv_dup(json_string_value(model), json_string_length(model), e, "model");
        if (!r->model) return 0;
    }
    int has = 0;
    if (!get_int(root, "max_tokens", 1, INT64_MAX, &r->max_tokens, &has, e)) return 0;
    if (!get_int(root, "max_completion_tokens", 1, INT64_MAX, &r->max_tokens, &has, e)) return 0;
    if (!get_number(root, "temperature", 0, 2, 0, &r->temperature, &r->has_temperature, e))
        return 0;
    if (!get_number(root, "top_p", 0, 1, 1, &r->top_p, &r->has_top_p, e)) return 0;
    json_t *tk = srv_json_field(root, "top_k");
    if (tk) {
        if (!as_int(tk, &r->top_k)) return srv_type_error(e, "top_k", "an integer", tk);
        if (r->top_k < -1)
            return srv_fail(e, 400, INVALID, "top_k", "invalid_value",
                            "Invalid 'top_k': expected -1 or 0 (off) or an integer >= 1, but "
                            "got %lld instead.",
                            (long long)r->top_k);
        r->has_top_k = 1;
    }
    int64_t seed = 0;
    if (!get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, &r->has_seed, e)) return 0;
    if (r->has_seed) r->seed = (uint64_t)seed;
    if (!get_number(root, "presence_penalty", -2, 2, 0, &r->presence_penalty, NULL, e)) return 0;
    if (!get_number(root, "frequency_penalty", -2, 2, 0, &r->frequency_penalty, NULL, e)) return 0;
    if (!get_bool(root, "stream", &r->stream, e)) return 0;
    json_t *so = srv_json_field(root, "stream_options");
    if (so) {
        if (!json_is_object(so)) return srv_type_error(e, "stream_options", "an object", so);
        if (!r->stream)
            return srv_fail(e, 400, INVALID, "stream_options", "invalid_value",
                            "Invalid 'stream_options': stream options can only be given when "
                            "'stream' is true.");
        json_t *iu = srv_json_field(so, "include_usage");
        if (iu && !json_is_boolean(iu))
            return srv_type_error(e, "stream_options.include_usage", "a boolean", iu);
        r->include_usage = json_is_true(iu);
    }
    if (!parse_stop(root, r, e)) return 0;
    if (!get_bool(root, "ignore_eos", &r->ignore_eos, e)) return 0;
    if (!parse_llama_server_fields(root, r, e)) return 0;
    if (!parse_template_kwargs(root, r, e)) return 0;
    return parse_logprobs(root, r, e);
}

// ---- entry points ----

/* The body as a JSON object into *ROOT (the caller's reference); 0 with E filled if it is not
 * one. */
static int load_object(const char *body, size_t len, json_t **root, srv_error *e) {
    json_error_t jerr;
    /* DECODE_ANY: a scalar body is reported as "not an object" rather than as bad JSON */
    *root = json_loadb(body ? body : "", body ? len : 0, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
                       &jerr);
    if (!*root)
        return srv_fail(e, 400, INVALID, NULL, NULL,
                        "We could not parse the JSON body of your request: %s (line %d, column "
                        "%d).",
                        jerr.text, jerr.line, jerr.column);
    if (!json_is_object(*root)) {
        srv_fail(e, 400, INVALID, NULL, NULL,
                 "The request body must be a JSON object, but got %s instead.", type_name(*root));
        json_decref(*root);
        *root = NULL;
        return 0;
    }
    return 1;
}

int srv_tokenize_parse(const char *body, size_t len, int detokenize, srv_tok_request *out,
                       srv_error *e) {
    srv_error scratch;
    if (!e) e = &scratch;
    memset(out, 0, sizeof *out);
    out->parse_special = 1;
    json_t *root;
    if (!load_object(body, len, &root, e)) return 0;
    int ok = 1;
    if (detokenize) {
        json_t *t = srv_json_field(root, "tokens");
        if (!t)
            ok = srv_fail(e, 400, INVALID, "tokens", "missing_required_parameter",
                          "Missing required parameter: 'tokens'.");
        else if (!json_is_array(t))
            ok = srv_type_error(e, "tokens", "an array of token ids", t);
        else if (json_array_size(t) > 0) {
            srv_prompt p = {0};
            ok = parse_ids(t, "tokens", &p, e);
            out->ids = p.ids, out->n_ids = ok ? p.n_ids : 0;
        }
    } else {
        json_t *c = srv_json_field(root, "content");
        if (!c)
            ok = srv_fail(e, 400, INVALID, "content", "missing_required_parameter",
                          "Missing required parameter: 'content'.");
        else if (!json_is_string(c))
            ok = srv_type_error(e, "content", "a string", c);
        else {
            out->len = json_string_length(c);
            ok = (out->content = srv_dup(json_string_value(c), out->len, e, "content")) != NULL;
        }
        ok = ok && get_bool(root, "add_special", &out->add_special, e) &&
             get_bool(root, "parse_special", &out->parse_special, e);
    }
    json_decref(root);
    if (!ok) srv_tok_request_deinit(out);
    return ok;
}

void srv_tok_request_deinit(srv_tok_request *r) {
    free(r->content);
    free(r->ids);
    memset(r, 0, sizeof *r);
}

int srv_request_parse(const char *body, size_t len, srv_kind kind, srv_request *out, srv_error *e) {
    srv_error scratch;
    if (!e) e = &scratch;
    memset(out, 0, sizeof *out);
    json_t *root;
    if (!load_object(body, len, &root, e)) return 0;
    srv_request r;
    memset(&r, 0, sizeof r);
    r.kind = kind;
    r.max_tokens = -1;
    int ok = (kind == SRV_CHAT ? parse_messages(root, &r, e) : parse_prompts(root, &r, e)) &&
             parse_options(root, &r, e) && srv_parse_tools(root, &r, e);
    json_decref(root);
    if (!ok) {
        srv_request_deinit(&r);
        return 0;
    }
    *out = r;
    return 1;
}

void srv_request_deinit(srv_request *r) {
    if (!r) return;
    srv_tools_deinit(r);
    free(r->model);
    for (int i = 0; i < r->n_messages; i++) {
        srv_message *m = &r->messages[i];
        free(m->role);
        free(m->content);
        free(m->reasoning);
        for (int k = 0; k < m->n_parts; k++) {
            free(m->parts[k].text);
            free(m->parts[k].image);
        }
        free(m->parts);
    }
    free(r->messages);
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    free(r->prompts);
    for (int i = 0; i < r->n_stop && i < 4; i++)
        free(r->stop[i]);
    memset(r, 0, sizeof *r);
}
