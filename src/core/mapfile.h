/* core/mapfile.h: read-only whole-file mappings (which may move into memory on huge pages).
 * A mapped file owns its descriptor and mapping; views into it are borrowed and die with
 * it. Empty files map to a non-NULL zero-length buffer. */
#ifndef MESHLM_CORE_MAPFILE_H
#define MESHLM_CORE_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

typedef struct mlm_mapfile {
    char *path;              /* owned copy */
    const unsigned char *data;
    size_t size;
    int mapped;              /* data came from mmap (else from malloc, for empty files) */
    int borrowed;            /* data belongs to the caller (mlm_mapfile_borrow): never freed */
    void *copy;              /* mlm_mapfile_to_memory: the anonymous mapping data lies in */
    size_t copy_bytes;
} mlm_mapfile;

/* Maps PATH read-only. IO with the path and strerror on failure. */
mlm_status mlm_mapfile_open(mlm_mapfile *f, const char *path, mlm_error *err);
void mlm_mapfile_close(mlm_mapfile *f);

/* The memory the kernel says is available (/proc/meminfo's MemAvailable) in bytes, or -1. */
int64_t mlm_mem_available(void);

/* Whether mlm_mapfile_to_memory is wanted for a file of SIZE bytes: MESHLM_HUGEPAGES=0 says
 * no and 1 yes; unset, yes where the kernel gives transparent huge pages on request
 * (/sys/kernel/mm/transparent_hugepage/enabled: always or madvise) and SIZE is at most half of
 * the available memory (MemAvailable, or what the process's memory cgroup still allows where
 * that is less: a container's limit). */
int mlm_mapfile_memory_wanted(size_t size);

/* Moves mapped F into anonymous memory on 2 MB boundaries, asking for transparent huge pages,
 * read-only like the mapping: the bytes copied in parallel on POOL (NULL: by the caller), then
 * the file's mapping dropped. Pointers into the old data die. Weights read from there stream
 * faster: on a 2-core Zen 4 VM, Llama 3.2 1B Q4_K_M decode 8-12% faster on one thread, 3-15%
 * on two (README). Returns 0, or -1 when memory cannot be had (F is then unchanged). */
struct mlm_pool;
int mlm_mapfile_to_memory(mlm_mapfile *f, struct mlm_pool *pool);

/* Wraps a caller's buffer as a "file" named NAME (for fuzzing and in-memory use); the bytes
 * must outlive it and are never freed by mlm_mapfile_close. */
mlm_status mlm_mapfile_borrow(mlm_mapfile *f, const char *name, const void *data, size_t size,
                              mlm_error *err);

/* Reads a whole (small) file into a malloc'd NUL-terminated buffer (*OUT, length *LEN).
 * A file larger than MAX_BYTES is refused with FORMAT naming the limit. */
mlm_status mlm_read_file(const char *path, size_t max_bytes, char **out, size_t *len,
                         mlm_error *err);

/* Whether PATH exists as a regular file / directory. */
int mlm_is_file(const char *path);
int mlm_is_dir(const char *path);

/* Joins DIR and NAME into a malloc'd path. */
char *mlm_path_join(const char *dir, const char *name);
/* The folder part of PATH ("." when it has none) into OUT (SIZE bytes, truncated if
 * longer); "/" for a file in the root. */
void mlm_path_dir(const char *path, char *out, size_t size);

/* Drops this process's mapping of the whole pages inside [P, P + N) of a read-only file
 * mapping (madvise MADV_DONTNEED): the data stays in the page cache and is mapped again on the
 * next read. For source tensors once they have been converted into buffers of our own, so the
 * process's RSS holds the converted copy only (a TP rank reads a column slice of a tensor,
 * and the kernel maps the pages around each one it touches). */
void mlm_mapfile_release(const void *p, size_t n);

#endif
