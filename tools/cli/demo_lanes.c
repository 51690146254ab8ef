/* tools/cli/demo_lanes.c: the demo's data-parallel lanes (the seeds' ci-b1-DP-N and DP-N-bB):
 * each lane, a TP group of the mesh, runs its own users; afterwards every lane leader's
 * outputs and timings go to rank 0, which checks and reports all of them. */
#include <stdlib.h>
#include <string.h>

#include "demo.h"

/* A lane's message: its stats, then per output {n, stopped, tokens[n]} as int32. */
static int32_t *pack(const mlm_gen_output *outs, int n, const demo_lane_stats *st, size_t *bytes) {
    size_t ints = sizeof *st / sizeof(int32_t) + 1;
    for (int i = 0; i < n; i++)
        ints += 2 + (size_t)outs[i].n;
    int32_t *m = malloc(ints * sizeof *m);
    if (!m) return NULL;
    memcpy(m, st, sizeof *st);
    int32_t *p = m + sizeof *st / sizeof(int32_t);
    for (int i = 0; i < n; i++) {
        *p++ = outs[i].n;
        *p++ = outs[i].stopped;
        memcpy(p, outs[i].tokens, (size_t)outs[i].n * sizeof *p);
        p += outs[i].n;
    }
    *bytes = (size_t)(p - m) * sizeof *m;
    return m;
}

int demo_lanes_gather(const mlm_mesh *mesh, const mlm_gen_output *outs, int n,
                      const demo_lane_stats *mine, mlm_gen_output *all, demo_lane_stats *stats) {
    mlm_comm *c = tool_mesh_comm();
    int size = mlm_comm_size(c), leader = tool_mesh_leader();
    size_t mine_bytes = 0, *counts = calloc((size_t)size, sizeof *counts);
    int32_t *msg = leader ? pack(outs, n, mine, &mine_bytes) : NULL;
    mlm_error err = {0};
    int ok = counts && (!leader || msg);
    ok = ok && !mlm_comm_allgather(c, &mine_bytes, sizeof mine_bytes, counts, &err);
    size_t total = 0;
    for (int r = 0; ok && r < size; r++)
        total += counts[r];
    char *buf = ok ? malloc(total ? total : 1) : NULL;
    ok = ok && buf && !mlm_comm_allgatherv(c, msg, buf, counts, &err);
    if (ok && tool_rank() == 0) {
        const char *p = buf;
        for (int r = 0; r < size; r++) {
            if (!counts[r]) continue;
            int lane = r / mesh->tp;
            const int32_t *q = (const int32_t *)p;
            memcpy(&stats[lane], q, sizeof *stats);
            q += sizeof *stats / sizeof(int32_t);
            for (int i = 0; i < n; i++) {
                mlm_gen_output *o = &all[lane * n + i];
                o->n = *q++;
                o->stopped = *q++;
                o->tokens = malloc(((size_t)o->n + 1) * sizeof *o->tokens);
                if (o->tokens) memcpy(o->tokens, q, (size_t)o->n * sizeof *q);
                q += o->n;
            }
            p += counts[r];
        }
    }
    if (!ok)
        fprintf(stderr, "meshlm demo: gathering the lanes' outputs: %s\n",
                err.msg[0] ? err.msg : "out of memory");
    free(counts), free(msg), free(buf);
    return ok;
}
