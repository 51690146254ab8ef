/* bench/common/bandwidth.h: the machine's read bandwidth, the yardstick for decode speed. */
#ifndef MESHLM_BENCH_BANDWIDTH_H
#define MESHLM_BENCH_BANDWIDTH_H

#include <stddef.h>

/* GB/s reading a 1 GiB buffer (far larger than the caches) with N_THREADS threads: the best
 * of a plain sum (each thread one stream) and of 2, 4 and 8 interleaved streams per thread
 * with 16-byte vector loads, best of 3 runs each, on huge pages where the weights have them.
 * *HOW gets which won ("4 streams/thread"). */
double bench_read_bandwidth(int n_threads, const char **how);

/* BYTES of zeroed memory on transparent huge pages where the model's weights get them
 * (core/mapfile.h), else plain pages, as benchmarks' stand-in weights; free() frees it. */
void *bench_weights_alloc(size_t bytes);

#endif
