/* tools/common/tool.h: what the meshlm command (tools/cli/) and the HTTP server
 * (tools/server/) share: exit codes, error reporting, argument helpers, JSON string output,
 * the precision and mesh flags, the mesh set-up, the memory check and the model loading.
 * Includes only the public header. */
#ifndef MESHLM_TOOL_H
#define MESHLM_TOOL_H

#include <stdio.h>
#include <string.h>

#include "meshlm.h"

enum { TOOL_OK = 0, TOOL_RUNTIME = 1, TOOL_USAGE = 2 };

/* Prints "meshlm: MSG" for a failed call and returns TOOL_RUNTIME. */
int tool_fail(const mlm_error *err);
/* Prints "meshlm CMD: MSG" plus a hint to --help, returns TOOL_USAGE. */
int tool_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether ARG is -h or --help. */
int tool_is_help(const char *arg);
/* Takes the value of option ARGV[*I] (e.g. "-m DIR"), advancing *I; NULL if missing. */
const char *tool_value(int argc, char **argv, int *i);

/* Writes S (LEN bytes) as a JSON string literal; invalid UTF-8 bytes become U+FFFD. */
void tool_json_string(FILE *out, const char *s, size_t len);

/* Reads a whole file (or stdin for "-") into a malloc'd buffer, NUL-terminated after its *LEN
 * bytes; NULL and a message on error. */
char *tool_read_text(const char *path, size_t *len);

/* Parses an integer / number flag value in [LO, HI]; prints a usage error naming FLAG and
 * returns 0 on failure. */
int tool_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi,
             long long *out);
int tool_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);

/* A path inside the meshlm source tree the running binary was built in (its directory's
 * parent, e.g. build/meshlm -> REL under the repo root), if it exists; malloc'd, or NULL. */
char *tool_repo_path(const char *rel);

/* Seconds from a monotonic clock. */
double tool_now(void);

/* The precision and mesh flags every command that runs a model takes (load.c, mesh.c). */
typedef struct tool_precision {
    const char *optimizations;  /* "performance", "accuracy", "bf16", "f32"; NULL: the model's
                                   default (tool_precision_resolve) */
    const char *decoder_config; /* per-layer overrides, or NULL */
    const char *mesh;           /* --mesh N150|N300|T3K|TG, or NULL */
    int tp, dp;                 /* --tp, --dp; 0 = from the mesh */
    mlm_tp_reduce tp_reduce;    /* --tp-reduce exact|sum */
} tool_precision;

#define TOOL_PRECISION_HELP                                                                        \
    "      --optimizations P    precision profile: performance (BFP4 MLP up/gate, BFP8\n"          \
    "                           elsewhere; the default for checkpoints), accuracy (all\n"          \
    "                           BFP8), bf16, f32, or native (the default for GGUF\n"               \
    "                           files: each matrix in the file's own type, q4_k,\n"                \
    "                           q6_k, q8_0, ... at its own bits, with int8 activations)\n"         \
    "      --decoder-config F   per-layer precision overrides (the seeds' JSON format)\n"          \
    "      --mesh M             run on a mesh of MPI ranks (under mpirun): N150 (1), N300\n"       \
    "                           (2), T3K (8) or TG (32: TP 8 x 4 lanes for Llama, TP 2 x 16\n"     \
    "                           for Phi-4); heads and MLP columns are split over TP ranks\n"       \
    "      --tp N, --dp M       TP ranks per lane and data-parallel lanes (TP x DP ranks)\n"       \
    "      --tp-reduce R        exact (default: one process's bits, every K chunk's partial\n"     \
    "                           gathered) or sum (all-reduce of each rank's sum: fewer\n"          \
    "                           bytes over a network, last bits may differ)\n"

/* Handles --optimizations, --dtype (f32|bf16, the older spelling) and --decoder-config with
 * VALUE; 0 after printing a usage error. */
int tool_precision_flag(const char *cmd, const char *flag, const char *value, tool_precision *p);
/* Handles --temperature, --top-k, --top-p and --seed with VALUE into SP; 0 after printing a
 * usage error. */
