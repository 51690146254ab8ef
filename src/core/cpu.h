/* core/cpu.h: what this CPU and its OS let the kernels use, read once (CPUID for the
 * instructions, XGETBV for the register state the OS saves, and for AMX the permission the
 * Linux kernel grants on request). Immutable process state. */
#ifndef MESHLM_CORE_CPU_H
#define MESHLM_CORE_CPU_H

typedef struct mlm_cpu_flags {
    /* instructions (CPUID) */
    int avx2, fma, f16c, avx_vnni;
    int avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    int amx_tile, amx_int8, amx_bf16;
    /* state the OS saves and restores (XCR0), and AMX tile data granted to this process */
    int os_avx, os_avx512, os_amx;
    /* the vendor is AMD (CPUID "AuthenticAMD"): memory-access tuning only, never the numbers */
    int amd;
} mlm_cpu_flags;

/* The flags (read once; later calls return the same). The first call asks Linux for
 * permission to use AMX tile data when the CPU has AMX. */
mlm_cpu_flags mlm_cpu_detect(void);

/* Weight panels a batch-1 GEMV reads side by side: 1 on AMD (on Zen 4, EPYC 9004, one
 * forward stream per thread read weights 20-50% faster from memory than 4 or 2 side by side:
 * bench/matmul's decode from memory), else XEON_BEST, what the kernel measured best on the
 * Intel Xeon (several streams keep more misses in flight there). Every count gives the same
 * bits: each row's sum is computed alone. MESHLM_DECODE_PANELS=1 or =many in the environment
 * forces one or XEON_BEST (tests/kernels/test_matmul_panels.sh checks the other path). */
int mlm_cpu_decode_panels(int xeon_best);

/* The CPU's brand string ("Intel(R) Xeon(R) ...") or "unknown" (static). */
const char *mlm_cpu_name(void);

/* The features seen, space separated, with the OS state: "avx2 fma ... (os: avx avx512 amx)"
 * (static). */
const char *mlm_cpu_features(void);

#endif
