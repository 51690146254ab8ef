/* tests/mesh/mesh_tp.c: tensor and data parallelism against one process and against
 * transformers. Run under mpirun (tests/mesh/test_mesh.sh):
 *
 *   mpirun -np N mesh_tp FIXTURE [--dp D] [--profiles f32,bf16,...] [--format hf|meta8]
 *
 * FIXTURE is a folder made by tests/fixtures/make_mesh_fixtures.py (or the older llama/phi3
 * ones): its FORMAT subfolder holds the checkpoint, logits.f32 transformers' float32 logits of
 * reference.json's 24 tokens and "greedy" its 64 greedy tokens. The world is D lanes of TP
 * N / D. In every profile each lane runs its user (the 24 tokens rotated by 5 x lane, read
 * in chunks of 7 so prefill chunks and single tokens both go through the mesh) and its lane
 * leader runs the same user in one process, unsharded:
 *   - every position's logits byte-identical to one process's, in every profile (the
 *     row-parallel products' K chunks are summed in one order on any mesh: forward.c);
 *   - every rank of the lane has bit-identical logits;
 *   - f32, lane 0: the logits within 1e-4 x max |logit| of transformers' (as test_llama);
 *   - 64 greedy tokens from the 8-token prompt: the single-process run's, and in f32
 *     transformers' own; the logits of the prompt's last token and of the first 16 decode
 *     steps byte-identical to one process's.
 * Rank 0 prints "ok"/"not ok" lines and the closing "N passed, N failed" for all ranks. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "meshlm.h"

#define N_TOK 24
#define N_GEN 64
#define N_PROMPT 8
#define N_STEPS 16 /* decode steps whose logits are compared */

static int passed, failed;
static int world_rank;
static char lines[64][256];
static int n_lines;

static void report(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(int ok, const char *fmt, ...) {
    va_list ap;
    char msg[200];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ok)
        passed++;
    else
        failed++;
    if (n_lines < 64)
        snprintf(lines[n_lines++], sizeof lines[0], "%s - %s", ok ? "ok" : "not ok", msg);
}

static void die(const char *what, const mlm_error *err, mlm_comm *world) {
    fprintf(stderr, "mesh_tp (rank %d): %s: %s\n", world_rank, what, err ? err->msg : "");
    mlm_comm_abort(world, 1);
}

typedef struct ref {
    int vocab;
    int32_t tokens[N_TOK], greedy[N_GEN];
    float *logits; /* (N_TOK, vocab) */
} ref;

static int ints(const json_t *a, int32_t *out, int n) {
    if (!json_is_array(a) || (int)json_array_size(a) < n) return -1;
    for (int i = 0; i < n; i++)
        out[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return 0;
}

static int ref_load(const char *dir, ref *r) {
    char path[600];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) return -1;
    r->vocab = (int)json_integer_value(json_object_get(j, "vocab"));
    int bad = ints(json_object_get(j, "tokens"), r->tokens, N_TOK) ||
              ints(json_object_get(json_object_get(j, "greedy"), "generated"), r->greedy, N_GEN);
    json_decref(j);
    snprintf(path, sizeof path, "%s/logits.f32", dir);
    FILE *f = fopen(path, "rb");
    size_t n = (size_t)N_TOK * (size_t)r->vocab;
    r->logits = malloc(n * sizeof *r->logits);
    if (bad || !f || !r->logits || fread(r->logits, sizeof *r->logits, n, f) != n) bad = 1;
    if (f) fclose(f);
    return bad ? -1 : 0;
}

static mlm_model *load(const char *dir, const char *profile, mlm_comm *tp, mlm_comm *world) {
    mlm_model_params mp = mlm_model_default_params();
    mp.optimizations = profile;
    mp.use_cache = 0;
    mp.n_threads = 1;
    mp.tp = tp;
    mlm_model *m = NULL;
    mlm_error err = {0};
    if (mlm_model_load(dir, &mp, &m, &err)) die("load", &err, world);
    return m;
}

static mlm_exec *executor(const mlm_model *m, mlm_comm *world) {
    mlm_exec_params ep = mlm_exec_default_params();
    ep.max_seq_len = 128;
    ep.block_size = 8;
    ep.max_step_tokens = 32;
    ep.max_step_logits = 32;
    ep.n_threads = 1;
    mlm_exec *e = NULL;
    mlm_error err = {0};
    if (mlm_exec_create(m, &ep, &e, &err)) die("executor", &err, world);
    return e;
}

