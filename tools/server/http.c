/* tools/server/http.c: the libmicrohttpd daemon of `meshlm serve`: one thread per connection,
 * routes (POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
 * GET /metrics, the chat page at GET / and GET /index.html; else 404 or 405), the API key check
 * (constant time), the body limit (413 from Content-Length or from what arrives), 503 while
 * draining, and the small GET endpoints. Generation requests go to handlers.c once their body
 * is complete. Each connection's context (the body buffer) is owned here and freed when MHD
 * reports the request done. */
#include "http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "handlers.h"

/* The chat page, tools/server/page.html: $(BUILD)/gen/page_html.c, made by scripts/embed.sh. */
extern const char srv_page_html[];
extern const size_t srv_page_html_len;

struct srv_http {
    struct MHD_Daemon *d; /* owned */
    srv_server *srv;      /* borrowed */
    int quiesced;
    unsigned timeout_s;   /* idle connection timeout */
};

enum route_id {
    R_CHAT,
    R_COMPLETIONS,
    R_MODELS,
    R_HEALTH,
    R_METRICS,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_PAGE
};

typedef struct route {
    const char *path;
    const char *method;
    int id;
    int needs_key; /* /v1/ paths and /tokenize, /detokenize, when the server has an API key;
                    * never the page, which is static: its API calls carry the key */
} route;

static const route ROUTES[] = {
    {"/v1/chat/completions", "POST", R_CHAT, 1}, {"/v1/completions", "POST", R_COMPLETIONS, 1},
    {"/v1/models", "GET", R_MODELS, 1},          {"/health", "GET", R_HEALTH, 0},
    {"/metrics", "GET", R_METRICS, 0},           {"/tokenize", "POST", R_TOKENIZE, 1},
    {"/detokenize", "POST", R_DETOKENIZE, 1},    {"/", "GET", R_PAGE, 0},
    {"/index.html", "GET", R_PAGE, 0},
};

/* One request on a connection (MHD's con_cls). */
typedef struct conn_ctx {
    const route *r;
    char *body;       /* owned; LEN bytes received, CAP allocated */
    size_t len, cap;
    int too_big;      /* more than max_body arrived: the rest is dropped, then 413 */
    int responded;    /* a response is queued: whatever still arrives is dropped */
    unsigned long long content_length; /* 0 when absent */
    int has_err;      /* ERR is the answer */
    int no_timeout;   /* the idle timeout is off while this request runs */
    srv_error err;
} conn_ctx;

// ---- replies ----

int srv_http_conn_fd(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

enum MHD_Result srv_http_send(srv_server *srv, struct MHD_Connection *conn, const char *path,
                              int status, const char *ctype, char *body, size_t len) {
    static const char OOM[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                              "\"param\":null,\"code\":null}}";
    struct MHD_Response *resp;
    if (body) {
        resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        if (!resp) free(body);
    } else {
        status = 500;
        ctype = "application/json";
        resp = MHD_create_response_from_buffer(sizeof OOM - 1, (void *)OOM, MHD_RESPMEM_PERSISTENT);
    }
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 405) {
        for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
            if (!strcmp(ROUTES[i].path, path))
                MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, ROUTES[i].method);
    }
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    srv_metrics_request(srv->metrics, path, status);
    return ok;
}

enum MHD_Result srv_http_send_error(srv_server *srv, struct MHD_Connection *conn,
                                    const char *path, const srv_error *e) {
    char *body = srv_error_json(e);
    return srv_http_send(srv, conn, path, e->http, "application/json", body,
                         body ? strlen(body) : 0);
}

static enum MHD_Result send_json(srv_server *srv, struct MHD_Connection *conn, const char *path,
                                 int status, json_t *obj) {
    char *body = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    /* jansson allocates with malloc (no custom allocator is installed), so MHD may free it */
    return srv_http_send(srv, conn, path, status, "application/json", body, body ? strlen(body) : 0);
}

