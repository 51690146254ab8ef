/* exec/exec.h: what the rest of exec/ needs of the executor beyond the public API: its
 * parameters resolved (the memory plan counts what mlm_exec_create allocates from the same
 * resolved values), and for the scheduler its KV pool, to share prefix blocks between
 * sequences and to free blocks before a step. */
#ifndef MESHLM_EXEC_EXEC_H
#define MESHLM_EXEC_EXEC_H

#include "kv/kv.h"
#include "meshlm.h"
#include "tensor/wtype.h"

/* Checks P and resolves its defaults in place, for a model of config C whose profile keeps
 * its KV cache in PROFILE_KV (mlm_profile_kv_dtype): the KV dtype, max_num_blocks (every sequence at max_seq_len),
 * max_step_logits (max_seqs, at most max_step_tokens), n_threads (the CPU count) and, for
 * Llama 3.2 Vision, image_tiles (max_images of max_tiles per sequence). INVALID_ARG names the
 * parameter. */
mlm_status mlm_exec_params_resolve(mlm_exec_params *p, mlm_dtype profile_kv, const mlm_config *c,
                                   mlm_error *err);

/* The executor's KV pool (borrowed; valid while the executor lives). */
mlm_kv *mlm_exec_kv(mlm_exec *exec);
/* The free tiles of its image pool, and all of them (0 without one). */
int32_t mlm_exec_image_tiles(const mlm_exec *exec, int32_t *total);

#endif
