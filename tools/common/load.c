/* tools/common/load.c: loading a model for any command: the precision flags, the memory check
 * before anything is read, and the weight cache's messages and progress bar on stderr. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/tool.h"

int tool_precision_flag(const char *cmd, const char *flag, const char *value, tool_precision *p) {
    if (!strcmp(flag, "--optimizations")) {
        static const char *names[] = {"performance", "accuracy", "bf16", "f32", "native"};
        for (int i = 0; i < 5; i++)
            if (!strcmp(value, names[i])) {
                p->optimizations = names[i];
                return 1;
            }
        tool_usage(cmd, "--optimizations is performance, accuracy, bf16, f32 or native, got '%s'",
                   value);
        return 0;
    }
    if (!strcmp(flag, "--dtype")) { /* the older spelling of the bf16 and f32 profiles */
        if (!strcmp(value, "f32") || !strcmp(value, "bf16")) {
            p->optimizations = value[0] == 'f' ? "f32" : "bf16";
            return 1;
        }
        tool_usage(cmd, "--dtype is f32 or bf16, got '%s'", value);
        return 0;
    }
    if (!strcmp(flag, "--decoder-config")) {
        p->decoder_config = value;
        return 1;
    }
    return tool_mesh_flag(cmd, flag, value, p);
}

typedef struct progress {
    const char *cmd;
    int tty;
    double last;
    int started, finished;
} progress;

static void on_message(void *user, const char *msg) {
    progress *pr = user;
    if (tool_rank() > 0) return;
    fprintf(stderr, "meshlm %s: %s\n", pr->cmd, msg);
}

