/* backend/kernels.c: the kernel tables, one per ISA level, and the choice of one from what the
 * CPU and the OS support, once per process. Levels, best first:
 *   amx      AVX-512 level + AMX-INT8 tiles (the Linux kernel must grant tile data)
 *   avx512   AVX-512 F/BW/VL/DQ + VNNI (+ BF16 for bf16 weights), zmm state saved by the OS
 *   avxvnni  AVX2 + FMA + AVX-VNNI
 *   avx2     AVX2 + FMA
 *   ref      the scalar twins
 * BFP products, attention and GELU give the same bits on every level (backend.h); bf16 and
 * f32 products differ between levels by rounding only. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/cpu.h"
#include "core/error.h"
#include "tensor/bfp.h"
#include "tensor/q8.h"

const char *const mlm_kernel_levels[] = {"amx", "avx512", "avxvnni", "avx2", "ref", NULL};

/* The native types' entries of level ISA in each of the three arrays. */
#define NATIVE(isa, f) MLM_NATIVE_TYPES(f, isa)
#define N_FN(T, t, isa) [MLM_W_##T] = mlm_matmul_##t##_q8_##isa,
#define N_ACT(T, t, isa) [MLM_W_##T] = MLM_ACT_Q8,
#define N_NAME(T, t, isa) [MLM_W_##T] = #t "_q8_" #isa,

