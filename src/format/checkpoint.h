/* format/checkpoint.h: the checkpoint's internals, shared by the readers that fill it
 * (safetensors.c, pytorch.c) and the public API in checkpoint.c.
 * The checkpoint owns its mapped files, every tensor name and every value string. */
#ifndef MESHLM_FORMAT_CHECKPOINT_H
#define MESHLM_FORMAT_CHECKPOINT_H

#include "core/mapfile.h"
#include "meshlm.h"

typedef enum ckpt_value_kind { CKPT_VALUE_INT, CKPT_VALUE_STR } ckpt_value_kind;

typedef struct ckpt_value {
    char *name; /* owned */
    ckpt_value_kind kind;
    int64_t i;
    char *s; /* owned, for CKPT_VALUE_STR */
} ckpt_value;

struct mlm_checkpoint {
    mlm_ckpt_format format;
    mlm_mapfile *files; /* owned, n_files */
    int n_files;
    mlm_tensor_view *tensors; /* owned; each .name owned */
    int64_t n_tensors, cap_tensors;
    ckpt_value *values; /* owned */
    int64_t n_values, cap_values;
    int64_t *index; /* open-addressing hash of tensor indices by name, n_index slots */
    int64_t n_index;
    struct mlm_gguf *gguf; /* owned: a GGUF checkpoint's parsed file (its metadata too), so a
                              model's load parses it once (mlm_ckpt_gguf); NULL otherwise */
};

/* The parsed GGUF file of a GGUF checkpoint (its metadata: config, rope factors), or NULL. */
const struct mlm_gguf *mlm_ckpt_gguf(const mlm_checkpoint *c);

/* Maps PATH and appends it to the checkpoint's files; *IDX gets its index. */
mlm_status mlm_ckpt_add_file(mlm_checkpoint *c, const char *path, int *idx, mlm_error *err);

/* Appends a caller-owned buffer as file NAME (it must outlive the checkpoint). */
mlm_status mlm_ckpt_add_buffer(mlm_checkpoint *c, const char *name, const void *data, size_t size,
                               int *idx, mlm_error *err);

/* Appends a tensor view (NAME is copied; DATA must point into one of c's files).
 * FORMAT if the name is already present ("duplicate tensor"). */
mlm_status mlm_ckpt_add_tensor(mlm_checkpoint *c, const char *name, mlm_dtype dtype, int n_dim,
                               const int64_t *shape, const int64_t *stride, const void *data,
                               int file, mlm_error *err);
mlm_status mlm_ckpt_add_int(mlm_checkpoint *c, const char *name, int64_t v, mlm_error *err);
mlm_status mlm_ckpt_add_str(mlm_checkpoint *c, const char *name, const char *s, size_t len,
                            mlm_error *err);

/* Checks that N_DIM dims of SHAPE are non-negative and that numel * ELEM fits in size_t;
 * *NUMEL and *NBYTES get the products. Returns 0 on overflow. */
int mlm_ckpt_shape_bytes(int n_dim, const int64_t *shape, size_t elem, int64_t *numel,
                         size_t *nbytes);

/* The readers: each parses one file already added as file FILE of C. */
mlm_status mlm_safetensors_read(mlm_checkpoint *c, int file, mlm_error *err);
/* Reads "model.safetensors.index.json" at PATH: maps every shard it names and checks
 * that each tensor in weight_map is in its shard. */
mlm_status mlm_safetensors_read_index(mlm_checkpoint *c, const char *path, mlm_error *err);
/* Reads a GGUF file's tensors (format/gguf_checkpoint.c). */
mlm_status mlm_gguf_ckpt_read(mlm_checkpoint *c, int file, mlm_error *err);
/* Reads a torch.save zip file; tensor and value names get PREFIX prepended. */
mlm_status mlm_pytorch_read(mlm_checkpoint *c, int file, const char *prefix, mlm_error *err);

/* Whether every file of C is a read-only mmap of a file (not a borrowed or copied buffer):
 * then its pages may be released after use (mlm_mapfile_release). */
int mlm_checkpoint_mapped(const mlm_checkpoint *c);
/* Whether [P, P + N) lies inside one of C's read-only file mappings (so its pages may be
 * released: they come back from the file when read again). */
int mlm_checkpoint_maps(const mlm_checkpoint *c, const void *p, size_t n);

#endif
