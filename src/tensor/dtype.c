/* tensor/dtype.c: dtype names, sizes and scalar conversions. */
#include "tensor/dtype.h"

#include <math.h>

static const struct {
    const char *name;
    const char *st_name; /* safetensors spelling */
    size_t size;
} dtype_table[MLM_DTYPE_COUNT] = {
    [MLM_DTYPE_F32] = {"f32", "F32", 4},   [MLM_DTYPE_F16] = {"f16", "F16", 2},
    [MLM_DTYPE_BF16] = {"bf16", "BF16", 2}, [MLM_DTYPE_F64] = {"f64", "F64", 8},
    [MLM_DTYPE_I64] = {"i64", "I64", 8},   [MLM_DTYPE_I32] = {"i32", "I32", 4},
    [MLM_DTYPE_I16] = {"i16", "I16", 2},   [MLM_DTYPE_I8] = {"i8", "I8", 1},
    [MLM_DTYPE_U8] = {"u8", "U8", 1},      [MLM_DTYPE_BOOL] = {"bool", "BOOL", 1},
    /* block formats: no element size, never a checkpoint dtype */
    [MLM_DTYPE_BFP8] = {"bfp8", NULL, 0},  [MLM_DTYPE_BFP4] = {"bfp4", NULL, 0},
    [MLM_DTYPE_GGML] = {"ggml", NULL, 0},
};

const char *mlm_dtype_name(mlm_dtype dtype) {
    return (unsigned)dtype < MLM_DTYPE_COUNT ? dtype_table[dtype].name : "?";
}

size_t mlm_dtype_size(mlm_dtype dtype) {
    return (unsigned)dtype < MLM_DTYPE_COUNT ? dtype_table[dtype].size : 0;
}

int mlm_dtype_from_safetensors(const char *s) {
    for (int i = 0; i < MLM_DTYPE_COUNT; i++)
        if (dtype_table[i].st_name && !strcmp(s, dtype_table[i].st_name)) return i;
    return -1;
}

float mlm_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float f = ldexpf((float)man, -24);
        memcpy(&u, &f, 4);
        u |= sign;
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}
