/* tests/fuzz/fuzz_read_all.h: reads back every tensor a fuzzed checkpoint accepted, element
 * by element, so that a view reaching outside its bytes shows under ASan. */
#ifndef MESHLM_FUZZ_READ_ALL_H
#define MESHLM_FUZZ_READ_ALL_H

#include <stdlib.h>

#include "meshlm.h"

static inline void fuzz_read_all(const mlm_checkpoint *c) {
    mlm_error err;
    for (int64_t i = 0; i < mlm_checkpoint_n_tensors(c); i++) {
        const mlm_tensor_view *t = mlm_checkpoint_tensor(c, i);
        int64_t n = mlm_tensor_numel(t);
        if (n > (1 << 16)) continue;
        float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
        if (v) mlm_tensor_to_f32(t, v, n, &err);
        free(v);
    }
}

#endif
