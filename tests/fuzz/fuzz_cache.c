/* tests/fuzz/fuzz_cache.c: libFuzzer target for the weight cache reader: the input is a cache
 * file; its framing (sizes, header, trailer checksum, index bounds) is checked and its key and
 * tensor count read. */
#include <stdint.h>

#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mlm_mapfile f;
    mlm_error err;
    if (mlm_mapfile_borrow(&f, "fuzz.mlmc", data, size, &err) != MLM_OK) return 0;
    const char *key;
    size_t key_len;
    uint64_t n;
    if (mlm_cache_read_frame(&f, &key, &key_len, &n, &err) == MLM_OK) {
        volatile char sink = 0;
        for (size_t i = 0; i < key_len; i++) sink ^= key[i];
        (void)sink;
    }
    mlm_mapfile_close(&f);
    return 0;
}
