/* tests/fuzz/fuzz_zip.c: libFuzzer target for torch.save files: zip central directory
 * (ZIP64 included), the restricted unpickler and the strided views it produces. Every
 * accepted tensor is read back element by element, so a view outside its storage shows. */
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
    if (mlm_ckpt_add_buffer(c, "fuzz.pth", data, size, &idx, &err) == MLM_OK &&
        mlm_pytorch_read(c, idx, "", &err) == MLM_OK)
        fuzz_read_all(c);
    mlm_checkpoint_free(c);
    return 0;
}
