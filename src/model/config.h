/* model/config.h: the config reader's internal entry point (the public one is
 * mlm_config_load in meshlm.h). */
#ifndef MESHLM_MODEL_CONFIG_H
#define MESHLM_MODEL_CONFIG_H

#include <jansson.h>

#include "meshlm.h"

/* Fills OUT from a parsed params.json (Meta, has "dim") or config.json (HF) object.
 * WHAT names the source in messages. Does not read generation_config.json. */
mlm_status mlm_config_from_json(const char *what, const json_t *j, mlm_config *out,
                                mlm_error *err);

#endif
