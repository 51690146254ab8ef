/* config/config_mllama.c: Llama 3.2 Vision's config.json (MllamaForConditionalGeneration,
 * models.md 6.1): the text decoder from "text_config" (read as a Llama config by the caller),
 * its cross-attention layers, the image token, and "vision_config". Every field is checked
 * against the shapes the vision tower implies (patches tile the image, the output width is
 * the layer plus the intermediate features), with FORMAT naming the file and field. */
#include <string.h>

#include "core/error.h"
#include "format/json.h"
#include "config/config.h"

/* ints of the JSON array FIELD of J into OUT (at most MAX, each in [LO, HI]), count in *N. */
static mlm_status int_list(const char *path, const json_t *j, const char *field, int max,
                           int64_t lo, int64_t hi, int32_t *out, int32_t *n, mlm_error *err) {
    const json_t *a = json_object_get(j, field);
    if (!json_is_array(a))
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: field '%s' must be a list of integers", path,
                             field);
    if ((int)json_array_size(a) > max)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: field '%s' has %zu entries, at most %d",
                             path, field, json_array_size(a), max);
    *n = 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
            return mlm_error_set(err, MLM_ERR_FORMAT,
                                 "%s: field '%s' entry %zu must be an integer in [%lld, %lld]",
                                 path, field, i, (long long)lo, (long long)hi);
        out[(*n)++] = (int32_t)json_integer_value(v);
    }
    return MLM_OK;
}

static mlm_status check_vision(const char *path, const mlm_vision_config *o, mlm_error *err);

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
        return mlm_error_set(err, MLM_ERR_FORMAT,
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
            return mlm_error_set(err, MLM_ERR_FORMAT,
                                 "%s: supported_aspect_ratios entry %d must be [rows, cols] with "
                                 "rows x cols <= max_num_tiles %lld",
                                 path, (int)i, (long long)tiles);
        o->aspect[i][0] = (int32_t)json_integer_value(r);
        o->aspect[i][1] = (int32_t)json_integer_value(c);
    }
    return check_vision(path, o, err);
}

/* The shapes the vision tower implies: patches tile the image, heads divide the width, the
 * output width is the layer plus the intermediate features. */
static mlm_status check_vision(const char *path, const mlm_vision_config *o, mlm_error *err) {
    int64_t img = o->image_size, patch = o->patch_size, d = o->n_embd, nh = o->n_head,
            out_dim = o->output_dim;
    if (img % patch)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: vision image_size %lld is not a multiple of patch_size %lld",
                             path, (long long)img, (long long)patch);
    if (d % nh)
        return mlm_error_set(
            err, MLM_ERR_FORMAT,
            "%s: vision hidden_size %lld is not a multiple of attention_heads %lld", path,
            (long long)d, (long long)nh);
    if (out_dim != (1 + (int64_t)o->n_intermediate) * d)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: vision_output_dim %lld is not (1 + %d intermediate layers) x "
                             "hidden_size %lld",
                             path, (long long)out_dim, (int)o->n_intermediate, (long long)d);
    return MLM_OK;
}

mlm_status mlm_config_mllama(const char *path, const json_t *j, mlm_config *c, mlm_error *err) {
    const json_t *text = json_object_get(j, "text_config"), *v = json_object_get(j, "vision_config");
    if (!json_is_object(text) || !json_is_object(v))
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: an mllama config needs the objects 'text_config' and "
                             "'vision_config'",
                             path);
    /* a text_config names itself mllama_text_model; one that names nothing is read as such */
    json_t *named = NULL;
    if (!json_object_get(text, "model_type") && !json_object_get(text, "architectures")) {
        named = json_deep_copy(text);
        if (!named || json_object_set_new(named, "model_type", json_string("mllama_text_model")))
            return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
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
            return mlm_error_set(err, MLM_ERR_FORMAT,
                                 "%s: text_config.cross_attention_layers must increase (entry %d)",
                                 path, (int)i);
    return MLM_OK;
}

