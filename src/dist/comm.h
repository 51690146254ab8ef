/* dist/comm.h: the communicator behind the public mlm_comm_* functions. One struct, two
 * implementations behind a table of operations: comm_null.c (this process alone, always
 * built) and comm_mpi.c (OpenMPI, built when the Makefile finds mpicc; MLM_HAVE_MPI).
 * comm.c holds what both share: argument checks and the public entry points. */
#ifndef MESHLM_DIST_COMM_H
#define MESHLM_DIST_COMM_H

#include "meshlm.h"

typedef struct mlm_comm_ops {
    const char *kind; /* "single" or "mpi" */
    mlm_status (*split)(mlm_comm *c, int color, int key, mlm_comm **out, mlm_error *err);
    /* sums N floats of BUF over the ranks, in rank order, the result on every rank */
    mlm_status (*allreduce_sum)(mlm_comm *c, float *buf, int64_t n, mlm_error *err);
    /* rank r's COUNTS[r] bytes at RECV + the sum of the counts before it */
    mlm_status (*allgatherv)(mlm_comm *c, const void *send, void *recv, const size_t *counts,
                             mlm_error *err);
    mlm_status (*bcast)(mlm_comm *c, void *buf, size_t bytes, int root, mlm_error *err);
    mlm_status (*barrier)(mlm_comm *c, mlm_error *err);
    void (*abort)(mlm_comm *c, int code);
    void (*free)(mlm_comm *c);
} mlm_comm_ops;

struct mlm_comm {
    const mlm_comm_ops *ops;
    int rank, size;
    int is_world;
    void *impl; /* owned by the implementation */
    float *sum; /* owned: all-reduce scratch (cap_sum floats), grown to the largest call */
    int64_t cap_sum;
    mlm_comm_stats stats;
};

/* The single-process world and the MPI one (NULL ops where MPI is not built in). */
mlm_status mlm_comm_null_create(mlm_comm **out, mlm_error *err);
mlm_status mlm_comm_mpi_world(mlm_comm **out, mlm_error *err);
/* Whether the MPI implementation is built in. */
int mlm_comm_mpi_built(void);

/* Grows C's all-reduce scratch to N floats. */
mlm_status mlm_comm_scratch(mlm_comm *c, int64_t n, mlm_error *err);

#endif
