/* tests/fuzz/fuzz_decoder_config.c: libFuzzer target for the decoder-config reader (per-layer
 * precision overrides): the input is the JSON file, applied to a 4-layer model's profile. */
#include <stdint.h>
#include <string.h>

#include "format/json.h"
#include "config/profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *j;
    mlm_error err;
    if (mlm_json_parse("fuzz.json", (const char *)data, size, &j, &err) != MLM_OK) return 0;
    mlm_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 4, c.n_embd = 64, c.n_head = 2, c.n_kv_head = 1, c.head_dim = 32, c.n_ff = 128;
    c.n_vocab = 100;
    mlm_profile p;
    if (mlm_profile_init(&p, "performance", &c, NULL, &err) == MLM_OK) {
        if (mlm_profile_apply_overrides(&p, "fuzz.json", j, &err) == MLM_OK) {
            char buf[512];
            mlm_profile_describe(&p, buf, sizeof buf);
        }
        mlm_profile_deinit(&p);
    }
    json_decref(j);
    return 0;
}
