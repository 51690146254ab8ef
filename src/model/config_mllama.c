/* model/config_mllama.c: Llama 3.2 Vision's config.json (MllamaForConditionalGeneration,
 * models.md 6.1): the text decoder from "text_config" (read as a Llama config by the caller),
 * its cross-attention layers, the image token, and "vision_config". Every field is checked
 * against the shapes the vision tower implies (patches tile the image, the output width is
 * the layer plus the intermediate features), with FORMAT naming the file and field. */
#include <string.h>

#include "core/error.h"
#include "format/json.h"
#include "model/config.h"

/* ints of the JSON array FIELD of J into OUT (at most MAX, each in [LO, HI]), count in *N. */
static mlm_status int_list(const char *path, const json_t *j, const char *field, int max,
                           int64_t lo, int64_t hi, int32_t *out, int32_t *n, mlm_error *err) {
    const json_t *a = json_object_get(j, field);
    if (!json_is_array(a))
        return mlm_err_set(err, MLM_ERR_FORMAT, "%s: field '%s' must be a list of integers", path,
                           field);
    if ((int)json_array_size(a) > max)
        return mlm_err_set(err, MLM_ERR_FORMAT, "%s: field '%s' has %zu entries, at most %d", path,
                           field, json_array_size(a), max);
    *n = 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
            return mlm_err_set(err, MLM_ERR_FORMAT,
                               "%s: field '%s' entry %zu must be an integer in [%lld, %lld]", path,
                               field, i, (long long)lo, (long long)hi);
        out[(*n)++] = (int32_t)json_integer_value(v);
    }
    return MLM_OK;
}

static mlm_status vision(const char *path, const json_t *v, mlm_vision_config *o, mlm_error *err) {
    int64_t d, ff, nl, ng, nh, ch = 3, img, patch, tiles, out_dim;
    double eps = 1e-5;
    mlm_status st;
    if ((st = mlm_json_get_int(path, v, "hidden_size", 1, 1, 1 << 16, &d, NULL, err)) ||
        (st = mlm_json_get_int(path, v, "intermediate_size", 1, 1, 1 << 20, &ff, NULL, err)) ||
        (st = mlm_json_get_int(path, v, "num_hidden_layers", 1, 1, 1024, &nl, NULL, err)) ||
        (st = mlm_json_get_int(path, v, "num_global_layers", 1, 0, 1024, &ng, NULL, err)) ||
        (st = mlm_json_get_int(path, v, "attention_heads", 1, 1, 1024, &nh, NULL, err)) ||
        (st = mlm_json_get_int(path, v, "num_channels", 0, 1, 4, &ch, NULL, err)) ||
        (st = mlm_json_get_int(path, v, "image_size", 1, 1, 1 << 14, &img, NULL, err)) ||
        (st = mlm_json_get_int(path, v, "patch_size", 1, 1, 1 << 10, &patch, NULL, err)) ||
        (st = mlm_json_get_int(path, v, "max_num_tiles", 1, 1, 16, &tiles, NULL, err)) ||
        (st = mlm_json_get_int(path, v, "vision_output_dim", 1, 1, 1 << 20, &out_dim, NULL, err)) ||
        (st = mlm_json_get_num(path, v, "norm_eps", 0, &eps, NULL, err)))
        return st;
    *o = (mlm_vision_config){.n_embd = (int32_t)d, .n_ff = (int32_t)ff, .n_layer = (int32_t)nl,
                             .n_global_layer = (int32_t)ng, .n_head = (int32_t)nh,
                             .n_channels = (int32_t)ch, .image_size = (int32_t)img,
                             .patch_size = (int32_t)patch, .max_tiles = (int32_t)tiles,
                             .output_dim = (int32_t)out_dim, .norm_eps = (float)eps};
    if ((st = int_list(path, v, "intermediate_layers_indices", 8, 0, nl - 1, o->intermediate,
                       &o->n_intermediate, err)))
        return st;
    const json_t *ar = json_object_get(v, "supported_aspect_ratios");
    if (!json_is_array(ar) || json_array_size(ar) < 1 || json_array_size(ar) > 16)
        return mlm_err_set(err, MLM_ERR_FORMAT,
                           "%s: field 'supported_aspect_ratios' must be a list of 1 to 16 [rows, "
                           "cols] pairs",
                           path);
    o->n_aspect = (int32_t)json_array_size(ar);
    for (int32_t i = 0; i < o->n_aspect; i++) {
        const json_t *pr = json_array_get(ar, (size_t)i);
        const json_t *r = json_array_get(pr, 0), *c = json_array_get(pr, 1);
        if (!json_is_array(pr) || json_array_size(pr) != 2 || !json_is_integer(r) ||
            !json_is_integer(c) || json_integer_value(r) < 1 || json_integer_value(c) < 1 ||
            json_integer_value(r) * json_integer_value(c) > tiles)
            return mlm_err_set(err, MLM_ERR_FORMAT,
                               "%s: supported_aspect_ratios entry %d must be [rows, cols] with "
                               "rows x cols <= max_num_tiles %lld",
                               path, (int)i, (long long)tiles);
        o->aspect[i][0] = (int32_t)json_integer_value(r);
        o->aspect[i][1] = (int32_t)json_integer_value(c);
    }
    if (img % patch)
        return mlm_err_set(err, MLM_ERR_FORMAT,
                           "%s: vision image_size %lld is not a multiple of patch_size %lld", path,
                           (long long)img, (long long)patch);
    if (d % nh)
        return mlm_err_set(err, MLM_ERR_FORMAT,
                           "%s: vision hidden_size %lld is not a multiple of attention_heads %lld",
                           path, (long long)d, (long long)nh);
    if (out_dim != (1 + (int64_t)o->n_intermediate) * d)
        return mlm_err_set(err, MLM_ERR_FORMAT,
                           "%s: vision_output_dim %lld is not (1 + %d intermediate layers) x "
                           "hidden_size %lld",
                           path, (long long)out_dim, (int)o->n_intermediate, (long long)d);
    return MLM_OK;
}

