/* tests/mesh/mesh_logits.c: one model's logits over a tensor-parallel world, and what each
 * rank's memory peaked at. Run under mpirun (tests/mesh/test_70b.sh):
 *
 *   mpirun -np N mesh_logits DIR --profile P --out FILE [--smaps]
 *   mesh_logits --compare A B
 *
 * The first form loads DIR with TP = N (every rank binds only its shard; no weight cache, one
 * thread), runs a fixed 8-token sequence in one step asking for every position's logits,
 * and rank 0 writes them to FILE as raw f32, position after position (8 x n_vocab). Each
 * rank reads its peak resident set (VmHWM of /proc/self/status) right after loading and
 * after the run, with its RssAnon and RssFile at those points, and mlm_model_weight_bytes;
 * rank 0 prints them for every rank as one JSON line on stdout. With --smaps each rank also
 * prints, after loading, every mapping of /proc/self/smaps resident over 1 MB to stderr (which
 * files, and how much of each, its RssFile is made of).
 * --compare reads two such files (no MPI) and prints max |A - B| / max |B| and the argmaxes
 * for every position; exit 0 when they are byte-identical (a mesh gives one process's bits),
 * 1 when not, 2 for bad arguments or files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"
#include "meshlm.h"

#define N_POS 8

/* "<|begin_of_text|>The quick brown fox jumps over the" in Llama 3's vocabulary; taken
 * modulo n_vocab for smaller vocabularies. */
static const int32_t TOKENS[N_POS] = {128000, 791, 4062, 14198, 39935, 35308, 927, 279};

static int world_rank;

static void die(const char *what, const mlm_error *err, mlm_comm *world) {
    fprintf(stderr, "mesh_logits (rank %d): %s%s%s\n", world_rank, what, err ? ": " : "",
            err ? err->msg : "");
    mlm_comm_abort(world, 1);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* This process's memory figures, in bytes (-1 where /proc/self/status lacks them). */
typedef struct mem {
    int64_t hwm, anon, file;
} mem;

static mem mem_now(void) {
    mem m = {-1, -1, -1};
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1)
            m.hwm = kb * 1024;
        else if (sscanf(line, "RssAnon: %lld kB", &kb) == 1)
            m.anon = kb * 1024;
        else if (sscanf(line, "RssFile: %lld kB", &kb) == 1)
            m.file = kb * 1024;
    }
    if (f) fclose(f);
    return m;
}

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

/* Every mapping of this process resident over 1 MB, to stderr. */
static void print_smaps(void) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512], name[400] = "";
    long long kb;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            /* "lo-hi perms offset dev inode   path": the path follows the inode's spaces */
            char *sp = line;
            for (int field = 0; field < 5 && sp; field++)
                sp = strchr(sp + 1, ' ');
            while (sp && *sp == ' ')
                sp++;
            snprintf(name, sizeof name, "%s", sp && *sp ? sp : "[anon]\n");
            name[strcspn(name, "\n")] = 0;
        } else if (sscanf(line, "Rss: %lld kB", &kb) == 1 && kb > 1024) {
            fprintf(stderr, "mesh_logits rank %d: %9lld kB resident: %s\n", world_rank, kb, name);
        }
    }
    if (f) fclose(f);
}

// ---- --compare ----

/* A malloc'd copy of file PATH (*N bytes), or NULL after a message. */
static float *read_logits(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "mesh_logits: %s: cannot open\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *v = size > 0 ? malloc((size_t)size) : NULL;
    if (!v || fread(v, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "mesh_logits: %s: cannot read %ld bytes\n", path, size);
        free(v);
        v = NULL;
    }
    fclose(f);
    *n = (size_t)size;
    return v;
}

static int compare(const char *pa, const char *pb) {
    size_t na, nb;
    float *a = read_logits(pa, &na), *b = a ? read_logits(pb, &nb) : NULL;
    if (!a || !b) {
        free(a);
        return 2;
    }
    if (na != nb || na % (N_POS * sizeof(float))) {
        fprintf(stderr, "mesh_logits: %s has %zu bytes and %s %zu: not both %d x n_vocab f32\n", pa,
                na, pb, nb, N_POS);
        free(a), free(b);
        return 2;
    }
    int64_t V = (int64_t)(na / (N_POS * sizeof(float)));
    double worst = 0;
    int bad = 0;
    for (int t = 0; t < N_POS; t++) {
        const float *x = a + t * V, *y = b + t * V;
        double d = 0, mx = 0;
        for (int64_t v = 0; v < V; v++) {
            double e = fabs((double)x[v] - y[v]), r = fabs((double)y[v]);
            if (e > d) d = e;
            if (r > mx) mx = r;
        }
        double rel = mx > 0 ? d / mx : d;
        int ax = helper_argmax(x, V), ay = helper_argmax(y, V);
        int ok = !memcmp(x, y, (size_t)V * sizeof *x); /* byte-identical (the exact mesh) */
        bad += !ok;
        if (rel > worst) worst = rel;
        printf("position %d: max|A-B| %.3e, max|B| %.4f, ratio %.3e; argmax %d / %d%s\n", t, d, mx,
               rel, ax, ay, ok ? "" : "  <- differs");
    }
    printf("max ratio %.3e, %d of %d positions not byte-identical (n_vocab %lld)\n", worst, bad,
           N_POS, (long long)V);
    free(a), free(b);
    return bad ? 1 : 0;
}

// ---- the run ----

/* What every rank reports to rank 0. */
typedef struct figures {
    int64_t weight_bytes;
    int64_t hwm_load, anon_load, file_load; /* right after mlm_model_load */
    int64_t hwm_run, anon_run, file_run;    /* after the step */
    double load_s, run_s;
    uint64_t logits_hash;
} figures;

