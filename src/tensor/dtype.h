/* tensor/dtype.h: element conversions shared by readers and kernels (bf16, f16 -> f32). */
#ifndef MESHLM_TENSOR_DTYPE_H
#define MESHLM_TENSOR_DTYPE_H

#include <stdint.h>
#include <string.h>

#include "meshlm.h"

static inline float mlm_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE half to float, exact for every input including subnormals, inf and NaN. */
float mlm_f16_to_f32(uint16_t h);

/* Parses "F32", "BF16", ... (safetensors spelling); returns -1 if unknown. */
int mlm_dtype_from_safetensors(const char *s);

#endif
