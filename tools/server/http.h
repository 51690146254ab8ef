/* tools/server/http.h: the HTTP front end of `meshlm serve` on libmicrohttpd: the daemon (a
 * thread per connection), routing, authentication, body limits, and the reply helpers the
 * handlers use. Knows the engine only through server.h; generation lives in handlers.c. */
#ifndef MESHLM_SERVER_HTTP_H
#define MESHLM_SERVER_HTTP_H

#include <microhttpd.h>
#include <stddef.h>

#include "meshlm.h"
#include "request.h"
#include "server.h"

typedef struct srv_http srv_http;

typedef struct srv_http_params {
    const char *host;  /* numeric address or name to bind ("127.0.0.1", "::1", "0.0.0.0") */
    int port;          /* 0: a free port */
    int timeout_s;     /* idle connection timeout */
    int max_conns;     /* connection limit */
} srv_http_params;

/* Starts serving SRV (borrowed; it must outlive the daemon). *PORT gets the bound port.
 * IO when the address cannot be resolved or bound, NOMEM. */
mlm_status srv_http_start(srv_server *srv, const srv_http_params *p, srv_http **out, int *port,
                          mlm_error *err);
/* Stops accepting connections; open ones keep being served. */
void srv_http_quiesce(srv_http *h);
/* Stops the daemon (closing every connection, waiting for their threads) and frees it. */
void srv_http_stop(srv_http *h);

/* Queues BODY (LEN bytes, malloc'd, taken over; NULL: out of memory, a 500 goes out instead)
 * as the response with STATUS and CTYPE, and counts the request in the metrics under PATH. */
enum MHD_Result srv_http_send(srv_server *srv, struct MHD_Connection *conn, const char *path,
                              int status, const char *ctype, char *body, size_t len);
/* Queues E as an OpenAI error body (503 also gets Retry-After: 1). */
enum MHD_Result srv_http_send_error(srv_server *srv, struct MHD_Connection *conn,
                                    const char *path, const srv_error *e);
/* The connection's socket, or -1. */
int srv_http_conn_fd(struct MHD_Connection *conn);

#endif
