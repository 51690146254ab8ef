/* dist/comm_null.c: the communicator of one process: rank 0 of 1. Every collective is the
 * identity (a gather copies its one part), so code written for a mesh runs unchanged alone. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/comm.h"

static mlm_status null_split(mlm_comm *c, int color, int key, mlm_comm **out, mlm_error *err) {
    (void)c, (void)key;
    if (color < 0) return MLM_OK; /* in no part: *out stays NULL */
    mlm_status st = mlm_comm_null_create(out, err);
    if (!st) (*out)->is_world = 0;
    return st;
}

static mlm_status null_allreduce(mlm_comm *c, float *buf, int64_t n, mlm_error *err) {
    (void)c, (void)buf, (void)n, (void)err;
    return MLM_OK;
}

static mlm_status null_allgatherv(mlm_comm *c, const void *send, void *recv, const size_t *counts,
                                  mlm_error *err) {
    (void)c, (void)err;
    if (counts[0] && recv != send) memmove(recv, send, counts[0]);
    return MLM_OK;
}

static mlm_status null_bcast(mlm_comm *c, void *buf, size_t bytes, int root, mlm_error *err) {
    (void)c, (void)buf, (void)bytes, (void)root, (void)err;
    return MLM_OK;
}

static mlm_status null_barrier(mlm_comm *c, mlm_error *err) {
    (void)c, (void)err;
    return MLM_OK;
}

static void null_abort(mlm_comm *c, int code) {
    (void)c;
    exit(code);
}

static void null_free(mlm_comm *c) { (void)c; }

static const mlm_comm_ops null_ops = {"single",   null_split,   null_allreduce, null_allgatherv,
                                      null_bcast, null_barrier, null_abort,     null_free};

mlm_status mlm_comm_null_create(mlm_comm **out, mlm_error *err) {
    mlm_comm *c = calloc(1, sizeof *c);
    if (!c) return mlm_error_set(err, MLM_ERR_NOMEM, "mesh: out of memory");
    *c = (mlm_comm){.ops = &null_ops, .rank = 0, .size = 1, .is_world = 1};
    *out = c;
    return MLM_OK;
}
