/* bench/common/model.h: the model a benchmark runs. Without a model named on the command line,
 * a synthetic checkpoint of a preset's real config is written once and reused; each profile is
 * then loaded twice, so that building a missing weight cache is timed apart from the warm load
 * (the cache mapped) that every later run sees. */
#ifndef MESHLM_BENCH_MODEL_H
#define MESHLM_BENCH_MODEL_H

#include "meshlm.h"

/* The synthetic bf16 checkpoint of PRESET at /tmp/meshlm-bench/<preset>-bf16, written (with
 * progress on stderr) when its config.json is missing. Returns the folder (static storage,
 * valid until the next call), or NULL after a message naming TAG on stderr. */
const char *bench_synth_model(const char *tag, const char *preset);

typedef struct bench_load {
    double first_s; /* the first load, the cache built when it was missing */
    int built;      /* whether that first load built the cache */
    double load_s;  /* the second, warm load */
} bench_load;

/* Loads DIR in PROFILE twice and returns the second model (the caller frees it), with the two
 * loads' figures in *OUT; NULL after a message naming TAG on stderr. */
mlm_model *bench_load_warm(const char *tag, const char *dir, const char *profile, bench_load *out);

#endif
