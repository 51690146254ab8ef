/* exec/exec.h: what the scheduler (exec/sched.c) needs of the executor beyond the public API:
 * its KV pool, to share prefix blocks between sequences and to free blocks before a step. */
#ifndef MESHLM_EXEC_EXEC_H
#define MESHLM_EXEC_EXEC_H

#include "kv/kv.h"
#include "meshlm.h"

/* The executor's KV pool (borrowed; valid while the executor lives). */
mlm_kv *mlm_exec_kv(mlm_exec *exec);

#endif