static void usage(void) {
    fprintf(stderr, "usage: mpirun -np N mesh_logits DIR --profile P --out FILE [--smaps]\n"
                    "       mesh_logits --compare A B\n");
}

int main(int argc, char **argv) {
    const char *dir = NULL, *profile = "f32", *out = NULL;
    int smaps = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--compare")) {
            if (i + 2 >= argc) {
                usage();
                return 2;
            }
            return compare(argv[i + 1], argv[i + 2]);
        } else if (!strcmp(argv[i], "--profile") && i + 1 < argc) {
            profile = argv[++i];
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(argv[i], "--smaps")) {
            smaps = 1;
        } else if (argv[i][0] != '-' && !dir) {
            dir = argv[i];
        } else {
            usage();
            return 2;
        }
    }
    if (!dir || !out) {
        usage();
        return 2;
    }
    mlm_comm *world = NULL;
    mlm_error err = {0};
    if (mlm_comm_world(&world, &err)) die("world", &err, NULL);
    world_rank = mlm_comm_rank(world);
    int size = mlm_comm_size(world);
    mlm_config cfg;
    if (mlm_config_load(dir, &cfg, &err)) die("config", &err, world);
    mlm_mesh mesh;
    if (mlm_mesh_resolve(NULL, size, 1, &cfg, size, 0, &mesh, &err)) die("mesh", &err, world);
    mlm_mesh_comms mc;
    if (mlm_mesh_join(world, &mesh, &mc, &err)) die("join", &err, world);

    figures me = {0};
    double t0 = now();
    mlm_model_params mp = mlm_model_default_params();
    mp.optimizations = profile;
    mp.use_cache = 0;
    mp.n_threads = 1;
    mp.tp = mc.tp;
    mlm_model *m = NULL;
    if (mlm_model_load(dir, &mp, &m, &err)) die("load", &err, world);
    me.load_s = now() - t0;
    mem a = mem_now();
    me.hwm_load = a.hwm, me.anon_load = a.anon, me.file_load = a.file;
    if (smaps) print_smaps();
    me.weight_bytes = mlm_model_weight_bytes(m);

    mlm_exec_params ep = mlm_exec_default_params();
    ep.max_seq_len = 4 * N_POS;
    ep.block_size = N_POS;
    ep.max_step_tokens = N_POS;
    ep.max_step_logits = N_POS;
    ep.n_threads = 1;
    mlm_exec *e = NULL;
    if (mlm_exec_create(m, &ep, &e, &err)) die("executor", &err, world);
    int32_t V = cfg.n_vocab, tokens[N_POS], seq[N_POS] = {0}, pos[N_POS];
    int8_t want[N_POS];
    for (int i = 0; i < N_POS; i++) {
        tokens[i] = TOKENS[i] % V;
        pos[i] = i;
        want[i] = 1;
    }
    size_t n = (size_t)N_POS * (size_t)V;
    float *logits = malloc(n * sizeof *logits);
    if (!logits) die("out of memory for the logits", NULL, world);
    t0 = now();
    mlm_batch b = {.n = N_POS, .tokens = tokens, .seq = seq, .pos = pos, .logits = want};
    if (mlm_exec_seq_reset(e, 0, 0, &err) || mlm_exec_step(e, &b, logits, &err))
        die("step", &err, world);
    me.run_s = now() - t0;
    mem r = mem_now();
    me.hwm_run = r.hwm, me.anon_run = r.anon, me.file_run = r.file;
    me.logits_hash = fnv(logits, n * sizeof *logits);

    figures *all = malloc((size_t)size * sizeof *all);
    if (!all) die("out of memory", NULL, world);
    if (mlm_comm_allgather(mc.mesh, &me, sizeof me, all, &err)) die("gather", &err, world);
    int rc = 0;
    if (world_rank == 0) {
        FILE *f = fopen(out, "wb");
        if (!f || fwrite(logits, sizeof *logits, n, f) != n || fclose(f) != 0) {
            fprintf(stderr, "mesh_logits: %s: cannot write the logits\n", out);
            rc = 1;
        }
        int same = 1;
        for (int i = 0; i < size; i++)
            same &= all[i].logits_hash == all[0].logits_hash;
        printf("{\"dir\": \"%s\", \"profile\": \"%s\", \"tp\": %d, \"n_layer\": %d, "
               "\"positions\": %d, \"argmax_last\": %d, \"ranks_bit_identical\": %s, \"ranks\": [",
               dir, profile, size, cfg.n_layer, N_POS,
               helper_argmax(logits + (N_POS - 1) * (size_t)V, V), same ? "true" : "false");
        for (int i = 0; i < size; i++) {
            const figures *x = &all[i];
            printf("%s{\"rank\": %d, \"weight_bytes\": %lld, \"hwm_load\": %lld, "
                   "\"anon_load\": %lld, \"file_load\": %lld, \"hwm_run\": %lld, "
                   "\"anon_run\": %lld, \"file_run\": %lld, \"load_s\": %.2f, \"run_s\": %.2f}",
                   i ? ", " : "", i, (long long)x->weight_bytes, (long long)x->hwm_load,
                   (long long)x->anon_load, (long long)x->file_load, (long long)x->hwm_run,
                   (long long)x->anon_run, (long long)x->file_run, x->load_s, x->run_s);
        }
        printf("]}\n");
        fflush(stdout);
    }
    free(all);
    free(logits);
    mlm_exec_free(e);
    mlm_model_free(m);
    mlm_mesh_leave(&mc);
    mlm_comm_free(world);
    return rc;
}
