/* tests/unit/test_cache.c: the weight cache of the BFP profiles. A first load builds the
 * cache file; a second maps it without converting, with logits bit-identical to a model
 * converted in memory, whether the file is then read into memory or stays mapped; touching a
 * source file, corrupting one byte of a tensor or of the index, or truncating the file is
 * detected, named in a message and rebuilt; two processes building the same cache at once
 * leave one valid file and no temporaries; the `meshlm cache` command builds, lists (valid /
 * stale) and clears. */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>

#include "core/mapfile.h"
#include "harness.h"
#include "meshlm.h"

#define FIXTURE "tests/data/llama/gqa4_hd64_tied_r32/hf"

static char tmp[256], model[300], cache[300];
static char messages[4096];

static void on_message(void *user, const char *msg) {
    (void)user;
    strncat(messages, msg, sizeof messages - strlen(messages) - 2);
    strcat(messages, "\n");
}

static mlm_model_params params(const char *profile, int use_cache) {
    mlm_model_params p = mlm_model_default_params();
    p.optimizations = profile;
    p.use_cache = use_cache;
    p.cache_dir = cache;
    p.on_message = on_message;
    return p;
}

static mlm_model *load(const char *profile, int use_cache) {
    mlm_model_params p = params(profile, use_cache);
    mlm_model *m = NULL;
    mlm_error err;
    messages[0] = 0;
    CHECK_OK(mlm_model_load(model, &p, &m, &err), &err);
    return m;
}

/* Logits of a fixed 12-token sequence (12 x n_vocab floats, malloc'd). */
static float *logits_of(const mlm_model *m) {
    int32_t V = mlm_model_config(m)->n_vocab, tokens[12], seq[12] = {0}, pos[12];
    int8_t want[12];
    for (int i = 0; i < 12; i++) tokens[i] = (i * 37 + 5) % V, pos[i] = i, want[i] = 1;
    mlm_exec_params ep = mlm_exec_default_params();
    ep.max_seq_len = 64;
    ep.max_step_logits = 12;
    mlm_exec *e = NULL;
    mlm_error err;
    float *out = calloc((size_t)12 * (size_t)V, 4);
    CHECK_OK(mlm_exec_create(m, &ep, &e, &err), &err);
    mlm_batch b = {.n = 12, .tokens = tokens, .seq = seq, .pos = pos, .logits = want};
    if (e) CHECK_OK(mlm_exec_step(e, &b, out, &err), &err);
    mlm_exec_free(e);
    return out;
}

static void cache_file(const char *profile, char *path, size_t size) {
    mlm_model_params p = params(profile, 1);
    mlm_error err;
    CHECK_OK(mlm_cache_path(model, &p, path, size, &err), &err);
}

static void flip_byte(const char *path, long off_from_end_or_start, int from_end) {
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f) return;
    fseek(f, from_end ? -off_from_end_or_start : off_from_end_or_start, from_end ? SEEK_END : SEEK_SET);
    long at = ftell(f);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

TEST(build_then_map) {
    mlm_model *mem = load("performance", 0);
    float *want = mem ? logits_of(mem) : NULL;
    int32_t V = mem ? mlm_model_config(mem)->n_vocab : 0;
    mlm_model_free(mem);
    mlm_model *m = load("performance", 1);
    if (!m || !want) return;
    CHECK(mlm_model_cache_built(m) == 1);
    char path[1024];
    cache_file("performance", path, sizeof path);
    CHECKF(!strcmp(mlm_model_cache_path(m), path), "%s vs %s", mlm_model_cache_path(m), path);
    float *got = logits_of(m);
    CHECK(!memcmp(got, want, (size_t)12 * (size_t)V * 4));
    free(got);
    mlm_model_free(m);
    /* a later load reads the file into memory (MESHLM_HUGEPAGES=1) or maps it (0) */
    for (int copy = 1; copy >= 0; copy--) {
        setenv("MESHLM_HUGEPAGES", copy ? "1" : "0", 1);
        m = load("performance", 1);
        unsetenv("MESHLM_HUGEPAGES");
        if (!m) break;
        CHECK(mlm_model_cache_built(m) == 0);
        CHECKF(messages[0] == 0, "a valid cache gave messages: %s", messages);
        got = logits_of(m);
        CHECKF(!memcmp(got, want, (size_t)12 * (size_t)V * 4), "cache %s",
               copy ? "in memory" : "mapped");
        free(got);
        mlm_model_free(m);
    }
    free(want);
}

/* mlm_mapfile_to_memory: a file of 5 MB + 3 bytes (three huge pages, the last one partly)
 * holds, after the move, the bytes read from it with stdio, on a 2 MB boundary; the override
 * MESHLM_HUGEPAGES=0/1 decides mlm_mapfile_memory_wanted whatever the size; unset, a size
 * beyond any machine's memory is not wanted. */
