/* format/writer_safetensors.h: streaming writers of checkpoint files, and the atomic
 * buffered output file they (and writer_pytorch.c, synth/synth.c) write through.
 *
 * A writer is planned up front from the tensor list (names, dtypes, shapes), so that every
 * file's size is known before a byte is written; the caller then hands it the tensors' bytes
 * in order, in pieces of any size. Every file goes to a temporary name in its target
 * directory; finish() flushes and fsyncs them, commit() renames them onto their final names,
 * and free() before commit() removes them: a failure never leaves a partial final file. */
#ifndef MESHLM_FORMAT_WRITER_SAFETENSORS_H
#define MESHLM_FORMAT_WRITER_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

// ---- atomic buffered output files ----

#define MLM_OUTFILE_BUF (4u << 20) /* bytes buffered before a write(2) */

/* One output file being written. Zero-initialise before use (then discard is a no-op). */
typedef struct mlm_outfile {
    char *path; /* final path (owned) */
    char *tmp;  /* temporary path next to it (owned); NULL once renamed or removed */
    int fd;     /* valid while is_open */
    int is_open;
    unsigned char *buf; /* owned, MLM_OUTFILE_BUF bytes */
    size_t n_buf;
    uint64_t size;       /* bytes written so far, buffered ones included */
    uint64_t wb_started; /* writeback has been started for bytes [0, wb_started) */
} mlm_outfile;

/* Creates a temporary file for PATH in PATH's directory (".<name>.tmp-XXXXXX"). If
 * EXPECT_SIZE > 0 the space is reserved up front (fallocate), so that a full disk is
 * reported before anything is written. IO names PATH and the reason. */
mlm_status mlm_outfile_open(mlm_outfile *f, const char *path, uint64_t expect_size, mlm_error *err);
/* Appends N bytes (buffered). IO names the final path. */
mlm_status mlm_outfile_write(mlm_outfile *f, const void *data, size_t n, mlm_error *err);
/* Flushes, fsyncs and closes the temporary file (it keeps its temporary name). */
mlm_status mlm_outfile_sync(mlm_outfile *f, mlm_error *err);
/* Renames the synced temporary file onto its final path. */
mlm_status mlm_outfile_commit(mlm_outfile *f, mlm_error *err);
/* Closes and removes the temporary file if it is still there; frees everything. Safe on a
 * zeroed, a committed or an already discarded mlm_outfile. */
void mlm_outfile_discard(mlm_outfile *f);

/* Writes LEN bytes as the whole of PATH through F: opened, written and synced, not yet
 * committed. On failure F is discarded. */
mlm_status mlm_outfile_put(mlm_outfile *f, const char *path, const void *data, size_t len,
                           mlm_error *err);

/* fsyncs directory DIR so that renames in it are durable. */
mlm_status mlm_fsync_dir(const char *dir, mlm_error *err);

// ---- tensors to write ----

/* One tensor as a writer sees it: contiguous, row-major, little-endian. */
typedef struct mlm_tensor_spec {
    const char *name; /* borrowed: must outlive the writer */
    mlm_dtype dtype;
    int n_dim;
    int64_t shape[MLM_MAX_DIMS];
} mlm_tensor_spec;

/* Bytes of one tensor (numel x element size); 0 for a bad spec. */
uint64_t mlm_tensor_spec_bytes(const mlm_tensor_spec *t);

// ---- safetensors ----

typedef struct mlm_safetensors_writer mlm_safetensors_writer;

#define MLM_HF_SHARD_BYTES 5000000000LL /* Hugging Face's default max_shard_size "5GB" */

/* Plans DIR/BASENAME.safetensors, or, when the tensor bytes exceed MAX_SHARD_BYTES (> 0),
 * the HF set DIR/BASENAME-0000K-of-0000N.safetensors + DIR/BASENAME.safetensors.index.json.
 * Tensors go to shards in order as HF splits them: a shard is closed when the next tensor
 * would take it past the limit, and a tensor larger than the limit gets a shard to itself.
 * Each header carries {"__metadata__": {"format": "pt"}} then the tensors in data order, and
 * is padded with spaces to a multiple of 8 bytes. Nothing is written yet. The specs are
 * copied; their names are borrowed. INVALID_ARG for a bad spec or a duplicate name. */
mlm_status mlm_safetensors_writer_create(const char *dir, const char *basename,
                                         const mlm_tensor_spec *tensors, int64_t n,
                                         int64_t max_shard_bytes, mlm_safetensors_writer **out,
                                         mlm_error *err);
/* Bytes of every file the writer will produce (headers, data, index). */
uint64_t mlm_safetensors_writer_total_bytes(const mlm_safetensors_writer *w);
/* Number of weight files (1 or the shard count). */
int mlm_safetensors_writer_n_files(const mlm_safetensors_writer *w);
/* Appends the next N bytes of tensor data, in tensor order; pieces may span tensors.
 * INVALID_ARG past the last tensor; IO names the file. */
mlm_status mlm_safetensors_writer_write(mlm_safetensors_writer *w, const void *data, size_t n,
                                        mlm_error *err);
/* Bytes written to disk or buffer so far, over all files. */
uint64_t mlm_safetensors_writer_written(const mlm_safetensors_writer *w);
/* Checks that every tensor byte was given, writes the index (for a set), fsyncs all files.
 * They keep their temporary names until commit. */
mlm_status mlm_safetensors_writer_finish(mlm_safetensors_writer *w, mlm_error *err);
/* Renames every file onto its final name (shards first, the index last). */
mlm_status mlm_safetensors_writer_commit(mlm_safetensors_writer *w, mlm_error *err);
/* Frees the writer; files not yet committed are removed. */
void mlm_safetensors_writer_free(mlm_safetensors_writer *w);

#endif
