/* model/vision.h: Llama 3.2 Vision's vision encoder and multi-modal projector (models.md 6.4)
 * on a loaded model's vision tower (model.h's mlm_vision_tower). One image at a time: its
 * max_tiles tile slots go through the patch embedding, the gated tile / positional
 * embeddings, the local and the gated global transformer (valid tokens attend to every token,
 * padding included; a pair is masked only when both are padding), Meta's intermediate
 * features (the inputs of the layers in intermediate_layers_indices), and the projector into
 * the text width. Two implementations of the same arithmetic:
 *   vision_ref.c  plain loops on f32 weights (the f32 profile): the reference;
 *   vision.c      the kernels (any profile), threads on a pool: what runs.
 * Both allocate their scratch per call (an image is not the step loop). Internal. */
#ifndef MESHLM_MODEL_VISION_H
#define MESHLM_MODEL_VISION_H

#include "core/pool.h"
#include "model/model.h"

/* The reference forward of one image.
 *   pixels           (NT, C, S, S) normalized f32 pixels, S = image_size; every slot is read
 *                    (the processor leaves slots >= n_tiles all zero)
 *   aspect_ratio_id  0..n_aspect: HF's id (1 + index into supported_aspect_ratios; 0 none)
 *   n_tiles          1..NT: tiles t < n_tiles are valid
 *   out              (NT, T, O) the encoder output before the projector (features [0, D) the
 *                    global encoder, D + d * K + k intermediate k of feature d), or NULL
 *   projected        (NT, T, E) out @ proj^T + bias, or NULL
 * UNSUPPORTED unless the vision weights are f32; INVALID_ARG for ids or tile counts out of
 * range; NOMEM. */
mlm_status mlm_vision_encode_ref(const mlm_model *m, const float *pixels, int32_t aspect_ratio_id,
                                 int32_t n_tiles, float *out, float *projected, mlm_error *err);

/* The same image through the kernels of the model's profile, on POOL's threads: PROJECTED
 * gets (n_tiles * T, E), the rows of the valid tiles only (the text never reads the others).
 * INVALID_ARG, NOMEM as above. */
mlm_status mlm_vision_encode(const mlm_model *m, const float *pixels, int32_t aspect_ratio_id,
                             int32_t n_tiles, float *projected, mlm_pool *pool, mlm_error *err);

/* Bytes of scratch mlm_vision_encode allocates for one image of config C (every tile slot is
 * computed, so this does not depend on the image). */
int64_t mlm_vision_scratch_bytes(const mlm_config *c);

#endif
