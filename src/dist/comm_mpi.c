/* dist/comm_mpi.c: the communicator over MPI (OpenMPI from Debian's packages). Built only
 * with MLM_HAVE_MPI; the Makefile defines it when it finds mpicc.
 *
 * The all-reduce is a reduce-scatter and an all-gather: the N floats are cut into one
 * contiguous chunk per rank; rank r receives every rank's copy of chunk r (MPI_Alltoallv)
 * and adds them in rank order 0, 1, ..., size - 1, then every rank gathers all the summed
 * chunks (MPI_Allgatherv). Each element is therefore summed in the same order on every run
 * and its one result is copied to every rank, whatever MPI's own reduction algorithms would
 * pick: the determinism checks hold on a mesh, and all ranks see bit-identical values.
 *
 * Errors return (MPI_ERRORS_RETURN) as MLM_ERR_BACKEND with MPI's message. A rank that dies
 * ends the job through mpirun, which stops the other ranks. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/comm.h"

#ifdef MLM_HAVE_MPI
#include <mpi.h>

typedef struct mpi_impl {
    MPI_Comm comm;
    int *counts, *displs, *rcounts, *rdispls; /* (size) each, for the collectives */
} mpi_impl;

int mlm_comm_mpi_built(void) { return 1; }

static mlm_status mpi_fail(mlm_error *err, int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
    return mlm_error_set(err, MLM_ERR_BACKEND, "mesh: %s failed: %s", what, msg);
}

static const mlm_comm_ops mpi_ops;