/* All logits of TOKENS[0..n), in steps of CHUNK. */
static void run_logits(const mlm_model *m, const int32_t *tokens, int n, int chunk, float *out,
                       mlm_comm *world) {
    mlm_exec *e = executor(m, world);
    mlm_error err = {0};
    int32_t seq[32] = {0}, pos[32];
    int8_t want[32];
    memset(want, 1, sizeof want);
    int V = mlm_model_config(m)->n_vocab;
    if (mlm_exec_seq_reset(e, 0, 0, &err)) die("reset", &err, world);
    for (int i = 0; i < n; i += chunk) {
        int k = n - i < chunk ? n - i : chunk;
        for (int j = 0; j < k; j++)
            pos[j] = i + j;
        mlm_batch b = {.n = k, .tokens = tokens + i, .seq = seq, .pos = pos, .logits = want};
        if (mlm_exec_step(e, &b, out + (size_t)i * V, &err)) die("step", &err, world);
    }
    mlm_exec_free(e);
}

/* N_GEN greedy tokens after PROMPT (N_PROMPT tokens); STEPS gets the logits the first
 * 1 + N_STEPS tokens were picked from (the prompt's last, then each decode step's). */
static void run_greedy(const mlm_model *m, const int32_t *prompt, int32_t *out, float *steps,
                       mlm_comm *world) {
    mlm_exec *e = executor(m, world);
    mlm_error err = {0};
    int V = mlm_model_config(m)->n_vocab;
    float *logits = malloc((size_t)V * N_PROMPT * sizeof *logits);
    int32_t seq[N_PROMPT] = {0}, pos[N_PROMPT];
    int8_t want[N_PROMPT] = {0};
    want[N_PROMPT - 1] = 1;
    for (int j = 0; j < N_PROMPT; j++)
        pos[j] = j;
    if (mlm_exec_seq_reset(e, 0, 0, &err)) die("reset", &err, world);
    mlm_batch b = {.n = N_PROMPT, .tokens = prompt, .seq = seq, .pos = pos, .logits = want};
    if (mlm_exec_step(e, &b, logits, &err)) die("prefill", &err, world);
    for (int i = 0; i < N_GEN; i++) {
        if (i <= N_STEPS) memcpy(steps + (size_t)i * V, logits, (size_t)V * sizeof *logits);
        out[i] = helper_argmax(logits, V);
        int32_t p = N_PROMPT + i;
        int8_t one = 1;
        mlm_batch d = {.n = 1, .tokens = &out[i], .seq = seq, .pos = &p, .logits = &one};
        if (i + 1 < N_GEN && mlm_exec_step(e, &d, logits, &err)) die("decode", &err, world);
    }
    free(logits);
    mlm_exec_free(e);
}

/* max over positions of max |a - b| / max |b|, and the positions whose argmax differs. */
static double rel_diff(const float *a, const float *b, int n, int V, int *argmax_diff) {
    double worst = 0;
    *argmax_diff = 0;
    for (int t = 0; t < n; t++) {
        double mx = 0, d = 0;
        for (int v = 0; v < V; v++) {
            double r = fabs(b[t * V + v]), e = fabs(a[t * V + v] - b[t * V + v]);
            if (r > mx) mx = r;
            if (e > d) d = e;
        }
        if (mx > 0 && d / mx > worst) worst = d / mx;
        *argmax_diff += helper_argmax(a + t * V, V) != helper_argmax(b + t * V, V);
    }
    return worst;
}

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

