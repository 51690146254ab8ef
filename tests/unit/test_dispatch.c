/* tests/unit/test_dispatch.c: the kernel level chosen at start-up, as a user sees it.
 * Each level this machine runs is forced through MESHLM_KERNELS: the generate stats name it,
 * and greedy tokens in a BFP profile are the same on every level (one canonical order). A
 * level the machine lacks (or one hidden with MESHLM_CPU_DISABLE) is refused with the
 * missing feature named; an unknown name too. `meshlm info --system` describes it all. */
#include <jansson.h>
#include <unistd.h>

#include "harness.h"
#include "meshlm.h"

static char out[1 << 16];
static char cache[256];

#define EXPECT(args, code, needle) HARNESS_EXPECT_MESHLM(out, args, code, needle)

/* 40 prompt tokens: the prefill runs the levels' GEMM tiles (AMX takes 16 at a time) */
static const char *GEN = "generate -m tests/data/llama/gqa4_hd64_tied_r32/hf --optimizations "
                         "accuracy --prompt-ids 5,42,79,116,153,190,227,264,301,338,375,412,449,486,11,48,85,122,159,196,233"
                         ",270,307,344,381,418,455,492,17,54,91,128,165,202,239,276,313,350,387,424 -n 12 --json";

/* Runs GEN with MESHLM_KERNELS=LEVEL; returns the generated ids as JSON text (malloc'd) and
 * checks the stats name the level. */
static char *generate_with(const char *level) {
    setenv("MESHLM_KERNELS", level, 1);
    int rc = harness_run_meshlm(GEN, out, sizeof out);
    unsetenv("MESHLM_KERNELS");
    CHECKF(rc == 0, "MESHLM_KERNELS=%s meshlm %s: exit %d: %.400s", level, GEN, rc, out);
    json_error_t je;
    const char *start = strstr(out, "{\""); /* after any cache-building message */
    json_t *j = start ? json_loads(start, JSON_DISABLE_EOF_CHECK, &je) : NULL;
    CHECKF(j != NULL, "MESHLM_KERNELS=%s: not JSON: %.300s", level, out);
    if (!j) return NULL;
    const char *used = json_string_value(json_object_get(json_object_get(j, "stats"), "kernels"));
    CHECKF(used && !strcmp(used, level), "MESHLM_KERNELS=%s: the stats say kernels '%s'", level,
           used ? used : "(none)");
    char *ids = json_dumps(json_object_get(j, "generated_ids"), JSON_COMPACT);
    json_decref(j);
    return ids;
}

static char *ref_ids;

TEST(ref_level_runs) {
    ref_ids = generate_with("ref");
    CHECK(ref_ids && strlen(ref_ids) > 2);
}

#define LEVEL_TEST(level)                                                                   \
    TEST(level##_runs_and_matches_ref) {                                                    \
        mlm_kernel_level info = {0};                                                        \
        for (int i = 0; i < mlm_kernel_levels_count(); i++) {                               \
            mlm_kernel_level l;                                                             \
            mlm_kernel_level_info(i, &l);                                                   \
            if (!strcmp(l.name, #level)) info = l;                                          \
        }                                                                                   \
        CHECK(info.name != NULL);                                                           \
        if (!info.available) SKIP("%s", info.missing);                                      \
        char *ids = generate_with(#level);                                                  \
        CHECKF(ids && ref_ids && !strcmp(ids, ref_ids),                                     \
               #level ": greedy BFP8 tokens %s differ from the ref level's %s", ids, ref_ids); \
        free(ids);                                                                          \
    }
LEVEL_TEST(avx2)
LEVEL_TEST(avxvnni)
LEVEL_TEST(avx512)
LEVEL_TEST(amx)

TEST(missing_levels_are_refused) {
    setenv("MESHLM_CPU_DISABLE", "avx512,amx", 1);
    setenv("MESHLM_KERNELS", "avx512", 1);
    EXPECT(GEN, 1, "MESHLM_KERNELS=avx512: this machine cannot run it: the CPU has no AVX-512F");
    EXPECT("info --system", 1, "the CPU has no AVX-512F");
    setenv("MESHLM_KERNELS", "amx", 1);
    EXPECT(GEN, 1, "MESHLM_KERNELS=amx: this machine cannot run it");
    setenv("MESHLM_CPU_DISABLE", "avx_vnni", 1);
    setenv("MESHLM_KERNELS", "avxvnni", 1);
    EXPECT(GEN, 1, "the CPU has no AVX-VNNI");
    unsetenv("MESHLM_CPU_DISABLE");
    setenv("MESHLM_KERNELS", "sse9", 1);
    EXPECT(GEN, 1, "MESHLM_KERNELS=sse9: not a kernel level");
    unsetenv("MESHLM_KERNELS");
    /* hidden features drop the choice to the next level */
    setenv("MESHLM_CPU_DISABLE", "avx512,amx,avx_vnni", 1);
    mlm_kernel_level l;
    mlm_kernel_level_info(3, &l); /* avx2 */
    if (l.available) EXPECT("info --system", 0, "kernels:    avx2 (the best this machine runs)");
    unsetenv("MESHLM_CPU_DISABLE");
}

TEST(info_system_describes_the_machine) {
    EXPECT("info --system", 0, "kernel levels, best first:");
    CHECK(strstr(out, "cpu:") && strstr(out, "features:") && strstr(out, "kernels:"));
    CHECK(strstr(out, "bfp8_q8_ref") && strstr(out, "flash_ref"));
    EXPECT("info --system --json", 0, "\"levels\":[");
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    CHECKF(j && json_array_size(json_object_get(j, "levels")) == 5, "bad JSON: %.300s", out);
    const char *chosen = NULL;
    mlm_error err;
    CHECK(mlm_kernels_chosen(&chosen, &err) == MLM_OK);
    CHECK(chosen && !strcmp(json_string_value(json_object_get(j, "kernels")), chosen));
    json_decref(j);
    EXPECT("info --system -m x", 2, "not both");
}

int main(void) {
    snprintf(cache, sizeof cache, "/tmp/meshlm-test-dispatch-XXXXXX");
    if (!mkdtemp(cache)) return 1;
    setenv("MESHLM_CACHE", cache, 1);
    RUN(ref_level_runs);
    RUN(avx2_runs_and_matches_ref);
    RUN(avxvnni_runs_and_matches_ref);
    RUN(avx512_runs_and_matches_ref);
    RUN(amx_runs_and_matches_ref);
    RUN(missing_levels_are_refused);
    RUN(info_system_describes_the_machine);
    free(ref_ids);
    harness_rmtree(cache);
    return HARNESS_END();
}
