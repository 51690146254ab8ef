/* dist/comm.c: the public communicator functions (argument checks, then the implementation's
 * operation) and the mesh: the seeds' presets, their split into TP groups and DP lanes, and
 * the checks that refuse a mesh a model or a world cannot run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "dist/comm.h"

int mlm_comm_launched(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

mlm_status mlm_comm_world(mlm_comm **out, mlm_error *err) {
    *out = NULL;
    if (!mlm_comm_launched()) return mlm_comm_null_create(out, err);
    if (!mlm_comm_mpi_built())
        return mlm_error_set(err, MLM_ERR_UNSUPPORTED,
                             "mesh: started by an MPI launcher, but this meshlm was built without "
                             "MPI (install libopenmpi-dev and rebuild)");
    return mlm_comm_mpi_world(out, err);
}

int mlm_comm_rank(const mlm_comm *c) { return c ? c->rank : 0; }
int mlm_comm_size(const mlm_comm *c) { return c ? c->size : 1; }
const char *mlm_comm_kind(const mlm_comm *c) { return c ? c->ops->kind : "single"; }

mlm_status mlm_comm_split(mlm_comm *c, int color, int key, mlm_comm **out, mlm_error *err) {
    *out = NULL;
    if (color < 0) color = -1;
    return c->ops->split(c, color, key, out, err);
}

mlm_status mlm_comm_scratch(mlm_comm *c, int64_t n, mlm_error *err) {
    if (n <= c->cap_sum) return MLM_OK;
    float *s = realloc(c->sum, (size_t)n * sizeof *s);
    if (!s)
        return mlm_error_set(err, MLM_ERR_NOMEM, "mesh: no memory for an all-reduce of %lld floats",
                             (long long)n);
    c->sum = s;
    c->cap_sum = n;
    return MLM_OK;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

mlm_status mlm_comm_allreduce_sum(mlm_comm *c, float *buf, int64_t n, mlm_error *err) {
    if (!c || c->size == 1 || n <= 0) return MLM_OK;
    double t0 = now_s();
    mlm_status st = c->ops->allreduce_sum(c, buf, n, err);
    c->stats.allreduce_calls++;
    c->stats.allreduce_bytes += n * (int64_t)sizeof(float);
    c->stats.allreduce_s += now_s() - t0;
    return st;
}

void mlm_comm_get_stats(const mlm_comm *c, mlm_comm_stats *out) {
    if (c)
        *out = c->stats;
    else
        memset(out, 0, sizeof *out);
}

mlm_status mlm_comm_allgatherv(mlm_comm *c, const void *send, void *recv, const size_t *counts,
                               mlm_error *err) {
    if (!c) {
        if (counts[0] && recv != send) memmove(recv, send, counts[0]);
        return MLM_OK;
    }
    double t0 = now_s();
    mlm_status st = c->ops->allgatherv(c, send, recv, counts, err);
    c->stats.gather_calls++;
    for (int i = 0; i < c->size; i++)
        c->stats.gather_bytes += (int64_t)counts[i];
    c->stats.gather_s += now_s() - t0;
    return st;
}

mlm_status mlm_comm_allgather(mlm_comm *c, const void *send, size_t bytes, void *recv,
                              mlm_error *err) {
    int n = mlm_comm_size(c);
    size_t *counts = malloc((size_t)n * sizeof *counts);
    if (!counts) return mlm_error_set(err, MLM_ERR_NOMEM, "mesh: out of memory");
    for (int i = 0; i < n; i++)
        counts[i] = bytes;
    mlm_status st = mlm_comm_allgatherv(c, send, recv, counts, err);
    free(counts);
    return st;
}

mlm_status mlm_comm_bcast(mlm_comm *c, void *buf, size_t bytes, int root, mlm_error *err) {
    if (!c || c->size == 1 || !bytes) return MLM_OK;
    if (root < 0 || root >= c->size)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG, "mesh: broadcast root %d outside [0, %d)",
                             root, c->size);
    return c->ops->bcast(c, buf, bytes, root, err);
}

mlm_status mlm_comm_barrier(mlm_comm *c, mlm_error *err) {
    return c && c->size > 1 ? c->ops->barrier(c, err) : MLM_OK;
}

void mlm_comm_abort(mlm_comm *c, int code) {
    if (c) c->ops->abort(c, code);
    exit(code);
}

void mlm_comm_free(mlm_comm *c) {
    if (!c) return;
    c->ops->free(c);
    free(c->sum);
    free(c);
}

// ---- the mesh ----

static const struct {
    const char *name;
    int devices;
} presets[] = {{"N150", 1}, {"N300", 2}, {"T3K", 8}, {"TG", 32}};

int mlm_mesh_devices(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (name && !strcmp(name, presets[i].name)) return presets[i].devices;
    return 0;
}

/* The largest divisor of TP that divides the head counts and n_ff: what a mesh of TP devices
 * can run as lanes. */
static int largest_tp(const mlm_config *c, int tp) {
    int best = 1;
    for (int t = 1; t <= tp; t++)
        if (tp % t == 0 && c->n_head % t == 0 && c->n_kv_head % t == 0 && c->n_ff % t == 0) best = t;
    return best;
}

