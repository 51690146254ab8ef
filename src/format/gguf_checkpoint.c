/* format/gguf_checkpoint.c: a GGUF file's tensors as checkpoint views.
 *
 * Names stay GGUF's ("blk.0.attn_q.weight"); binding them to roles is the model's job.
 * Shapes are GGUF's ne[] reversed (outermost first, as torch and safetensors give them).
 * f32, f16 and bf16 tensors are plain strided views; every other ggml type becomes an
 * MLM_DTYPE_GGML view whose rows are contiguous runs of blocks (the reader has checked that
 * each row is whole blocks and that the data lies inside the file). The parsed file stays
 * with the checkpoint (mlm_ckpt_gguf), so the model's load reads the metadata from it
 * (config/config_gguf.c) instead of parsing the file again. */
#include "format/checkpoint.h"
#include "format/gguf.h"
#include "format/gguf_quants.h"

mlm_status mlm_gguf_ckpt_read(mlm_checkpoint *c, int file, mlm_error *err) {
    const mlm_mapfile *f = &c->files[file];
    mlm_gguf *g;
    mlm_status st = mlm_gguf_open_memory(f->data, f->size, f->path, &g, err);
    if (st) return st;
    for (int64_t i = 0; i < mlm_gguf_n_tensors(g) && !st; i++) {
        const mlm_gguf_tensor *t = mlm_gguf_tensor_at(g, i);
        int64_t shape[MLM_GGUF_MAX_DIMS], stride[MLM_GGUF_MAX_DIMS];
        int64_t s = 1;
        for (int d = 0; d < t->n_dim; d++) {
            shape[d] = t->ne[t->n_dim - 1 - d];
        }
        for (int d = t->n_dim - 1; d >= 0; d--) {
            stride[d] = s;
            s *= shape[d];
        }
        mlm_dtype dt = t->type == MLM_GGML_T_F32    ? MLM_DTYPE_F32
                       : t->type == MLM_GGML_T_F16  ? MLM_DTYPE_F16
                       : t->type == MLM_GGML_T_BF16 ? MLM_DTYPE_BF16
                                                    : MLM_DTYPE_GGML;
        st = mlm_ckpt_add_tensor(c, t->name, dt, t->n_dim, shape, stride, t->data, file, err);
        if (!st) c->tensors[c->n_tensors - 1].ggml_type = t->type;
    }
    if (st || c->gguf) { /* one GGUF file a checkpoint: a second keeps only its views */
        mlm_gguf_free(g);
        return st;
    }
    c->gguf = g;
    return MLM_OK;
}
