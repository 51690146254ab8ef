/* core/mapfile.c: read-only mmap of whole files, small-file reads, path helpers. */
#include "core/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/pool.h"

mlm_status mlm_mapfile_open(mlm_mapfile *f, const char *path, mlm_error *err) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mlm_error_set(err, MLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return mlm_error_set(err, MLM_ERR_IO, "%s: not a regular file", path);
    }
    f->path = strdup(path);
    if (!f->path) {
        close(fd);
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
    }
    f->size = (size_t)st.st_size;
    if (f->size == 0) {
        f->data = calloc(1, 1);
        close(fd);
        return MLM_OK;
    }
    void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        free(f->path);
        f->path = NULL;
        return mlm_error_set(err, MLM_ERR_IO, "%s: cannot map %zu bytes: %s", path, f->size,
                             strerror(errno));
    }
    f->data = p;
    f->mapped = 1;
    return MLM_OK;
}

mlm_status mlm_mapfile_borrow(mlm_mapfile *f, const char *name, const void *data, size_t size,
                              mlm_error *err) {
    memset(f, 0, sizeof *f);
    f->path = strdup(name);
    if (!f->path) return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", name);
    f->data = data;
    f->size = size;
    f->borrowed = 1;
    return MLM_OK;
}

void mlm_mapfile_close(mlm_mapfile *f) {
    if (!f) return;
    if (f->borrowed) {
        /* the caller's bytes */
    } else if (f->copy) {
        munmap(f->copy, f->copy_bytes);
    } else if (f->mapped) {
        munmap((void *)f->data, f->size);
    } else {
        free((void *)f->data);
    }
    free(f->path);
    memset(f, 0, sizeof *f);
}

/* The number in file DIR/NAME, or UINT64_MAX when it cannot be read (or says "max"). */
static uint64_t read_u64(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "r");
    unsigned long long v;
    int ok = fp && fscanf(fp, "%llu", &v) == 1;
    if (fp) fclose(fp);
    return ok ? (uint64_t)v : UINT64_MAX;
}

/* Bytes this process's memory cgroup (a container's limit) still allows, from cgroup v2's
 * memory.max and memory.current or v1's limit_in_bytes and usage_in_bytes, looked up at the
 * process's cgroup path and at the hierarchy's root (inside a cgroup namespace); UINT64_MAX
 * where none is set. Usage counts the page cache too, so this errs low. */
static uint64_t cgroup_room(void) {
    FILE *fp = fopen("/proc/self/cgroup", "r");
    char line[512], v2[512] = "", v1[512] = "";
    while (fp && fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "0::", 3)) snprintf(v2, sizeof v2, "%s", line + 3);
        char *m = strstr(line, ":memory:");
        if (m) snprintf(v1, sizeof v1, "%s", m + 8);
    }
    if (fp) fclose(fp);
    static const char *const roots[2] = {"/sys/fs/cgroup", "/sys/fs/cgroup/memory"};
    static const char *const limit[2] = {"memory.max", "memory.limit_in_bytes"};
    static const char *const usage[2] = {"memory.current", "memory.usage_in_bytes"};
    for (int v = 0; v < 2; v++)
        for (int at = 0; at < 2; at++) {
            char dir[1024];
            snprintf(dir, sizeof dir, "%s%s", roots[v], at ? "" : (v ? v1 : v2));
            uint64_t lim = read_u64(dir, limit[v]), used = read_u64(dir, usage[v]);
            if (lim >= ((uint64_t)1 << 60) || used == UINT64_MAX) continue; /* none here */
            return lim > used ? lim - used : 0;
        }
    return UINT64_MAX;
}

int64_t mlm_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

int mlm_mapfile_memory_wanted(size_t size) {
    const char *env = getenv("MESHLM_HUGEPAGES");
    if (env && *env) return strcmp(env, "0") != 0;
    char line[256];
    FILE *fp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    int thp = fp && fgets(line, sizeof line, fp) &&
              (strstr(line, "[always]") || strstr(line, "[madvise]"));
    if (fp) fclose(fp);
    int64_t avail = mlm_mem_available();
    if (!thp || avail < 0) return 0;
    uint64_t room = (uint64_t)avail, cg = cgroup_room();
    return (uint64_t)size <= (cg < room ? cg : room) / 2;
}

#define HUGE_PAGE ((size_t)2 << 20)

typedef struct copy_job {
    unsigned char *dst;
    const unsigned char *src;
    size_t size;
} copy_job;

/* Huge page TASK of the copy, from the mapping (the very bytes checked so far, even if the
 * path has been replaced since), whose pages are then dropped so the resident set does not
 * hold both; faulting the huge page in and filling it happen on one thread, so the pool's
 * threads share both. */
static void copy_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const copy_job *j = ctx;
    size_t at = (size_t)task * HUGE_PAGE, n = j->size - at < HUGE_PAGE ? j->size - at : HUGE_PAGE;
    memcpy(j->dst + at, j->src + at, n);
    mlm_mapfile_release(j->src + at, n);
}

int mlm_mapfile_to_memory(mlm_mapfile *f, struct mlm_pool *pool) {
    if (!f->mapped || f->borrowed || f->copy || f->size == 0) return -1;
    int64_t n = (int64_t)((f->size + HUGE_PAGE - 1) / HUGE_PAGE); /* huge pages, the copy's tasks */
    size_t bytes = (size_t)(n + 1) * HUGE_PAGE; /* one more, to start on a 2 MB boundary */
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return -1;
    unsigned char *at = (unsigned char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    madvise(at, (size_t)n * HUGE_PAGE, MADV_HUGEPAGE); /* a wish: may fail */
    copy_job j = {at, f->data, f->size};
    if (pool) mlm_pool_run(pool, n, copy_task, &j);
    else
        for (int64_t i = 0; i < n; i++) copy_task(&j, i, 0);
    mprotect(p, bytes, PROT_READ);
    munmap((void *)f->data, f->size);
    f->data = at;
    f->copy = p;
    f->copy_bytes = bytes;
    return 0;
}

mlm_status mlm_read_file(const char *path, size_t max_bytes, char **out, size_t *len,
                         mlm_error *err) {
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return mlm_error_set(err, MLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(fp);
        return mlm_error_set(err, MLM_ERR_IO, "%s: not a regular file", path);
    }
    if ((size_t)st.st_size > max_bytes) {
        fclose(fp);
        return mlm_error_set(err, MLM_ERR_FORMAT, "%s: size %lld exceeds the limit of %zu bytes",
                             path, (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(fp);
        return mlm_error_set(err, MLM_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t got = fread(buf, 1, n, fp);
    fclose(fp);
    if (got != n) {
        free(buf);
        return mlm_error_set(err, MLM_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return MLM_OK;
}

int mlm_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int mlm_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

void mlm_path_dir(const char *path, char *out, size_t size) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, size, ".");
    else if (slash == path) snprintf(out, size, "/");
    else snprintf(out, size, "%.*s", (int)(slash - path), path);
}

char *mlm_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a > 0 && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

void mlm_mapfile_release(const void *p, size_t n) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || !p || !n) return;
    uintptr_t a = ((uintptr_t)p + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t b = ((uintptr_t)p + n) & ~((uintptr_t)page - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}