/* PATH with anything but printable ASCII replaced, cut to fit an error message. */
static void printable(const char *path, char *out, size_t cap) {
    size_t n = 0;
    for (; path[n] && n + 1 < cap && n < 200; n++) {
        unsigned char ch = (unsigned char)path[n];
        out[n] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    out[n] = 0;
}

// ---- authentication ----

/* Whether HEADER is "Bearer KEY". The comparison runs over KEY's length whatever the header
 * holds, so its timing tells nothing about how much of the key matched. */
static int key_ok(const char *key, const char *header) {
    if (!header || strncasecmp(header, "Bearer ", 7)) return 0;
    const char *tok = header + 7;
    while (*tok == ' ') tok++;
    size_t n = strlen(tok), m = strlen(key);
    unsigned diff = n != m;
    for (size_t i = 0; i < m; i++) {
        unsigned char t = n ? (unsigned char)tok[i < n ? i : n - 1] : 0;
        diff |= (unsigned)(t ^ (unsigned char)key[i]);
    }
    return diff == 0;
}

// ---- the small endpoints ----

static enum MHD_Result get_models(srv_server *srv, struct MHD_Connection *conn, const char *path) {
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:i}", "id", srv->alias, "object", "model",
                          "created", (json_int_t)srv->start_time, "owned_by", "meshlm",
                          "max_model_len", (int)srv->max_seq_len);
    json_t *o = m ? json_pack("{s:s, s:[o]}", "object", "list", "data", m) : NULL;
    return send_json(srv, conn, path, 200, o);
}

static enum MHD_Result get_health(srv_server *srv, struct MHD_Connection *conn, const char *path) {
    int d = atomic_load(&srv->draining);
    return send_json(srv, conn, path, d ? 503 : 200, json_pack("{s:s}", "status", d ? "draining" : "ok"));
}

static enum MHD_Result get_metrics(srv_server *srv, struct MHD_Connection *conn, const char *path) {
    mlm_sched_stats st;
    mlm_sched_get_stats(srv->sched, &st);
    char *text = srv_metrics_render(srv->metrics, &st, srv->alias);
    return srv_http_send(srv, conn, path, 200, "text/plain; version=0.0.4; charset=utf-8", text,
                         text ? strlen(text) : 0);
}

/* The page is copied because srv_http_send takes over a malloc'd body; 9 KB per page load. */
static enum MHD_Result get_page(srv_server *srv, struct MHD_Connection *conn, const char *path) {
    char *body = malloc(srv_page_html_len);
    if (body) memcpy(body, srv_page_html, srv_page_html_len);
    return srv_http_send(srv, conn, path, 200, "text/html; charset=utf-8", body,
                         srv_page_html_len);
}

// ---- the access handler ----

/* The first call for a request: route, method, draining, key and Content-Length checks. A
 * failed check leaves its error in CX->err. */
static void begin(srv_http *h, struct MHD_Connection *conn, conn_ctx *cx, const char *url,
                  const char *method) {
    srv_server *srv = h->srv;
    srv_error *e = &cx->err;
    char shown[224];
    cx->has_err = 1;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
        if (!strcmp(ROUTES[i].path, url)) cx->r = &ROUTES[i];
    if (!cx->r) {
        printable(url, shown, sizeof shown);
        srv_fail(e, 404, "invalid_request_error", "", "not_found", "Not found: %s", shown);
        return;
    }
    if (strcmp(method, cx->r->method)) {
        printable(method, shown, sizeof shown);
        srv_fail(e, 405, "invalid_request_error", "", "method_not_allowed",
                 "Method %s not allowed for %s (use %s)", shown, cx->r->path, cx->r->method);
        return;
    }
    if (atomic_load(&srv->draining) && cx->r->id != R_HEALTH && cx->r->id != R_METRICS) {
        srv_fail(e, 503, "server_error", "", "shutting_down", "The server is shutting down.");
        return;
    }
    if (cx->r->needs_key && srv->api_key) {
        const char *auth =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (!key_ok(srv->api_key, auth)) {
            srv_fail(e, 401, "invalid_request_error", "", "invalid_api_key",
                     auth ? "Incorrect API key provided."
                          : "You didn't provide an API key. Pass it in the Authorization header "
                            "(Authorization: Bearer YOUR_KEY).");
            return;
        }
    }
    if (cx->content_length > srv->max_body) {
        srv_fail(e, 413, "invalid_request_error", "", "request_too_large",
                 "The request body has %llu bytes; the limit is %zu (--max-body-bytes).",
                 cx->content_length, srv->max_body);
        return;
    }
    cx->has_err = 0;
}

