/* tests/fuzz/fuzz_safetensors.c: libFuzzer target for the safetensors reader: the input is
 * one .safetensors file; every tensor it accepts is read back element by element. */
#include <stdint.h>
#include <stdlib.h>

#include "format/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mlm_checkpoint *c = calloc(1, sizeof *c);
    if (!c) return 0;
    mlm_error err;
    int idx;
    if (mlm_ckpt_add_buffer(c, "fuzz.safetensors", data, size, &idx, &err) == MLM_OK &&
        mlm_safetensors_read(c, idx, &err) == MLM_OK) {
        for (int64_t i = 0; i < mlm_checkpoint_n_tensors(c); i++) {
            const mlm_tensor_view *t = mlm_checkpoint_tensor(c, i);
            int64_t n = mlm_tensor_numel(t);
            if (n > (1 << 16)) continue;
            float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
            if (v) mlm_tensor_to_f32(t, v, n, &err);
            free(v);
        }
    }
    mlm_checkpoint_free(c);
    return 0;
}