static void on_progress(void *user, int64_t done, int64_t total) {
    progress *pr = user;
    if (tool_rank() > 0) return;
    double now = tool_now(), frac = total > 0 ? (double)done / (double)total : 1;
    if (!pr->started) {
        pr->started = 1;
        fprintf(stderr, "meshlm %s: converting the weights for the cache (%.2f GB)%s", pr->cmd,
                total / 1e9, pr->tty ? "\n" : "...");
    }
    if (pr->finished) return;
    pr->finished = done >= total;
    if (!pr->tty) {
        if (done >= total) fprintf(stderr, " done\n");
        return;
    }
    if (done < total && now - pr->last < 0.2) return;
    pr->last = now;
    char bar[41];
    int fill = (int)(frac * 40);
    for (int i = 0; i < 40; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[40] = 0;
    fprintf(stderr, "\r  [%s] %3d%%  %.2f / %.2f GB", bar, (int)(frac * 100), done / 1e9,
            total / 1e9);
    if (done >= total) fprintf(stderr, "\n");
}

/* The ranks of this job on this machine (mpirun's local size), 1 alone. */
static int local_ranks(void) {
    const char *s = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int n = s ? atoi(s) : 1;
    return n > 0 ? n : 1;
}

/* The draft model's share of the memory (D's --draft-model, else none): its weights in its
 * profile and a KV pool of as many blocks as the model's, run without TP; 0 after a message. */
static int draft_plan(const char *cmd, const tool_draft *d, const mlm_exec_params *xp,
                      mlm_memory_plan *plan) {
    memset(plan, 0, sizeof *plan);
    if (!d || !d->model) return 1;
    tool_precision dp = {.optimizations = d->optimizations};
    tool_precision_resolve(&dp, d->model);
    mlm_exec_params dxp = *xp;
    dxp.lead = 0;
    mlm_error err = {0};
    if (!mlm_memory_plan_at(d->model, 1, dp.optimizations, NULL, &dxp, plan, &err)) return 1;
    fprintf(stderr, "meshlm %s: --draft-model: %s\n", cmd, err.msg);
    return 0;
}

int tool_memory_fits(const char *cmd, const char *dir, const tool_precision *p,
                     const mlm_exec_params *xp, const tool_draft *d) {
    mlm_error err = {0};
    if (tool_mesh_setup(cmd, dir, p, &err)) {
        fprintf(stderr, "meshlm %s: %s\n", cmd, err.msg);
        return 0;
    }
    mlm_config cfg;
    if (mlm_config_load(dir, &cfg, NULL) != MLM_OK) return 1; /* the loader reports it */
    mlm_memory_plan plan;
    int tp = tool_mesh() ? tool_mesh()->tp : 1;
    if (mlm_memory_plan_at(dir, tp, p->optimizations, p->decoder_config, xp, &plan, &err)) {
        fprintf(stderr, "meshlm %s: %s\n", cmd, err.msg);
        return 0;
    }
    /* every rank on this machine holds its own shard: together they must fit */
    int here = local_ranks();
    if (here > 1)
        plan.total *= here, plan.weights *= here, plan.kv *= here, plan.scratch *= here,
            plan.images *= here;
    mlm_memory_plan dplan;
    if (!draft_plan(cmd, d, xp, &dplan)) return 0;
    if (plan.available < 0 || plan.total + dplan.total <= plan.available) return 1;
    if (here > 1)
        fprintf(stderr, "meshlm %s: the %d ranks on this machine each hold a shard\n", cmd, here);
    const double GB = 1e9;
    char images[96] = "";
    if (plan.images)
        snprintf(images, sizeof images, ", images %.2f GB (their K/V and the vision encoder)",
                 plan.images / GB);
    char avail[64];
    snprintf(avail, sizeof avail, "but %.1f GB of memory is available", plan.available / GB);
    fprintf(stderr,
            "meshlm %s: %s needs %.1f GB (weights %.1f GB in the %s profile, KV cache %.1f GB "
            "for --max-seq-len %d, scratch %.2f GB%s, converting %.2f GB)%s%s\n",
            cmd, dir, plan.total / GB, plan.weights / GB, p->optimizations, plan.kv / GB,
            xp->max_seq_len, plan.scratch / GB, images, plan.convert / GB, dplan.total ? "" : " ",
            dplan.total ? "" : avail);
    if (dplan.total)
        fprintf(stderr,
                "  and --draft-model %s needs %.1f GB more (weights %.1f GB, KV cache %.1f GB): "
                "%.1f GB in all, %s\n",
                d->model, dplan.total / GB, dplan.weights / GB, dplan.kv / GB,
                (plan.total + dplan.total) / GB, avail);
    /* the most precise lighter profile that fits (native, only for a GGUF file, fails to
     * plan for any other) */
    static const char *profiles[] = {"f32", "bf16", "accuracy", "native", "performance"};
    const char *best = NULL;
    int64_t best_total = 0;
    for (int i = 0; i < 5; i++) {
        mlm_memory_plan q;
        if (!mlm_memory_plan_at(dir, tp, profiles[i], NULL, xp, &q, NULL) && q.total < plan.total &&
            q.total + dplan.total <= q.available && q.total > best_total)
            best = profiles[i], best_total = q.total;
    }
    if (best) {
        fprintf(stderr, "  --optimizations %s would fit (%.1f GB)\n", best, best_total / GB);
        return 0;
    }
    if (plan.total - plan.kv + dplan.total - dplan.kv <= plan.available)
        fprintf(stderr, "  a smaller --max-seq-len would fit\n");
    return 0;
}

int32_t tool_largest_seq_len(const char *dir, const tool_precision *p, const mlm_exec_params *xp,
                             int32_t cap) {
    int32_t bs = xp->block_size;
    int tp = tool_mesh() ? tool_mesh()->tp : p->tp > 0 ? p->tp : 1; /* one rank's share */
    /* one block per user: the KV pool is the only part that grows with the length, by exactly
     * this much per block per user */
    mlm_exec_params t = *xp;
    t.max_seq_len = bs;
    t.max_num_blocks = xp->max_seqs;
    mlm_memory_plan one;
    if (mlm_memory_plan_at(dir, tp, p->optimizations, p->decoder_config, &t, &one, NULL)) return 0;
    int64_t blocks = cap / bs;
    if (one.available >= 0) {
        int64_t room = one.available - (one.total - one.kv);
        blocks = room < 0 ? 0 : room / one.kv < blocks ? room / one.kv : blocks;
    }
    return (int32_t)(blocks * bs);
}

/* Loads DIR in P's profile with TP (NULL: whole), with the cache's messages and progress. */
static mlm_status load(const char *cmd, const char *dir, const tool_precision *p, int n_threads,
                       mlm_comm *tp, mlm_model **model, mlm_error *err) {
    static progress pr;
    pr = (progress){.cmd = cmd, .tty = isatty(2)};
    mlm_model_params mp = mlm_model_default_params();
    mp.optimizations = p->optimizations;
    mp.decoder_config = p->decoder_config;
    mp.n_threads = n_threads;
    mp.on_message = on_message;
    mp.on_progress = on_progress;
    mp.user = &pr;
    mp.tp = tp;
    mp.tp_reduce = p->tp_reduce;
    return mlm_model_load(dir, &mp, model, err);
}

mlm_status tool_load_model(const char *cmd, const char *dir, const tool_precision *p, int n_threads,
                           mlm_model **model, mlm_error *err) {
    mlm_status st = tool_mesh_setup(cmd, dir, p, err);
    if (st) return st;
    return load(cmd, dir, p, n_threads, tool_mesh_tp(), model, err);
}

mlm_status tool_load_whole(const char *cmd, const char *dir, const tool_precision *p, int n_threads,
                           mlm_model **model, mlm_error *err) {
    return load(cmd, dir, p, n_threads, NULL, model, err);
}
