/* tensor/wtype.c: the weight types' names and sizes. */
#include "tensor/wtype.h"
#include "tensor/bfp.h"
#include "tensor/qpanel.h"

#define NAME(T, t, _) [MLM_W_##T] = #t,
static const char *const names[MLM_W_COUNT] = {
    [MLM_W_F32] = "f32", [MLM_W_BF16] = "bf16", [MLM_W_BFP8] = "bfp8", [MLM_W_BFP4] = "bfp4",
    MLM_NATIVE_TYPES(NAME, _)
};

_Static_assert(MLM_W_COUNT - MLM_W_Q8_0 == MLM_QK_COUNT, "one native wtype per qpanel kind");

const char *mlm_wtype_name(mlm_wtype t) { return (unsigned)t < MLM_W_COUNT ? names[t] : "?"; }

int64_t mlm_wtype_bytes(mlm_wtype t, int64_t rows, int64_t cols) {
    switch (t) {
    case MLM_W_F32: return rows * cols * 4;
    case MLM_W_BF16: return rows * cols * 2;
    case MLM_W_BFP8: return mlm_bfp_matrix_bytes(rows, cols, 8);
    case MLM_W_BFP4: return mlm_bfp_matrix_bytes(rows, cols, 4);
    default: return mlm_qpanel_bytes((mlm_qkind)mlm_wtype_qkind(t), rows, cols);
    }
}

int64_t mlm_wtype_row_bytes(mlm_wtype t, int64_t cols) {
    switch (t) {
    case MLM_W_F32: return cols * 4;
    case MLM_W_BF16: return cols * 2;
    case MLM_W_BFP8: return mlm_bfp_row_bytes(cols, 8);
    case MLM_W_BFP4: return mlm_bfp_row_bytes(cols, 4);
    default: return mlm_qpanel_bytes((mlm_qkind)mlm_wtype_qkind(t), MLM_QP_ROWS, cols) / MLM_QP_ROWS;
    }
}
