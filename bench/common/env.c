/* bench/common/env.c: see env.h. */
#include "env.h"

#include <stdlib.h>

int bench_env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && atoi(v) > 0 ? atoi(v) : dflt;
}
