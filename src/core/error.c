/* core/error.c: status names and error-message formatting. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *mlm_status_str(mlm_status status) {
    switch (status) {
    case MLM_OK: return "ok";
    case MLM_ERR_INVALID_ARG: return "invalid argument";
    case MLM_ERR_IO: return "i/o error";
    case MLM_ERR_FORMAT: return "format error";
    case MLM_ERR_UNSUPPORTED: return "unsupported";
    case MLM_ERR_NOMEM: return "out of memory";
    case MLM_ERR_CAPACITY: return "capacity exceeded";
    case MLM_ERR_BACKEND: return "backend error";
    case MLM_ERR_CANCELLED: return "cancelled";
    case MLM_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *mlm_version(void) { return "0.1.0"; }

mlm_status mlm_error_set(mlm_error *err, mlm_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

void mlm_error_prefix(mlm_error *err, const char *fmt, ...) {
    if (!err) return;
    char prefix[MLM_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Build "prefix: old" in place, truncating the old message if needed. */
    size_t np = strlen(prefix), no = strlen(err->msg);
    if (np + 2 >= sizeof err->msg) np = sizeof err->msg - 3;
    if (np + 2 + no >= sizeof err->msg) no = sizeof err->msg - 3 - np;
    memmove(err->msg + np + 2, err->msg, no);
    memcpy(err->msg, prefix, np);
    err->msg[np] = ':';
    err->msg[np + 1] = ' ';
    err->msg[np + 2 + no] = 0;
}

void mlm_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "meshlm: internal assertion failed: %s (%s:%d)\n", cond, file, line);
    abort();
}
