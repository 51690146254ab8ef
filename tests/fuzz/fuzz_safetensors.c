/* tests/fuzz/fuzz_safetensors.c: libFuzzer target for the safetensors reader: the input is
 * one .safetensors file; every tensor it accepts is read back element by element. */
#include <stdint.h>
#include <stdlib.h>

#include "format/checkpoint.h"
#include "fuzz_read_all.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mlm_checkpoint *c = calloc(1, sizeof *c);
    if (!c) return 0;
    mlm_error err;
    int idx;
    if (mlm_ckpt_add_buffer(c, "fuzz.safetensors", data, size, &idx, &err) == MLM_OK &&
        mlm_safetensors_read(c, idx, &err) == MLM_OK)
        fuzz_read_all(c);
    mlm_checkpoint_free(c);
    return 0;
}
