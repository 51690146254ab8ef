/* core/cpu.h: which SIMD extensions this CPU has, for filling kernel dispatch tables. */
#ifndef MESHLM_CORE_CPU_H
#define MESHLM_CORE_CPU_H

#include "meshlm.h"

typedef struct mlm_cpu_flags {
    int avx2, fma, avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16;
} mlm_cpu_flags;

mlm_cpu_flags mlm_cpu_detect(void);

#endif
