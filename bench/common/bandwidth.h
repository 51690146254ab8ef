/* bench/common/bandwidth.h: the machine's read bandwidth, the yardstick for decode speed. */
#ifndef MESHLM_BENCH_BANDWIDTH_H
#define MESHLM_BENCH_BANDWIDTH_H

/* GB/s reading a 1 GiB buffer (far larger than the caches) with N_THREADS threads: the best
 * of a plain sum (each thread one stream) and of 2, 4 and 8 interleaved streams per thread
 * with 16-byte vector loads, best of 3 runs each. *HOW gets which won ("4 streams/thread"). */
double bench_read_bandwidth(int n_threads, const char **how);

#endif
