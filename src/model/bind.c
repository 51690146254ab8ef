/* model/bind.c: binds a checkpoint's tensors to the Llama 3 decoder's weights.
 * HF safetensors (model.*, HF row order) and Meta consolidated.NN.pth (tok_embeddings,
 * layers.N.attention.*, Meta interleaved q/k rows, possibly split over model-parallel shards)
 * both end as row-major matrices in the compute dtype with HF q/k row order. A tensor that
 * already has the compute dtype, is contiguous and needs no merge or permutation stays a view
 * of the mapping; everything else is converted once into buffers the model owns. The native
 * profile's types are read from the same names (mlm_profile_resolve_native). Llama 3.2
 * Vision's extra tensors are bind_mllama.c's; load.c runs both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/mapfile.h"
#include "format/checkpoint.h"
#include "format/gguf.h"
#include "format/gguf_quants.h"
#include "model/bind.h"
#include "config/config.h"
#include "model/model.h"
#include "tensor/bfp.h"
#include "tensor/dtype.h"
#include "tensor/qpanel.h"

// ---- names ----

typedef enum role { R_EMB, R_OUT, R_NORM, R_ATTN_NORM, R_FFN_NORM, R_WQ, R_WK, R_WV, R_WO, R_W1, R_W2, R_W3 } role;

/* GGUF's names (llama.cpp's LLM_TENSOR_NAMES; Phi-3 fuses qkv into attn_qkv and gate/up
 * into ffn_up, gate rows first). */
static void gguf_name(char *buf, size_t size, int phi3, role r, int l) {
    static const char *gg[] = {"token_embd.weight", "output.weight", "output_norm.weight",
                               "attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v",
                               "attn_output", "ffn_gate", "ffn_down", "ffn_up"};
    const char *n = gg[r];
    if (phi3 && (r == R_WQ || r == R_WK || r == R_WV)) n = "attn_qkv";
    if (phi3 && (r == R_W1 || r == R_W3)) n = "ffn_up";
    if (r <= R_NORM) snprintf(buf, size, "%s", n);
    else snprintf(buf, size, "blk.%d.%s.weight", l, n);
}

