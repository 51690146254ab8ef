/* format/json.c: jansson glue with error messages that name file and field. */
#include "format/json.h"

#include "core/error.h"
#include "core/mapfile.h"

#include <stdlib.h>

mlm_status mlm_json_parse(const char *what, const char *text, size_t len, json_t **out,
                          mlm_error *err) {
    json_error_t jerr;
    *out = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!*out)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", what,
                             jerr.line, jerr.column, jerr.text);
    return MLM_OK;
}

mlm_status mlm_json_load_file(const char *path, size_t max_bytes, json_t **out, mlm_error *err) {
    char *text;
    size_t len;
    *out = NULL;
    mlm_status st = mlm_read_file(path, max_bytes, &text, &len, err);
    if (st) return st;
    st = mlm_json_parse(path, text, len, out, err);
    free(text);
    return st;
}

const char *mlm_json_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Looks KEY up; handles the missing/required cases. Returns 1 when a value is present. */
static int lookup(const char *what, const json_t *obj, const char *key, int required,
                  json_t **v, int *found, mlm_status *st, mlm_error *err) {
    *st = MLM_OK;
    *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (found) *found = *v != NULL && !json_is_null(*v);
    if (*v && !json_is_null(*v)) return 1;
    if (required) *st = mlm_error_set(err, MLM_ERR_FORMAT, "%s: missing field '%s'", what, key);
    return 0;
}

mlm_status mlm_json_get_int(const char *what, const json_t *obj, const char *key, int required,
                            int64_t lo, int64_t hi, int64_t *out, int *found, mlm_error *err) {
    json_t *v;
    mlm_status st;
    if (!lookup(what, obj, key, required, &v, found, &st, err)) return st;
    if (!json_is_integer(v))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: field '%s' must be an integer, got %s", what,
                             key, mlm_json_type_name(v));
    int64_t x = (int64_t)json_integer_value(v);
    if (x < lo || x > hi)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: field '%s' = %lld is outside [%lld, %lld]",
                             what, key, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return MLM_OK;
}

mlm_status mlm_json_get_num(const char *what, const json_t *obj, const char *key, int required,
                            double *out, int *found, mlm_error *err) {
    json_t *v;
    mlm_status st;
    if (!lookup(what, obj, key, required, &v, found, &st, err)) return st;
    if (!json_is_number(v))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: field '%s' must be a number, got %s", what,
                             key, mlm_json_type_name(v));
    *out = json_number_value(v);
    return MLM_OK;
}

mlm_status mlm_json_get_bool(const char *what, const json_t *obj, const char *key, int required,
                             int *out, int *found, mlm_error *err) {
    json_t *v;
    mlm_status st;
    if (!lookup(what, obj, key, required, &v, found, &st, err)) return st;
    if (!json_is_boolean(v))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: field '%s' must be a boolean, got %s", what,
                             key, mlm_json_type_name(v));
    *out = json_is_true(v);
    return MLM_OK;
}

mlm_status mlm_json_get_str(const char *what, const json_t *obj, const char *key, int required,
                            const char **out, int *found, mlm_error *err) {
    json_t *v;
    mlm_status st;
    if (!lookup(what, obj, key, required, &v, found, &st, err)) return st;
    if (!json_is_string(v))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: field '%s' must be a string, got %s", what,
                             key, mlm_json_type_name(v));
    *out = json_string_value(v);
    return MLM_OK;
}