mlm_status mlm_config_mllama(const char *path, const json_t *j, mlm_config *c, mlm_error *err) {
    const json_t *text = json_object_get(j, "text_config"), *v = json_object_get(j, "vision_config");
    if (!json_is_object(text) || !json_is_object(v))
        return mlm_err_set(err, MLM_ERR_FORMAT,
                           "%s: an mllama config needs the objects 'text_config' and "
                           "'vision_config'",
                           path);
    /* a text_config names itself mllama_text_model; one that names nothing is read as such */
    json_t *named = NULL;
    if (!json_object_get(text, "model_type") && !json_object_get(text, "architectures")) {
        named = json_deep_copy(text);
        if (!named || json_object_set_new(named, "model_type", json_string("mllama_text_model")))
            return mlm_err_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
    }
    mlm_status st = mlm_config_hf_text(path, named ? named : text, c, err);
    json_decref(named);
    if (st) return st;
    c->family = MLM_FAMILY_MLLAMA;
    int64_t image = -1;
    if ((st = mlm_json_get_int(path, j, "image_token_index", 1, 0, 1 << 24, &image, NULL, err)) ||
        (st = int_list(path, text, "cross_attention_layers", MLM_MAX_CROSS_LAYERS, 0,
                       c->n_layer - 1, c->cross_layers, &c->n_cross, err)) ||
        (st = vision(path, v, &c->vision, err)))
        return st;
    c->image_token_id = (int32_t)image;
    for (int32_t i = 1; i < c->n_cross; i++)
        if (c->cross_layers[i] <= c->cross_layers[i - 1])
            return mlm_err_set(err, MLM_ERR_FORMAT,
                               "%s: text_config.cross_attention_layers must increase (entry %d)",
                               path, (int)i);
    return MLM_OK;
}
