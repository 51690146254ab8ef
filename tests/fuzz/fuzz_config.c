/* tests/fuzz/fuzz_config.c: libFuzzer target for the JSON glue and the config reader: the
 * input is a params.json or config.json document. */
#include <stdint.h>

#include "format/json.h"
#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *j;
    mlm_error err;
    if (mlm_json_parse("fuzz.json", (const char *)data, size, &j, &err) != MLM_OK) return 0;
    mlm_config c;
    if (mlm_config_from_json("fuzz.json", j, &c, &err) == MLM_OK) (void)mlm_config_n_params(&c);
    json_decref(j);
    return 0;
}
