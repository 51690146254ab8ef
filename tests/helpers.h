/* tests/helpers.h: what several test programs share beyond the harness: loading a fixture
 * model, argmax, reading a raw f32 file or a tensor as floats, comparing files, counting a
 * folder's entries, hashing token ids and writing a synthetic checkpoint. Built once
 * (tests/helpers.c) and linked into every unit test and mesh program. It does not include harness.h, whose counters
 * belong to each binary's own translation unit: a helper that must fail a case takes the
 * case's flag (&harness_case_failed). Everything returned is the caller's to free. */
#ifndef MESHLM_TESTS_HELPERS_H
#define MESHLM_TESTS_HELPERS_H

#include <stddef.h>
#include <stdint.h>

#include "meshlm.h"

// ---- models ----

/* Loads the checkpoint at PATH (a folder or a GGUF file) in precision profile PROFILE into *M
 * (NULL on failure; the caller frees it), returning mlm_model_load's status with ERR filled.
 * CACHE_DIR NULL: BFP weights are converted in memory (use_cache 0, nothing written);
 * otherwise the weight cache in CACHE_DIR is mapped, or built. */
mlm_status helper_load(const char *path, const char *profile, const char *cache_dir, mlm_model **m,
                       mlm_error *err);

/* helper_load for a test case: on failure prints the status and message, sets *CASE_FAILED
 * (pass &harness_case_failed) and returns NULL. */
mlm_model *helper_load_or_fail(const char *path, const char *profile, const char *cache_dir,
                               int *case_failed);

/* The index of the largest of X[0..N) (the first of equals); 0 when N <= 1. */
int32_t helper_argmax(const float *x, int64_t n);

// ---- files ----

/* The file at PATH when it holds exactly WANT floats (malloc'd); NULL after a line saying
 * so when it is missing or of another size. */
float *helper_read_f32(const char *path, size_t want);

/* Whether files A and B both exist and hold the same bytes. */
int helper_files_equal(const char *a, const char *b);

/* Number of entries of folder DIR other than . and .. (-1 when it cannot be opened), and
 * when TEMPS is not NULL how many of them are temporary files (".tmp-" in the name). */
int helper_count_entries(const char *dir, int *temps);

// ---- token ids ----

/* FNV-1a-64 of N token ids, each as its 4 little-endian bytes (the fixture scripts' hash of
 * an id list). */
uint64_t helper_fnv64_ids(const int32_t *ids, int64_t n);

// ---- checkpoints ----

/* All numel(T) elements of tensor T as f32 (malloc'd); NULL when it cannot be converted. */
float *helper_tensor_f32(const mlm_tensor_view *t);

/* mlm_synth of PRESET into DIR in FORMAT (MLM_SYNTH_HF or _META) and DTYPE with SEED, HF
 * shards of at most MAX_SHARD bytes; the other parameters default. */
mlm_status helper_synth(const char *preset, const char *dir, int format, mlm_dtype dtype,
                        uint64_t seed, int64_t max_shard, mlm_error *err);

#endif
