/* bench/common/env.h: the benchmarks' settings from the environment. */
#ifndef MESHLM_BENCH_ENV_H
#define MESHLM_BENCH_ENV_H

/* $NAME as a positive integer, else DFLT (unset, empty, zero, negative or not a number). */
int bench_env_int(const char *name, int dflt);

#endif
