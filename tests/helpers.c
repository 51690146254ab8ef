/* tests/helpers.c: the test programs' shared helpers (tests/helpers.h). Plain functions over
 * the public API: no harness state here, so nothing in this file passes or fails a case
 * except through the flag a caller hands in. */
#include "helpers.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- models ----

mlm_status helper_load(const char *path, const char *profile, const char *cache_dir, mlm_model **m,
                       mlm_error *err) {
    mlm_model_params mp = mlm_model_default_params();
    mp.optimizations = profile;
    mp.use_cache = cache_dir != NULL;
    mp.cache_dir = cache_dir;
    *m = NULL;
    return mlm_model_load(path, &mp, m, err);
}

mlm_model *helper_load_or_fail(const char *path, const char *profile, const char *cache_dir,
                               int *case_failed) {
    mlm_model *m = NULL;
    mlm_error err;
    mlm_status st = helper_load(path, profile, cache_dir, &m, &err);
    if (st != MLM_OK) {
        printf("  load %s (%s): %s: %s\n", path, profile, mlm_status_str(st), err.msg);
        *case_failed = 1;
    }
    return m;
}

int32_t helper_argmax(const float *x, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return (int32_t)b;
}

// ---- files ----

/* The whole file at PATH (malloc'd, NUL-terminated) and its length; NULL if unreadable. */
static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        *len = (size_t)n;
    }
    return buf;
}

float *helper_read_f32(const char *path, size_t want) {
    size_t n = 0;
    char *buf = read_all(path, &n);
    if (!buf || n != want * sizeof(float)) {
        printf("  %s: missing or not %zu floats\n", path, want);
        free(buf);
        return NULL;
    }
    return (float *)buf;
}

int helper_files_equal(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    char *x = read_all(a, &la), *y = read_all(b, &lb);
    int eq = x && y && la == lb && !memcmp(x, y, la);
    free(x);
    free(y);
    return eq;
}

int helper_count_entries(const char *dir, int *temps) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    if (temps) *temps = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        n++;
        if (temps && strstr(e->d_name, ".tmp-")) (*temps)++;
    }
    closedir(d);
    return n;
}

// ---- checkpoints ----

float *helper_tensor_f32(const mlm_tensor_view *t) {
    int64_t n = mlm_tensor_numel(t);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    mlm_error err;
    if (v && mlm_tensor_to_f32(t, v, n, &err) != MLM_OK) {
        free(v);
        v = NULL;
    }
    return v;
}

mlm_status helper_synth(const char *preset, const char *dir, int format, mlm_dtype dtype,
                        uint64_t seed, int64_t max_shard, mlm_error *err) {
    mlm_synth_params p = mlm_synth_default_params();
    p.preset = preset;
    p.out_dir = dir;
    p.format = format;
    p.dtype = dtype;
    p.seed = seed;
    p.max_shard_bytes = max_shard;
    return mlm_synth(&p, err);
}

// ---- token ids ----

uint64_t helper_fnv64_ids(const int32_t *ids, int64_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++)
            h = (h ^ (((uint32_t)ids[i] >> (8 * b)) & 0xFF)) * 0x100000001b3ull;
    return h;
}