int main(int argc, char **argv) {
    const char *fixture = NULL, *format = "hf", *profiles = "f32,bf16,accuracy,performance";
    int dp = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dp") && i + 1 < argc)
            dp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--profiles") && i + 1 < argc)
            profiles = argv[++i];
        else if (!strcmp(argv[i], "--format") && i + 1 < argc)
            format = argv[++i];
        else
            fixture = argv[i];
    }
    mlm_comm *world = NULL;
    mlm_error err = {0};
    if (!fixture) {
        fprintf(stderr, "usage: mpirun -np N mesh_tp FIXTURE [--dp D] [--profiles P,...]\n");
        return 2;
    }
    if (mlm_comm_world(&world, &err)) die("world", &err, NULL);
    world_rank = mlm_comm_rank(world);
    int size = mlm_comm_size(world);
    ref r;
    if (ref_load(fixture, &r))
        die("reading the fixture's reference.json and logits.f32", NULL, world);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", fixture, format);
    mlm_config cfg;
    if (mlm_config_load(dir, &cfg, &err)) die("config", &err, world);
    mlm_mesh mesh;
    if (mlm_mesh_resolve(NULL, size / (dp > 0 ? dp : 1), dp, &cfg, size, 0, &mesh, &err))
        die("mesh", &err, world);
    mlm_mesh_comms mc;
    if (mlm_mesh_join(world, &mesh, &mc, &err)) die("join", &err, world);
    int lane = mc.lane, leader = mc.tp_rank == 0, V = r.vocab;
    /* this lane's user */
    int32_t user[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        user[i] = r.tokens[(i + 5 * lane) % N_TOK];
    size_t n = (size_t)N_TOK * (size_t)V;
    float *tp_logits = malloc(n * sizeof(float)), *one = malloc(n * sizeof(float));
    size_t ns = (size_t)(N_STEPS + 1) * (size_t)V;
    float *tp_steps = malloc(ns * sizeof(float)), *one_steps = malloc(ns * sizeof(float));
    uint64_t *hashes = malloc((size_t)mesh.tp * sizeof *hashes);

    char list[256];
    snprintf(list, sizeof list, "%s", profiles);
    for (char *prof = strtok(list, ","); prof; prof = strtok(NULL, ",")) {
        char what[160];
        snprintf(what, sizeof what, "%s %s TP%d x DP%d lane %d", fixture, prof, mesh.tp, mesh.dp,
                 lane);
        mlm_model *m = load(dir, prof, mc.tp, world);
        run_logits(m, user, N_TOK, 7, tp_logits, world);
        int32_t tp_greedy[N_GEN];
        run_greedy(m, user, tp_greedy, tp_steps, world);
        mlm_model_free(m);
        /* every rank of the lane has the same bits */
        uint64_t h = fnv(tp_logits, n * sizeof(float));
        if (mlm_comm_allgather(mc.tp, &h, sizeof h, hashes, &err)) die("gather", &err, world);
        if (leader) {
            int same = 1;
            for (int i = 0; i < mesh.tp; i++)
                same &= hashes[i] == hashes[0];
            report(same, "%s: every rank's logits are bit-identical", what);
            mlm_model *m1 = load(dir, prof, NULL, world);
            run_logits(m1, user, N_TOK, N_TOK, one, world);
            int32_t greedy1[N_GEN];
            run_greedy(m1, user, greedy1, one_steps, world);
            mlm_model_free(m1);
            int am;
            double d = rel_diff(tp_logits, one, N_TOK, V, &am);
            report(!memcmp(tp_logits, one, n * sizeof(float)),
                   "%s: %d positions' logits byte-identical to one process's (max diff %.2e x "
                   "max|logit|, %d argmax differences)",
                   what, N_TOK, d, am);
            report(!memcmp(tp_greedy, greedy1, sizeof greedy1),
                   "%s: %d greedy tokens equal one process's", what, N_GEN);
            d = rel_diff(tp_steps, one_steps, N_STEPS + 1, V, &am);
            report(!memcmp(tp_steps, one_steps, ns * sizeof(float)),
                   "%s: the prompt's and %d decode steps' logits byte-identical to one "
                   "process's (max diff %.2e)",
                   what, N_STEPS, d);
            if (!strcmp(prof, "f32") && lane == 0) {
                d = rel_diff(tp_logits, r.logits, N_TOK, V, &am);
                report(d <= 1e-4,
                       "%s: logits vs transformers: max diff %.2e x max|logit| (<= 1e-4)", what, d);
                report(!memcmp(tp_greedy, r.greedy, sizeof tp_greedy),
                       "%s: %d greedy tokens equal transformers'", what, N_GEN);
            }
        }
    }
    /* rank 0 prints every rank's lines and the totals */
    int counts[2] = {passed, failed}, *all = malloc((size_t)size * sizeof counts);
    if (mlm_comm_allgather(mc.mesh, counts, sizeof counts, all, &err)) die("gather", &err, world);
    char *text = malloc((size_t)size * sizeof lines), *mine = (char *)lines;
    if (mlm_comm_allgather(mc.mesh, mine, sizeof lines, text, &err)) die("gather", &err, world);
    if (world_rank == 0) {
        int p = 0, f = 0;
        for (int i = 0; i < size; i++) {
            p += all[2 * i], f += all[2 * i + 1];
            for (int k = 0; k < 64; k++) {
                const char *line = text + (size_t)i * sizeof lines + (size_t)k * sizeof lines[0];
                if (line[0]) printf("%s\n", line);
            }
        }
        printf("%d passed, %d failed\n", p, f);
    }
    int rc = 0;
    for (int i = 0; i < size; i++)
        rc |= all[2 * i + 1] != 0;
    free(all), free(text), free(tp_logits), free(one), free(hashes), free(r.logits);
    free(tp_steps), free(one_steps);
    mlm_mesh_leave(&mc);
    mlm_comm_free(world);
    return rc;
}