int tool_sampling_flag(const char *cmd, const char *flag, const char *value,
                       mlm_sampler_params *sp);
static inline int tool_is_sampling_flag(const char *a) {
    return !strcmp(a, "--temperature") || !strcmp(a, "--top-k") || !strcmp(a, "--top-p") ||
           !strcmp(a, "--seed");
}
/* Fills P's profile, when no flag named one, with the model's default
 * (mlm_model_default_profile: native for GGUF files, else performance). */
void tool_precision_resolve(tool_precision *p, const char *dir);
/* The profile `meshlm chat` runs the model at DIR in when no flag names one: f32, else bf16,
 * when its weights are small enough that decode stays far above reading speed on any
 * machine (0.4 GB: 25 tok/s at 10 GB/s), else the model's default. WHY (SIZE bytes) gets
 * the reason, for chat -v and meshlm info. */
const char *tool_chat_profile(const char *dir, char *why, size_t size);
/* Whether FLAG is one of those. */
static inline int tool_is_precision_flag(const char *a) {
    return !strcmp(a, "--optimizations") || !strcmp(a, "--dtype") ||
           !strcmp(a, "--decoder-config") || !strcmp(a, "--mesh") || !strcmp(a, "--tp") ||
           !strcmp(a, "--dp") || !strcmp(a, "--tp-reduce");
}

/* ---- the mesh (mesh.c) ---- */

/* Opens the world in main() (0 after a message); tool_mesh_end closes it with the command's
 * exit code RC and returns it (a failure that may be this rank's alone ends every rank). */
int tool_mesh_begin(void);
int tool_mesh_end(int rc);
/* The failure being returned is one every rank reaches alike: exit normally on each. */
void tool_mesh_alike(void);
int tool_rank(void);
int tool_world_size(void);
/* Where a rank's own error messages go (stderr on rank 0; the others' stderr is silenced). */
FILE *tool_err_stream(void);
/* --mesh, --tp, --dp and --tp-reduce with VALUE into P; 0 after a usage error. */
int tool_mesh_flag(const char *cmd, const char *flag, const char *value, tool_precision *p);
/* Resolves P's mesh (flags, or MESHLM_FAKE_DEVICE) for CFG on WORLD ranks into OUT. */
mlm_status tool_mesh_resolve(const mlm_config *cfg, const tool_precision *p, int world,
                             mlm_mesh *out, mlm_error *err);
/* Resolves and joins the mesh for the model in DIR, once (CMD names the command in its
 * notice); a rank past the mesh (a fake device) exits 0 here. */
mlm_status tool_mesh_setup(const char *cmd, const char *dir, const tool_precision *p,
                           mlm_error *err);
/* After setup: the mesh (NULL without one), this rank's TP group, all the mesh's ranks, this
 * rank's lane and whether it leads it (TP rank 0). */
const mlm_mesh *tool_mesh(void);
mlm_comm *tool_mesh_tp(void);
mlm_comm *tool_mesh_comm(void);
int tool_mesh_lane(void);
int tool_mesh_leader(void);
/* Checks, before loading, that the model in DIR fits the memory available with P and XP,
 * together with D's draft model (NULL or no --draft-model: none) and its KV cache; otherwise
 * prints what they need and what would fit, and returns 0. */
struct tool_draft;
int tool_memory_fits(const char *cmd, const char *dir, const tool_precision *p,
                     const mlm_exec_params *xp, const struct tool_draft *d);
/* The largest max_seq_len (a multiple of XP's block size, at most CAP) for which the model in
 * DIR in P fits the memory available now, with XP's users and a KV pool of just what they
 * need (max_seqs x max_seq_len / block_size blocks); 0 if none does. */
int32_t tool_largest_seq_len(const char *dir, const tool_precision *p, const mlm_exec_params *xp,
                             int32_t cap);
