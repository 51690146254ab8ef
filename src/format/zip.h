/* format/zip.h: a read-only view of a zip archive's stored entries (torch.save files).
 * Entry names and data point into the caller's mapping, which must outlive the mlm_zip. */
#ifndef MESHLM_FORMAT_ZIP_H
#define MESHLM_FORMAT_ZIP_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

typedef struct mlm_zip_entry {
    const char *name; /* not NUL-terminated */
    size_t name_len;
    const unsigned char *data; /* borrowed from the mapping */
    uint64_t size;
} mlm_zip_entry;

typedef struct mlm_zip {
    mlm_zip_entry *entries; /* owned */
    int64_t n_entries;
} mlm_zip;

/* Reads the central directory of the SIZE bytes at D (PATH is for messages). FORMAT for a
 * malformed archive, UNSUPPORTED for a compressed entry. */
mlm_status mlm_zip_open(mlm_zip *z, const char *path, const unsigned char *d, size_t size,
                        mlm_error *err);
void mlm_zip_close(mlm_zip *z);

/* The entry named PREFIX (of PREFIX_LEN bytes) + NAME, or NULL. */
const mlm_zip_entry *mlm_zip_find(const mlm_zip *z, const char *prefix, size_t prefix_len,
                                  const char *name);

#endif
