/* core/cpu.c: CPU feature detection (see cpu.h). */
#include "core/cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}

/* Linux (5.16+) gives a process AMX tile data only when asked: ARCH_REQ_XCOMP_PERM for
 * XFEATURE_XTILEDATA (18), then ARCH_GET_XCOMP_PERM says whether it was granted. */
static int amx_permitted(void) {
#ifdef SYS_arch_prctl
    unsigned long bits = 0;
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18) != 0) return 0;
    if (syscall(SYS_arch_prctl, 0x1022 /* ARCH_GET_XCOMP_PERM */, &bits) != 0) return 0;
    return (bits >> 18) & 1;
#else
    return 0;
#endif
}

static void detect(mlm_cpu_flags *f) {
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d)) /* the vendor: EBX, EDX, ECX */
        f->amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int osxsave = (c >> 27) & 1;
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;
    int avx = (c >> 28) & 1;
    unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
    f->os_avx = avx && (xcr0 & 0x6) == 0x6;            /* XMM and YMM state */
    f->os_avx512 = f->os_avx && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    int os_tiles = (xcr0 & 0x60000) == 0x60000;       /* XTILECFG, XTILEDATA */
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        f->avx2 = (b >> 5) & 1;
        f->avx512f = (b >> 16) & 1;
        f->avx512dq = (b >> 17) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        f->avx512vnni = (c >> 11) & 1;
        f->amx_bf16 = (d >> 22) & 1;
        f->amx_tile = (d >> 24) & 1;
        f->amx_int8 = (d >> 25) & 1;
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        f->avx_vnni = (a >> 4) & 1;
        f->avx512bf16 = (a >> 5) & 1;
    }
    f->os_amx = f->amx_tile && os_tiles && amx_permitted();
}
#else
static void detect(mlm_cpu_flags *f) { (void)f; }
#endif

/* MESHLM_CPU_DISABLE=name,...: features to treat as absent (for trying lower levels). */
static void disable_from_env(mlm_cpu_flags *f) {
    const char *env = getenv("MESHLM_CPU_DISABLE");
    if (!env) return;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        int all512 = !strcmp(t, "avx512"), amx = !strcmp(t, "amx") || all512;
        if (!strcmp(t, "avx2")) f->avx2 = 0;
        if (!strcmp(t, "fma")) f->fma = 0;
        if (!strcmp(t, "avx_vnni")) f->avx_vnni = 0;
        if (all512 || !strcmp(t, "avx512f")) f->avx512f = 0;
        if (all512 || !strcmp(t, "avx512bw")) f->avx512bw = 0;
        if (all512 || !strcmp(t, "avx512vl")) f->avx512vl = 0;
        if (all512 || !strcmp(t, "avx512dq")) f->avx512dq = 0;
        if (all512 || !strcmp(t, "avx512_vnni")) f->avx512vnni = 0;
        if (all512 || !strcmp(t, "avx512_bf16")) f->avx512bf16 = 0;
        if (amx) f->amx_tile = f->amx_int8 = f->amx_bf16 = f->os_amx = 0;
    }
}

static mlm_cpu_flags flags;
static int panels_env = -1; /* MESHLM_DECODE_PANELS: 1, 0 ("many"), or -1 (unset) */
static char name_buf[64] = "unknown", features_buf[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void fill(void) {
    detect(&flags);
    disable_from_env(&flags);
    const char *panels = getenv("MESHLM_DECODE_PANELS");
    if (panels) panels_env = !strcmp(panels, "1") ? 1 : !strcmp(panels, "many") ? 0 : -1;
#if defined(__x86_64__) || defined(__i386__)
    unsigned r[12];
    if (__get_cpuid(0x80000000u, &r[0], &r[1], &r[2], &r[3]) && r[0] >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
        char s[49];
        memcpy(s, r, 48);
        s[48] = 0;
        const char *p = s;
        while (*p == ' ') p++;
        snprintf(name_buf, sizeof name_buf, "%s", p);
    }
#endif
    const mlm_cpu_flags *f = &flags;
    struct { int on; const char *name; } list[] = {
        {f->avx2, "avx2"}, {f->fma, "fma"}, {f->f16c, "f16c"}, {f->avx_vnni, "avx_vnni"},
        {f->avx512f, "avx512f"}, {f->avx512bw, "avx512bw"}, {f->avx512vl, "avx512vl"},
        {f->avx512dq, "avx512dq"}, {f->avx512vnni, "avx512_vnni"}, {f->avx512bf16, "avx512_bf16"},
        {f->amx_tile, "amx_tile"}, {f->amx_int8, "amx_int8"}, {f->amx_bf16, "amx_bf16"},
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        if (list[i].on)
            n += (size_t)snprintf(features_buf + n, sizeof features_buf - n, "%s%s", n ? " " : "",
                                  list[i].name);
    if (!n) n += (size_t)snprintf(features_buf, sizeof features_buf, "none");
    snprintf(features_buf + n, sizeof features_buf - n, " (os saves:%s%s%s)",
             f->os_avx ? " ymm" : "", f->os_avx512 ? " zmm" : "",
             f->os_amx ? " amx tiles" : "");
}

int mlm_cpu_decode_panels(int xeon_best) {
    pthread_once(&once, fill);
    return panels_env == 1 || (panels_env < 0 && flags.amd) ? 1 : xeon_best;
}

mlm_cpu_flags mlm_cpu_detect(void) {
    pthread_once(&once, fill);
    return flags;
}

const char *mlm_cpu_name(void) {
    pthread_once(&once, fill);
    return name_buf;
}

const char *mlm_cpu_features(void) {
    pthread_once(&once, fill);
    return features_buf;
}
