/* format/gguf.h: the GGUF reader (llama.cpp's model file format, version 3; 2 is read too).
 *
 * Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 key-value count; the
 * key-value pairs (u64-length key, u32 value type, value; arrays are u32 element type, u64
 * count, elements, and may nest); the tensor infos (u64-length name, u32 n_dims, u64 ne[n_dims]
 * innermost first, u32 ggml type, u64 offset); padding to general.alignment (default 32); the
 * data section, every tensor at its offset from the section's start, aligned.
 *
 * The reader maps the file read-only (or borrows a caller's buffer) and checks everything
 * before it hands anything out: every length and count against the bytes left, nesting
 * depth, value types, duplicate keys and tensor names, general.alignment (a power of two,
 * u32), dims and byte sizes against overflow, rows whole blocks of the ggml type, offsets
 * aligned, tensors inside the data section and not overlapping. Errors are FORMAT (UNSUPPORTED
 * for an unknown ggml type or version) with a message naming the file, the key or tensor and
 * the limit. Keys, values and tensor data are views into the mapping, valid until free. */
#ifndef MESHLM_FORMAT_GGUF_H
#define MESHLM_FORMAT_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

#define MLM_GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define MLM_GGUF_VERSION 3
#define MLM_GGUF_DEFAULT_ALIGNMENT 32
#define MLM_GGUF_MAX_DIMS 4  /* ggml's GGML_MAX_DIMS */
#define MLM_GGUF_MAX_NAME 63 /* tensor name bytes (ggml's GGML_MAX_NAME - 1) */
#define MLM_GGUF_MAX_DEPTH 8 /* arrays of arrays of ... */

/* Value types, as numbered in the file. */
typedef enum mlm_gguf_type {
    MLM_GGUF_U8 = 0,
    MLM_GGUF_I8 = 1,
    MLM_GGUF_U16 = 2,
    MLM_GGUF_I16 = 3,
    MLM_GGUF_U32 = 4,
    MLM_GGUF_I32 = 5,
    MLM_GGUF_F32 = 6,
    MLM_GGUF_BOOL = 7,
    MLM_GGUF_STRING = 8,
    MLM_GGUF_ARRAY = 9,
    MLM_GGUF_U64 = 10,
    MLM_GGUF_I64 = 11,
    MLM_GGUF_F64 = 12,
    MLM_GGUF_TYPE_COUNT
} mlm_gguf_type;

/* ggml tensor types that meshlm writes or names (the reader knows every type llama.cpp has). */
enum {
    MLM_GGML_F32 = 0,
    MLM_GGML_F16 = 1,
    MLM_GGML_Q4_0 = 2,
    MLM_GGML_Q8_0 = 8,
    MLM_GGML_BF16 = 30
};

/* One value. Scalars are widened into u / i / f (whichever fits the type: u for unsigned
 * and bool, i for signed, f for floats); a string is STR[0..LEN) (not NUL-terminated, a view
 * into the file); an array has ELEM_TYPE and N elements starting at DATA (for nested arrays
 * ELEM_TYPE is MLM_GGUF_ARRAY). SIZE is the bytes the value takes in the file. */
typedef struct mlm_gguf_value {
    mlm_gguf_type type;
    uint64_t u;
    int64_t i;
    double f;
    const char *str;
    uint64_t len;
    mlm_gguf_type elem_type;
    uint64_t n;
    const unsigned char *data;
    uint64_t size;
} mlm_gguf_value;

typedef struct mlm_gguf_kv {
    const char *key; /* owned NUL-terminated copy */
    mlm_gguf_value value;
} mlm_gguf_kv;

typedef struct mlm_gguf_tensor {
    const char *name; /* owned NUL-terminated copy */
    uint32_t type;    /* ggml type */
    int n_dim;
    int64_t ne[MLM_GGUF_MAX_DIMS]; /* innermost first; unused dims are 1 */
    uint64_t offset;               /* from the start of the data section */
    uint64_t nbytes;
    const void *data; /* borrowed: inside the mapping */
} mlm_gguf_tensor;

