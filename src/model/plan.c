/* model/plan.c: memory planning before loading: weights in the compute dtype, the KV pool
 * and the step scratch, against what the system says is available. Pure arithmetic on the
 * config plus one read of /proc/meminfo. */
#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "model/forward.h"

#define PROCESS_ALLOWANCE (64ll << 20) /* code, tokenizer, page tables, libc */

static int64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

void mlm_memory_plan_for(const mlm_config *c, mlm_dtype dtype, const mlm_exec_params *params,
                         mlm_memory_plan *plan) {
    mlm_exec_params p = params ? *params : mlm_exec_default_params();
    if (!p.max_num_blocks)
        p.max_num_blocks = p.max_seqs * ((p.max_seq_len + p.block_size - 1) / p.block_size);
    if (!p.max_step_logits) p.max_step_logits = p.max_seqs;
    int threads = p.n_threads;
#ifdef _OPENMP
    if (!threads) threads = omp_get_max_threads();
#endif
    if (threads < 1) threads = 1;
    int64_t wbytes = dtype == MLM_DTYPE_F32 ? 4 : 2, kvbytes = p.kv_dtype == MLM_DTYPE_BF16 ? 2 : 4;
    memset(plan, 0, sizeof *plan);
    plan->weights = mlm_config_n_params(c) * wbytes;
    plan->kv = (int64_t)c->n_layer * 2 * (int64_t)p.max_num_blocks * p.block_size *
               c->n_kv_head * c->head_dim * kvbytes;
    plan->scratch = (int64_t)mlm_forward_scratch_size(c, p.max_step_tokens, p.max_step_logits,
                                                      p.max_seq_len, threads);
    plan->total = plan->weights + plan->kv + plan->scratch + PROCESS_ALLOWANCE;
    plan->available = mem_available();
}
