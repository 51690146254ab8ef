/* backend/cpu/attention_flash_ref.c: flash attention (backend.h's mlm_attn_job), scalar. It
 * defines the arithmetic every SIMD twin reproduces bit for bit:
 *   q' = q * (log2(e) / sqrt(head_dim)), per (query, head);
 *   entries in tiles of MLM_ATT_KT from entry 0, the last one cut at the query's last entry
 *   (its own, q0 + i, when causal; n_ctx - 1 for every query when the job is non-causal);
 *   score s_j = fma over d in order of q'[d] * k_j[d], from +0;
 *   m' = max(m, max s_j); alpha = exp2(m - m') (0 on the first tile); p_j = exp2(s_j - m');
 *   l = l * alpha + tilesum(p), tilesum adding the 64 slots (0 past the cut) as 16 lanes,
 *   lane i = ((p_i + p_16+i) + p_32+i) + p_48+i, then lanes 8 + 8, 4 + 4, 2 + 2, 1 + 1;
 *   o[d] = o[d] * alpha, then fma over the tile's entries in order of p_j * v_j[d];
 *   out = o * (1 / l).
 * exp2 is exp2.h's. Values of bf16 and BFP8 entries are decoded exactly. Nothing depends on
 * the other queries of the job, so batching never changes a result. */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/exp2.h"
#include "tensor/bfp.h"
#include "tensor/dtype.h"

/* Value I of the entry at BASE. */
static float load(const void *base, mlm_wtype type, int64_t i) {
    if (type == MLM_W_F32) return ((const float *)base)[i];
    if (type == MLM_W_BF16) return mlm_bf16_to_f32(((const uint16_t *)base)[i]);
    const uint8_t *g = (const uint8_t *)base + i / MLM_BFP_GROUP * 68;
    int j = (int)(i % MLM_BFP_GROUP);
    return mlm_bfp_decode(g[64 + j / 16], g[j], 8);
}

/* Values [OFF, OFF + HD) of entry J as f32 into DST. */
static void decode_entry(const mlm_paged_kv *kv, const void *pool, const int32_t *blocks,
                         int32_t j, int64_t off, int hd, float *dst) {
    const char *e = (const char *)pool + mlm_kv_entry_offset(kv, blocks, j);
    for (int d = 0; d < hd; d++) dst[d] = load(e, kv->type, off + d);
}

void mlm_attention_flash_ref(const mlm_attn_job *job, float *scratch) {
    const mlm_paged_kv *kv = job->kv;
    const int hd = job->head_dim, nh = job->n_hh, R = job->n_q * nh;
    const int64_t off = (int64_t)job->kv_head * hd;
    const float c = MLM_LOG2E / sqrtf((float)hd);
    /* the tile's K and V rows (decoded once), then per row (query, head): q', o, p, m, l */
    float *kt = scratch, *vt = kt + MLM_ATT_KT * hd, *qs = vt + MLM_ATT_KT * hd,
          *o = qs + R * hd, *p = o + R * hd, *m = p + MLM_ATT_KT, *l = m + R;
    for (int r = 0; r < R; r++) {
        int i = r / nh, h = job->kv_head * job->group + job->hh0 + r % nh;
        const float *qrow = job->q + i * job->q_stride + (int64_t)h * hd;
        for (int d = 0; d < hd; d++) qs[r * hd + d] = qrow[d] * c, o[r * hd + d] = 0;
        m[r] = -INFINITY, l[r] = 0;
    }
    const int32_t last = job->n_ctx > 0 ? job->n_ctx : job->q0 + job->n_q;
    for (int32_t j0 = 0; j0 < last; j0 += MLM_ATT_KT) {
        int ntile = last - j0 < MLM_ATT_KT ? last - j0 : MLM_ATT_KT;
        for (int jj = 0; jj < ntile; jj++) {
            decode_entry(kv, kv->k, job->blocks, j0 + jj, off, hd, kt + jj * hd);
            decode_entry(kv, kv->v, job->blocks, j0 + jj, off, hd, vt + jj * hd);
        }
        for (int r = 0; r < R; r++) {
            int32_t end = job->n_ctx > 0 ? job->n_ctx : job->q0 + r / nh + 1; /* entries read */
            if (end <= j0) continue;
            int nj = end - j0 < MLM_ATT_KT ? end - j0 : MLM_ATT_KT;
            const float *qr = qs + r * hd;
            float *orow = o + r * hd, mt = -INFINITY;
            for (int jj = 0; jj < nj; jj++) {
                float sc = 0;
                for (int d = 0; d < hd; d++) sc = fmaf(qr[d], kt[jj * hd + d], sc);
                p[jj] = sc;
                mt = sc > mt ? sc : mt;
            }
            float mn = m[r] > mt ? m[r] : mt, alpha = m[r] == -INFINITY ? 0.0f : mlm_exp2c(m[r] - mn);
            for (int jj = 0; jj < MLM_ATT_KT; jj++) p[jj] = jj < nj ? mlm_exp2c(p[jj] - mn) : 0.0f;
            float lane[16];
            for (int x = 0; x < 16; x++) lane[x] = ((p[x] + p[16 + x]) + p[32 + x]) + p[48 + x];
            for (int w = 8; w >= 1; w /= 2)
                for (int x = 0; x < w; x++) lane[x] += lane[x + w];
            l[r] = l[r] * alpha + lane[0];
            for (int d = 0; d < hd; d++) orow[d] *= alpha;
            for (int jj = 0; jj < nj; jj++)
                for (int d = 0; d < hd; d++) orow[d] = fmaf(p[jj], vt[jj * hd + d], orow[d]);
            m[r] = mn;
        }
    }
    for (int r = 0; r < R; r++) {
        int i = r / nh, h = job->kv_head * job->group + job->hh0 + r % nh;
        float inv = 1.0f / l[r], *out = job->out + i * job->out_stride + (int64_t)h * hd;
        for (int d = 0; d < hd; d++) out[d] = o[r * hd + d] * inv;
    }
}
