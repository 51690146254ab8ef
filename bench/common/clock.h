/* bench/common/clock.h: the one clock every benchmark times with. Seconds as a double on the
 * monotonic clock: only differences mean anything; fine to the nanosecond over a machine's
 * uptime. Thread-safe. */
#ifndef MESHLM_BENCH_CLOCK_H
#define MESHLM_BENCH_CLOCK_H

/* Seconds on CLOCK_MONOTONIC. */
double bench_now(void);

#endif
