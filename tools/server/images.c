/* tools/server/images.c: a chat request's images for a vision model (images.h). The request
 * holds each image_url part's bytes (request.c decoded its data: URL); here they are checked
 * against the server, opened with the library (decoded and preprocessed for the model's
 * vision tower) into the job, which owns them until its last final event, and encoded on the
 * HTTP thread, one image at a time over the server, before the request is submitted: the
 * engine loop never waits for the encoder. The prompt is built with
 * mlm_tokenizer_encode_chat_parts, one image token where each image part is. */
#include "images.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define INVALID "invalid_request_error"

/* The message and part of image IDX (0-based, in request order) of R: 1, or 0 past the last. */
static int image_at(const srv_request *r, int idx, int *mi, int *pk) {
    for (int i = 0; i < r->n_messages; i++) {
        const srv_message *m = &r->messages[i];
        if (idx >= m->n_images) {
            idx -= m->n_images;
            continue;
        }
        for (int k = 0; k < m->n_parts; k++)
            if (!m->parts[k].text && idx-- == 0) {
                *mi = i, *pk = k;
                return 1;
            }
        return 0; /* n_images disagrees with the parts: not from srv_request_parse */
    }
    return 0;
}

/* "messages[i].content[k]" of image IDX of R into NAME. */
static void image_name(const srv_request *r, int idx, char *name, size_t cap) {
    int i = 0, k = 0;
    if (image_at(r, idx, &i, &k))
        snprintf(name, cap, "messages[%d].content[%d]", i, k);
    else
        snprintf(name, cap, "image %d", idx);
}

int srv_images_check(const srv_server *srv, const srv_request *r, srv_error *e) {
    char first[64], over[64];
    image_name(r, 0, first, sizeof first);
    if (srv->image_token < 0)
        return srv_fail(e, 400, INVALID, first, "invalid_value",
                        "The model `%s` takes no images, but %s is an image_url part (only "
                        "Llama 3.2 Vision models take images).",
                        srv->alias, first);
    if (srv->max_images <= 0)
        return srv_fail(e, 400, INVALID, first, "invalid_value",
                        "This server takes no images (--max-images 0), but %s is an image_url "
                        "part.",
                        first);
    if (r->n_images > srv->max_images) {
        image_name(r, srv->max_images, over, sizeof over);
        return srv_fail(e, 400, INVALID, over, "invalid_value",
                        "The request has %d images, but this server takes at most %d per "
                        "request (--max-images %d): %s is one too many.",
                        r->n_images, srv->max_images, srv->max_images, over);
    }
    return 1;
}

int srv_images_prompt(const srv_server *srv, const srv_request *r, mlm_tokens *out, srv_error *e) {
    if (r->n_messages < 1) return srv_fail(e, 400, INVALID, "messages", "", "no messages");
    size_t total = 0;
    for (int i = 0; i < r->n_messages; i++)
        total += r->messages[i].n_parts ? (size_t)r->messages[i].n_parts : 1;
    mlm_chat_parts *msgs = calloc((size_t)r->n_messages, sizeof *msgs);
    mlm_chat_part *parts = calloc(total, sizeof *parts);
    if (!msgs || !parts) {
        free(msgs);
        free(parts);
        return srv_fail(e, 500, "server_error", "", "", "out of memory");
    }
    size_t at = 0;
    for (int i = 0; i < r->n_messages; i++) {
        const srv_message *m = &r->messages[i];
        msgs[i].role = m->role;
        msgs[i].parts = parts + at;
        msgs[i].n_parts = m->n_parts ? m->n_parts : 1;
        if (!m->n_parts) parts[at++] = (mlm_chat_part){m->content ? m->content : "", 0};
        for (int k = 0; k < m->n_parts; k++)
            parts[at++] = m->parts[k].text ? (mlm_chat_part){m->parts[k].text, 0}
                                           : (mlm_chat_part){NULL, srv->image_token};
    }
    mlm_error err = {0};
    mlm_status st = mlm_tokenizer_encode_chat_parts(srv->tok, msgs, r->n_messages, 1, out, &err);
    free(msgs);
    free(parts);
    if (st == MLM_ERR_UNSUPPORTED || st == MLM_ERR_INVALID_ARG)
        return srv_fail(e, 400, INVALID, "messages", "", "%s", err.msg);
    if (st) return srv_fail(e, 500, "server_error", "", "", "%s", err.msg);
    return 1;
}