mlm_status mlm_mesh_check_tp(const mlm_config *c, int tp, const char *mesh, mlm_error *err) {
    /* the mesh sums w2's K chunks (one per KV head) in one order: n_ff must cut into them */
    if (tp > 1 && c->n_kv_head > 0 && c->n_ff % c->n_kv_head)
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "mesh%s%s: the model's n_ff %d does not cut into its %d KV heads' K "
                             "chunks, which a mesh needs to give one process's bits; run it on "
                             "one device (N150)",
                             mesh ? " " : "", mesh ? mesh : "", c->n_ff, c->n_kv_head);
    const char *what = c->n_kv_head % tp ? "KV heads" : c->n_head % tp ? "attention heads" : NULL;
    int n = c->n_kv_head % tp ? c->n_kv_head : c->n_head;
    if (!what && c->n_ff % tp) what = "MLP columns (n_ff)", n = c->n_ff;
    if (!what) return MLM_OK;
    int fit = largest_tp(c, tp);
    const char *use = fit == 1 ? "N150" : fit == 2 ? "N300" : fit == 8 ? "T3K" : NULL;
    char hint[96];
    if (use) snprintf(hint, sizeof hint, "use %s (TP %d)", use, fit);
    else snprintf(hint, sizeof hint, "use --tp %d", fit);
    return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                         "mesh%s%s: TP %d does not divide the model's %d %s (n_head %d, n_kv_head "
                         "%d); %s, or %d data-parallel lanes of TP %d (--dp %d)",
                         mesh ? " " : "", mesh ? mesh : "", tp, n, what, c->n_head, c->n_kv_head,
                         hint, tp / fit, fit, tp / fit);
}

mlm_status mlm_mesh_resolve(const char *name, int tp, int dp, const mlm_config *cfg, int world,
                            int fake, mlm_mesh *out, mlm_error *err) {
    memset(out, 0, sizeof *out);
    int devices = 0;
    if (name) {
        if (!(devices = mlm_mesh_devices(name)))
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "mesh: unknown mesh '%s' (N150, N300, T3K or TG)", name);
        snprintf(out->name, sizeof out->name, "%s", name);
        if (tp && dp && tp * dp != devices)
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "mesh %s has %d devices, not --tp %d x --dp %d", name, devices, tp,
                                 dp);
        if (!tp && dp) {
            if (devices % dp)
                return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                     "mesh %s: %d data-parallel lanes do not divide its %d devices",
                                     name, dp, devices);
            tp = devices / dp;
        } else if (tp && !dp) {
            if (devices % tp)
                return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                     "mesh %s: TP %d does not divide its %d devices", name, tp,
                                     devices);
            dp = devices / tp;
        } else if (!tp) {
            /* TG is 8 x 4: TP along the axis of 8 when the heads allow it (Llama 3: 8 KV heads),
             * and the other axis as 4 lanes; a model whose heads do not divide 8 (Phi-4: 10 KV
             * heads) runs TP 2 lanes over the whole mesh. The other meshes are one TP group. */
            tp = devices;
            if (!strcmp(name, "TG"))
                tp = cfg && largest_tp(cfg, 8) == 8 ? 8 : cfg ? largest_tp(cfg, 2) : 8;
            dp = devices / tp;
        }
    } else {
        tp = tp ? tp : 1;
        dp = dp ? dp : 1;
        devices = tp * dp;
    }
    out->tp = tp, out->dp = dp, out->devices = devices;
    if (cfg) {
        mlm_status st = mlm_mesh_check_tp(cfg, tp, name, err);
        if (st) return st;
    }
    if (world < devices || (world > devices && !fake)) {
        if (world == 1 && !mlm_comm_launched())
            return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                                 "mesh%s%s: %d ranks (TP %d x DP %d) are needed, but this process "
                                 "is not under an MPI launcher; run it as mpirun -np %d meshlm ...",
                                 name ? " " : "", name ? name : "", devices, tp, dp, devices);
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "mesh%s%s has %d devices (TP %d x DP %d), but the MPI world has %d "
                             "ranks%s",
                             name ? " " : "", name ? name : "", devices, tp, dp, world,
                             world > devices ? " (MESHLM_FAKE_DEVICE runs a smaller mesh on a "
                                               "larger world)"
                                             : "");
    }
    return MLM_OK;
}

mlm_status mlm_mesh_join(mlm_comm *world, const mlm_mesh *mesh, mlm_mesh_comms *out,
                         mlm_error *err) {
    memset(out, 0, sizeof *out);
    int r = mlm_comm_rank(world), active = r < mesh->devices;
    out->lane = active ? r / mesh->tp : -1;
    out->tp_rank = active ? r % mesh->tp : -1;
    mlm_status st = mlm_comm_split(world, active ? 0 : -1, r, &out->mesh, err);
    if (!st) st = mlm_comm_split(world, active ? out->lane : -1, r, &out->tp, err);
    if (st) mlm_mesh_leave(out);
    return st;
}

void mlm_mesh_leave(mlm_mesh_comms *c) {
    mlm_comm_free(c->tp);
    mlm_comm_free(c->mesh);
    c->tp = c->mesh = NULL;
}