static mlm_status wrap(MPI_Comm comm, int is_world, mlm_comm **out, mlm_error *err) {
    mlm_comm *c = calloc(1, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (m) {
        m->counts = calloc((size_t)size, sizeof(int));
        m->displs = calloc((size_t)size, sizeof(int));
        m->rcounts = calloc((size_t)size, sizeof(int));
        m->rdispls = calloc((size_t)size, sizeof(int));
    }
    if (!c || !m || !m->counts || !m->displs || !m->rcounts || !m->rdispls) {
        if (m) free(m->counts), free(m->displs), free(m->rcounts), free(m->rdispls);
        free(m), free(c);
        return mlm_error_set(err, MLM_ERR_NOMEM, "mesh: out of memory");
    }
    m->comm = comm;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    *c = (mlm_comm){.ops = &mpi_ops, .rank = rank, .size = size, .is_world = is_world, .impl = m};
    *out = c;
    return MLM_OK;
}

static mlm_status mpi_split(mlm_comm *c, int color, int key, mlm_comm **out, mlm_error *err) {
    mpi_impl *m = c->impl;
    MPI_Comm sub;
    int rc = MPI_Comm_split(m->comm, color < 0 ? MPI_UNDEFINED : color, key, &sub);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Comm_split");
    if (sub == MPI_COMM_NULL) return MLM_OK; /* this rank is in no part: *out stays NULL */
    mlm_status st = wrap(sub, 0, out, err);
    if (st) MPI_Comm_free(&sub);
    return st;
}

static mlm_status mpi_allreduce(mlm_comm *c, float *buf, int64_t n, mlm_error *err) {
    mpi_impl *m = c->impl;
    int p = c->size, r = c->rank;
    if (n > (int64_t)INT_MAX)
        return mlm_error_set(err, MLM_ERR_CAPACITY,
                             "mesh: an all-reduce of %lld floats exceeds "
                             "MPI's int counts",
                             (long long)n);
    int64_t base = n / p, extra = n % p, off = 0;
    for (int j = 0; j < p; j++) {
        m->counts[j] = (int)(base + (j < extra));
        m->displs[j] = (int)off;
        off += m->counts[j];
    }
    int mine = m->counts[r];
    for (int j = 0; j < p; j++)
        m->rcounts[j] = mine, m->rdispls[j] = j * mine;
    mlm_status st = mlm_comm_scratch(c, (int64_t)mine * p, err);
    if (st) return st;
    int rc = MPI_Alltoallv(buf, m->counts, m->displs, MPI_FLOAT, c->sum, m->rcounts, m->rdispls,
                           MPI_FLOAT, m->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Alltoallv (all-reduce)");
    float *dst = buf + m->displs[r];
    for (int k = 0; k < mine; k++) {
        float s = c->sum[k];
        for (int j = 1; j < p; j++)
            s += c->sum[(int64_t)j * mine + k];
        dst[k] = s;
    }
    rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buf, m->counts, m->displs, MPI_FLOAT, m->comm);
    return rc == MPI_SUCCESS ? MLM_OK : mpi_fail(err, rc, "MPI_Allgatherv (all-reduce)");
}

static mlm_status mpi_allgatherv(mlm_comm *c, const void *send, void *recv, const size_t *counts,
                                 mlm_error *err) {
    mpi_impl *m = c->impl;
    size_t off = 0;
    for (int j = 0; j < c->size; j++) {
        if (counts[j] > INT_MAX || off > INT_MAX)
            return mlm_error_set(err, MLM_ERR_CAPACITY,
                                 "mesh: a gather of %zu bytes exceeds MPI's int counts",
                                 off + counts[j]);
        m->counts[j] = (int)counts[j];
        m->displs[j] = (int)off;
        off += counts[j];
    }
    int rc = MPI_Allgatherv(send, m->counts[c->rank], MPI_BYTE, recv, m->counts, m->displs,
                            MPI_BYTE, m->comm);
    return rc == MPI_SUCCESS ? MLM_OK : mpi_fail(err, rc, "MPI_Allgatherv");
}

static mlm_status mpi_bcast(mlm_comm *c, void *buf, size_t bytes, int root, mlm_error *err) {
    mpi_impl *m = c->impl;
    for (size_t off = 0; off < bytes;) { /* MPI counts are ints */
        size_t part = bytes - off < (size_t)1 << 30 ? bytes - off : (size_t)1 << 30;
        int rc = MPI_Bcast((char *)buf + off, (int)part, MPI_BYTE, root, m->comm);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Bcast");
        off += part;
    }
    return MLM_OK;
}

static mlm_status mpi_barrier(mlm_comm *c, mlm_error *err) {
    mpi_impl *m = c->impl;
    int rc = MPI_Barrier(m->comm);
    return rc == MPI_SUCCESS ? MLM_OK : mpi_fail(err, rc, "MPI_Barrier");
}

static void mpi_abort(mlm_comm *c, int code) {
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static void mpi_free(mlm_comm *c) {
    mpi_impl *m = c->impl;
    if (c->is_world)
        MPI_Finalize();
    else
        MPI_Comm_free(&m->comm);
    free(m->counts), free(m->displs), free(m->rcounts), free(m->rdispls);
    free(m);
}

static const mlm_comm_ops mpi_ops = {"mpi",     mpi_split,   mpi_allreduce, mpi_allgatherv,
                                     mpi_bcast, mpi_barrier, mpi_abort,     mpi_free};

mlm_status mlm_comm_mpi_world(mlm_comm **out, mlm_error *err) {
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        /* SERIALIZED: the server's engine thread makes the calls, not the one that began */
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Init_thread");
        if (provided < MPI_THREAD_SERIALIZED) {
            MPI_Finalize();
            return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                                 "mesh: this MPI gives thread level %d, meshlm needs "
                                 "MPI_THREAD_SERIALIZED",
                                 provided);
        }
    }
    return wrap(MPI_COMM_WORLD, 1, out, err);
}

#else

int mlm_comm_mpi_built(void) { return 0; }

mlm_status mlm_comm_mpi_world(mlm_comm **out, mlm_error *err) {
    *out = NULL;
    return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                         "mesh: this meshlm was built without MPI (install libopenmpi-dev and "
                         "rebuild)");
}

#endif
