/* core/cpu.c: CPU feature detection, done once; the result is immutable process state. */
#include "core/cpu.h"

#include <pthread.h>
#include <string.h>

static int has(const char *feature) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!strcmp(feature, "avx2")) return __builtin_cpu_supports("avx2");
    if (!strcmp(feature, "fma")) return __builtin_cpu_supports("fma");
    if (!strcmp(feature, "avx512f")) return __builtin_cpu_supports("avx512f");
    if (!strcmp(feature, "avx512bw")) return __builtin_cpu_supports("avx512bw");
    if (!strcmp(feature, "avx512vl")) return __builtin_cpu_supports("avx512vl");
    if (!strcmp(feature, "avx512vnni")) return __builtin_cpu_supports("avx512vnni");
    if (!strcmp(feature, "avx512bf16")) return __builtin_cpu_supports("avx512bf16");
#endif
    (void)feature;
    return 0;
}

mlm_cpu_flags mlm_cpu_detect(void) {
    mlm_cpu_flags f = {0};
    f.avx2 = has("avx2");
    f.fma = has("fma");
    f.avx512f = has("avx512f");
    f.avx512bw = has("avx512bw");
    f.avx512vl = has("avx512vl");
    f.avx512vnni = has("avx512vnni");
    f.avx512bf16 = has("avx512bf16");
    return f;
}

static char features_buf[160];
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

static void features_fill(void) {
    mlm_cpu_flags f = mlm_cpu_detect();
    struct { int on; const char *name; } list[] = {
        {f.avx2, "avx2"}, {f.fma, "fma"}, {f.avx512f, "avx512f"}, {f.avx512bw, "avx512bw"},
        {f.avx512vl, "avx512vl"}, {f.avx512vnni, "avx512vnni"}, {f.avx512bf16, "avx512bf16"},
    };
    char tmp[160] = "";
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
        if (!list[i].on) continue;
        if (tmp[0]) strcat(tmp, " ");
        strcat(tmp, list[i].name);
    }
    if (!tmp[0]) strcpy(tmp, "none");
    memcpy(features_buf, tmp, sizeof features_buf);
}

const char *mlm_cpu_features(void) {
    pthread_once(&features_once, features_fill);
    return features_buf;
}
