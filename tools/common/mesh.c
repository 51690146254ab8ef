/* tools/common/mesh.c: the command's place in a mesh. main() opens the world (MPI under mpirun,
 * else this process alone) and closes it; a command that runs a model resolves the mesh
 * flags against the model's config once (tool_mesh_setup), joins its lane and loads its
 * shard. Only rank 0 writes to stdout and stderr; the other ranks' streams go to /dev/null,
 * except the error messages of a failure only they see (tool_fail prints those with the
 * rank). A failure on a mesh ends every rank (MPI_Abort) so that none waits for ever; the
 * refusals every rank reaches alike (usage, mesh checks) exit normally on all of them. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/tool.h"

static struct {
    mlm_comm *world;
    mlm_mesh mesh;
    mlm_mesh_comms comms;
    int joined;
    int err_fd; /* the original stderr of a rank > 0, -1 on rank 0 */
    int alike;  /* the failure being returned is one every rank reaches alike */
} g = {.err_fd = -1};

int tool_mesh_begin(void) {
    mlm_error err = {0};
    if (mlm_comm_world(&g.world, &err)) {
        fprintf(stderr, "meshlm: %s\n", err.msg);
        return 0;
    }
    if (mlm_comm_rank(g.world) > 0) {
        fflush(stdout), fflush(stderr);
        g.err_fd = dup(2);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 1), dup2(null, 2), close(null);
    }
    return 1;
}

int tool_mesh_end(int rc) {
    if (rc != TOOL_OK && mlm_comm_size(g.world) > 1 && !g.alike) {
        fflush(stdout), fflush(stderr);
        mlm_comm_abort(g.world, rc);
    }
    mlm_mesh_leave(&g.comms);
    mlm_comm_free(g.world);
    g.world = NULL;
    return rc;
}

void tool_mesh_alike(void) { g.alike = 1; }
int tool_rank(void) { return mlm_comm_rank(g.world); }
int tool_world_size(void) { return mlm_comm_size(g.world); }

FILE *tool_err_stream(void) {
    static FILE *f;
    if (g.err_fd < 0) return stderr;
    if (!f) f = fdopen(g.err_fd, "w");
    return f ? f : stderr;
}

const mlm_mesh *tool_mesh(void) { return g.joined ? &g.mesh : NULL; }
mlm_comm *tool_mesh_tp(void) { return g.comms.tp; }
mlm_comm *tool_mesh_comm(void) { return g.comms.mesh; }
int tool_mesh_lane(void) { return g.joined ? g.comms.lane : 0; }
int tool_mesh_leader(void) { return !g.joined || g.comms.tp_rank == 0; }

int tool_mesh_flag(const char *cmd, const char *flag, const char *value, tool_precision *p) {
    long long v;
    if (!strcmp(flag, "--mesh")) {
        if (!mlm_mesh_devices(value)) {
            tool_usage(cmd, "--mesh is N150, N300, T3K or TG, got '%s'", value);
            return 0;
        }
        p->mesh = value;
        return 1;
    }
    if (!strcmp(flag, "--tp-reduce")) {
        if (strcmp(value, "exact") && strcmp(value, "sum")) {
            tool_usage(cmd, "--tp-reduce is exact or sum, got '%s'", value);
            return 0;
        }
        p->tp_reduce = strcmp(value, "sum") ? MLM_TP_EXACT : MLM_TP_SUM;
        return 1;
    }
    if (!tool_int(cmd, flag, value, 1, 1024, &v)) return 0;
    if (!strcmp(flag, "--tp"))
        p->tp = (int)v;
    else
        p->dp = (int)v;
    return 1;
}

/* The mesh P asks for: the flags, or MESHLM_FAKE_DEVICE (the seeds' FAKE_DEVICE: a smaller
 * mesh's run on a larger allocation) in place of --mesh. */
static const char *mesh_name(const tool_precision *p, int *fake) {
    const char *f = getenv("MESHLM_FAKE_DEVICE");
    *fake = f && f[0];
    return *fake ? f : p->mesh;
}

mlm_status tool_mesh_resolve(const mlm_config *cfg, const tool_precision *p, int world,
                             mlm_mesh *out, mlm_error *err) {
    int fake;
    const char *name = mesh_name(p, &fake);
    if (fake && !mlm_mesh_devices(name)) {
        return mlm_error_set(err, MLM_ERR_INVALID_ARG,
                             "MESHLM_FAKE_DEVICE is N150, N300, T3K or TG, got '%s'", name);
    }
    /* mpirun -np N with no mesh flag: one TP group of all N ranks; with --dp M alone, M lanes
     * of N / M */
    int tp = p->tp;
    if (!name && !tp)
        tp = !p->dp ? world : world % p->dp == 0 && world >= p->dp ? world / p->dp : 1;
    return mlm_mesh_resolve(name, tp, p->dp, cfg, world, fake, out, err);
}

mlm_status tool_mesh_setup(const char *cmd, const char *dir, const tool_precision *p,
                           mlm_error *err) {
    if (g.joined) return MLM_OK;
    int fake;
    const char *name = mesh_name(p, &fake);
    if (!name && !p->tp && !p->dp && mlm_comm_size(g.world) == 1) return MLM_OK; /* no mesh */
    mlm_config cfg;
    mlm_error e = {0};
    if (mlm_config_load(dir, &cfg, &e)) return MLM_OK; /* the loader reports it */
    mlm_status st = tool_mesh_resolve(&cfg, p, mlm_comm_size(g.world), &g.mesh, err);
    if (st) {
        tool_mesh_alike(); /* every rank resolves the same flags against the same config */
        return st;
    }
    if ((st = mlm_mesh_join(g.world, &g.mesh, &g.comms, err))) return st;
    g.joined = 1;
    if (g.comms.lane < 0) { /* past the mesh: nothing to do but wait for the others */
        tool_mesh_end(TOOL_OK);
        exit(TOOL_OK);
    }
    if (mlm_comm_size(g.world) == 1 && g.mesh.devices > 1) { /* only a fake device does this */
        return mlm_error_set(err, MLM_ERR_INTERNAL, "mesh: %d devices on one rank", g.mesh.devices);
    }
    if (mlm_comm_size(g.world) > 1 && !getenv("MESHLM_QUIET_MESH"))
        fprintf(stderr, "meshlm %s: mesh %s: %d ranks, TP %d x DP %d (%s)\n", cmd,
                g.mesh.name[0] ? g.mesh.name : "--tp/--dp", mlm_comm_size(g.world), g.mesh.tp,
                g.mesh.dp, mlm_comm_kind(g.world));
    return MLM_OK;
}
