/* tensor/dtype.h: element conversions shared by readers, converters and kernels (bf16 and f16
 * to f32, f32 to bf16). */
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

/* Float to bf16, rounding to nearest even; a NaN stays a (quiet) NaN. */
static inline uint16_t mlm_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* IEEE half to float, exact for every input including subnormals, inf and NaN. */
float mlm_f16_to_f32(uint16_t h);

/* Parses "F32", "BF16", ... (safetensors spelling); returns -1 if unknown. */
int mlm_dtype_from_safetensors(const char *s);

#endif
