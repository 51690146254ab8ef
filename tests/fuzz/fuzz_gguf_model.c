/* tests/fuzz/fuzz_gguf_model.c: libFuzzer target for the GGUF model path: the input is one
 * .gguf file, handed to meshlm as a model would be (through a memfd's /proc path). The
 * metadata is read into a config, the tensors opened as checkpoint views and read back
 * (dequantized), and the model bound in f32 without a cache (q/k un-permuted, fused Phi-3
 * tensors split, norms read), so that any read outside the input shows under ASan. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_read_all.h"
#include "meshlm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz.gguf", 0);
    if (fd < 0) return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    mlm_error err;
    mlm_config cfg;
    mlm_checkpoint *c;
    if (mlm_checkpoint_open(path, &c, &err) == MLM_OK) {
        fuzz_read_all(c);
        mlm_checkpoint_free(c);
    }
    /* bind only what a small input can describe: the binder allocates per tensor present */
    if (mlm_config_load(path, &cfg, &err) == MLM_OK &&
        (int64_t)cfg.n_embd * cfg.n_layer * ((int64_t)cfg.n_ff + cfg.n_embd) < (1 << 24) &&
        (int64_t)cfg.n_vocab * cfg.n_embd < (1 << 24)) {
        mlm_model_params p = mlm_model_default_params();
        p.optimizations = "f32";
        p.use_cache = 0;
        p.n_threads = 1;
        mlm_model *m;
        if (mlm_model_load(path, &p, &m, &err) == MLM_OK) mlm_model_free(m);
    }
    close(fd);
    return 0;
}
