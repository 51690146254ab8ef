/* core/error.h: the library's side of mlm_error: a message prefix and the assert for our own
 * invariants. mlm_error_set (meshlm.h) formats a message into ERR (which may be NULL) and
 * returns STATUS, so that a failing path reads
 * `return mlm_error_set(err, MLM_ERR_FORMAT, "...", ...);`. */
#ifndef MESHLM_CORE_ERROR_H
#define MESHLM_CORE_ERROR_H

#include "meshlm.h"

#if defined(__GNUC__)
#define MLM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MLM_PRINTF(a, b)
#endif

/* Prepends "PREFIX: " to an already-filled message (used to add a file name). */
void mlm_error_prefix(mlm_error *err, const char *fmt, ...) MLM_PRINTF(2, 3);

/* Our own invariants only: never for input from files, flags or requests. */
#define MLM_ASSERT(cond)                                                            \
    do {                                                                            \
        if (!(cond)) mlm_assert_fail(#cond, __FILE__, __LINE__);                    \
    } while (0)
_Noreturn void mlm_assert_fail(const char *cond, const char *file, int line);

#endif
