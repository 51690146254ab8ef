/* exec/exec.h: what the scheduler (exec/sched.c) needs of the executor beyond the public API:
 * its KV pool, to share prefix blocks between sequences and to free blocks before a step. */
#ifndef MESHLM_EXEC_EXEC_H
#define MESHLM_EXEC_EXEC_H

#include "kv/kv.h"
#include "meshlm.h"

/* The executor's KV pool (borrowed; valid while the executor lives). */
mlm_kv *mlm_exec_kv(mlm_exec *exec);
/* The free tiles of its image pool, and all of them (0 without one). */
int32_t mlm_exec_image_tiles(const mlm_exec *exec, int32_t *total);

#endif
