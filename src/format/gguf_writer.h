/* format/gguf_writer.h: a streaming GGUF (version 3) writer.
 *
 * The caller first declares everything that goes into the header: key-value pairs (kept in
 * an in-memory buffer, in call order) and tensor infos (name, ggml type, shape); then hands
 * over the tensors' bytes in order, in pieces of any size. The header is written with the
 * first data byte, each tensor is padded to the alignment (32, or a u32 general.alignment
 * pair), as llama.cpp's own writers do. Output goes through an mlm_outfile (writer_safetensors.h):
 * a temporary file next to PATH, fsynced by finish(), renamed onto PATH by commit(); free()
 * before commit() removes it, so a failure never leaves a partial file. One writer per thread. */
#ifndef MESHLM_FORMAT_GGUF_WRITER_H
#define MESHLM_FORMAT_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "meshlm.h"

typedef struct mlm_gguf_writer mlm_gguf_writer;

/* A writer for PATH; nothing is created on disk before the first data byte (or finish()).
 * NOMEM. */
mlm_status mlm_gguf_writer_create(const char *path, mlm_gguf_writer **out, mlm_error *err);
/* Removes the temporary file unless committed; NULL is a no-op. */
void mlm_gguf_writer_free(mlm_gguf_writer *w);

// ---- key-value pairs (before any data) ----
/* Each appends one pair. INVALID_ARG for an empty or repeated key, a general.alignment that
 * is not a power of two, or a call after data started; NOMEM. */
mlm_status mlm_gguf_writer_u32(mlm_gguf_writer *w, const char *key, uint32_t v, mlm_error *err);
mlm_status mlm_gguf_writer_i32(mlm_gguf_writer *w, const char *key, int32_t v, mlm_error *err);
mlm_status mlm_gguf_writer_u64(mlm_gguf_writer *w, const char *key, uint64_t v, mlm_error *err);
mlm_status mlm_gguf_writer_f32(mlm_gguf_writer *w, const char *key, float v, mlm_error *err);
mlm_status mlm_gguf_writer_bool(mlm_gguf_writer *w, const char *key, int v, mlm_error *err);
mlm_status mlm_gguf_writer_str(mlm_gguf_writer *w, const char *key, const char *s, size_t len,
                               mlm_error *err);

/* An array of N elements of ELEM_TYPE (a scalar type or MLM_GGUF_STRING): begin, then exactly
 * N calls of arr_str (strings) or arr_scalar (the element's value in the low bytes of BITS,
 * e.g. (uint32_t)int32 or the bit pattern of a float), then end. INVALID_ARG for a count that
 * does not match, or an element of the wrong kind. */
mlm_status mlm_gguf_writer_arr_begin(mlm_gguf_writer *w, const char *key, mlm_gguf_type elem_type,
                                     uint64_t n, mlm_error *err);
mlm_status mlm_gguf_writer_arr_str(mlm_gguf_writer *w, const char *s, size_t len, mlm_error *err);
mlm_status mlm_gguf_writer_arr_scalar(mlm_gguf_writer *w, uint64_t bits, mlm_error *err);
mlm_status mlm_gguf_writer_arr_end(mlm_gguf_writer *w, mlm_error *err);

// ---- tensors ----

/* Declares the next tensor: NAME (copied, 1..63 bytes, unique), ggml TYPE (one whose block
 * size mlm_ggml_type_block knows), N_DIM (1..4) dims NE innermost first (ne[0] a whole number
 * of blocks). Its data offset follows the previous tensor's padded end. INVALID_ARG. */
mlm_status mlm_gguf_writer_tensor(mlm_gguf_writer *w, const char *name, uint32_t type, int n_dim,
                                  const int64_t *ne, mlm_error *err);

/* Bytes of the whole file as declared so far. */
uint64_t mlm_gguf_writer_total_bytes(const mlm_gguf_writer *w);

// ---- data ----

/* Appends the next N bytes of tensor data (tensor order; pieces may span tensors). The first
 * call creates the temporary file and writes the header. INVALID_ARG past the last tensor or
 * with an array still open; IO names the file. */
mlm_status mlm_gguf_writer_write(mlm_gguf_writer *w, const void *data, size_t n, mlm_error *err);
/* Checks that every declared byte was given, pads, flushes and fsyncs (the file keeps its
 * temporary name). INVALID_ARG naming the first incomplete tensor; IO. */
mlm_status mlm_gguf_writer_finish(mlm_gguf_writer *w, mlm_error *err);
/* Renames the finished file onto PATH and fsyncs its directory. IO. */
mlm_status mlm_gguf_writer_commit(mlm_gguf_writer *w, mlm_error *err);

#endif
