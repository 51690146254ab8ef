/* format/zip.c: the zip container as torch.save writes it: STORED entries only, sizes and
 * offsets taken from the central directory (local headers may carry zeros), ZIP64 end
 * record, locator and extra fields. Entries are views into the mapping; nothing is
 * decompressed or copied. Compressed entries are refused. */
#include "format/zip.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u

/* Finds the end-of-central-directory record: the last "PK\5\6" whose comment length fits. */
static int64_t find_eocd(const unsigned char *d, size_t size) {
    if (size < 22) return -1;
    size_t lo = size > 22 + 65535 ? size - 22 - 65535 : 0;
    for (size_t i = size - 22 + 1; i-- > lo;)
        if (rd32(d + i) == SIG_EOCD && i + 22 + rd16(d + i + 20) == size) return (int64_t)i;
    return -1;
}

/* Applies a ZIP64 extra field (id 1) to the fields that were 0xFFFFFFFF, in the order the
 * spec gives: uncompressed size, compressed size, local header offset. */
static int apply_zip64_extra(const unsigned char *extra, size_t len, uint64_t *usize,
                             uint64_t *csize, uint64_t *offset) {
    size_t i = 0;
    while (i + 4 <= len) {
        uint16_t id = rd16(extra + i), n = rd16(extra + i + 2);
        if (i + 4 + n > len) return 0;
        if (id == 1) {
            const unsigned char *p = extra + i + 4, *end = p + n;
            uint64_t *fields[3] = {usize, csize, offset};
            for (int k = 0; k < 3; k++) {
                if (*fields[k] != 0xFFFFFFFFu) continue;
                if (p + 8 > end) return 0;
                *fields[k] = rd64(p);
                p += 8;
            }
            return 1;
        }
        i += 4 + (size_t)n;
    }
    /* No ZIP64 field: only valid if nothing needed one. */
    return *usize != 0xFFFFFFFFu && *csize != 0xFFFFFFFFu && *offset != 0xFFFFFFFFu;
}

static mlm_status zip_open(mlm_zip *z, const char *path, const unsigned char *d, size_t size,
                           int fd, mlm_error *err);

/* The 30 bytes of the local header at LOFF (in bounds): read with pread from FD when it is
 * open, so that opening a checkpoint does not fault in a page at the start of every tensor
 * (a TP rank then maps only the tensors it reads), else from the mapping. */
static void local_header(int fd, const unsigned char *d, uint64_t loff, unsigned char h[30]) {
    if (fd >= 0 && pread(fd, h, 30, (off_t)loff) == 30) return;
    memcpy(h, d + loff, 30);
}

mlm_status mlm_zip_open(mlm_zip *z, const char *path, const unsigned char *d, size_t size,
                        mlm_error *err) {
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    mlm_status st = zip_open(z, path, d, size, fd, err);
    if (fd >= 0) close(fd);
    return st;
}