int srv_images_open(srv_server *srv, srv_request *r, srv_job *j, srv_error *e) {
    if (!(j->images = calloc((size_t)r->n_images, sizeof *j->images)))
        return srv_fail(e, 500, "server_error", "", "", "out of memory");
    for (int idx = 0; idx < r->n_images; idx++) {
        int i = 0, k = 0;
        if (!image_at(r, idx, &i, &k))
            return srv_fail(e, 500, "server_error", "", "", "image %d: not in the parts", idx);
        srv_part *p = &r->messages[i].parts[k];
        char name[64];
        snprintf(name, sizeof name, "messages[%d].content[%d]", i, k);
        if (!p->image) return srv_fail(e, 500, "server_error", name, "", "%s: no bytes", name);
        mlm_image *img = NULL;
        mlm_error err = {0};
        mlm_status st = mlm_image_open_memory(srv->model, name, p->image, p->n_image, &img, &err);
        free(p->image); /* the preprocessed pixels are all that is read from now on */
        p->image = NULL;
        if (st == MLM_ERR_FORMAT || st == MLM_ERR_UNSUPPORTED || st == MLM_ERR_INVALID_ARG)
            return srv_fail(e, 400, INVALID, name, "invalid_image", "%s", err.msg);
        if (st) return srv_fail(e, 500, "server_error", name, "", "%s", err.msg);
        j->images[j->n_images++] = img;
    }
    return 1;
}

// ---- the vision encoder's turn ----

/* Waits for the encoder (50 ms at a time, watching J's client and the server's stop).
 * 1 when it is this thread's; 0 when the client went away or the server stops. */
static int vision_acquire(srv_server *srv, const srv_job *j) {
    pthread_mutex_lock(&srv->vision_mu);
    while (srv->vision_busy) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&srv->vision_cv, &srv->vision_mu, &ts);
        if (srv->vision_busy && (srv_fd_closed(j->fd) || atomic_load(&srv->aborting))) {
            pthread_mutex_unlock(&srv->vision_mu);
            return 0;
        }
    }
    srv->vision_busy = 1;
    pthread_mutex_unlock(&srv->vision_mu);
    return 1;
}

static void vision_release(srv_server *srv) {
    pthread_mutex_lock(&srv->vision_mu);
    srv->vision_busy = 0;
    pthread_cond_signal(&srv->vision_cv);
    pthread_mutex_unlock(&srv->vision_mu);
}

int srv_images_encode(srv_server *srv, const srv_request *r, srv_job *j, srv_error *e, int *gone) {
    *gone = 0;
    for (int idx = 0; idx < j->n_images; idx++) {
        if (srv_fd_closed(j->fd) || atomic_load(&srv->aborting) || !vision_acquire(srv, j)) {
            *gone = 1;
            return 0;
        }
        mlm_error err = {0};
        double t0 = srv_now();
        mlm_status st = mlm_image_encode(srv->model, j->images[idx], srv->n_threads, &err);
        double dt = srv_now() - t0;
        vision_release(srv);
        if (st) {
            char name[64];
            image_name(r, idx, name, sizeof name);
            return srv_fail(e, 500, "server_error", name, "", "%s: the vision encoder failed: %s",
                            name, err.msg);
        }
        srv_metrics_vision(srv->metrics, dt);
    }
    if (srv_fd_closed(j->fd) || atomic_load(&srv->aborting)) {
        *gone = 1;
        return 0;
    }
    return 1;
}