/* Appends an upload chunk, up to the body limit. */
static void take_chunk(srv_server *srv, conn_ctx *cx, const char *data, size_t n) {
    if (cx->too_big || cx->responded) return;
    if (n > srv->max_body - cx->len) {
        cx->too_big = 1;
        free(cx->body);
        cx->body = NULL;
        cx->len = cx->cap = 0;
        return;
    }
    if (cx->len + n + 1 > cx->cap) {
        size_t cap = cx->cap ? cx->cap : 4096;
        while (cap < cx->len + n + 1) cap *= 2;
        char *b = realloc(cx->body, cap);
        if (!b) {
            cx->too_big = 1; /* reported as 413: the body cannot be held */
            return;
        }
        cx->body = b;
        cx->cap = cap;
    }
    memcpy(cx->body + cx->len, data, n);
    cx->len += n;
    cx->body[cx->len] = 0;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls) {
    (void)version;
    srv_http *h = cls;
    srv_server *srv = h->srv;
    conn_ctx *cx = *con_cls;
    if (!cx) {
        if (!(cx = calloc(1, sizeof *cx))) return MHD_NO;
        *con_cls = cx;
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        const char *te =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
        if (cl) {
            char *end;
            cx->content_length = strtoull(cl, &end, 10);
        }
        begin(h, conn, cx, url, method);
        /* A failed request with a body is answered now, without reading the body (MHD then
         * closes the connection); one without waits for the final call, keeping the
         * connection alive. */
        if (cx->has_err && (cx->content_length > 0 || te)) {
            cx->responded = 1;
            return srv_http_send_error(srv, conn, url, &cx->err);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        take_chunk(srv, cx, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (cx->responded) return MHD_YES;
    cx->responded = 1;
    if (cx->has_err) return srv_http_send_error(srv, conn, url, &cx->err);
    switch (cx->r->id) {
    case R_MODELS: return get_models(srv, conn, url);
    case R_HEALTH: return get_health(srv, conn, url);
    case R_METRICS: return get_metrics(srv, conn, url);
    case R_PAGE: return get_page(srv, conn, url);
    default: break;
    }
    if (cx->too_big) {
        srv_error e;
        srv_fail(&e, 413, "invalid_request_error", "", "request_too_large",
                 "The request body is over the limit of %zu bytes (--max-body-bytes).",
                 srv->max_body);
        return srv_http_send_error(srv, conn, url, &e);
    }
    /* While a generation runs the connection is busy, not idle, even when no byte moves for
     * longer than --timeout (a queued request, a long prompt): MHD would close it. The idle
     * timeout comes back when the request completes. */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    cx->no_timeout = 1;
    if (cx->r->id == R_TOKENIZE || cx->r->id == R_DETOKENIZE)
        return srv_handle_tokenize(srv, conn, url, cx->body ? cx->body : "", cx->len,
                                   cx->r->id == R_DETOKENIZE);
    srv_kind kind = cx->r->id == R_CHAT ? SRV_CHAT : SRV_COMPLETION;
    return srv_handle_generate(srv, conn, url, kind, cx->body ? cx->body : "", cx->len);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode why) {
    (void)why;
    srv_http *h = cls;
    conn_ctx *cx = *con_cls;
    if (!cx) return;
    if (cx->no_timeout) MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, h->timeout_s);
    free(cx->body);
    free(cx);
    *con_cls = NULL;
}

// ---- the daemon ----

mlm_status srv_http_start(srv_server *srv, const srv_http_params *p, srv_http **out, int *port,
                          mlm_error *err) {
    *out = NULL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE}, *ai = NULL;
    int rc = getaddrinfo(p->host, NULL, &hints, &ai);
    if (rc || !ai) {
        return mlm_error_set(err, MLM_ERR_IO, "--host %s: %s", p->host, gai_strerror(rc));
    }
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    memcpy(&addr, ai->ai_addr, ai->ai_addrlen < sizeof addr ? ai->ai_addrlen : sizeof addr);
    int v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    if (v6) ((struct sockaddr_in6 *)&addr)->sin6_port = htons((uint16_t)p->port);
    else ((struct sockaddr_in *)&addr)->sin_port = htons((uint16_t)p->port);

    srv_http *h = calloc(1, sizeof *h);
    if (!h) {
        return mlm_error_set(err, MLM_ERR_NOMEM, "out of memory");
    }
    h->srv = srv;
    h->timeout_s = (unsigned)p->timeout_s;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (v6) flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_access, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)p->max_conns,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->timeout_s,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
    if (!h->d) {
        free(h);
        return mlm_error_set(err, MLM_ERR_IO,
                             "cannot listen on %s port %d (in use, or no such local address)",
                             p->host, p->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    *port = di ? di->port : p->port;
    *out = h;
    return MLM_OK;
}

void srv_http_quiesce(srv_http *h) {
    if (!h || h->quiesced) return;
    h->quiesced = 1;
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    if (fd != MHD_INVALID_SOCKET) close(fd); /* ours now: closing it refuses new connections */
}

void srv_http_stop(srv_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->d);
    free(h);
}
