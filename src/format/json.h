/* format/json.h: thin glue over jansson that turns every failure into an mlm_error
 * naming the file, the field and what was expected. Values returned are borrowed from the
 * json_t tree the caller owns (json_decref frees it). */
#ifndef MESHLM_FORMAT_JSON_H
#define MESHLM_FORMAT_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

/* Parses LEN bytes as a JSON document; duplicate object keys are refused. On failure:
 * FORMAT with "WHAT: line L column C: reason". WHAT names the source (a file path). */
mlm_status mlm_json_parse(const char *what, const char *text, size_t len, json_t **out,
                          mlm_error *err);
/* Reads and parses a JSON file of at most MAX_BYTES. */
mlm_status mlm_json_load_file(const char *path, size_t max_bytes, json_t **out, mlm_error *err);

/* Typed field access on an object. REQUIRED fields that are missing give FORMAT
 * "WHAT: missing field 'KEY'"; present fields of the wrong type give
 * "WHAT: field 'KEY' must be TYPE". Optional missing fields leave *OUT unchanged and
 * set *FOUND (if given) to 0. */
mlm_status mlm_json_get_int(const char *what, const json_t *obj, const char *key, int required,
                            int64_t lo, int64_t hi, int64_t *out, int *found, mlm_error *err);
mlm_status mlm_json_get_num(const char *what, const json_t *obj, const char *key, int required,
                            double *out, int *found, mlm_error *err);
mlm_status mlm_json_get_bool(const char *what, const json_t *obj, const char *key, int required,
                             int *out, int *found, mlm_error *err);
mlm_status mlm_json_get_str(const char *what, const json_t *obj, const char *key, int required,
                            const char **out, int *found, mlm_error *err);

/* The name of a JSON value's type ("object", "string", ...), for messages. */
const char *mlm_json_type_name(const json_t *v);

#endif
