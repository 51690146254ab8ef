/* tests/fuzz/fuzz_pickle.c: libFuzzer target for the restricted unpickler on its own: the
 * input is a pickle stream (a torch.save data.pkl). */
#include <stdint.h>

#include "format/pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mlm_pickle *p = NULL;
    const pk_value *root;
    mlm_error err;
    mlm_pickle_load("fuzz.pkl", data, size, &p, &root, &err);
    mlm_pickle_free(p);
    return 0;
}
