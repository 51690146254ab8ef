/* format/pickle.h: a restricted unpickler for exactly what torch.save emits for state dicts
 * and dict-shaped files: dicts/OrderedDicts, tuples, lists, ints, floats, strings, bools,
 * None, persistent storage ids and torch._utils._rebuild_tensor_v2 / _rebuild_parameter.
 * Any other global is refused (UNSUPPORTED) when the GLOBAL opcode is read; nothing is ever
 * executed. Strings point into the caller's pickle bytes (borrowed); every value node is
 * owned by the mlm_pickle and freed with it. */
#ifndef MESHLM_FORMAT_PICKLE_H
#define MESHLM_FORMAT_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

typedef enum pk_kind {
    PK_NONE,
    PK_BOOL,
    PK_INT,
    PK_FLOAT,
    PK_STR,
    PK_TUPLE,
    PK_LIST,
    PK_DICT,    /* items hold key, value, key, value, ... */
    PK_GLOBAL,  /* an allowed callable or storage class */
    PK_STORAGE, /* a persistent id: ('storage', type, key, location, numel) */
    PK_TENSOR   /* the result of _rebuild_tensor_v2 */
} pk_kind;

typedef enum pk_global {
    PK_G_ORDERED_DICT,
    PK_G_REBUILD_TENSOR_V2,
    PK_G_REBUILD_PARAMETER,
    PK_G_STORAGE /* torch.<X>Storage; the dtype is in .dtype */
} pk_global;

typedef struct pk_value pk_value;
struct pk_value {
    pk_kind kind;
    int64_t i;      /* PK_BOOL, PK_INT; PK_STORAGE: numel; PK_TENSOR: storage offset */
    double f;       /* PK_FLOAT */
    const char *s;  /* PK_STR (borrowed, not NUL-terminated); PK_STORAGE: key */
    size_t len;
    pk_value **items; /* PK_TUPLE, PK_LIST, PK_DICT (owned array, borrowed nodes) */
    int64_t n, cap;
    pk_global global;  /* PK_GLOBAL */
    mlm_dtype dtype;   /* PK_GLOBAL storage class, PK_STORAGE */
    pk_value *storage; /* PK_TENSOR */
    int n_dim;         /* PK_TENSOR */
    int64_t shape[MLM_MAX_DIMS], stride[MLM_MAX_DIMS];
};

typedef struct mlm_pickle mlm_pickle;

/* Unpickles N bytes at D. WHAT names the source in messages ("x.pth: data.pkl").
 * *ROOT is the value STOP returned. FORMAT for malformed streams, UNSUPPORTED for
 * opcodes or globals outside the subset. */
mlm_status mlm_pickle_load(const char *what, const unsigned char *d, size_t n, mlm_pickle **out,
                           const pk_value **root, mlm_error *err);
void mlm_pickle_free(mlm_pickle *p);

#endif
