/* tensor/wtype.c: the weight types' traits, one row per type: name, the public dtype that
 * names it, and the layout its sizes come from (elements, BFP panels or native panels). */
#include "tensor/wtype.h"
#include "tensor/bfp.h"
#include "tensor/qpanel.h"

typedef struct traits {
    const char *name;
    mlm_dtype dtype; /* the public dtype that names the type (GGML for the native ones) */
    int elem;        /* bytes per element of a plain row-major type, else 0 */
    int bfp_bits;    /* 8 or 4 for a BFP panel type, else 0 */
} traits;

#define NATIVE(T, t, _) [MLM_W_##T] = {#t, MLM_DTYPE_GGML, 0, 0},
static const traits table[MLM_W_COUNT] = {[MLM_W_F32] = {"f32", MLM_DTYPE_F32, 4, 0},
                                          [MLM_W_BF16] = {"bf16", MLM_DTYPE_BF16, 2, 0},
                                          [MLM_W_BFP8] = {"bfp8", MLM_DTYPE_BFP8, 0, 8},
                                          [MLM_W_BFP4] = {"bfp4", MLM_DTYPE_BFP4, 0, 4},
                                          MLM_NATIVE_TYPES(NATIVE, _)};

_Static_assert(MLM_W_COUNT - MLM_W_Q8_0 == MLM_QK_COUNT, "one native wtype per qpanel kind");

const char *mlm_wtype_name(mlm_wtype t) { return (unsigned)t < MLM_W_COUNT ? table[t].name : "?"; }

mlm_dtype mlm_wtype_dtype(mlm_wtype t) { return table[t].dtype; }

int mlm_wtype_of_dtype(mlm_dtype d) {
    for (int t = 0; t < MLM_W_Q8_0; t++) /* the native types share GGML: none is named so */
        if (table[t].dtype == d) return t;
    return -1;
}

int64_t mlm_wtype_bytes(mlm_wtype t, int64_t rows, int64_t cols) {
    const traits *x = &table[t];
    if (x->elem) return rows * cols * x->elem;
    if (x->bfp_bits) return mlm_bfp_matrix_bytes(rows, cols, x->bfp_bits);
    return mlm_qpanel_bytes((mlm_qkind)mlm_wtype_qkind(t), rows, cols);
}

int64_t mlm_wtype_row_bytes(mlm_wtype t, int64_t cols) {
    const traits *x = &table[t];
    if (x->elem) return cols * x->elem;
    if (x->bfp_bits) return mlm_bfp_row_bytes(cols, x->bfp_bits);
    return mlm_qpanel_bytes((mlm_qkind)mlm_wtype_qkind(t), MLM_QP_ROWS, cols) / MLM_QP_ROWS;
}
