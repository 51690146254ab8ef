/* backend/cpu/matmul_q_avxvnni.c: the AVX2 native-type kernels built for AVX-VNNI (vpdpbusd on
 * 256-bit vectors): the same file with MLM_AVXVNNI, compiled with -mavxvnni only here. */
#define MLM_AVXVNNI 1
#include "matmul_q_avx2.c"