#define TABLE(nm, f32, bf16, bf16act, bfp8, bfp4, att, quant, gel, nat)                         \
    {.name = nm,                                                                                \
     .matmul = {[MLM_W_F32] = mlm_matmul_##f32, [MLM_W_BF16] = mlm_matmul_##bf16,              \
                [MLM_W_BFP8] = mlm_matmul_##bfp8, [MLM_W_BFP4] = mlm_matmul_##bfp4,            \
                NATIVE(nat, N_FN)},                                                             \
     .act = {[MLM_W_F32] = MLM_ACT_F32, [MLM_W_BF16] = bf16act, [MLM_W_BFP8] = MLM_ACT_Q8,     \
             [MLM_W_BFP4] = MLM_ACT_Q8, NATIVE(nat, N_ACT)},                                    \
     .matmul_name = {[MLM_W_F32] = #f32, [MLM_W_BF16] = #bf16, [MLM_W_BFP8] = #bfp8,           \
                     [MLM_W_BFP4] = #bfp4, NATIVE(nat, N_NAME)},                                \
     .attention = mlm_attention_##att,                                                          \
     .attention_name = #att,                                                                    \
     .quantize = mlm_quantize_q8_##quant,                                                       \
     .gelu = mlm_gelu_##gel,                                                                    \
     .gelu_name = "gelu_" #gel}

static const mlm_kernels tables[] = {
    TABLE("amx", f32_avx512, bf16_bf16_avx512, MLM_ACT_BF16, bfp8_q8_amx, bfp4_q8_amx,
          flash_avx512, avx512, avx512, avx512),
    TABLE("avx512", f32_avx512, bf16_bf16_avx512, MLM_ACT_BF16, bfp8_q8_avx512, bfp4_q8_avx512,
          flash_avx512, avx512, avx512, avx512),
    /* AVX-512 with VNNI but without BF16 (Ice Lake): bf16 widened to f32 */
    TABLE("avx512", f32_avx512, bf16_avx512, MLM_ACT_F32, bfp8_q8_avx512, bfp4_q8_avx512,
          flash_avx512, avx512, avx512, avx512),
    TABLE("avxvnni", f32_avx2, bf16_avx2, MLM_ACT_F32, bfp8_q8_avxvnni, bfp4_q8_avxvnni,
          flash_avx2, avx2, avx2, avxvnni),
    TABLE("avx2", f32_avx2, bf16_avx2, MLM_ACT_F32, bfp8_q8_avx2, bfp4_q8_avx2, flash_avx2,
          avx2, avx2, avx2),
    TABLE("ref", f32_ref, bf16_ref, MLM_ACT_F32, bfp8_q8_ref, bfp4_q8_ref, flash_ref, ref, ref,
          ref),
};

/* The first feature level NAME needs that this machine lacks, or NULL. */
static const char *missing(const char *name, const mlm_cpu_flags *f) {
    if (!strcmp(name, "ref")) return NULL;
    if (!f->avx2) return "the CPU has no AVX2";
    if (!f->fma) return "the CPU has no FMA";
    if (!f->f16c) return "the CPU has no F16C";
    if (!f->os_avx) return "the OS does not enable AVX state (XCR0)";
    if (!strcmp(name, "avx2")) return NULL;
    if (!strcmp(name, "avxvnni")) return f->avx_vnni ? NULL : "the CPU has no AVX-VNNI";
    if (!f->avx512f) return "the CPU has no AVX-512F";
    if (!f->avx512bw) return "the CPU has no AVX-512BW";
    if (!f->avx512vl) return "the CPU has no AVX-512VL";
    if (!f->avx512dq) return "the CPU has no AVX-512DQ";
    if (!f->avx512vnni) return "the CPU has no AVX-512 VNNI";
    if (!f->os_avx512) return "the OS does not enable AVX-512 state (XCR0 opmask/ZMM)";
    if (!strcmp(name, "avx512")) return NULL;
    if (!f->amx_tile || !f->amx_int8) return "the CPU has no AMX-TILE/AMX-INT8";
    if (!f->os_amx) return "the OS does not grant AMX tile data (XCR0 / arch_prctl)";
    if (!f->avx512bf16) return "the CPU has no AVX512-BF16";
    return NULL;
}

void mlm_quantize_q8_ref(const float *x, int64_t cols, int8_t *q, uint8_t *u, float *d) {
    mlm_q8_quantize(x, 1, cols, q, u, d);
}

const mlm_kernels *mlm_kernels_get(const char *name, const char **why) {
    mlm_cpu_flags f = mlm_cpu_detect();
    int known = 0;
    for (int i = 0; mlm_kernel_levels[i]; i++) known |= !strcmp(name, mlm_kernel_levels[i]);
    if (!known) {
        if (why) *why = "no such kernel level";
        return NULL;
    }
    const char *m = missing(name, &f);
    if (m) {
        if (why) *why = m;
        return NULL;
    }
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        if (strcmp(tables[i].name, name)) continue;
        /* the avx512 table with BF16 products needs AVX512-BF16; the next one does not */
        if (tables[i].act[MLM_W_BF16] == MLM_ACT_BF16 && !f.avx512bf16) continue;
        return &tables[i];
    }
    return NULL;
}

static const mlm_kernels *picked;
static mlm_error pick_err;
static pthread_once_t pick_once = PTHREAD_ONCE_INIT;

static void pick(void) {
    const char *forced = getenv("MESHLM_KERNELS");
    if (forced && *forced) {
        const char *why = NULL;
        picked = mlm_kernels_get(forced, &why);
        if (!picked && !strcmp(why, "no such kernel level"))
            mlm_error_set(&pick_err, MLM_ERR_INVALID_ARG,
                          "MESHLM_KERNELS=%s: not a kernel level (amx, avx512, avxvnni, avx2, ref)",
                          forced);
        else if (!picked)
            mlm_error_set(&pick_err, MLM_ERR_UNSUPPORTED,
                          "MESHLM_KERNELS=%s: this machine cannot run it: %s", forced, why);
        return;
    }
    for (int i = 0; !picked && mlm_kernel_levels[i]; i++)
        picked = mlm_kernels_get(mlm_kernel_levels[i], NULL);
}

mlm_status mlm_kernels_pick(const mlm_kernels **out, mlm_error *err) {
    pthread_once(&pick_once, pick);
    *out = picked;
    if (picked) return MLM_OK;
    if (err) *err = pick_err;
    return pick_err.status;
}

// ---- the public description (meshlm.h) ----

int mlm_kernel_levels_count(void) {
    int n = 0;
    while (mlm_kernel_levels[n]) n++;
    return n;
}

void mlm_kernel_level_info(int i, mlm_kernel_level *out) {
    memset(out, 0, sizeof *out);
    if (i < 0 || i >= mlm_kernel_levels_count()) return;
    out->name = mlm_kernel_levels[i];
    const mlm_kernels *k = mlm_kernels_get(out->name, &out->missing);
    out->available = k != NULL;
    if (!k) { /* what it would run: the first table of that name */
        for (size_t t = 0; t < sizeof tables / sizeof tables[0] && !k; t++)
            if (!strcmp(tables[t].name, out->name)) k = &tables[t];
    }
    out->n_matmul = MLM_W_COUNT;
    for (int w = 0; w < MLM_W_COUNT; w++) {
        out->weight_type[w] = mlm_wtype_name((mlm_wtype)w);
        out->matmul[w] = k ? k->matmul_name[w] : NULL;
    }
    _Static_assert(MLM_W_COUNT <= sizeof out->matmul / sizeof out->matmul[0], "matmul names");
    out->attention = k ? k->attention_name : NULL;
    out->gelu = k ? k->gelu_name : NULL;
}

mlm_status mlm_kernels_chosen(const char **name, mlm_error *err) {
    const mlm_kernels *k;
    mlm_status st = mlm_kernels_pick(&k, err);
    *name = st ? NULL : k->name;
    return st;
}