TEST(file_to_memory) {
    char path[300];
    snprintf(path, sizeof path, "%s/bytes.bin", tmp);
    const size_t n = (5u << 20) + 3;
    unsigned char *want = malloc(n);
    uint32_t r = 7;
    for (size_t i = 0; i < n; i++) r = r * 1664525u + 1013904223u, want[i] = (unsigned char)(r >> 24);
    FILE *fp = fopen(path, "wb");
    CHECK(fp && fwrite(want, 1, n, fp) == n);
    if (fp) fclose(fp);
    mlm_mapfile f;
    mlm_error err;
    CHECK_OK(mlm_mapfile_open(&f, path, &err), &err);
    CHECK(mlm_mapfile_to_memory(&f, NULL) == 0);
    CHECK(f.copy != NULL && (uintptr_t)f.data % (2u << 20) == 0 && f.size == n);
    CHECK(!memcmp(f.data, want, n));
    CHECK(mlm_mapfile_to_memory(&f, NULL) == -1); /* once */
    mlm_mapfile_close(&f);
    CHECK(f.data == NULL);
    setenv("MESHLM_HUGEPAGES", "0", 1);
    CHECK(!mlm_mapfile_memory_wanted(1));
    setenv("MESHLM_HUGEPAGES", "1", 1);
    CHECK(mlm_mapfile_memory_wanted((size_t)1 << 50));
    unsetenv("MESHLM_HUGEPAGES");
    CHECK(!mlm_mapfile_memory_wanted((size_t)1 << 50)); /* a petabyte never fits */
    free(want);
    remove(path);
}

/* Loads again after DAMAGE and expects a rebuild with a message containing WHY. */
static void expect_rebuild(const char *what, const char *why) {
    mlm_model *m = load("performance", 1);
    CHECKF(m && mlm_model_cache_built(m), "%s: no rebuild", what);
    CHECKF(strstr(messages, why), "%s: message '%s' lacks '%s'", what, messages, why);
    mlm_model_free(m);
    m = load("performance", 1);
    CHECKF(m && !mlm_model_cache_built(m) && !messages[0], "%s: rebuilt cache not reused", what);
    mlm_model_free(m);
}

TEST(damage_is_detected_and_rebuilt) {
    char path[1024], src[400];
    cache_file("performance", path, sizeof path);
    mlm_model_free(load("performance", 1));
    /* a source file touched: stale */
    snprintf(src, sizeof src, "%s/model.safetensors", model);
    struct utimbuf t = {.actime = 1700000000, .modtime = 1700000000};
    CHECK(utime(src, &t) == 0);
    expect_rebuild("touched source", "stale (changed: file model.safetensors");
    /* one byte of a tensor (just after the 4096-byte header: the first norm) */
    flip_byte(path, 4096 + 3, 0);
    expect_rebuild("tensor byte", "fails its checksum");
    /* one byte of the index (just before the 64-byte trailer) */
    flip_byte(path, 64 + 10, 1);
    expect_rebuild("index byte", "index checksum");
    /* the header's magic */
    flip_byte(path, 1, 0);
    expect_rebuild("header byte", "not a meshlm weight cache");
    /* truncated */
    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECK(truncate(path, st.st_size / 2) == 0);
    expect_rebuild("truncated", "truncated");
}

TEST(concurrent_builders) {
    char path[1024];
    cache_file("accuracy", path, sizeof path);
    unlink(path);
    /* two processes: two commands through the shell */
    const char *bin = getenv("MESHLM") ? getenv("MESHLM") : "build/meshlm";
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "MESHLM_CACHE=%s %s cache -m %s --optimizations accuracy >/dev/null 2>&1 & a=$!; "
             "MESHLM_CACHE=%s %s cache -m %s --optimizations accuracy >/dev/null 2>&1 & b=$!; "
             "wait $a && wait $b",
             cache, bin, model, cache, bin, model);
    CHECK(system(cmd) == 0);
    mlm_model *m = load("accuracy", 1);
    CHECKF(m && !mlm_model_cache_built(m) && !messages[0], "after two builders: %s", messages);
    mlm_model_free(m);
    /* no temporary files left in the folder */
    DIR *d = opendir(cache);
    int temps = 0;
    for (struct dirent *e; d && (e = readdir(d));) temps += strstr(e->d_name, ".tmp") != NULL;
    if (d) closedir(d);
    CHECK(temps == 0);
}

TEST(cache_command) {
    char out[8192], args[1200];
    snprintf(args, sizeof args, "cache -m %s --optimizations accuracy", model);
    setenv("MESHLM_CACHE", cache, 1);
    int rc = harness_run_meshlm(args, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "accuracy"), "%s", out);
    snprintf(args, sizeof args, "cache --list -m %s", model);
    rc = harness_run_meshlm(args, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "performance") && strstr(out, "accuracy") && strstr(out, "valid"),
           "%s", out);
    char src[400];
    snprintf(src, sizeof src, "%s/config.json", model);
    struct utimbuf t = {.actime = 1600000000, .modtime = 1600000000};
    CHECK(utime(src, &t) == 0);
    rc = harness_run_meshlm(args, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "INVALID: stale (changed: file config.json"), "%s", out);
    snprintf(args, sizeof args, "cache --clear -m %s --optimizations accuracy", model);
    rc = harness_run_meshlm(args, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "1 file") && strstr(out, "removed"), "%s", out);
    snprintf(args, sizeof args, "cache --list -m %s", model);
    rc = harness_run_meshlm(args, out, sizeof out);
    CHECKF(rc == 0 && !strstr(out, "accuracy") && strstr(out, "performance"), "%s", out);
    rc = harness_run_meshlm("cache --list --clear", out, sizeof out);
    CHECKF(rc == 2, "%s", out);
    unsetenv("MESHLM_CACHE");
}

int main(void) {
    if (harness_tmpdir(tmp, sizeof tmp, "cache")) return 1;
    snprintf(model, sizeof model, "%s/model", tmp);
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp -r %s %s", FIXTURE, model);
    if (system(cmd) != 0) return 1;
    RUN(build_then_map);
    RUN(file_to_memory);
    RUN(damage_is_detected_and_rebuilt);
    RUN(concurrent_builders);
    RUN(cache_command);
    harness_rmtree(tmp);
    return HARNESS_END();
}