/* Loads the model with P, printing the cache's messages and a conversion progress bar. */
mlm_status tool_load_model(const char *cmd, const char *dir, const tool_precision *p, int n_threads,
                           mlm_model **model, mlm_error *err);

/* Loads the model in DIR whole on this rank (no TP: a draft model beside a mesh's shards). */
mlm_status tool_load_whole(const char *cmd, const char *dir, const tool_precision *p, int n_threads,
                           mlm_model **model, mlm_error *err);

/* ---- speculative decoding (draft.c) ---- */

typedef struct tool_draft {
    const char *model;         /* --draft-model PATH, or NULL */
    const char *optimizations; /* --draft-optimizations; NULL: the draft's default profile */
    long long max;             /* --draft-max (default 8) */
    float p_min;               /* --draft-p-min (default the scheduler's, 0) */
    int ngram;                 /* --draft-ngram */
    mlm_model *model_loaded;   /* tool_draft_load's; NULL without --draft-model */
} tool_draft;

#define TOOL_DRAFT_HELP                                                                            \
    "      --draft-model PATH   speculative decoding with a draft model sharing the model's\n"     \
    "                           tokenizer (a smaller one, or the same at a cheaper profile):\n"   \
    "                           it drafts tokens that the model checks in one step. Greedy\n"     \
    "                           ids, logprobs and text stay exactly plain decoding's;\n"          \
    "                           sampling keeps the model's distribution (rejection scheme)\n"    \
    "      --draft-optimizations P  the draft's profile (default: its own default)\n"            \
    "      --draft-p-min P      stop drafting where the draft's best token is less likely\n"      \
    "                           than P (0..1, default 0: draft --draft-max tokens)\n"                                     \
    "      --draft-ngram        speculative decoding by prompt lookup: each step drafts\n"        \
    "                           the tokens that followed the last 4, 3 or 2 tokens'\n"            \
    "                           latest earlier occurrence (greedy requests only)\n"               \
    "      --draft-max N        tokens drafted per step at most (1..64, default 8)\n"

void tool_draft_init(tool_draft *d);
/* Whether A is one of the flags that take a value (--draft-ngram takes none). */
static inline int tool_is_draft_flag(const char *a) {
    return !strcmp(a, "--draft-model") || !strcmp(a, "--draft-optimizations") ||
           !strcmp(a, "--draft-max") || !strcmp(a, "--draft-p-min");
}
/* Handles one of those with VALUE; 0 after a usage error. */
int tool_draft_flag(const char *cmd, const char *flag, const char *value, tool_draft *d);
/* The flags agree with each other; 0 after a usage error. */
int tool_draft_check(const char *cmd, const tool_draft *d);
/* Loads --draft-model whole (after checking that its tokenizer's every token equals TOK's,
 * when TOK and a draft tokenizer are there). Nothing to do without one. */
mlm_status tool_draft_load(const char *cmd, tool_draft *d, const mlm_tokenizer *tok, int n_threads,
                           mlm_error *err);
/* Tokens a request drafts per step at most: --draft-max with a method, else 0 (off). */
static inline int32_t tool_draft_max(const tool_draft *d) {
    return d->model || d->ngram ? (int32_t)d->max : 0;
}
/* The scheduler's max_draft, draft_model and draft_p_min from D. */
void tool_draft_params(const tool_draft *d, mlm_sched_params *sp);
void tool_draft_free(tool_draft *d);

/* The model CMD runs without -m: the SmolLM2-135M-Instruct GGUF that scripts/setup.sh puts
 * in models/smollm2/ (beside the build folder), else the tiny embedded model (models/default,
 * with a notice on stderr that it babbles and how to get the real one). Malloc'd; NULL, after
 * printing why, when neither is there. */
#define TOOL_DEFAULT_GGUF "models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
char *tool_default_model(const char *cmd);

/* The length of the UTF-8 sequence that starts S (N bytes left): 1-4, or 0 when the bytes
 * there are not a complete, valid sequence (overlong, surrogate, past U+10FFFF, cut). */
size_t tool_utf8_len(const unsigned char *s, size_t n);

#endif