typedef struct mlm_gguf mlm_gguf;

/* Maps PATH and parses it. IO for an unreadable file; FORMAT / UNSUPPORTED as above; NOMEM. */
mlm_status mlm_gguf_open(const char *path, mlm_gguf **out, mlm_error *err);
/* Parses DATA[0..SIZE) (borrowed: it must outlive the handle); NAME is used in messages. */
mlm_status mlm_gguf_open_memory(const void *data, size_t size, const char *name, mlm_gguf **out,
                                mlm_error *err);
void mlm_gguf_free(mlm_gguf *g);

uint32_t mlm_gguf_version(const mlm_gguf *g);
uint32_t mlm_gguf_alignment(const mlm_gguf *g);
/* File offset of the data section. */
uint64_t mlm_gguf_data_offset(const mlm_gguf *g);

int64_t mlm_gguf_n_kv(const mlm_gguf *g);
const mlm_gguf_kv *mlm_gguf_kv_at(const mlm_gguf *g, int64_t i);
/* The pair with key KEY, or NULL. */
const mlm_gguf_kv *mlm_gguf_find(const mlm_gguf *g, const char *key);

int64_t mlm_gguf_n_tensors(const mlm_gguf *g);
const mlm_gguf_tensor *mlm_gguf_tensor_at(const mlm_gguf *g, int64_t i);
const mlm_gguf_tensor *mlm_gguf_find_tensor(const mlm_gguf *g, const char *name);

/* Typed look-ups: INVALID_ARG naming the file and key when KEY is absent or has another type.
 * get_uint accepts any unsigned integer type, get_int any signed or unsigned one that fits,
 * get_float f32 or f64. *STR of get_str is not NUL-terminated. */
mlm_status mlm_gguf_get_uint(const mlm_gguf *g, const char *key, uint64_t *out, mlm_error *err);
mlm_status mlm_gguf_get_int(const mlm_gguf *g, const char *key, int64_t *out, mlm_error *err);
mlm_status mlm_gguf_get_float(const mlm_gguf *g, const char *key, double *out, mlm_error *err);
mlm_status mlm_gguf_get_bool(const mlm_gguf *g, const char *key, int *out, mlm_error *err);
mlm_status mlm_gguf_get_str(const mlm_gguf *g, const char *key, const char **str, uint64_t *len,
                            mlm_error *err);
/* An array value; *ARR is borrowed from the handle. */
mlm_status mlm_gguf_get_array(const mlm_gguf *g, const char *key, const mlm_gguf_value **arr,
                              mlm_error *err);

/* Walks array ARR (already validated): *POS starts at 0 and is advanced past each element;
 * ELEM gets the element. Returns 0 after the last one. Fixed-size elements can also be read
 * directly with mlm_gguf_array_get. */
int mlm_gguf_array_next(const mlm_gguf_value *arr, uint64_t *pos, mlm_gguf_value *elem);
/* Element I of an array of a fixed-size type (not string, not array); 0 if I is out of range
 * or the elements have no fixed size. */
int mlm_gguf_array_get(const mlm_gguf_value *arr, uint64_t i, mlm_gguf_value *elem);

/* Whether PATH is a regular file that starts with the GGUF magic. */
int mlm_gguf_is_file(const char *path);
/* The malloc'd path of the GGUF file in folder DIR: of the files named *.gguf (any case)
 * that start with the GGUF magic, the first by name (bytewise), so that the choice does not
 * depend on readdir's order. NULL when there is none (or on allocation failure). */
char *mlm_gguf_find_in_dir(const char *dir);

/* "u8", "i8", ..., "f64" ("?" out of range). */
const char *mlm_gguf_type_name(uint32_t type);
/* "f32", "f16", "q4_0", ..., "bf16" ("?" for a type llama.cpp does not have). */
const char *mlm_ggml_type_name(uint32_t type);
/* Elements per block and bytes per block of a ggml type; 0 when unknown. */
int mlm_ggml_type_block(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes);

#endif