/* Tensor name of ROLE (layer L) in the HF, Meta or Phi-3 (fused qkv, gate_up) scheme. */
static void tensor_name(char *buf, size_t size, int meta, int phi3, role r, int l) {
    static const char *hf[] = {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
                               "input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
                               "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                               "mlp.gate_proj", "mlp.down_proj", "mlp.up_proj"};
    static const char *mt[] = {"tok_embeddings.weight", "output.weight", "norm.weight",
                               "attention_norm", "ffn_norm", "attention.wq", "attention.wk",
                               "attention.wv", "attention.wo", "feed_forward.w1",
                               "feed_forward.w2", "feed_forward.w3"};
    const char *n = meta ? mt[r] : hf[r];
    if (phi3 && (r == R_WQ || r == R_WK || r == R_WV)) n = "self_attn.qkv_proj";
    if (phi3 && (r == R_W1 || r == R_W3)) n = "mlp.gate_up_proj";
    if (r <= R_NORM) snprintf(buf, size, "%s", n);
    else snprintf(buf, size, "%s%d.%s.weight", meta ? "layers." : "model.layers.", l, n);
}

/* Llama 3.2 Vision's names of text role R of decoder layer L (HF numbering): HF's
 * MllamaForConditionalGeneration layout (language_model.*) or Meta's (text_model.*). */
static void mllama_name(const mlm_binder *b, char *buf, size_t size, int r, int l) {
    /* the role order above: emb, output, norm, attn_norm, ffn_norm, wq wk wv wo, w1 w2 w3 */
    static const char *hf_top[] = {"language_model.model.embed_tokens.weight",
                                   "language_model.lm_head.weight",
                                   "language_model.model.norm.weight"};
    static const char *mt_top[] = {"text_model.tok_embeddings.weight", "text_model.output.weight",
                                   "text_model.norm.weight"};
    static const char *hf_self[] = {
        "input_layernorm",  "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
        "self_attn.v_proj", "self_attn.o_proj",         "mlp.gate_proj",    "mlp.down_proj",
        "mlp.up_proj"};
    static const char *hf_cross[] = {
        "input_layernorm",   "post_attention_layernorm", "cross_attn.q_proj", "cross_attn.k_proj",
        "cross_attn.v_proj", "cross_attn.o_proj",        "mlp.gate_proj",     "mlp.down_proj",
        "mlp.up_proj"};
    static const char *mt[] = {"attention_norm",  "ffn_norm",        "attention.wq",
                               "attention.wk",    "attention.wv",    "attention.wo",
                               "feed_forward.w1", "feed_forward.w2", "feed_forward.w3"};
    if (r < 3) {
        snprintf(buf, size, "%s", b->meta ? mt_top[r] : hf_top[r]);
        return;
    }
    MLM_ASSERT(r - 3 < 9);
    const mlm_layer *L = &b->m->layers[l];
    const char *hf = L->cross ? hf_cross[r - 3] : hf_self[r - 3];
    if (!b->meta)
        snprintf(buf, size, "language_model.model.layers.%d.%s.weight", l, hf);
    else /* Meta numbers the self layers and the cross blocks apart: kv_layer is that index */
        snprintf(buf, size, "text_model.%s.%d.%s.weight",
                 L->cross ? "cross_attention_layers" : "layers", L->kv_layer, mt[r - 3]);
}

// ---- the binder ----

typedef mlm_binder binder;
typedef mlm_bind_slice slice;

static void role_name(const binder *b, char *buf, size_t size, role r, int l) {
    if (b->mllama)
        mllama_name(b, buf, size, r, l);
    else if (b->gguf)
        gguf_name(buf, size, b->phi3, r, l);
    else tensor_name(buf, size, b->meta, b->phi3, r, l);
}

const mlm_tensor_view *mlm_bind_find(const binder *b, const char *name, int shard) {
    if (b->n_shards == 1) return mlm_checkpoint_find(b->m->ckpt, name);
    char full[300];
    snprintf(full, sizeof full, "shard%d/%s", shard, name);
    return mlm_checkpoint_find(b->m->ckpt, full);
}

static int is_float(mlm_dtype d) {
    return d == MLM_DTYPE_F32 || d == MLM_DTYPE_BF16 || d == MLM_DTYPE_F16;
}

/* Checks that tensor NAME exists in every shard with the shard shape (ROWS, COLS)
 * (a 1-D tensor when COLS == 0) and a float dtype. */
static mlm_status check(const binder *b, const char *name, int64_t rows, int64_t cols,
                        mlm_tensor_view *views) {
    for (int s = 0; s < b->n_shards; s++) {
        const mlm_tensor_view *found = mlm_bind_find(b, name, s);
        char where[32] = "";
        if (b->n_shards > 1) snprintf(where, sizeof where, " (shard %d)", s);
        if (!found)
            return mlm_error_set(b->err, MLM_ERR_FORMAT, "model: missing tensor '%s'%s", name,
                                 where);
        mlm_tensor_view *t = &views[s];
        *t = *found;
        /* a contiguous tensor of more dimensions (a patch embedding [D, C, p, p]) as 2-D */
        if (cols && t->n_dim > 2 && t->dtype != MLM_DTYPE_GGML) {
            int64_t inner = 1, stride = 1, dense = 1;
            for (int d = t->n_dim - 1; d >= 1; d--) {
                dense &= t->stride[d] == stride;
                stride *= t->shape[d];
                inner *= t->shape[d];
            }
            if (dense && t->stride[0] == inner) {
                t->n_dim = 2, t->shape[1] = inner, t->stride[1] = 1;
            }
        }
        int want_dims = cols ? 2 : 1;
        if (t->n_dim != want_dims || t->shape[0] != rows || (cols && t->shape[1] != cols)) {
            char got[64] = "[";
            for (int d = 0; d < t->n_dim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                         (long long)t->shape[d]);
            strncat(got, "]", sizeof got - strlen(got) - 1);
            char want[64];
            if (cols) snprintf(want, sizeof want, "[%lld, %lld]", (long long)rows, (long long)cols);
            else snprintf(want, sizeof want, "[%lld]", (long long)rows);
            return mlm_error_set(b->err, MLM_ERR_FORMAT,
                                 "model: tensor '%s'%s has shape %s, but %s implies %s", name,
                                 where, got, b->source, want);
        }
        if (t->dtype == MLM_DTYPE_GGML && !mlm_ggml_can_dequantize(t->ggml_type))
            return mlm_error_set(
                b->err, MLM_ERR_UNSUPPORTED,
                "model: tensor '%s' has ggml type %s, which meshlm does not read "
                "(f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k..q6_k, iq4_nl, iq4_xs)",
                name, mlm_ggml_type_name(t->ggml_type));
        if (!is_float(t->dtype) && t->dtype != MLM_DTYPE_GGML)
            return mlm_error_set(b->err, MLM_ERR_FORMAT,
                                 "model: tensor '%s'%s has dtype %s, expected f32, f16 or bf16",
                                 name, where, mlm_dtype_name(t->dtype));
    }
    return MLM_OK;
}

static float elem(const mlm_tensor_view *t, int64_t r, int64_t c) {
    const unsigned char *p = (const unsigned char *)t->data +
                             (r * t->stride[0] + (t->n_dim > 1 ? c * t->stride[1] : 0)) *
                                 (int64_t)mlm_dtype_size(t->dtype);
    uint16_t h;
    float f;
    switch (t->dtype) {
    case MLM_DTYPE_BF16: memcpy(&h, p, 2); return mlm_bf16_to_f32(h);
    case MLM_DTYPE_F16: memcpy(&h, p, 2); return mlm_f16_to_f32(h);
    default: memcpy(&f, p, 4); return f;
    }
}

/* The bytes of 2-D view T (contiguous rows, as the checkpoint readers give them). */
static size_t view_bytes(const mlm_tensor_view *t) {
    if (t->dtype == MLM_DTYPE_GGML) {
        uint32_t be = 1, bb = 0;
        mlm_ggml_type_block(t->ggml_type, &be, &bb);
        return (size_t)t->shape[0] * (size_t)(t->shape[1] / be) * bb;
    }
    return (size_t)t->shape[0] * (size_t)t->stride[0] * mlm_dtype_size(t->dtype);
}

/* Columns [C0, C1) of row R of 2-D view T as f32 into DST[C0..C1): only those are read (for a
 * GGML type, the whole blocks that hold them), so a TP rank's column slice of wo or w2 touches
 * only its part of the mapping. */
static void read_cols(const mlm_tensor_view *t, int64_t r, int64_t c0, int64_t c1, float *dst) {
    int64_t cols = t->shape[1];
    if (t->dtype == MLM_DTYPE_GGML) {
        uint32_t be = 1, bb = 0;
        mlm_ggml_type_block(t->ggml_type, &be, &bb);
        int64_t b0 = c0 / be, b1 = (c1 + be - 1) / be; /* blocks covering [c0, c1) */
        const char *row = (const char *)t->data + (size_t)r * (size_t)(cols / be) * bb;
        mlm_ggml_dequantize(t->ggml_type, row + (size_t)b0 * bb, (b1 - b0) * be, dst + b0 * be);
        return;
    }
    for (int64_t c = c0; c < c1; c++)
        dst[c] = elem(t, r, c);
}

/* The type to map a tensor of dtype SRC in, zero-copy where the checkpoint allows, for the
 * profile's type WANT: WANT when it is f32, bf16 or native; for BFP the source values (bf16
 * stays bf16, anything else f32), which the cache writer converts panel by panel. A tensor
 * that must be copied is copied straight into WANT (bind_views). */
static mlm_wtype bind_type(mlm_wtype want, mlm_dtype src) {
    if (want == MLM_W_F32 || want == MLM_W_BF16 || mlm_wtype_is_native(want)) return want;
    return src == MLM_DTYPE_BF16 ? MLM_W_BF16 : MLM_W_F32;
}

/* Profile P's type for matrix ROLE of layer L (where the loader reads and sets it). */
static mlm_wtype *role_slot(mlm_profile *p, role r, int l) {
    static const mlm_role roles[] = {[R_WQ] = MLM_ROLE_WQ, [R_WK] = MLM_ROLE_WK,
                                     [R_WV] = MLM_ROLE_WV, [R_WO] = MLM_ROLE_WO,
                                     [R_W1] = MLM_ROLE_W1, [R_W2] = MLM_ROLE_W2,
                                     [R_W3] = MLM_ROLE_W3};
    return r == R_EMB ? &p->emb : r == R_OUT ? &p->head : &p->layer[l][roles[r]];
}

static mlm_wtype role_type(const binder *b, role r, int l) {
    return *role_slot(&b->m->profile, r, l);
}

/* Binds slice S of the tensor of ROLE in layer L. Meta shards are concatenated on dim 0
 * (column parallel) or dim 1 (row parallel, SPLIT_COLS), and only the shards that hold part
 * of S are read; PERM_HEADS > 0 reorders each head's rows from Meta interleaved to HF
 * half-split order (S's rows start at a head). */
static mlm_status bind_slice(binder *b, role r, int l, slice s, int split_cols, int perm_heads,
                             mlm_weight *out) {
    char name[256];
    role_name(b, name, sizeof name, r, l);
    return mlm_bind_tensor(b, name, role_type(b, r, l), s, split_cols, perm_heads, out);
}

static mlm_status bind_views(binder *b, const char *name, const mlm_tensor_view *v,
                             mlm_wtype want_type, slice s, int split_cols, int perm_heads,
                             mlm_weight *out);

mlm_status mlm_bind_tensor(binder *b, const char *name, mlm_wtype want_type, slice s,
                           int split_cols, int perm_heads, mlm_weight *out) {
    mlm_tensor_view v[64];
    int64_t srows = split_cols ? s.total_rows : s.total_rows / b->n_shards;
    int64_t scols = split_cols ? s.total_cols / b->n_shards : s.total_cols;
    if ((split_cols ? s.total_cols : s.total_rows) % b->n_shards)
        return mlm_error_set(b->err, MLM_ERR_FORMAT, "model: '%s' does not split into %d shards",
                             name, b->n_shards);
    mlm_status st = check(b, name, srows, scols, v);
    return st ? st : bind_views(b, name, v, want_type, s, split_cols, perm_heads, out);
}

mlm_status mlm_bind_view(binder *b, const char *name, const mlm_tensor_view *v, mlm_wtype want,
                         mlm_weight *out) {
    MLM_ASSERT(b->n_shards == 1 && v->n_dim == 2 && v->stride[1] == 1);
    slice s = {0, v->shape[0], v->shape[0], 0, v->shape[1], v->shape[1], 1};
    return bind_views(b, name, v, want, s, 0, 0, out);
}

/* Binds slice S of the GGUF tensor V of tensor NAME in its own native type: each row's
 * blocks repacked, bits unchanged, into the kernels' panels (tensor/qpanel.h), chunk by chunk
 * for a row-parallel weight. */
static mlm_status bind_native(binder *b, const char *name, const mlm_tensor_view *v, slice s,
                              int perm_heads, mlm_weight *out) {
    mlm_model *m = b->m;
    mlm_qkind k = (mlm_qkind)mlm_wtype_qkind(out->type);
    const char *tname = mlm_wtype_name(out->type);
    int32_t chunks = out->n_chunks;
    int64_t kc = s.cols / chunks;
    if (b->n_shards != 1 || v->dtype != MLM_DTYPE_GGML || mlm_ggml_qkind(v->ggml_type) != (int)k)
        return mlm_error_set(b->err, MLM_ERR_INTERNAL, "model: '%s' is not a %s tensor", name,
                             tname);
    for (int32_t c = 0; c < chunks; c++)
        if (!mlm_qpanel_fits(k, s.col0 + c * kc, kc))
            return mlm_error_set(b->err, MLM_ERR_UNSUPPORTED,
                                 "model: '%s' (%s): columns [%lld, %lld) of a K chunk do not cut "
                                 "its blocks (multiples of 32, whole super-blocks of 256); use "
                                 "another --optimizations profile",
                                 name, tname, (long long)(s.col0 + c * kc),
                                 (long long)(s.col0 + (c + 1) * kc));
    int64_t bytes = mlm_chunked_bytes(out->type, s.rows, s.cols, chunks);
    uint8_t *buf = calloc(1, bytes ? (size_t)bytes : 1);
    if (!buf) return mlm_error_set(b->err, MLM_ERR_NOMEM, "model: out of memory for '%s'", name);
    mlm_status st = mlm_model_own(m, buf, (size_t)bytes, b->err);
    if (st) return st;
    int64_t row_bytes = (int64_t)(view_bytes(v) / (size_t)v->shape[0]);
    int hd = m->cfg.head_dim;
    for (int64_t i = 0; i < s.rows; i++) {
        int64_t src = i;
        if (perm_heads) { /* as bind_views */
            int64_t h = i / hd, j = i % hd;
            src = h * hd + (j < hd / 2 ? 2 * j : 2 * (j - hd / 2) + 1);
        }
        const uint8_t *row = (const uint8_t *)v->data + (src + s.row0) * row_bytes;
        int64_t blk = i / MLM_CHUNK_ROWS;
        for (int32_t c = 0; c < chunks; c++) {
            mlm_weight part = *out;
            part.data = buf;
            if (chunks > 1) part = mlm_weight_part(&part, blk, c);
            int64_t r = chunks > 1 ? i - blk * MLM_CHUNK_ROWS : i;
            mlm_ggml_qpanel_row(v->ggml_type, row, s.col0 + c * kc, kc, r, (uint8_t *)part.data);
        }
    }
    out->data = buf;
    if (mlm_checkpoint_mapped(m->ckpt)) mlm_mapfile_release(v->data, view_bytes(v));
    return MLM_OK;
}

/* Binds slice S of the checked views V (one per shard) of tensor NAME. */
static mlm_status bind_views(binder *b, const char *name, const mlm_tensor_view *v,
                             mlm_wtype want_type, slice s, int split_cols, int perm_heads,
                             mlm_weight *out) {
    mlm_model *m = b->m;
    mlm_status st;
    int64_t srows = split_cols ? s.total_rows : s.total_rows / b->n_shards;
    int64_t scols = split_cols ? s.total_cols / b->n_shards : s.total_cols;
    int32_t chunks = s.chunks > 1 ? s.chunks : 1;
    if (s.cols % chunks)
        return mlm_error_set(b->err, MLM_ERR_FORMAT,
                             "model: '%s': %lld columns do not cut into %d K chunks", name,
                             (long long)s.cols, chunks);
    int64_t kc = s.cols / chunks; /* columns per chunk */
    out->type = bind_type(want_type, v[0].dtype);
    out->rows = s.rows;
    out->cols = s.cols;
    out->n_chunks = chunks;
    if (mlm_wtype_is_native(out->type)) return bind_native(b, name, v, s, perm_heads, out);
    mlm_dtype want = out->type == MLM_W_BF16 ? MLM_DTYPE_BF16 : MLM_DTYPE_F32;
    size_t es = mlm_dtype_size(want);
    const mlm_tensor_view *t = &v[0];
    if (b->n_shards == 1 && !perm_heads && chunks == 1 && t->dtype == want && t->stride[1] == 1 &&
        t->stride[0] == s.total_cols && s.cols == s.total_cols) {
        out->data = (const char *)t->data + (size_t)(s.row0 * s.cols) * es; /* zero-copy */
        m->bytes_mapped += s.rows * s.cols * (int64_t)es;
        return MLM_OK;
    }
    /* A copy is made: straight in the profile's type, a block of rows at a time through one
     * block of f32, so no f32 copy of the whole tensor (or model) is ever held. */
    out->type = want_type;
    int64_t bytes = mlm_chunked_bytes(out->type, s.rows, s.cols, chunks);
    int64_t block = chunks > 1 ? MLM_CHUNK_ROWS : 16 * MLM_CHUNK_ROWS;
    void *buf = malloc(bytes ? (size_t)bytes : 1);
    float *tmp = malloc((size_t)scols * sizeof *tmp);
    float *rows = malloc((size_t)(block * s.cols) * sizeof *rows);
    if (!buf || !tmp || !rows) {
        free(buf), free(tmp), free(rows);
        return mlm_error_set(b->err, MLM_ERR_NOMEM, "model: out of memory for '%s'", name);
    }
    if ((st = mlm_model_own(m, buf, (size_t)bytes, b->err))) {
        free(tmp), free(rows);
        return st;
    }
    int hd = m->cfg.head_dim;
    for (int64_t b0 = 0; b0 < s.rows && !st; b0 += block) {
        int64_t br = s.rows - b0 < block ? s.rows - b0 : block;
        for (int64_t i = b0; i < b0 + br; i++) {
            /* HF row i of a head comes from Meta row 2i (first half) or 2(i - hd/2) + 1. */
            int64_t src = i;
            if (perm_heads) {
                int64_t h = i / hd, j = i % hd;
                src = h * hd + (j < hd / 2 ? 2 * j : 2 * (j - hd / 2) + 1);
            }
            src += s.row0;
            /* the row's pieces: one per shard when the columns are split, else one shard's
             * row; each piece covers merged columns [c0, c0 + scols), of which S wants a part */
            for (int sh = 0; sh < (split_cols ? b->n_shards : 1); sh++) {
                int k = split_cols ? sh : (int)(src / srows);
                int64_t c0 = split_cols ? sh * scols : 0;
                int64_t lo = c0 > s.col0 ? c0 : s.col0;
                int64_t hi = c0 + scols < s.col0 + s.cols ? c0 + scols : s.col0 + s.cols;
                if (lo >= hi) continue;
                read_cols(&v[k], split_cols ? src : src % srows, lo - c0, hi - c0, tmp);
                /* the block's chunks as (br, kc) matrices one after another (one chunk:
                 * plain rows) */
                for (int64_t c = lo; c < hi; c++) {
                    int64_t j = c - s.col0;
                    rows[(j / kc) * br * kc + (i - b0) * kc + j % kc] = tmp[c - c0];
                }
            }
        }
        for (int32_t c = 0; c < chunks && !st; c++) {
            mlm_weight part = {MLM_W_F32, br, kc, 1, rows + c * br * kc};
            int64_t at = mlm_chunked_offset(out->type, s.rows, s.cols, chunks,
                                            b0 / MLM_CHUNK_ROWS, c);
            st = mlm_weight_convert_rows(&part, out->type, 0, br, (char *)buf + at, m->load_pool,
                                         b->err);
        }
    }
    free(rows);
    free(tmp);
    if (st) return st;
    out->data = buf;
    /* the source's pages are no longer needed by this process: only the copy stays resident */
    if (mlm_checkpoint_mapped(m->ckpt))
        for (int k = 0; k < b->n_shards; k++)
            mlm_mapfile_release(v[k].data, view_bytes(&v[k]));
    return MLM_OK;
}

/* This rank's share [*LO, *LO + *N) of N_ALL rows or columns cut in m->tp_size equal parts. */
static void share(const mlm_model *m, int64_t n_all, int64_t *lo, int64_t *n) {
    *n = n_all / m->tp_size;
    *lo = *n * m->tp_rank;
}

/* Norm weights are always converted to f32 (replicated across Meta shards: shard 0). */
static mlm_status bind_norm(binder *b, role r, int l, const float **out) {
    char name[256];
    role_name(b, name, sizeof name, r, l);
    mlm_tensor_view v[64];
    int64_t d = b->m->cfg.n_embd;
    mlm_status st = check(b, name, d, 0, v);
    if (st) return st;
    float *buf = malloc((size_t)d * sizeof *buf);
    if (!buf) return mlm_error_set(b->err, MLM_ERR_NOMEM, "model: out of memory");
    if ((st = mlm_model_own(b->m, buf, (size_t)d * sizeof *buf, b->err))) return st;
    if ((st = mlm_tensor_to_f32(&v[0], buf, d, b->err))) return st;
    *out = buf;
    return MLM_OK;
}

mlm_status mlm_bind_vector(binder *b, const char *name, int64_t len, const float **out) {
    const mlm_tensor_view *t = mlm_bind_find(b, name, 0);
    if (!t) return mlm_error_set(b->err, MLM_ERR_FORMAT, "model: missing tensor '%s'", name);
    if (mlm_tensor_numel(t) != len || !is_float(t->dtype)) {
        char got[96] = "[";
        for (int d = 0; d < t->n_dim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                     (long long)t->shape[d]);
        strncat(got, "]", sizeof got - strlen(got) - 1);
        return mlm_error_set(b->err, MLM_ERR_FORMAT,
                             "model: tensor '%s' has shape %s and dtype %s, but %s implies %lld "
                             "float values",
                             name, got, mlm_dtype_name(t->dtype), b->source, (long long)len);
    }
    float *buf = malloc((size_t)(len ? len : 1) * sizeof *buf);
    if (!buf) return mlm_error_set(b->err, MLM_ERR_NOMEM, "model: out of memory for '%s'", name);
    mlm_status st = mlm_model_own(b->m, buf, (size_t)len * sizeof *buf, b->err);
    if (!st) st = mlm_tensor_to_f32(t, buf, len, b->err);
    if (st) return st;
    *out = buf;
    return MLM_OK;
}

/* The bias of role R's weight in layer L: the weight's name with ".bias" for ".weight". */
static void bias_name(const binder *b, char *buf, size_t size, role r, int l) {
    role_name(b, buf, size, r, l);
    size_t n = strlen(buf);
    if (n > 7 && !strcmp(buf + n - 7, ".weight")) snprintf(buf + n - 7, size - (n - 7), ".bias");
}

/* Elements [LO, LO + N) of the float vector of role R's bias (LEN_ALL values): this rank's. */
static mlm_status bind_bias(binder *b, role r, int l, int64_t len_all, int64_t lo,
                            const float **out) {
    char name[256];
    bias_name(b, name, sizeof name, r, l);
    const float *all;
    mlm_status st = mlm_bind_vector(b, name, len_all, &all);
    if (!st) *out = all + lo;
    return st;
}

/* Qwen3's per-head q and k RMSNorm weights (head_dim each, every rank all of them). */
static mlm_status bind_qk_norm(binder *b, int l, mlm_layer *L) {
    char qn[96], kn[96];
    int64_t hd = b->m->cfg.head_dim;
    if (b->gguf) {
        snprintf(qn, sizeof qn, "blk.%d.attn_q_norm.weight", l);
        snprintf(kn, sizeof kn, "blk.%d.attn_k_norm.weight", l);
    } else {
        snprintf(qn, sizeof qn, "model.layers.%d.self_attn.q_norm.weight", l);
        snprintf(kn, sizeof kn, "model.layers.%d.self_attn.k_norm.weight", l);
    }
    mlm_status st = mlm_bind_vector(b, qn, hd, &L->q_norm);
    return st ? st : mlm_bind_vector(b, kn, hd, &L->k_norm);
}

/* q, k, v: separate tensors (Meta q/k permuted to HF order), or Phi-3's fused qkv_proj
 * whose rows are q, then k, then v; this rank's heads only, with their biases and norms where
 * the config has them (Qwen). Then wo: their columns. */
static mlm_status bind_attention(binder *b, int l, int64_t q, int64_t kv, int64_t d, mlm_layer *L) {
    mlm_status st;
    int64_t q0, nq, k0, nk;
    share(b->m, q, &q0, &nq);
    share(b->m, kv, &k0, &nk);
    const mlm_config *c = &b->m->cfg;
    if (c->qkv_bias && !L->cross &&
        ((st = bind_bias(b, R_WQ, l, q, q0, &L->bq)) || (st = bind_bias(b, R_WK, l, kv, k0, &L->bk)) ||
         (st = bind_bias(b, R_WV, l, kv, k0, &L->bv))))
        return st;
    if (c->qk_norm && !L->cross && (st = bind_qk_norm(b, l, L))) return st;
    if (b->phi3) {
        int64_t all = q + 2 * kv;
        if ((st = bind_slice(b, R_WQ, l, (slice){q0, nq, all, 0, d, d, 1}, 0, 0, &L->wq)) ||
            (st = bind_slice(b, R_WK, l, (slice){q + k0, nk, all, 0, d, d, 1}, 0, 0, &L->wk)) ||
            (st = bind_slice(b, R_WV, l, (slice){q + kv + k0, nk, all, 0, d, d, 1}, 0, 0, &L->wv)))
            return st;
    } else {
        /* Meta's and llama.cpp's llama q/k rows are interleaved (llama.cpp leaves Qwen's in
         * HF order); cross layers have no RoPE */
        int perm = (b->meta || (b->gguf && c->family == MLM_FAMILY_LLAMA3)) && !L->cross;
        if ((st = bind_slice(b, R_WQ, l, (slice){q0, nq, q, 0, d, d, 1}, 0, perm, &L->wq)) ||
            (st = bind_slice(b, R_WK, l, (slice){k0, nk, kv, 0, d, d, 1}, 0, perm, &L->wk)) ||
            (st = bind_slice(b, R_WV, l, (slice){k0, nk, kv, 0, d, d, 1}, 0, 0, &L->wv)))
            return st;
    }
    /* wo: row-parallel, in K chunks of one KV head's group of heads */
    return bind_slice(b, R_WO, l, (slice){0, d, d, q0, nq, q, mlm_wo_chunks(&b->m->local)}, 1, 0,
                      &L->wo);
}

/* gate and up: separate tensors, or Phi-3's fused gate_up_proj (gate rows first); this
 * rank's rows of n_ff. Then w2: those columns. */
static mlm_status bind_mlp(binder *b, int l, int64_t f, int64_t d, mlm_layer *L) {
    mlm_status st;
    int64_t f0, nf;
    share(b->m, f, &f0, &nf);
    if (b->phi3) {
        if ((st = bind_slice(b, R_W1, l, (slice){f0, nf, 2 * f, 0, d, d, 1}, 0, 0, &L->w1)) ||
            (st = bind_slice(b, R_W3, l, (slice){f + f0, nf, 2 * f, 0, d, d, 1}, 0, 0, &L->w3)))
            return st;
    } else if ((st = bind_slice(b, R_W1, l, (slice){f0, nf, f, 0, d, d, 1}, 0, 0, &L->w1)) ||
               (st = bind_slice(b, R_W3, l, (slice){f0, nf, f, 0, d, d, 1}, 0, 0, &L->w3))) {
        return st;
    }
    /* w2: row-parallel, in K chunks of n_ff / n_kv_head columns */
    return bind_slice(b, R_W2, l, (slice){0, d, d, f0, nf, f, mlm_w2_chunks(&b->m->local)}, 1, 0,
                      &L->w2);
}

mlm_status mlm_bind_decoder(binder *b) {
    mlm_model *m = b->m;
    const mlm_config *c = &m->cfg;
    int64_t d = c->n_embd, q = (int64_t)c->n_head * c->head_dim,
            kv = (int64_t)c->n_kv_head * c->head_dim, f = c->n_ff, V = c->n_vocab;
    mlm_status st;
    /* Llama 3.2 Vision: HF's embedding holds the 8 learnable rows after the vocabulary; Meta
     * keeps them apart (mlm_bind_mllama appends them) */
    int64_t extra = b->mllama && !b->meta ? m->n_emb_extra : 0;
    if ((st = bind_slice(b, R_EMB, 0,
                         (slice){m->vocab0, m->n_vocab_local + extra, V + extra, 0, d, d, 1}, 0, 0,
                         &m->tok_emb)))
        return st;
    for (int l = 0; l < c->n_layer; l++) {
        mlm_layer *L = &m->layers[l];
        if ((st = bind_norm(b, R_ATTN_NORM, l, &L->attn_norm)) ||
            (st = bind_norm(b, R_FFN_NORM, l, &L->ffn_norm)) ||
            (st = bind_attention(b, l, q, kv, d, L)) || (st = bind_mlp(b, l, f, d, L)))
            return st;
    }
    if ((st = bind_norm(b, R_NORM, 0, &m->norm))) return st;
    /* The LM head: output.weight / lm_head.weight when present, else the tied embedding. */
    /* Under TP each rank holds a slice of the vocabulary, as of the embedding. */
    char name[256];
    role_name(b, name, sizeof name, R_OUT, 0);
    if (mlm_bind_find(b, name, 0)) {
        if ((st = bind_slice(b, R_OUT, 0, (slice){m->vocab0, m->n_vocab_local, V, 0, d, d, 1}, 0, 0,
                             &m->output)))
            return st;
        return MLM_OK;
    }
    if (!b->meta && !c->tied_embeddings)
        return mlm_error_set(
            b->err, MLM_ERR_FORMAT,
            "model: missing tensor 'lm_head.weight' (%s says the embeddings are not "
            "tied)",
            b->source);
    m->output = m->tok_emb;
    return MLM_OK;
}

// ---- the native profile's types ----

/* The type the native profile runs GGUF tensor T in: its own native type, f32 for F32, bf16
 * for F16 and BF16; UNSUPPORTED naming the tensor for any other. */
static mlm_status native_type(const char *name, const mlm_tensor_view *t, mlm_wtype *out,
                              mlm_error *err) {
    if (t->dtype == MLM_DTYPE_F32 || t->dtype == MLM_DTYPE_F16 || t->dtype == MLM_DTYPE_BF16) {
        *out = t->dtype == MLM_DTYPE_F32 ? MLM_W_F32 : MLM_W_BF16;
        return MLM_OK;
    }
    int w = t->dtype == MLM_DTYPE_GGML ? mlm_wtype_of_ggml(t->ggml_type) : -1;
    if (w < 0)
        return mlm_error_set(
            err, MLM_ERR_UNSUPPORTED,
            "model: tensor '%s' has type %s, which the native profile does not run "
            "(q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, f32, "
            "f16, bf16); use --optimizations bf16",
            name,
            t->dtype == MLM_DTYPE_GGML ? mlm_ggml_type_name(t->ggml_type)
                                       : mlm_dtype_name(t->dtype));
    *out = (mlm_wtype)w;
    return MLM_OK;
}

/* Whether the K chunks of wo (WO) or w2 of a model of config C, LOCAL a rank's shard of it,
 * cut whole blocks of kind K on every rank. */
static int chunks_fit(const mlm_config *c, const mlm_config *l, mlm_qkind k, int wo) {
    int64_t cols = wo ? (int64_t)l->n_head * l->head_dim : l->n_ff;
    int32_t n = wo ? mlm_wo_chunks(l) : mlm_w2_chunks(l);
    int64_t kc = cols / n, all = wo ? (int64_t)c->n_head * c->head_dim : c->n_ff;
    for (int64_t c0 = 0; c0 < all; c0 += kc)
        if (!mlm_qpanel_fits(k, c0, kc)) return 0;
    return 1;
}

/* A tied LM head takes the embedding's type; wo and w2 run in f32 where their K chunks would
 * cut the type's blocks (a model whose heads or MLP columns per KV head are not multiples of
 * 32). */
mlm_status mlm_profile_resolve_native_ckpt(mlm_profile *p, const mlm_config *cfg,
                                           const mlm_config *local, const mlm_checkpoint *ck,
                                           const char *dir, mlm_error *err) {
    if (!ck || !mlm_ckpt_gguf(ck))
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "model: %s: the native profile runs GGUF files; this checkpoint is %s",
                             dir, cfg->source);
    mlm_status st = MLM_OK;
    binder b = {.err = err, .gguf = 1, .phi3 = cfg->family == MLM_FAMILY_PHI3, .n_shards = 1};
    static const role roles[] = {R_WQ, R_WK, R_WV, R_WO, R_W1, R_W2, R_W3};
    char name[256];
    for (int l = -1; l < cfg->n_layer && !st; l++)
        for (int i = 0; i < (l < 0 ? 2 : 7) && !st; i++) {
            role r = l < 0 ? (i ? R_OUT : R_EMB) : roles[i];
            role_name(&b, name, sizeof name, r, l < 0 ? 0 : l);
            const mlm_tensor_view *t = mlm_checkpoint_find(ck, name);
            mlm_wtype w = MLM_W_BF16;
            if (!t) { /* the binder reports a missing tensor; no LM head: the tied embedding */
                if (r == R_OUT) p->head = p->emb;
                continue;
            }
            st = native_type(name, t, &w, err);
            if (!st && mlm_wtype_is_native(w) && (r == R_WO || r == R_W2) &&
                !chunks_fit(cfg, local, (mlm_qkind)mlm_wtype_qkind(w), r == R_WO))
                w = MLM_W_F32; /* the file's values exactly, where its blocks cannot be cut */
            *role_slot(p, r, l < 0 ? 0 : l) = w;
        }
    return st;
}

mlm_status mlm_profile_resolve_native(mlm_profile *p, const mlm_config *cfg,
                                      const mlm_config *local, const char *dir, mlm_error *err) {
    char gguf[1024];
    mlm_checkpoint *ck = NULL;
    mlm_status st = mlm_gguf_model_file(dir, gguf, sizeof gguf)
                        ? mlm_checkpoint_open(gguf, &ck, err)
                        : MLM_OK;
    if (!st) st = mlm_profile_resolve_native_ckpt(p, cfg, local, ck, dir, err);
    mlm_checkpoint_free(ck);
    return st;
}
