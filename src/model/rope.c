/* model/rope.c: RoPE frequencies with Llama 3.1 "llama3" scaling, and the rotation.
 * float32 throughout, in the order the references evaluate (models.md 3.1-3.3):
 * inv_freq[i] = 1 / theta^(2i/hd); llama3 keeps high frequencies, divides low ones by the
 * factor and blends the band between; angle = (float)pos * inv_freq[i]; HF half-split pairs. */
#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "config/config.h"
#include "format/checkpoint.h"
#include "model/model.h"

mlm_status mlm_rope_init(mlm_model *m, mlm_error *err) {
    const mlm_config *c = &m->cfg;
    int half = c->head_dim / 2;
    m->inv_freq = malloc((size_t)half * sizeof *m->inv_freq);
    if (!m->inv_freq) return mlm_error_set(err, MLM_ERR_NOMEM, "model: out of memory");
    for (int i = 0; i < half; i++) {
        float inv = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->head_dim);
        if (c->rope_type == MLM_ROPE_LLAMA3) {
            float old_ctx = (float)c->rope_orig_ctx;
            float low_wavelen = old_ctx / c->rope_low_freq_factor;
            float high_wavelen = old_ctx / c->rope_high_freq_factor;
            float wavelen = 2.0f * (float)M_PI / inv;
            if (wavelen < high_wavelen) {
                /* high frequency: unchanged */
            } else if (wavelen > low_wavelen) {
                inv = inv / c->rope_factor;
            } else {
                float smooth = (old_ctx / wavelen - c->rope_low_freq_factor) /
                               (c->rope_high_freq_factor - c->rope_low_freq_factor);
                inv = (1.0f - smooth) * inv / c->rope_factor + smooth * inv;
            }
        }
        m->inv_freq[i] = inv;
    }
    if (c->rope_type == MLM_ROPE_FACTORS) {
        /* llama.cpp: angle = pos * theta^(-2i/hd) / rope_freqs[i] */
        float *f = malloc((size_t)half * sizeof *f);
        if (!f) return mlm_error_set(err, MLM_ERR_NOMEM, "model: out of memory");
        mlm_status st = mlm_gguf_rope_factors(mlm_ckpt_gguf(m->ckpt), m->gguf_path, f, half, err);
        for (int i = 0; i < half && !st; i++) m->inv_freq[i] /= f[i];
        free(f);
        return st;
    }
    return MLM_OK;
}

void mlm_rope_apply(const mlm_model *m, float *x, int64_t stride, int n, const int32_t *pos,
                    int n_head) {
    int hd = m->cfg.head_dim, half = hd / 2;
    for (int t = 0; t < n; t++) {
        float *row = x + t * stride;
        for (int i = 0; i < half; i++) {
            float angle = (float)pos[t] * m->inv_freq[i];
            float c = cosf(angle), s = sinf(angle);
            for (int h = 0; h < n_head; h++) {
                float *v = row + h * hd;
                float a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}