static mlm_status zip_open(mlm_zip *z, const char *path, const unsigned char *d, size_t size,
                           int fd, mlm_error *err) {
    memset(z, 0, sizeof *z);
    int64_t eocd = find_eocd(d, size);
    if (eocd < 0)
        return mlm_error_set(err, MLM_ERR_FORMAT,
                             "%s: zip end-of-central-directory record not found", path);
    uint64_t n_entries = rd16(d + eocd + 10), cd_size = rd32(d + eocd + 12),
             cd_off = rd32(d + eocd + 16);
    if (n_entries == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_off == 0xFFFFFFFFu) {
        if (eocd < 20 || rd32(d + eocd - 20) != SIG_LOCATOR64)
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: zip64 locator missing", path);
        uint64_t e64 = rd64(d + eocd - 20 + 8);
        if (size < 56 || e64 > size - 56 || rd32(d + e64) != SIG_EOCD64)
            return mlm_error_set(err, MLM_ERR_FORMAT, "%s: zip64 end record at %llu is invalid",
                                 path, (unsigned long long)e64);
        n_entries = rd64(d + e64 + 32);
        cd_size = rd64(d + e64 + 40);
        cd_off = rd64(d + e64 + 48);
    }
    if (cd_off > size || cd_size > size - cd_off)
        return mlm_error_set(
            err, MLM_ERR_FORMAT,
            "%s: zip central directory [%llu, +%llu) is outside the file (%zu bytes)", path,
            (unsigned long long)cd_off, (unsigned long long)cd_size, size);
    if (n_entries > cd_size / 46)
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: zip claims %llu entries in %llu bytes", path,
                             (unsigned long long)n_entries, (unsigned long long)cd_size);
    z->entries = calloc(n_entries ? n_entries : 1, sizeof *z->entries);
    if (!z->entries) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);

    const unsigned char *p = d + cd_off, *end = p + cd_size;
    for (uint64_t i = 0; i < n_entries; i++) {
        if (p + 46 > end || rd32(p) != SIG_CENTRAL) {
            mlm_status st =
                mlm_error_set(err, MLM_ERR_FORMAT, "%s: zip central entry %llu is malformed", path,
                              (unsigned long long)i);
            mlm_zip_close(z);
            return st;
        }
        uint16_t method = rd16(p + 10), name_len = rd16(p + 28), extra_len = rd16(p + 30),
                 comment_len = rd16(p + 32);
        uint64_t csize = rd32(p + 20), usize = rd32(p + 24), loff = rd32(p + 42);
        if (p + 46 + name_len + extra_len + comment_len > end) {
            mlm_status st =
                mlm_error_set(err, MLM_ERR_FORMAT, "%s: zip central entry %llu overruns", path,
                              (unsigned long long)i);
            mlm_zip_close(z);
            return st;
        }
        mlm_zip_entry *e = &z->entries[i];
        e->name = (const char *)p + 46;
        e->name_len = name_len;
        if (!apply_zip64_extra(p + 46 + name_len, extra_len, &usize, &csize, &loff)) {
            mlm_status st =
                mlm_error_set(err, MLM_ERR_FORMAT, "%s: zip entry '%.*s': bad zip64 extra field",
                              path, (int)name_len, e->name);
            mlm_zip_close(z);
            return st;
        }
        if (method != 0 || csize != usize) {
            mlm_status st =
                mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                              "%s: zip entry '%.*s' is compressed (method %u); torch.save writes "
                              "stored entries only",
                              path, (int)name_len, e->name, method);
            mlm_zip_close(z);
            return st;
        }
        unsigned char lh[30];
        if (loff <= size && size - loff >= 30) local_header(fd, d, loff, lh);
        if (loff > size || size - loff < 30 || rd32(lh) != SIG_LOCAL) {
            mlm_status st = mlm_error_set(err, MLM_ERR_FORMAT,
                                          "%s: zip entry '%.*s': local header at %llu is invalid",
                                          path, (int)name_len, e->name, (unsigned long long)loff);
            mlm_zip_close(z);
            return st;
        }
        uint64_t data_off = loff + 30 + rd16(lh + 26) + rd16(lh + 28);
        if (data_off > size || usize > size - data_off) {
            mlm_status st =
                mlm_error_set(err, MLM_ERR_FORMAT,
                              "%s: zip entry '%.*s': data [%llu, +%llu) exceeds the file size %zu",
                              path, (int)name_len, e->name, (unsigned long long)data_off,
                              (unsigned long long)usize, size);
            mlm_zip_close(z);
            return st;
        }
        e->data = d + data_off;
        e->size = usize;
        p += 46 + name_len + extra_len + comment_len;
    }
    z->n_entries = (int64_t)n_entries;
    return MLM_OK;
}

void mlm_zip_close(mlm_zip *z) {
    if (!z) return;
    free(z->entries);
    memset(z, 0, sizeof *z);
}

const mlm_zip_entry *mlm_zip_find(const mlm_zip *z, const char *prefix, size_t prefix_len,
                                  const char *name) {
    size_t n = strlen(name);
    for (int64_t i = 0; i < z->n_entries; i++) {
        const mlm_zip_entry *e = &z->entries[i];
        if (e->name_len == prefix_len + n && !memcmp(e->name, prefix, prefix_len) &&
            !memcmp(e->name + prefix_len, name, n))
            return e;
    }
    return NULL;
}