/* Meta's params.json for Llama 3.2 Vision (models.md 1.1, 6.1, 6.2). Meta's code hard-codes the
 * vision tower (1280 wide, 32 local + 8 global layers, 16 heads, MLP 4 x 1280, patch 14,
 * intermediate layers 3, 7, 15, 23, 30); meshlm reads optional extension keys for them
 * (vision_width, vision_layers, vision_global_layers, vision_heads,
 * vision_return_intermediate), whose defaults are those constants, so that small test models
 * can be written in Meta's format too. n_layers counts the self-attention layers; the
 * cross-attention blocks come from Meta's fusion schedule: k = ceil(n_layers / n_cross),
 * the self layers list(range(n_layers))[::-1][::k][:n_cross][::-1], block m running before
 * self layer s_m, which is HF's decoder layer s_m + m. */
mlm_status mlm_config_mllama_meta(const char *path, const json_t *j, mlm_config *c,
                                  mlm_error *err) {
    int64_t chunk, tiles, n_cross, width = 1280, layers = 32, global = 8, heads = 16;
    mlm_status st;
    if ((st = mlm_json_get_int(path, j, "vision_chunk_size", 1, 1, 1 << 14, &chunk, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "vision_max_num_chunks", 1, 1, 16, &tiles, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "vision_num_cross_attention_layers", 1, 1,
                               MLM_MAX_CROSS_LAYERS, &n_cross, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "vision_width", 0, 1, 1 << 16, &width, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "vision_layers", 0, 1, 1024, &layers, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "vision_global_layers", 0, 0, 1024, &global, NULL, err)) ||
        (st = mlm_json_get_int(path, j, "vision_heads", 0, 1, 1024, &heads, NULL, err)))
        return st;
    int32_t n_self = c->n_layer;
    if (n_cross > n_self)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: vision_num_cross_attention_layers %lld exceeds n_layers %d", path,
                             (long long)n_cross, (int)n_self);
    mlm_vision_config *o = &c->vision;
    *o = (mlm_vision_config){.n_embd = (int32_t)width,
                             .n_ff = (int32_t)(4 * width),
                             .n_layer = (int32_t)layers,
                             .n_global_layer = (int32_t)global,
                             .n_head = (int32_t)heads,
                             .n_channels = 3,
                             .image_size = (int32_t)chunk,
                             .patch_size = 14,
                             .max_tiles = (int32_t)tiles,
                             .norm_eps = 1e-5f};
    if (json_object_get(j, "vision_return_intermediate")) {
        if ((st = int_list(path, j, "vision_return_intermediate", 8, 0, layers - 1, o->intermediate,
                           &o->n_intermediate, err)))
            return st;
    } else {
        static const int32_t meta[] = {3, 7, 15, 23, 30};
        for (int i = 0; i < 5; i++)
            if (meta[i] < layers) o->intermediate[o->n_intermediate++] = meta[i];
    }
    o->output_dim = (1 + o->n_intermediate) * o->n_embd;
    for (int32_t a = 1; a <= o->max_tiles; a++) /* transformers' order: rows outer */
        for (int32_t b = 1; b <= o->max_tiles; b++)
            if (a * b <= o->max_tiles && o->n_aspect < 16) {
                o->aspect[o->n_aspect][0] = a;
                o->aspect[o->n_aspect][1] = b;
                o->n_aspect++;
            }
    if ((st = check_vision(path, o, err))) return st;
    /* the fusion schedule, in HF numbering */
    int32_t k = (int32_t)((n_self + n_cross - 1) / n_cross), sched[MLM_MAX_CROSS_LAYERS], n = 0;
    for (int32_t s = n_self - 1; s >= 0 && n < n_cross; s -= k)
        sched[n++] = s;
    if (n != n_cross)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: %lld cross-attention layers do not fit Meta's schedule over %d "
                             "layers",
                             path, (long long)n_cross, (int)n_self);
    c->n_cross = n;
    for (int32_t m = 0; m < n; m++)
        c->cross_layers[m] = sched[n - 1 - m] + m;
    c->n_layer = n_self + n;
    c->family = MLM_FAMILY_MLLAMA;
    c->image_token_id = c->n_vocab; /* learnable_embedding row 0 (models.md 6.2) */
    return MLM_OK;
}
