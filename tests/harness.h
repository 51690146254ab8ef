/* tests/harness.h: the tiny test harness every test binary uses.
 * TEST(name) { ... } defines a case; CHECK*, CHECK_OK, SKIP inside it.
 * RUN(name) in main() runs one; HARNESS_END() prints "N passed, N failed, N skipped"
 * as the last line and returns the exit status. One translation unit per binary. */
#ifndef MESHLM_TESTS_HARNESS_H
#define MESHLM_TESTS_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static int harness_passed, harness_failed, harness_skipped;
static int harness_case_failed, harness_case_skipped;

#define TEST(name) static void test_##name(void)

#define RUN(name)                                                            \
    do {                                                                     \
        harness_case_failed = 0;                                             \
        harness_case_skipped = 0;                                            \
        test_##name();                                                       \
        if (harness_case_skipped) {                                          \
            harness_skipped++;                                               \
        } else if (harness_case_failed) {                                    \
            harness_failed++;                                                \
            printf("FAIL %s\n", #name);                                      \
        } else {                                                             \
            harness_passed++;                                                \
            printf("ok   %s\n", #name);                                      \
        }                                                                    \
        fflush(stdout);                                                      \
    } while (0)

#define HARNESS_END()                                                        \
    (printf("%d passed, %d failed, %d skipped\n", harness_passed,            \
            harness_failed, harness_skipped),                                \
     harness_failed ? 1 : 0)

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            printf("  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            harness_case_failed = 1;                                         \
        }                                                                    \
    } while (0)

/* Like CHECK, with a printf-style explanation. */
#define CHECKF(cond, ...)                                                    \
    do {                                                                     \
        if (!(cond)) {                                                       \
            printf("  %s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            printf(__VA_ARGS__);                                             \
            printf("\n");                                                    \
            harness_case_failed = 1;                                         \
        }                                                                    \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                \
    do {                                                                     \
        double ha_ = (double)(a), hb_ = (double)(b);                         \
        if (!(fabs(ha_ - hb_) <= (double)(tol))) {                           \
            printf("  %s:%d: CHECK_NEAR(%s, %s): %.9g vs %.9g (tol %g)\n",   \
                   __FILE__, __LINE__, #a, #b, ha_, hb_, (double)(tol));     \
            harness_case_failed = 1;                                         \
        }                                                                    \
    } while (0)

/* Checks that an mlm_status call returned MLM_OK; prints the error message if not. */
#define CHECK_OK(call, errp)                                                 \
    do {                                                                     \
        mlm_status hs_ = (call);                                             \
        if (hs_ != MLM_OK) {                                                 \
            printf("  %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,     \
                   mlm_status_str(hs_), (errp)->msg);                        \
            harness_case_failed = 1;                                         \
        }                                                                    \
    } while (0)

#define SKIP(...)                                                            \
    do {                                                                     \
        printf("SKIP %s: ", __func__ + 5);                                   \
        printf(__VA_ARGS__);                                                 \
        printf("\n");                                                        \
        harness_case_skipped = 1;                                            \
        return;                                                              \
    } while (0)

/* Reads a whole file into a malloc'd buffer (NUL-terminated); NULL if missing. */
static inline char *harness_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len) *len = (size_t)n;
    }
    return buf;
}

/* Writes bytes to a file; returns 0 on success. */
static inline int harness_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, len, f);
    fclose(f);
    return w == len ? 0 : -1;
}

/* The CRC-32 of PNG chunks and zip entries (polynomial 0xedb88320) of N bytes at P. */
static inline uint32_t harness_crc32(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}

/* V as 4 big-endian bytes at P (PNG's integers). */
static inline void harness_put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* Creates a fresh directory /tmp/meshlm-test-TAG-XXXXXX into DIR (size >= 64); 0 on success. */
static inline int harness_tmpdir(char *dir, size_t size, const char *tag) {
    snprintf(dir, size, "/tmp/meshlm-test-%s-XXXXXX", tag);
    return mkdtemp(dir) ? 0 : -1;
}

/* Runs "$MESHLM ARGS" (default build/meshlm) through the shell with stderr merged into OUT
 * (SIZE bytes, NUL-terminated, truncated if longer); returns the exit status, or -1. */
static inline int harness_run_meshlm(const char *args, char *out, size_t size) {
    const char *bin = getenv("MESHLM") ? getenv("MESHLM") : "build/meshlm";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", bin, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, size - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs "meshlm ARGS" into the char array OUT and checks its exit status is CODE and, unless
 * NEEDLE is NULL, that the output contains NEEDLE. */
#define HARNESS_EXPECT_MESHLM(out, args, code, needle)                                          \
    do {                                                                                        \
        const char *needle_ = (needle);                                                         \
        int rc_ = harness_run_meshlm(args, out, sizeof out);                                    \
        CHECKF(rc_ == (code), "meshlm %s: exit %d, want %d; output: %.600s", args, rc_, code,   \
               out);                                                                            \
        if (needle_)                                                                            \
            CHECKF(strstr(out, needle_) != NULL, "meshlm %s: output lacks '%s': %.600s", args,  \
                   needle_, out);                                                               \
    } while (0)

/* Removes DIR and everything under it (tests' scratch space only). */
static inline void harness_rmtree(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
}

#endif
